#include "proxies_model.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <stdexcept>

namespace proxies {

using hangar::Error;

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
        s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
        s.remove_suffix(1);
    return s;
}

bool is_ip(std::string_view s) {
    std::string text(s);
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
    unsigned char buf[16];
    return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

std::optional<std::uint16_t> parse_port(std::string_view s) {
    unsigned value = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || p != s.data() + s.size() || value < 1 || value > 65535) return std::nullopt;
    return static_cast<std::uint16_t>(value);
}

const std::set<std::string, std::less<>> kTagNames = {"country", "state", "city", "asn"};

// A field of a config object: absent/null → nullopt; otherwise it must be a non-empty string.
std::optional<std::string> config_string(const json &config, const char *field, std::size_t max = 255) {
    auto it = config.find(field);
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) throw Error::invalid(std::string("config.") + field, "must be a string");
    const auto &s = it->get_ref<const std::string &>();
    if (s.empty() || s.size() > max)
        throw Error::invalid(std::string("config.") + field, "must be 1 to " + std::to_string(max) + " characters");
    return s;
}

bool all_of(std::string_view s, int (*pred)(int)) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [pred](char c) { return pred(static_cast<unsigned char>(c)); });
}

std::string country_of(const json &config, std::string_view type) {
    auto c = config_string(config, "country", 2);
    if (!c) return "US";
    std::string up = *c;
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char ch) { return std::toupper(ch); });
    if (up == "EU" && (type == "datacenter" || type == "isp")) return up;
    if (up.size() != 2 || !all_of(up, std::isalpha))
        throw Error::invalid("config.country", "must be a two-letter ISO 3166 country code");
    return up;
}

void only_fields(const json &config, std::initializer_list<const char *> allowed, std::string_view type) {
    for (const auto &item : config.items()) {
        const std::string &key = item.key();
        if (std::none_of(allowed.begin(), allowed.end(), [&key](const char *a) { return key == a; }))
            throw Error::invalid("config." + key, "is not a setting of a " + std::string(type) + " proxy");
    }
}

json parse_managed_config(const std::string &type, const json &config) {
    json out = json::object();
    if (type == "datacenter" || type == "isp") {
        only_fields(config, {"country"}, type);
        out["country"] = country_of(config, type);
        return out;
    }
    if (type == "mobile") {
        only_fields(config, {"country", "state", "city"}, type);
        out["country"] = country_of(config, type);
        if (auto state = config_string(config, "state", 2)) {
            if (state->size() != 2 || !all_of(*state, std::isalpha))
                throw Error::invalid("config.state", "must be a two-letter US state code");
            if (out["country"] != "US") throw Error::invalid("config.state", "is only available with country US");
            out["state"] = lower(*state);
        }
        if (auto city = config_string(config, "city")) out["city"] = lower(*city);
        return out;
    }
    // residential
    only_fields(config, {"country", "state", "city", "zip", "asn", "os"}, type);
    bool other = false;
    for (const char *f : {"state", "city", "zip", "asn", "os"})
        other = other || (config.contains(f) && !config[f].is_null());
    if (other && (!config.contains("country") || config["country"].is_null()))
        throw Error::invalid("config.country", "is required when state, city, zip, asn or os is given");
    out["country"] = country_of(config, type);
    auto state = config_string(config, "state", 2);
    auto city = config_string(config, "city");
    auto zip = config_string(config, "zip", 5);
    auto asn = config_string(config, "asn", 16);
    if (state) {
        if (state->size() != 2 || !all_of(*state, std::isalpha))
            throw Error::invalid("config.state", "must be a two-letter US state code");
        out["state"] = lower(*state);
    }
    if (city) {
        if (city->find(' ') != std::string::npos || !all_of(*city, std::isalpha))
            throw Error::invalid("config.city", "is letters only, without spaces (e.g. sanfrancisco)");
        out["city"] = lower(*city);
    }
    if (zip) {
        if (zip->size() != 5 || !all_of(*zip, std::isdigit))
            throw Error::invalid("config.zip", "must be a five-digit US ZIP code");
        if (state || city) throw Error::invalid("config.zip", "cannot be combined with city or state");
        out["zip"] = *zip;
    }
    if (asn) {
        std::string digits = lower(*asn);
        if (digits.starts_with("as")) digits = digits.substr(2);
        if (!all_of(digits, std::isdigit)) throw Error::invalid("config.asn", "must be an AS number (e.g. AS7922)");
        if (state || city) throw Error::invalid("config.asn", "cannot be combined with city or state");
        out["asn"] = "AS" + digits;
    }
    if (auto os = config_string(config, "os")) {
        if (*os != "windows" && *os != "macos" && *os != "android")
            throw Error::invalid("config.os", "must be windows, macos or android");
        out["os"] = *os;
    }
    return out;
}

