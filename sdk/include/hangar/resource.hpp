// Header-only helpers for plugins that keep a library of named resources (profiles, extensions,
// pools, ...): ids, timestamps, the Kernel name rule and offset pagination, so every list and
// every id looks the same on the wire whichever plugin serves it.
#pragma once

#include <hangar/plugin.hpp>

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hangar {

// `length` lowercase alphanumerics from the kernel's CSPRNG, like Kernel's ids.
inline std::string new_id(std::size_t length = 24) {
    static constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string id;
    id.reserve(length);
    unsigned char buf[64];
    while (id.size() < length) {
        ssize_t n = ::getrandom(buf, sizeof buf, 0);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            throw std::runtime_error("getrandom failed");
        }
        for (ssize_t i = 0; i < n && id.size() < length; ++i) {
            // 252 = 7 * 36: rejecting the rest keeps every character equally likely.
            if (buf[i] < 252) id.push_back(alphabet[buf[i] % 36]);
        }
    }
    return id;
}

inline bool looks_like_id(std::string_view s, std::size_t length = 24) {
    return s.size() == length &&
           std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

inline std::int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// "2025-01-02T03:04:05.123Z"
inline std::string rfc3339(std::int64_t epoch_ms) {
    std::time_t secs = static_cast<std::time_t>(epoch_ms / 1000);
    int ms = static_cast<int>(epoch_ms % 1000);
    if (ms < 0) {
        ms += 1000;
        --secs;
    }
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
    return buf;
}

// Parses what clients send as a time: RFC 3339 ("2026-05-01T10:00:00Z", fractions to the
// microsecond, "T", "t" or a space, Z or a ±HH:MM offset) or a plain date ("2026-05-01", UTC
// midnight). Unix microseconds, or nullopt when the text is neither.
inline std::optional<std::int64_t> parse_rfc3339_us(std::string_view s) {
    auto two = [&](std::size_t at) {
        if (at + 2 > s.size() || s[at] < '0' || s[at] > '9' || s[at + 1] < '0' || s[at + 1] > '9') return -1;
        return (s[at] - '0') * 10 + (s[at + 1] - '0');
    };
    if (s.size() < 10 || s[4] != '-' || s[7] != '-') return std::nullopt;
    int year = 0;
    if (std::from_chars(s.data(), s.data() + 4, year).ptr != s.data() + 4) return std::nullopt;
    int mon = two(5), day = two(8), hour = 0, min = 0, sec = 0;
    std::size_t at = 10;
    std::int64_t frac_us = 0, offset_s = 0;
    if (s.size() > 10) {
        if (s.size() < 20 || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || s[13] != ':' || s[16] != ':')
            return std::nullopt;
        hour = two(11);
        min = two(14);
        sec = two(17);
        at = 19;
        if (at < s.size() && s[at] == '.') {
            std::size_t start = ++at;
            for (std::int64_t scale = 100000; at < s.size() && s[at] >= '0' && s[at] <= '9'; ++at, scale /= 10)
                frac_us += (s[at] - '0') * scale;
            if (at == start) return std::nullopt;
        }
        if (at < s.size() && (s[at] == 'Z' || s[at] == 'z')) {
            ++at;
        } else if (at < s.size() && (s[at] == '+' || s[at] == '-')) {
            int oh = two(at + 1), om = two(at + 4);
            if (oh < 0 || oh > 23 || om < 0 || om > 59 || at + 6 > s.size() || s[at + 3] != ':') return std::nullopt;
            offset_s = (s[at] == '+' ? 1 : -1) * (std::int64_t{oh} * 3600 + std::int64_t{om} * 60);
            at += 6;
        } else {
            return std::nullopt;
        }
    }
    if (at != s.size() || mon < 1 || mon > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 || min < 0 || min > 59 ||
        sec < 0 || sec > 60)
        return std::nullopt;
    std::tm tm{};
    tm.tm_year = year - 1900;
    tm.tm_mon = mon - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    return (static_cast<std::int64_t>(::timegm(&tm)) - offset_s) * 1'000'000 + frac_us;
}

// A duration such as "5m", "1h30m", "90s", "1.5h" in microseconds (nullopt when it is not one).
inline std::optional<std::int64_t> parse_duration_us(std::string_view t) {
    if (t.empty()) return std::nullopt;
    std::int64_t total = 0;
    while (!t.empty()) {
        std::size_t digits = 0;
        while (digits < t.size() && (std::isdigit(static_cast<unsigned char>(t[digits])) || t[digits] == '.'))
            ++digits;
        if (digits == 0) return std::nullopt;
        double value = 0;
        auto [ptr, ec] = std::from_chars(t.data(), t.data() + digits, value);
        if (ec != std::errc() || ptr != t.data() + digits) return std::nullopt;
        t.remove_prefix(digits);
        std::size_t unit_len = 0;
        while (unit_len < t.size() && std::isalpha(static_cast<unsigned char>(t[unit_len])))
            ++unit_len;
        std::string_view unit = t.substr(0, unit_len);
        t.remove_prefix(unit_len);
        double scale = 0;
        if (unit == "h")
            scale = 3600e6;
        else if (unit == "m")
            scale = 60e6;
        else if (unit == "s")
            scale = 1e6;
        else if (unit == "ms")
            scale = 1e3;
        else if (unit == "us" || unit == "µs")
            scale = 1;
        else
            return std::nullopt;
        total += static_cast<std::int64_t>(value * scale);
    }
    return total;
}

// A time bound as clients send `since`/`until`: RFC 3339 or a duration back from `now_us`.
inline std::optional<std::int64_t> parse_time_bound(std::string_view text, std::int64_t now_us) {
    if (auto t = parse_rfc3339_us(text)) return t;
    if (auto d = parse_duration_us(text)) return now_us - *d;
    return std::nullopt;
}

// Kernel's rule for user-chosen names of profiles, extensions and pools: 1-255 of [A-Za-z0-9._-].
inline bool valid_resource_name(std::string_view s) {
    return !s.empty() && s.size() <= 255 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
    });
}

