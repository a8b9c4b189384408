// The org plugin's pure logic: validation of names and lifetimes, key masking, timestamps and
// the audit-log query rules, kept apart from the routes so CppUnit can hold them to the contract.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace org {

using json = nlohmann::json;

// Unicode code points in valid UTF-8 (names are limited in code points, not bytes); nullopt
// when `s` is not valid UTF-8.
std::optional<std::size_t> code_points(std::string_view s);

// The problem with a key or project name (1–255 code points, not blank), or nullopt.
std::optional<std::string> name_problem(const json &value);

// `days_to_expire` / `expire_in_days`: absent → `absent`, null → nullopt (never), else a whole
// number in [min, 3650]. Throws std::invalid_argument with the problem.
struct Days {
    bool present = false;
    std::optional<std::int64_t> days; // nullopt: null (never expires)
};
Days parse_days(const json &body, const std::string &field, std::int64_t min);

// What lists show of a key: "hgr_****" plus the last four characters, as the host stores it.
std::string mask_key(const std::string &plaintext);

// RFC 3339 ("2026-01-02T03:04:05Z", fractions and offsets allowed) or a plain date
// ("2026-01-02") to epoch milliseconds; nullopt when it is neither.
std::optional<std::int64_t> parse_time(std::string_view text);

// One of `allowed`, else nullopt.
std::optional<std::string> one_of(std::string_view value, const std::vector<std::string> &allowed);

// The audit-log window: both ends required, start < end, at most 30 days apart. Throws
// std::invalid_argument naming the field ("start: ...").
struct Window {
    std::int64_t start_ms;
    std::int64_t end_ms;
};
Window parse_window(const std::optional<std::string> &start, const std::optional<std::string> &end);
constexpr std::int64_t kMaxWindowMs = 30LL * 24 * 3600 * 1000;

// Page tokens and export cursors are the last row's sequence number, opaque to clients.
std::string encode_cursor(std::int64_t seq);
std::optional<std::int64_t> decode_cursor(std::string_view token);

} // namespace org