constexpr std::size_t kMaxCaBundle = std::size_t{64} * 1024;

} // namespace

// RFC 1123 host name: dot-separated labels of letters, digits, inner hyphens and the underscores
// real hosts use.
bool is_hostname(std::string_view s) {
    if (s.empty() || s.size() > 253) return false;
    std::size_t start = 0;
    while (start <= s.size()) {
        auto dot = s.find('.', start);
        auto label = s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
        for (char c : label)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return true;
}

json Upstream::to_json() const {
    json j = {{"scheme", scheme}, {"host", host}, {"port", port}};
    if (!username.empty()) j["username"] = username;
    if (!password.empty()) j["password"] = password;
    if (!ca_bundle.empty()) j["ca_bundle"] = ca_bundle;
    return j;
}

Upstream Upstream::from_json(const json &j) {
    if (!j.is_object()) throw Error::invalid("upstream", "must be an object");
    Upstream u;
    u.scheme = j.value("scheme", "");
    u.host = j.value("host", "");
    int port = j.value("port", 0);
    u.username = j.value("username", "");
    u.password = j.value("password", "");
    u.ca_bundle = j.value("ca_bundle", "");
    if (u.scheme != "http" && u.scheme != "https" && u.scheme != "socks5")
        throw Error::invalid("upstream.scheme", "must be http, https or socks5");
    if (u.host.empty()) throw Error::invalid("upstream.host", "is required");
    if (port < 1 || port > 65535) throw Error::invalid("upstream.port", "must be between 1 and 65535");
    u.port = static_cast<std::uint16_t>(port);
    return u;
}

std::string Upstream::display() const {
    return scheme + "://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
           std::to_string(port);
}

std::optional<Upstream> parse_upstream(std::string_view text, std::string &error) {
    text = trim(text);
    auto space = text.find_first_of(" \t");
    std::string_view url = text.substr(0, space);
    std::string_view rest = space == std::string_view::npos ? std::string_view() : text.substr(space);
    Upstream u;
    auto sep = url.find("://");
    if (sep == std::string_view::npos) {
        error = "an upstream is scheme://[user:password@]host:port";
        return std::nullopt;
    }
    u.scheme = lower(url.substr(0, sep));
    if (u.scheme == "socks5h") u.scheme = "socks5";
    if (u.scheme != "http" && u.scheme != "https" && u.scheme != "socks5") {
        error = "the scheme must be http, https or socks5";
        return std::nullopt;
    }
    std::string_view authority = url.substr(sep + 3);
    if (auto slash = authority.find('/'); slash != std::string_view::npos) {
        if (authority.substr(slash) != "/") {
            error = "an upstream has no path";
            return std::nullopt;
        }
        authority = authority.substr(0, slash);
    }
    if (auto at = authority.rfind('@'); at != std::string_view::npos) {
        std::string_view userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        u.username = hangar::url_decode(userinfo.substr(0, colon));
        if (colon != std::string_view::npos) u.password = hangar::url_decode(userinfo.substr(colon + 1));
    }
    std::string_view host_part;
    std::string_view port_part;
    if (!authority.empty() && authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos || close + 1 >= authority.size() || authority[close + 1] != ':') {
            error = "an upstream needs host:port";
            return std::nullopt;
        }
        host_part = authority.substr(1, close - 1);
        port_part = authority.substr(close + 2);
    } else {
        auto colon = authority.rfind(':');
        if (colon == std::string_view::npos) {
            error = "an upstream needs host:port";
            return std::nullopt;
        }
        host_part = authority.substr(0, colon);
        port_part = authority.substr(colon + 1);
    }
    auto port = parse_port(port_part);
    if (host_part.empty() || !port) {
        error = "an upstream needs host:port with a port from 1 to 65535";
        return std::nullopt;
    }
    u.host = std::string(host_part);
    u.port = *port;
    while (!(rest = trim(rest)).empty()) {
        auto end = rest.find_first_of(" \t");
        std::string_view tag = rest.substr(0, end);
        rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
        auto eq = tag.find('=');
        std::string name = lower(tag.substr(0, eq));
        if (eq == std::string_view::npos || eq + 1 == tag.size() || !kTagNames.contains(name)) {
            error = "tags are country=, state=, city= or asn= (got \"";
            error.append(tag).append("\")");
            return std::nullopt;
        }
        std::string value = lower(tag.substr(eq + 1));
        if (name == "asn" && !value.starts_with("as")) value.insert(0, "as");
        u.tags[name] = value;
    }
    return u;
}