struct Paging {
    std::int64_t offset = 0;
    int limit = 20;
};

// A query parameter by name (nullopt when absent): Request::query, or a map in a test.
using QueryParam = std::function<std::optional<std::string>(std::string_view)>;

// `offset` and `limit` query parameters (contract §1.7): problems go into `v` under their names.
// A `limit` over `max_limit` is lowered to it, as Kernel does.
inline Paging parse_paging(const QueryParam &param, Validation &v, int default_limit = 20, int max_limit = 100) {
    auto integer = [&](const char *name, std::int64_t min, std::int64_t fallback) -> std::int64_t {
        auto s = param(name);
        if (!s || s->empty()) return fallback;
        std::int64_t n = 0;
        const std::string text = *s;
        const char *end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, n);
        if (ec != std::errc() || ptr != end) {
            v.fail(name, "must be an integer");
            return fallback;
        }
        if (n < min) {
            v.fail(name, "must be at least " + std::to_string(min));
            return fallback;
        }
        return n;
    };
    Paging p;
    p.offset = integer("offset", 0, 0);
    p.limit = static_cast<int>(std::min<std::int64_t>(integer("limit", 1, default_limit), max_limit));
    return p;
}

inline Paging parse_paging(const Request &req, Validation &v, int default_limit = 20, int max_limit = 100) {
    return parse_paging([&](std::string_view name) { return req.query(name); }, v, default_limit, max_limit);
}

// The row of `table` (columns id, name and the scope column) in `scope` whose id is
// `id_or_name`, else the one whose name is, compared without case: the Kernel rule for
// {id_or_name} in paths. The id is tried first, so a name that looks like another row's id never
// shadows that row. `sql` is the plugin's sql() (any callable taking the statement and its
// parameters); `scope_column` is `project_id` for project resources, `org_id` for the org's.
template <typename Sql>
std::optional<json> find_by_id_or_name(const Sql &sql, const std::string &table, const std::string &scope,
                                       const std::string &id_or_name, const std::string &scope_column = "project_id") {
    const std::string where = " WHERE " + scope_column + " = ? AND ";
    json rows = sql("SELECT * FROM " + table + where + "id = ?", json::array({scope, id_or_name}));
    if (rows.empty())
        rows = sql("SELECT * FROM " + table + where + "LOWER(name) = LOWER(?)", json::array({scope, id_or_name}));
    if (rows.empty()) return std::nullopt;
    return rows.front();
}

// Answers one page of a list (contract §1.7): runs `select` (a whole SELECT with its ORDER BY, no
// LIMIT) for one row more than asked, which tells whether another page exists, and answers the
// rendered rows with the paging headers. `sql` is the plugin's sql(), as above.
template <typename Sql, typename Render>
void answer_page(Response &res, const Sql &sql, const std::string &select, json params, const Paging &paging,
                 const Render &render) {
    params.push_back(paging.limit + 1);
    params.push_back(paging.offset);
    json rows = sql(select + " LIMIT ? OFFSET ?", params);
    const auto limit = static_cast<std::size_t>(paging.limit);
    json items = json::array();
    for (std::size_t i = 0; i < rows.size() && i < limit; ++i)
        items.push_back(render(rows[i]));
    res.page(items, paging.offset, rows.size() > limit);
}

// Text for an HTML page a plugin serves (a replay's viewer, a proxy's error page): <, >, & and "
// as entities, so a name or a message never becomes markup.
inline std::string html_escape(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '<':
            out += "&lt;";
            break;
        case '>':
            out += "&gt;";
            break;
        case '&':
            out += "&amp;";
            break;
        case '"':
            out += "&quot;";
            break;
        default:
            out += c;
        }
    }
    return out;
}

} // namespace hangar
