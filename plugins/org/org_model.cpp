#include "org_model.hpp"

#include <hangar/resource.hpp>

#include <charconv>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace org {

std::optional<std::size_t> code_points(std::string_view s) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + len > s.size()) return std::nullopt;
        for (std::size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return std::nullopt;
        i += len;
        ++n;
    }
    return n;
}

std::optional<std::string> name_problem(const json &value) {
    if (!value.is_string()) return "must be a string";
    const auto &s = value.get_ref<const std::string &>();
    auto n = code_points(s);
    if (!n) return "must be valid UTF-8";
    if (*n == 0 || s.find_first_not_of(" \t\r\n") == std::string::npos) return "must not be empty";
    if (*n > 255) return "must be at most 255 characters";
    return std::nullopt;
}

Days parse_days(const json &body, const std::string &field, std::int64_t min) {
    Days d;
    auto it = body.find(field);
    if (it == body.end()) return d;
    d.present = true;
    if (it->is_null()) return d;
    bool whole = it->is_number_integer() ||
                 (it->is_number_float() && it->get<double>() == static_cast<double>(it->get<std::int64_t>()));
    if (!it->is_number() || !whole) throw std::invalid_argument(field + ": must be a whole number of days or null");
    auto v = it->get<std::int64_t>();
    if (v < min || v > 3650)
        throw std::invalid_argument(field + ": must be between " + std::to_string(min) + " and 3650");
    d.days = v;
    return d;
}

std::string mask_key(const std::string &plaintext) {
    if (plaintext.size() < 12) return "****";
    std::string prefix = plaintext.starts_with("hgr_") ? "hgr_" : "";
    return prefix + "****" + plaintext.substr(plaintext.size() - 4);
}

std::optional<std::int64_t> parse_time(std::string_view text) {
    auto us = hangar::parse_rfc3339_us(text);
    if (!us) return std::nullopt;
    return *us >= 0 ? *us / 1000 : -((-*us + 999) / 1000);
}

std::optional<std::string> one_of(std::string_view value, const std::vector<std::string> &allowed) {
    for (const auto &a : allowed)
        if (a == value) return a;
    return std::nullopt;
}

Window parse_window(const std::optional<std::string> &start, const std::optional<std::string> &end) {
    if (!start || start->empty()) throw std::invalid_argument("start: is required");
    if (!end || end->empty()) throw std::invalid_argument("end: is required");
    auto s = parse_time(*start);
    if (!s) throw std::invalid_argument("start: must be an RFC 3339 timestamp");
    auto e = parse_time(*end);
    if (!e) throw std::invalid_argument("end: must be an RFC 3339 timestamp");
    if (*e <= *s) throw std::invalid_argument("end: must be after start");
    if (*e - *s > kMaxWindowMs) throw std::invalid_argument("end: the window may span at most 30 days");
    return {*s, *e};
}

std::string encode_cursor(std::int64_t seq) {
    return "a" + std::to_string(seq);
}

std::optional<std::int64_t> decode_cursor(std::string_view token) {
    if (token.size() < 2 || token.front() != 'a') return std::nullopt;
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(token.data() + 1, token.data() + token.size(), v);
    if (ec != std::errc() || ptr != token.data() + token.size() || v < 0) return std::nullopt;
    return v;
}

} // namespace org