std::vector<Upstream> parse_pool(std::string_view line) {
    std::vector<Upstream> out;
    while (!trim(line).empty()) {
        auto comma = line.find(',');
        std::string_view entry = line.substr(0, comma);
        line = comma == std::string_view::npos ? std::string_view() : line.substr(comma + 1);
        if (trim(entry).empty()) continue;
        std::string error;
        auto u = parse_upstream(entry, error);
        if (!u) throw std::invalid_argument("upstream #" + std::to_string(out.size() + 1) + ": " + error);
        out.push_back(std::move(*u));
    }
    return out;
}

bool is_managed(std::string_view type) {
    return type == "datacenter" || type == "isp" || type == "residential" || type == "mobile";
}
bool is_type(std::string_view type) {
    return is_managed(type) || type == "custom";
}

std::optional<std::string> bypass_problem(std::string_view entry) {
    if (entry.empty()) return "is empty";
    if (entry.size() > 253) return "is longer than 253 characters";
    if (entry.find("://") != std::string_view::npos) return "must be a host name without a scheme";
    if (entry.find('/') != std::string_view::npos) return "must be a host name without a path";
    if (is_ip(entry)) return "must be a host name, not an IP address";
    if (entry.find(':') != std::string_view::npos) return "must be a host name without a port";
    std::string_view host = entry.starts_with("*.") ? entry.substr(2) : entry;
    if (host.find('*') != std::string_view::npos) return "a wildcard is only allowed as a leading \"*.\"";
    if (!is_hostname(host)) return "is not a host name";
    return std::nullopt;
}

bool bypassed(const std::vector<std::string> &bypass, std::string_view host) {
    std::string h = lower(host);
    while (!h.empty() && h.back() == '.')
        h.pop_back();
    for (const auto &entry : bypass) {
        if (entry.starts_with("*.")) {
            std::string_view suffix = std::string_view(entry).substr(1); // ".example.com"
            if (h.size() > suffix.size() && std::string_view(h).ends_with(suffix)) return true;
        } else if (h == entry) {
            return true;
        }
    }
    return false;
}

