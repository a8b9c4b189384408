// What every HTML page Hangar serves needs so that a link handed to a browser cannot be turned
// against it: redirect targets checked against the server's own origin and the operator's list,
// and one strict set of security headers with a fresh script nonce per answer.
//
// A page's template writes {{nonce}} where a nonce goes (<script nonce="{{nonce}}">); html()
// fills in the answer's nonce and sends the headers. Inline event handlers and inline style
// attributes never run under these headers: pages attach handlers from their nonce'd scripts.
#pragma once

#include <hangar/plugin.hpp>

#include <sys/random.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::web {

// "scheme://host[:port]" of an absolute http(s) URL, lower-case, the default port dropped;
// nullopt for anything else. Strict on purpose: browsers strip tabs and newlines, read '\' as
// '/' and decode percent-escapes in host names, so any of those (and user info, which hides the
// real host behind an '@') makes the URL unusable as a redirect target rather than guessed at.
inline std::optional<std::string> origin_of(std::string_view url) {
    for (char c : url)
        if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f || c == '\\') return std::nullopt;
    auto lower = [](std::string_view s) {
        std::string out(s);
        for (auto &c : out)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return out;
    };
    auto colon = url.find("://");
    if (colon == std::string_view::npos) return std::nullopt;
    std::string scheme = lower(url.substr(0, colon));
    if (scheme != "http" && scheme != "https") return std::nullopt;
    std::string_view rest = url.substr(colon + 3);
    std::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
    if (authority.empty() || authority.find('@') != std::string_view::npos) return std::nullopt;
    std::string_view host = authority, port;
    if (authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        host = authority.substr(0, close + 1);
        std::string_view after = authority.substr(close + 1);
        if (!after.empty()) {
            if (after.front() != ':') return std::nullopt;
            port = after.substr(1);
        }
        for (char c : host.substr(1, host.size() - 2))
            if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return std::nullopt;
    } else {
        if (auto p = authority.rfind(':'); p != std::string_view::npos) {
            host = authority.substr(0, p);
            port = authority.substr(p + 1);
        }
        for (char c : host)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return std::nullopt;
    }
    if (host.empty() || host == "[]" || port.size() > 5) return std::nullopt;
    for (char c : port)
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    std::string out = scheme + "://" + lower(host);
    if (!port.empty()) {
        unsigned long n = std::stoul(std::string(port));
        if (n == 0 || n > 65535) return std::nullopt;
        if (n != (scheme == "https" ? 443UL : 80UL)) out += ":" + std::to_string(n);
    }
    return out;
}

// The origins of a configuration list ("https://app.example.com, https://b.example:8443"), as
// origin_of spells them; `bad` collects the entries that are not http(s) origins.
inline std::vector<std::string> origin_list(std::string_view text, std::vector<std::string> *bad = nullptr) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < text.size()) {
        auto end = text.find_first_of(", \t", i);
        std::string_view item = text.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
        i = end == std::string_view::npos ? text.size() : end + 1;
        if (item.empty()) continue;
        if (auto o = origin_of(item))
            out.push_back(*o);
        else if (bad)
            bad->emplace_back(item);
    }
    return out;
}

// Why `url` may not be a redirect target, or nullopt when it may: an absolute http(s) URL on
// `self_base_url`'s origin (the server's public URL) or on one of `allowed`.
inline std::optional<std::string> redirect_problem(std::string_view url, std::string_view self_base_url,
                                                   const std::vector<std::string> &allowed) {
    auto origin = origin_of(url);
    if (!origin) return "must be an absolute http or https URL";
    if (auto self = origin_of(self_base_url); self && *self == *origin) return std::nullopt;
    for (const auto &a : allowed)
        if (a == *origin) return std::nullopt;
    return "its origin " + *origin +
           " is neither this server's nor one the operator allows ([server] redirect_origins)";
}

// 128 random bits, base64: a script nonce for one answer.
inline std::string nonce() {
    std::array<unsigned char, 16> raw{};
    std::size_t got = 0;
    while (got < raw.size()) {
        auto n = ::getrandom(raw.data() + got, raw.size() - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error::internal("no randomness for a page nonce");
        }
        got += static_cast<std::size_t>(n);
    }
    static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < raw.size(); i += 3) {
        std::uint32_t v = raw[i] << 16;
        if (i + 1 < raw.size()) v |= raw[i + 1] << 8;
        if (i + 2 < raw.size()) v |= raw[i + 2];
        out += kB64[(v >> 18) & 63];
        out += kB64[(v >> 12) & 63];
        out += i + 1 < raw.size() ? kB64[(v >> 6) & 63] : '=';
        out += i + 2 < raw.size() ? kB64[v & 63] : '=';
    }
    return out;
}

// The Content-Security-Policy sources of one page beyond what every page gets: `default-src
// 'none'`, `base-uri 'none'`, scripts and styles only with the answer's nonce (plus what is
// listed here). Empty means 'none' for that directive.
struct PagePolicy {
    std::string script_src;             // besides the nonce, e.g. "'self'" for module imports
    std::string style_src;              // besides the nonce
    std::string connect_src = "'self'"; // fetch and WebSocket ('self' covers ws: on this host)
    std::string img_src = "'self' data:";
    std::string media_src;
    std::string frame_src;
    std::string frame_ancestors = "'none'"; // who may frame the page
    std::string form_action = "'self'";
};

// The Content-Security-Policy value for `p` with `nonce_value`.
inline std::string csp(const PagePolicy &p, std::string_view nonce_value) {
    auto or_none = [](const std::string &s) { return s.empty() ? std::string("'none'") : s; };
    std::string n = "'nonce-" + std::string(nonce_value) + "'";
    std::string script = n + (p.script_src.empty() ? "" : " " + p.script_src);
    std::string style = n + (p.style_src.empty() ? "" : " " + p.style_src);
    return "default-src 'none'; script-src " + script + "; style-src " + style + "; connect-src " +
           or_none(p.connect_src) + "; img-src " + or_none(p.img_src) + "; media-src " + or_none(p.media_src) +
           "; frame-src " + or_none(p.frame_src) + "; frame-ancestors " + or_none(p.frame_ancestors) +
           "; form-action " + or_none(p.form_action) + "; base-uri 'none'";
}

// The security headers of an HTML answer under `p` (see csp) with `nonce_value`, for a page
// whose body is not built by html() (the dashboard's files).
inline void security_headers(Response &res, const PagePolicy &p, std::string_view nonce_value) {
    res.header("Content-Security-Policy", csp(p, nonce_value));
    res.header("X-Content-Type-Options", "nosniff");
    res.header("Referrer-Policy", "no-referrer");
    res.header("Cache-Control", "no-store");
    if (p.frame_ancestors == "'none'") res.header("X-Frame-Options", "DENY");
}

// Answers `status` with the HTML `page` under `p`: a fresh nonce replaces every {{nonce}}.
inline void html(Response &res, std::string_view page, const PagePolicy &p, int status = 200) {
    std::string n = nonce();
    std::string body;
    body.reserve(page.size());
    static constexpr std::string_view kMark = "{{nonce}}";
    for (std::size_t i = 0;;) {
        auto at = page.find(kMark, i);
        body.append(page.substr(i, at == std::string_view::npos ? std::string_view::npos : at - i));
        if (at == std::string_view::npos) break;
        body += n;
        i = at + kMark.size();
    }
    security_headers(res, p, n);
    res.status(status);
    res.body("text/html; charset=utf-8", body);
}

} // namespace hangar::web
