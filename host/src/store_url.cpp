#include "store_url.hpp"

#include "store.hpp"

#include <charconv>
#include <filesystem>
#include <set>

namespace hangar::host {

namespace {

[[noreturn]] void bad(const std::string &shown, const std::string &why) {
    throw StoreError(std::string(kStoreSetting) + " = " + shown + ": " + why);
}

int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

bool percent_decode(std::string_view in, std::string &out) {
    out.clear();
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '%') {
            out += in[i];
            continue;
        }
        if (i + 2 >= in.size() || hex(in[i + 1]) < 0 || hex(in[i + 2]) < 0) return false;
        out += static_cast<char>(hex(in[i + 1]) * 16 + hex(in[i + 2]));
        i += 2;
    }
    return true;
}

// libpq options a URL may carry; the others (host, user, ...) come from the URL's own parts.
const std::set<std::string> kPgOptions = {"sslmode", "connect_timeout", "application_name",    "sslrootcert",
                                          "sslcert", "sslkey",          "target_session_attrs"};

std::string quote_conninfo(const std::string &v) {
    std::string out = "'";
    for (char c : v) {
        if (c == '\\' || c == '\'') out += '\\';
        out += c;
    }
    return out + "'";
}

} // namespace

std::string StoreUrl::redacted() const {
    if (kind == Kind::sqlite) return "sqlite:" + path;
    std::string out = "postgresql://";
    if (!user.empty()) out += user + (password.empty() ? "" : ":***") + "@";
    out += host + ":" + std::to_string(port) + "/" + dbname;
    char sep = '?';
    for (const auto &[k, v] : options) {
        out += sep;
        out.append(k).append("=").append(v);
        sep = '&';
    }
    return out;
}

std::string StoreUrl::conninfo() const {
    std::string out =
        "host=" + quote_conninfo(host) + " port=" + std::to_string(port) + " dbname=" + quote_conninfo(dbname);
    if (!user.empty()) out += " user=" + quote_conninfo(user);
    if (!password.empty()) out += " password=" + quote_conninfo(password);
    auto opts = options;
    opts.emplace("connect_timeout", "5"); // never hang on an unreachable store
    opts.emplace("application_name", "hangar");
    for (const auto &[k, v] : opts)
        out += " " + k + "=" + quote_conninfo(v);
    return out;
}

StoreUrl parse_store_url(const std::string &url, const std::string &data_dir) {
    StoreUrl out;
    if (url.empty()) {
        out.path = (std::filesystem::path(data_dir) / "hangar.db").string();
        return out;
    }
    auto colon = url.find(':');
    std::string scheme = colon == std::string::npos ? "" : url.substr(0, colon);
    if (scheme == "sqlite") {
        std::string path = url.substr(colon + 1);
        if (path.rfind("//", 0) == 0) path = path.substr(2); // sqlite:///abs/path reads as /abs/path
        if (path.empty()) bad(url, "sqlite: needs a file path (sqlite:/var/lib/hangar/hangar.db)");
        // A relative path is relative to the data dir, like every other file the host keeps.
        std::filesystem::path p(path);
        out.path = p.is_absolute() ? p.string() : (std::filesystem::path(data_dir) / p).string();
        return out;
    }
    if (scheme != "postgresql" && scheme != "postgres") {
        // The whole URL may hold a password in an unknown shape: show the scheme only.
        bad(scheme.empty() ? "(no scheme)" : scheme + ":...",
            "unknown store scheme; expected sqlite:<path> or postgresql://user:pass@host:port/db");
    }
    out.kind = StoreUrl::Kind::postgresql;
    std::string_view rest(url);
    rest.remove_prefix(colon + 1);
    if (rest.substr(0, 2) != "//") bad(scheme + ":...", "expected postgresql://user:pass@host:port/db");
    rest.remove_prefix(2);
    std::string_view query;
    if (auto q = rest.find('?'); q != std::string_view::npos) {
        query = rest.substr(q + 1);
        rest = rest.substr(0, q);
    }
    std::string_view path;
    if (auto slash = rest.find('/'); slash != std::string_view::npos) {
        path = rest.substr(slash + 1);
        rest = rest.substr(0, slash);
    }
    std::string_view hostport = rest;
    if (auto at = rest.rfind('@'); at != std::string_view::npos) {
        std::string_view userinfo = rest.substr(0, at);
        hostport = rest.substr(at + 1);
        std::string_view user = userinfo, pass;
        if (auto c = userinfo.find(':'); c != std::string_view::npos) {
            user = userinfo.substr(0, c);
            pass = userinfo.substr(c + 1);
        }
        if (!percent_decode(user, out.user) || !percent_decode(pass, out.password))
            bad("postgresql://...", "bad %-escape in the user or password");
    }
    std::string shown = "postgresql://" + (out.user.empty() ? "" : out.user + (out.password.empty() ? "@" : ":***@")) +
                        std::string(hostport) + "/" + std::string(path);
    std::string_view host = hostport, port;
    if (!hostport.empty() && hostport.front() == '[') { // [::1]:5432
        auto close = hostport.find(']');
        if (close == std::string_view::npos) bad(shown, "unclosed [ in the host");
        host = hostport.substr(1, close - 1);
        if (close + 1 < hostport.size()) {
            if (hostport[close + 1] != ':') bad(shown, "expected :port after the host");
            port = hostport.substr(close + 2);
        }
    } else if (auto c = hostport.rfind(':'); c != std::string_view::npos) {
        host = hostport.substr(0, c);
        port = hostport.substr(c + 1);
    }
    if (!percent_decode(host, out.host) || out.host.empty()) bad(shown, "the host is missing");
    if (!port.empty()) {
        unsigned p = 0;
        auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
        if (ec != std::errc() || end != port.data() + port.size() || p == 0 || p > 65535)
            bad(shown, "the port must be a number from 1 to 65535");
        out.port = p;
    }
    if (!percent_decode(path, out.dbname) || out.dbname.empty() || out.dbname.find('/') != std::string::npos)
        bad(shown, "the database name is missing (postgresql://user:pass@host:port/db)");
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view kv = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        if (kv.empty()) continue;
        auto eq = kv.find('=');
        std::string key, value;
        if (eq == std::string_view::npos || !percent_decode(kv.substr(0, eq), key) ||
            !percent_decode(kv.substr(eq + 1), value))
            bad(shown, "options must read name=value");
        if (!kPgOptions.count(key)) bad(shown, "unknown option '" + key + "'");
        out.options[key] = value;
    }
    return out;
}

} // namespace hangar::host