NewProxy parse_create(const json &body) {
    NewProxy p;
    auto type = body.find("type");
    if (type == body.end() || type->is_null()) throw Error::invalid("type", "is required");
    if (!type->is_string() || !is_type(type->get_ref<const std::string &>()))
        throw Error::invalid("type", "must be datacenter, isp, residential, mobile or custom");
    p.type = type->get<std::string>();

    if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw Error::invalid("name", "must be a string");
        std::string name(trim(it->get_ref<const std::string &>()));
        if (name.size() > 255) throw Error::invalid("name", "must be at most 255 characters");
        if (!name.empty()) p.name = name;
    }
    if (auto it = body.find("protocol"); it != body.end() && !it->is_null()) {
        if (*it != "http" && *it != "https") throw Error::invalid("protocol", "must be http or https");
        p.protocol = it->get<std::string>();
    }
    if (auto it = body.find("bypass_hosts"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) throw Error::invalid("bypass_hosts", "must be an array of host names");
        if (it->size() > 100) throw Error::invalid("bypass_hosts", "at most 100 entries");
        for (std::size_t i = 0; i < it->size(); ++i) {
            const json &e = (*it)[i];
            std::string field = "bypass_hosts[" + std::to_string(i) + "]";
            if (!e.is_string()) throw Error::invalid(field, "must be a string");
            std::string entry = lower(e.get_ref<const std::string &>());
            if (auto problem = bypass_problem(entry)) throw Error::invalid(field, "\"" + entry + "\" " + *problem);
            if (std::find(p.bypass_hosts.begin(), p.bypass_hosts.end(), entry) == p.bypass_hosts.end())
                p.bypass_hosts.push_back(entry);
        }
    }
    json config = json::object();
    if (auto it = body.find("config"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) throw Error::invalid("config", "must be an object");
        config = *it;
    }
    if (p.type != "custom") {
        p.config = parse_managed_config(p.type, config);
        return p;
    }
    only_fields(config, {"host", "port", "username", "password", "ca_bundle"}, "custom");
    auto host = config_string(config, "host", 253);
    if (!host) throw Error::invalid("config.host", "is required for a custom proxy");
    std::string h = lower(*host);
    if (h.find("://") != std::string::npos || h.find('/') != std::string::npos || (!is_ip(h) && !is_hostname(h)))
        throw Error::invalid("config.host", "must be a host name or IP address, without scheme, port or path");
    if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    auto port = config.find("port");
    if (port == config.end() || port->is_null()) throw Error::invalid("config.port", "is required for a custom proxy");
    if (!port->is_number_integer() &&
        !(port->is_number_float() && port->get<double>() == std::floor(port->get<double>())))
        throw Error::invalid("config.port", "must be an integer from 1 to 65535");
    double n = port->get<double>();
    if (n < 1 || n > 65535) throw Error::invalid("config.port", "must be an integer from 1 to 65535");
    p.config = {{"host", h}, {"port", static_cast<int>(n)}};
    if (auto user = config_string(config, "username")) p.config["username"] = *user;
    if (auto it = config.find("password"); it != config.end() && !it->is_null()) {
        if (!it->is_string()) throw Error::invalid("config.password", "must be a string");
        const auto &pw = it->get_ref<const std::string &>();
        if (pw.size() < 5) throw Error::invalid("config.password", "must be at least 5 characters");
        if (pw.size() > 1024) throw Error::invalid("config.password", "must be at most 1024 characters");
        p.password = pw;
    }
    if (auto it = config.find("ca_bundle"); it != config.end() && !it->is_null() && *it != "") {
        if (!it->is_string()) throw Error::invalid("config.ca_bundle", "must be a PEM string");
        const auto &pem = it->get_ref<const std::string &>();
        if (pem.size() > kMaxCaBundle) throw Error::invalid("config.ca_bundle", "must be at most 64 KiB");
        if (pem.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
            throw Error::invalid("config.ca_bundle", "must hold PEM certificates (-----BEGIN CERTIFICATE-----)");
        p.ca_bundle = pem;
    }
    p.config["has_password"] = p.password.has_value();
    p.config["has_ca_bundle"] = p.ca_bundle.has_value();
    return p;
}

std::string parse_rename(const json &body) {
    auto it = body.find("name");
    if (it == body.end() || it->is_null()) throw Error::invalid("name", "is required");
    if (!it->is_string()) throw Error::invalid("name", "must be a string");
    std::string name(trim(it->get_ref<const std::string &>()));
    if (name.empty()) throw Error::invalid("name", "must not be empty");
    if (name.size() > 255) throw Error::invalid("name", "must be at most 255 characters");
    return name;
}

