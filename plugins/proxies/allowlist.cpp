#include "allowlist.hpp"

#include "proxies_model.hpp"

#include <hangar/egress.hpp>

#include <arpa/inet.h>
#include <libpsl.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>

namespace proxies {

namespace {

using hangar::Error;

struct Address {
    int family = 0;
    std::array<unsigned char, 16> bytes{};
};

std::optional<Address> parse_address(const std::string &text) {
    Address a;
    if (::inet_pton(AF_INET, text.c_str(), a.bytes.data()) == 1) {
        a.family = AF_INET;
        return a;
    }
    if (::inet_pton(AF_INET6, text.c_str(), a.bytes.data()) == 1) {
        a.family = AF_INET6;
        return a;
    }
    return std::nullopt;
}

std::string text_of(const Address &a) {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(a.family, a.bytes.data(), buf, sizeof buf);
    return buf;
}

// What kind of non-public address `a` is (hangar/egress.hpp's judgement), or nullopt.
std::optional<std::string> special(const Address &a) {
    if (a.family == AF_INET) {
        std::uint32_t v = 0;
        std::memcpy(&v, a.bytes.data(), 4);
        return hangar::egress::special_v4(ntohl(v));
    }
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    std::memcpy(&sa.sin6_addr, a.bytes.data(), 16);
    return hangar::egress::special(reinterpret_cast<const sockaddr *>(&sa));
}

int width(int family) {
    return family == AF_INET ? 32 : 128;
}

// `a` with every bit after the first `bits` cleared (`fill`: set).
Address masked(Address a, int bits, bool fill) {
    int bytes = width(a.family) / 8;
    for (int i = 0; i < bytes; ++i) {
        int keep = std::clamp(bits - i * 8, 0, 8);
        auto mask = static_cast<unsigned char>(keep == 0 ? 0 : 0xff << (8 - keep));
        a.bytes[i] =
            fill ? static_cast<unsigned char>(a.bytes[i] | ~mask) : static_cast<unsigned char>(a.bytes[i] & mask);
    }
    return a;
}

bool in_network(const Address &a, int family, const std::array<unsigned char, 16> &net, int bits) {
    if (a.family != family) return false;
    Address n{family, net};
    return masked(a, bits, false).bytes == masked(n, bits, false).bytes;
}

// A host name (proxies_model's rule) that is not an IPv4 address written oddly ("1.2.3").
bool valid_host_name(std::string_view name) {
    return is_hostname(name) &&
           !std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c) || c == '.'; });
}

bool public_suffix(const std::string &name) {
    // The system's list (Debian's publicsuffix) when present, else the one libpsl was built with.
    static const psl_ctx_t *psl = [] {
        const psl_ctx_t *latest = psl_latest(nullptr);
        return latest ? latest : psl_builtin();
    }();
    // Unlisted top-level names ("test", "localhost") count as suffixes too (the list's "*" rule).
    return psl_is_public_suffix(psl, name.c_str()) != 0;
}

// 400 naming the list's entry at `where`, quoting it, and why.
Error refused(const std::string &where, const std::string &entry, const std::string &why) {
    std::string message = "\"" + entry + "\" ";
    message += why;
    return Error::invalid(where, message);
}

// What every list of hosts is first held to: an array of at most Allowlist::kMaxEntries strings,
// none with a scheme or anything a host cannot hold. `each(where, entry)` gets them lower-cased.
template <class Each> void each_entry(const hangar::json &entries, const std::string &field, Each each) {
    if (!entries.is_array()) throw Error::invalid(field, "must be an array of host names, addresses and networks");
    if (entries.size() > Allowlist::kMaxEntries)
        throw Error::invalid(field, "has " + std::to_string(entries.size()) + " entries; at most " +
                                        std::to_string(Allowlist::kMaxEntries) + " are allowed");
    for (std::size_t i = 0; i < entries.size(); ++i) {
        std::string where = field + "[" + std::to_string(i) + "]";
        if (!entries[i].is_string()) throw Error::invalid(where, "must be a string");
        std::string entry = lower(entries[i].get<std::string>());
        if (entry.find("://") != std::string::npos) throw refused(where, entry, "has a scheme: name the host alone");
        if (entry.empty() || entry.find_first_of("?#@ ") != std::string::npos)
            throw refused(where, entry, "is not a host, address or network");
        each(where, std::move(entry));
    }
}

std::string host_of_url(std::string_view url, bool &has_host) {
    has_host = false;
    auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return {};
    std::string scheme = lower(url.substr(0, scheme_end));
    if (scheme != "http" && scheme != "https" && scheme != "ws" && scheme != "wss") return {};
    auto rest = url.substr(scheme_end + 3);
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (auto at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
    has_host = true;
    if (!rest.empty() && rest.front() == '[') return std::string(rest.substr(1, rest.find(']') - 1));
    return std::string(rest.substr(0, rest.find(':')));
}

} // namespace

