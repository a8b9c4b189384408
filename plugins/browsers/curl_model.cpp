#include "curl_model.hpp"

#include <hangar/cdp.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <map>

namespace hangar::browsers {

namespace {

bool valid_header_name(const std::string &name) {
    // RFC 9110 token characters.
    return !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string::npos;
    });
}

} // namespace

std::optional<std::string> http_origin(const std::string &url) {
    std::string l = lower(url.substr(0, 8));
    std::size_t scheme_end;
    if (l.rfind("http://", 0) == 0)
        scheme_end = 7;
    else if (l.rfind("https://", 0) == 0)
        scheme_end = 8;
    else
        return std::nullopt;
    auto host_end = url.find_first_of("/?#", scheme_end);
    std::string authority =
        url.substr(scheme_end, host_end == std::string::npos ? std::string::npos : host_end - scheme_end);
    if (authority.empty() || authority.find('@') != std::string::npos ||
        authority.find_first_of(" \t\r\n\\") != std::string::npos)
        return std::nullopt;
    return lower(url.substr(0, scheme_end)) + lower(authority);
}

CurlRequest parse_curl_request(const json &body) {
    Validation v;
    CurlRequest r;
    auto url = body.find("url");
    if (url == body.end() || !url->is_string() || url->get_ref<const std::string &>().empty())
        v.fail("url", "is required");
    else if (!http_origin(url->get<std::string>()))
        v.fail("url", "must be an absolute http:// or https:// URL");
    else
        r.url = url->get<std::string>();

    if (auto m = body.find("method"); m != body.end() && !m->is_null()) {
        static const std::array<std::string_view, 7> methods = {"GET",   "HEAD",   "POST",   "PUT",
                                                                "PATCH", "DELETE", "OPTIONS"};
        if (!m->is_string() || std::find(methods.begin(), methods.end(), m->get<std::string>()) == methods.end())
            v.fail("method", "must be one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS");
        else
            r.method = m->get<std::string>();
    }
    if (auto h = body.find("headers"); h != body.end() && !h->is_null()) {
        if (!h->is_object()) {
            v.fail("headers", "must be an object of header names to string values");
        } else {
            for (const auto &[name, value] : h->items()) {
                if (!valid_header_name(name))
                    v.fail("headers." + name, "is not a valid header name");
                else if (!value.is_string())
                    v.fail("headers." + name, "must be a string");
                else if (value.get_ref<const std::string &>().find_first_of("\r\n") != std::string::npos)
                    v.fail("headers." + name, "must not contain line breaks");
                else
                    r.headers.emplace_back(name, value.get<std::string>());
            }
        }
    }
    if (auto b = body.find("body"); b != body.end() && !b->is_null()) {
        if (!b->is_string())
            v.fail("body", "must be a string");
        else if (r.method == "GET" || r.method == "HEAD")
            v.fail("body", "cannot be sent with " + r.method);
        else
            r.body = b->get<std::string>();
    }
    if (auto e = body.find("response_encoding"); e != body.end() && !e->is_null()) {
        if (!e->is_string() || (*e != "utf8" && *e != "base64"))
            v.fail("response_encoding", "must be utf8 or base64");
        else
            r.base64_response = *e == "base64";
    }
    if (auto t = body.find("timeout_ms"); t != body.end() && !t->is_null()) {
        if (!t->is_number() || t->get<double>() < 1 || t->get<double>() > kCurlMaxTimeoutMs)
            v.fail("timeout_ms", "must be a number from 1 to " + std::to_string(kCurlMaxTimeoutMs));
        else
            r.timeout_ms = static_cast<int>(std::ceil(t->get<double>()));
    }
    v.throw_if_failed("invalid curl request");
    return r;
}

std::string valid_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    std::size_t i = 0;
    while (i < s.size()) {
        auto c = static_cast<unsigned char>(s[i]);
        std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        bool ok = len > 0 && i + len <= s.size();
        for (std::size_t k = 1; ok && k < len; ++k)
            ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
        if (ok && len > 1) {
            // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
            std::uint32_t cp = c & (0xFF >> (len + 1));
            for (std::size_t k = 1; k < len; ++k)
                cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            static constexpr std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
            ok = cp >= min_for_len[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
        }
        if (ok) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

json render_curl_response(const CurlResponse &r, bool base64) {
    json headers = json::object();
    for (const auto &[name, value] : r.headers) {
        std::string canonical = canonical_header_name(name);
        // The body is whole: how it was framed on the wire does not describe it.
        if (canonical == "Transfer-Encoding") continue;
        headers[canonical].push_back(value);
    }
    return {{"status", r.status},
            {"headers", headers},
            {"body", base64 ? cdp::base64_encode(r.body) : valid_utf8(r.body)},
            {"duration_ms", std::round(r.duration_ms * 10) / 10}};
}

} // namespace hangar::browsers