PoolMatch match_pool(const std::vector<Upstream> &pool, const json &config) {
    PoolMatch m;
    std::map<std::string, std::string> want;
    for (const char *field : {"country", "state", "city", "asn"})
        if (config.contains(field) && config[field].is_string()) want[field] = lower(config[field].get<std::string>());
    auto describe = [](const Upstream &u) {
        std::string s;
        for (const char *f : {"country", "state", "city", "asn"})
            if (auto it = u.tags.find(f); it != u.tags.end())
                s += (s.empty() ? "" : " ") + std::string(f) + "=" +
                     (std::string_view(f) == "country" || std::string_view(f) == "asn"
                          ? [](std::string v) {
                                std::transform(v.begin(), v.end(), v.begin(),
                                               [](unsigned char c) { return std::toupper(c); });
                                return v;
                            }(it->second)
                          : it->second);
        return s.empty() ? std::string("any geo") : s;
    };
    std::vector<const Upstream *> same_country;
    for (const auto &u : pool) {
        bool ok = true;
        for (const auto &[k, v] : want) {
            auto it = u.tags.find(k);
            // An untagged upstream serves any value of that tag, except a country-specific ask
            // beyond the country itself: an untagged pool entry is as good as "anywhere".
            if (it != u.tags.end() && it->second != v) ok = false;
            if (it == u.tags.end() && k != "country") ok = false;
        }
        if (ok)
            m.upstreams.push_back(u);
        else if (want.count("country") && u.tags.count("country") && u.tags.at("country") == want["country"])
            same_country.push_back(&u);
    }
    if (!m.upstreams.empty()) return m;
    std::vector<const Upstream *> order = same_country;
    for (const auto &u : pool)
        if (std::find(order.begin(), order.end(), &u) == order.end()) order.push_back(&u);
    for (const auto *u : order) {
        std::string d = describe(*u);
        if (std::find(m.suggestions.begin(), m.suggestions.end(), d) == m.suggestions.end()) m.suggestions.push_back(d);
        if (m.suggestions.size() == 10) break;
    }
    return m;
}

std::optional<std::string> exit_address(std::string_view body) {
    std::string_view t = trim(body);
    if (is_ip(t)) return std::string(t);
    json j = json::parse(t, nullptr, false);
    if (j.is_object())
        for (const char *f : {"ip", "origin", "ip_address"})
            if (auto it = j.find(f); it != j.end() && it->is_string() && is_ip(it->get_ref<const std::string &>()))
                return it->get<std::string>();
    return std::nullopt;
}

std::optional<Url> parse_url(std::string_view url) {
    Url u;
    auto sep = url.find("://");
    if (sep == std::string_view::npos) return std::nullopt;
    u.scheme = lower(url.substr(0, sep));
    if (u.scheme != "http" && u.scheme != "https") return std::nullopt;
    std::string_view rest = url.substr(sep + 3);
    auto path = rest.find_first_of("/?#");
    std::string_view authority = rest.substr(0, path);
    u.target = path == std::string_view::npos ? "/" : std::string(rest.substr(path));
    if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
    if (u.target.empty() || u.target.front() != '/') u.target.insert(0, "/");
    if (authority.find('@') != std::string_view::npos) return std::nullopt;
    u.port = u.scheme == "https" ? 443 : 80;
    std::string_view host = authority;
    if (!authority.empty() && authority.front() == '[') {
        auto close = authority.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        host = authority.substr(1, close - 1);
        if (close + 1 < authority.size()) {
            if (authority[close + 1] != ':') return std::nullopt;
            auto p = parse_port(authority.substr(close + 2));
            if (!p) return std::nullopt;
            u.port = *p;
        }
    } else if (auto colon = authority.rfind(':'); colon != std::string_view::npos) {
        auto p = parse_port(authority.substr(colon + 1));
        if (!p) return std::nullopt;
        u.port = *p;
        host = authority.substr(0, colon);
    }
    if (host.empty()) return std::nullopt;
    u.host = lower(host);
    return u;
}

} // namespace proxies