Allowlist Allowlist::parse(const hangar::json &entries, const std::string &field) {
    if (entries.is_array() && entries.empty())
        throw Error::invalid(field, "must name at least one destination (leave it out for no allowlist)");
    Allowlist list;
    each_entry(entries, field, [&](const std::string &where, std::string entry) {
        auto refuse = [&](const std::string &why) { return refused(where, entry, why); };

        if (auto slash = entry.find('/'); slash != std::string::npos) {
            std::string addr = entry.substr(0, slash), prefix = entry.substr(slash + 1);
            if (addr.size() > 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
            auto a = parse_address(addr);
            if (!a) throw refuse("has a path: name the host alone, or write a network as address/prefix");
            if (prefix.empty() || prefix.size() > 3 ||
                !std::all_of(prefix.begin(), prefix.end(), [](unsigned char c) { return std::isdigit(c); }))
                throw refuse("has no prefix length after '/'");
            int bits = std::stoi(prefix);
            if (bits > width(a->family)) throw refuse("has a prefix longer than the address");
            Address net = masked(*a, bits, false);
            if (net.bytes != a->bytes)
                throw refuse("is not in canonical form: its network is " + text_of(net) + "/" + std::to_string(bits));
            std::optional<std::string> why;
            if (a->family == AF_INET) {
                std::uint32_t v = 0;
                std::memcpy(&v, net.bytes.data(), 4);
                why = hangar::egress::special_v4_network(ntohl(v), bits);
            } else if (bits < 32) {
                throw refuse("is wider than /32: name the public networks it should reach");
            } else {
                why = special(net);
                if (!why) why = special(masked(*a, bits, true));
            }
            if (why) throw refuse("reaches " + *why + "; only public networks can be allowed");
            list.networks_.push_back({a->family, net.bytes, bits});
            list.entries_.push_back(entry);
            return;
        }

        if (entry.front() == '[') {
            if (entry.back() != ']') throw refuse("has a port: name the host alone");
            auto a = parse_address(entry.substr(1, entry.size() - 2));
            if (!a || a->family != AF_INET6) throw refuse("is not a bracketed IPv6 address");
            if (auto why = special(*a)) throw refuse("is " + *why + "; only public addresses can be allowed");
            list.exact_.insert(text_of(*a));
            list.entries_.push_back(entry);
            return;
        }
        if (auto a = parse_address(entry)) {
            if (a->family == AF_INET6) throw refuse("is an IPv6 address: write it in brackets");
            if (auto why = special(*a)) throw refuse("is " + *why + "; only public addresses can be allowed");
            list.exact_.insert(text_of(*a));
            list.entries_.push_back(entry);
            return;
        }
        if (entry.find(':') != std::string::npos) throw refuse("has a port: name the host alone");
        if (entry.back() == '.') entry.pop_back();
        bool wildcard = entry.starts_with("*.");
        std::string name = wildcard ? entry.substr(2) : entry;
        if (!valid_host_name(name))
            throw refuse(name.find('*') != std::string::npos ? "has a '*' other than one leading \"*.\""
                                                             : "is not a host name");
        if (wildcard) {
            if (public_suffix(name))
                throw refuse("is a wildcard over the public suffix \"" + name + "\"; name a domain under it");
            list.suffixes_.push_back("." + name);
        } else {
            list.exact_.insert(name);
        }
        list.entries_.push_back(entry);
    });
    return list;
}

bool Allowlist::allows(std::string_view host) const {
    std::string h = lower(host);
    if (!h.empty() && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    if (auto a = parse_address(h)) {
        if (exact_.count(text_of(*a))) return true;
        return std::any_of(networks_.begin(), networks_.end(),
                           [&](const Network &n) { return in_network(*a, n.family, n.bytes, n.bits); });
    }
    if (!h.empty() && h.back() == '.') h.pop_back();
    if (exact_.count(h)) return true;
    return std::any_of(suffixes_.begin(), suffixes_.end(), [&](const std::string &s) { return h.ends_with(s); });
}

bool Allowlist::allows_url(std::string_view url) const {
    bool has_host = false;
    std::string host = host_of_url(url, has_host);
    return !has_host || allows(host);
}

namespace {

// The ranges a private host may be in (Kernel's defaults for private_hosts).
struct Range {
    const char *address;
    int bits;
};
constexpr Range kPrivateRanges[] = {
    {"10.0.0.0", 8}, {"172.16.0.0", 12}, {"192.168.0.0", 16}, {"100.64.0.0", 10}, {"fc00::", 7}};

bool within_private(const Address &a, int bits) {
    return std::any_of(std::begin(kPrivateRanges), std::end(kPrivateRanges), [&](const Range &r) {
        auto net = parse_address(r.address);
        return bits >= r.bits && in_network(a, net->family, net->bytes, r.bits);
    });
}

} // namespace

PrivateHosts PrivateHosts::defaults() {
    PrivateHosts p;
    for (const auto &r : kPrivateRanges) {
        auto a = parse_address(r.address);
        Entry e;
        e.address = true;
        e.family = a->family;
        e.net = a->bytes;
        e.bits = r.bits;
        p.list_.push_back(e);
    }
    return p;
}

PrivateHosts PrivateHosts::parse(const hangar::json &entries, const std::string &field) {
    PrivateHosts out;
    each_entry(entries, field, [&](const std::string &where, std::string entry) {
        auto refuse = [&](const std::string &why) { return refused(where, entry, why); };
        Entry e;
        if (auto slash = entry.find('/'); slash != std::string::npos) {
            auto a = parse_address(entry.substr(0, slash));
            std::string prefix = entry.substr(slash + 1);
            if (!a || prefix.empty() || prefix.size() > 3 ||
                !std::all_of(prefix.begin(), prefix.end(), [](unsigned char c) { return std::isdigit(c); }))
                throw refuse("is not a network (address/prefix, IPv6 without brackets, no port)");
            int bits = std::stoi(prefix);
            if (bits > width(a->family)) throw refuse("has a prefix longer than the address");
            if (masked(*a, bits, false).bytes != a->bytes) throw refuse("is not in canonical form (host bits set)");
            if (!within_private(*a, bits))
                throw refuse("is not inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7");
            e.address = true;
            e.family = a->family;
            e.net = a->bytes;
            e.bits = bits;
        } else {
            // host[:port] or [v6][:port]
            auto port_of = [&](const std::string &digits) {
                if (digits.empty() || digits.size() > 5 ||
                    !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }) ||
                    std::stoi(digits) < 1 || std::stoi(digits) > 65535)
                    throw refuse("has a port outside 1-65535");
                return static_cast<std::uint16_t>(std::stoi(digits));
            };
            std::string host = entry;
            if (entry.front() == '[') {
                auto close = entry.find(']');
                std::string rest = close == std::string::npos ? "" : entry.substr(close + 1);
                auto a = close == std::string::npos ? std::nullopt : parse_address(entry.substr(1, close - 1));
                if (!a || a->family != AF_INET6 || (!rest.empty() && rest.front() != ':'))
                    throw refuse("is not a bracketed IPv6 address");
                if (!rest.empty()) e.port = port_of(rest.substr(1));
                host = text_of(*a);
            } else if (auto colon = entry.rfind(':'); colon != std::string::npos) {
                if (entry.find(':') != colon) throw refuse("is an IPv6 address: write it in brackets");
                e.port = port_of(entry.substr(colon + 1));
                host = entry.substr(0, colon);
            }
            if (auto a = parse_address(host)) {
                if (!within_private(*a, width(a->family)))
                    throw refuse("is not inside 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7");
                e.address = true;
                e.family = a->family;
                e.net = a->bytes;
                e.bits = width(a->family);
            } else {
                if (host.back() == '.') host.pop_back();
                e.wildcard = host.starts_with("*.");
                std::string name = e.wildcard ? host.substr(2) : host;
                if (!valid_host_name(name))
                    throw refuse(name.find('*') != std::string::npos ? "has a '*' other than one leading \"*.\""
                                                                     : "is not a host name");
                if (e.wildcard && (name.find('.') == std::string::npos || public_suffix(name)))
                    throw refuse("is a wildcard over \"" + name +
                                 "\": name a domain of two labels or more under a public suffix");
                e.name = e.wildcard ? "." + name : name;
            }
        }
        out.list_.push_back(e);
        out.entries_.push_back(entry);
    });
    return out;
}

std::vector<std::string> PrivateHosts::name_patterns() const {
    std::vector<std::string> out;
    for (const auto &e : list_)
        if (!e.address) out.push_back(e.wildcard ? "*" + e.name : e.name);
    return out;
}

bool PrivateHosts::matches(std::string_view host, std::uint16_t port) const {
    std::string h = lower(host);
    if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    auto a = parse_address(h);
    if (!a && !h.empty() && h.back() == '.') h.pop_back();
    return std::any_of(list_.begin(), list_.end(), [&](const Entry &e) {
        if (e.port != 0 && e.port != port) return false;
        if (e.address) return a && in_network(*a, e.family, e.net, e.bits);
        if (a) return false;
        return e.wildcard ? h.size() > e.name.size() && h.ends_with(e.name) : h == e.name;
    });
}

} // namespace proxies
