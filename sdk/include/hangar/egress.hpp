// Connections the server makes to a host a tenant named (a custom proxy, a credential
// provider's URL): such a host must not be the server's own loopback, its other addresses, or a
// private network behind it, unless the operator lists it. resolve() looks the name up once and
// checks every address; the caller connects to exactly those addresses, so a name that
// answers differently a moment later (DNS rebinding) reaches nothing new.
//
// Configuration (any plugin reads it through config()):
//   [server] fetch_allow = 127.0.0.1:21000-21199, connect.internal:8080   host:port or host:first-last
//   [server] fetch_allow_private_networks = false                          true: only loopback and
//                                                                          this host's addresses stay refused
#pragma once

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::egress {

// The name did not resolve.
class ResolveError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The destination is one the server may not connect to; the message says which address and why.
class Refused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct Address {
    sockaddr_storage storage{};
    socklen_t length = 0;

    const sockaddr *get() const { return reinterpret_cast<const sockaddr *>(&storage); }
    int family() const { return storage.ss_family; }
    // The address without the port ("127.0.0.1", "::1").
    std::string text() const {
        char buf[INET6_ADDRSTRLEN] = {};
        if (family() == AF_INET)
            ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(&storage)->sin_addr, buf, sizeof buf);
        else if (family() == AF_INET6)
            ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6 *>(&storage)->sin6_addr, buf, sizeof buf);
        return buf;
    }
};

namespace detail {
constexpr bool in4(std::uint32_t a, std::uint32_t net, int bits) {
    return bits == 0 || (a >> (32 - bits)) == (net >> (32 - bits));
}
constexpr std::uint32_t v4(int a, int b, int c, int d) {
    return static_cast<std::uint32_t>(a) << 24 | static_cast<std::uint32_t>(b) << 16 |
           static_cast<std::uint32_t>(c) << 8 | static_cast<std::uint32_t>(d);
}
inline std::uint32_t v4_at(const unsigned char *p) {
    return v4(p[0], p[1], p[2], p[3]);
}

struct SpecialRangeV4 {
    std::uint32_t net;
    int bits;
    const char *why;
    bool loopback; // stays refused even with private networks allowed
};
inline constexpr SpecialRangeV4 kSpecialV4[] = {
    {v4(127, 0, 0, 0), 8, "a loopback address", true},
    {v4(0, 0, 0, 0), 8, "an unspecified address (this host)", true},
    {v4(10, 0, 0, 0), 8, "a private address (RFC 1918)", false},
    {v4(172, 16, 0, 0), 12, "a private address (RFC 1918)", false},
    {v4(192, 168, 0, 0), 16, "a private address (RFC 1918)", false},
    {v4(100, 64, 0, 0), 10, "a carrier-grade NAT address (RFC 6598)", false},
    {v4(169, 254, 0, 0), 16, "a link-local address", false},
    {v4(192, 0, 0, 0), 24, "an IETF protocol address (192.0.0.0/24)", false},
    {v4(198, 18, 0, 0), 15, "a benchmarking address (198.18.0.0/15)", false},
    {v4(224, 0, 0, 0), 4, "a multicast address", false},
    {v4(240, 0, 0, 0), 4, "a reserved address (240.0.0.0/4)", false},
};
} // namespace detail

// What kind of special address an IPv4 address (host order) is, or nullopt for a public one.
// `loopback` is set for the ranges that stay refused even with private networks allowed.
inline std::optional<std::string> special_v4(std::uint32_t a, bool *loopback = nullptr) {
    for (const auto &r : detail::kSpecialV4)
        if (detail::in4(a, r.net, r.bits)) {
            if (loopback && r.loopback) *loopback = true;
            return r.why;
        }
    return std::nullopt;
}

// The same for a whole IPv4 network (host order, `bits` long): the kind of the first special
// range it overlaps, or nullopt when every address in it is public.
inline std::optional<std::string> special_v4_network(std::uint32_t net, int bits) {
    for (const auto &r : detail::kSpecialV4)
        if (detail::in4(r.net, net, bits) || detail::in4(net, r.net, r.bits)) return r.why;
    return std::nullopt;
}

// The same for any address; IPv6 forms that carry an IPv4 address (mapped ::ffff:a.b.c.d,
// compatible ::a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16) are judged by that address.
inline std::optional<std::string> special(const sockaddr *sa, bool *loopback = nullptr) {
    if (sa->sa_family == AF_INET) {
        auto a = ntohl(reinterpret_cast<const sockaddr_in *>(sa)->sin_addr.s_addr);
        return special_v4(a, loopback);
    }
    if (sa->sa_family != AF_INET6) return "not an IP address";
    const unsigned char *b = reinterpret_cast<const sockaddr_in6 *>(sa)->sin6_addr.s6_addr;
    auto zero = [&](int from, int to) {
        for (int i = from; i < to; ++i)
            if (b[i] != 0) return false;
        return true;
    };
    auto hard = [&](const char *why) {
        if (loopback) *loopback = true;
        return std::optional<std::string>(why);
    };
    if (zero(0, 15) && b[15] == 1) return hard("a loopback address");
    if (zero(0, 16)) return hard("an unspecified address (this host)");
    if (zero(0, 10) && b[10] == 0xff && b[11] == 0xff) return special_v4(detail::v4_at(b + 12), loopback);
    if (zero(0, 12)) return special_v4(detail::v4_at(b + 12), loopback);
    if (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(4, 12))
        return special_v4(detail::v4_at(b + 12), loopback);
    if (b[0] == 0x20 && b[1] == 0x02) return special_v4(detail::v4_at(b + 2), loopback);
    if ((b[0] & 0xfe) == 0xfc) return "a unique local address (fc00::/7)";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "a link-local address";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "a site-local address (fec0::/10)";
    if (b[0] == 0xff) return "a multicast address";
    return std::nullopt;
}

// Whether `a` is one of this host's own addresses (any interface), which reach the server's
// own listeners whatever range they are in.
inline bool own_address(const Address &a) {
    ifaddrs *list = nullptr;
    if (::getifaddrs(&list) != 0) return false;
    std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
    for (ifaddrs *i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != a.family()) continue;
        if (a.family() == AF_INET && reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr ==
                                         reinterpret_cast<const sockaddr_in *>(a.get())->sin_addr.s_addr)
            return true;
        if (a.family() == AF_INET6 &&
            std::memcmp(&reinterpret_cast<const sockaddr_in6 *>(i->ifa_addr)->sin6_addr,
                        &reinterpret_cast<const sockaddr_in6 *>(a.get())->sin6_addr, sizeof(in6_addr)) == 0)
            return true;
    }
    return false;
}

// What the operator allows. Entries name a host as the tenant writes it or an address it
// resolves to, with a port or a port range; a listed destination skips every check.
struct Policy {
    struct Entry {
        std::string host; // lower-case; an IPv6 address without brackets
        std::uint16_t first = 0, last = 0;
    };
    bool allow_private_networks = false;
    std::vector<Entry> allow;

    // "host:port" or "host:first-last", separated by commas or spaces; "[::1]:8080" for IPv6.
    // Throws std::invalid_argument naming a malformed entry.
    static Policy parse(std::string_view list, bool allow_private_networks) {
        Policy p;
        p.allow_private_networks = allow_private_networks;
        std::size_t i = 0;
        while (i < list.size()) {
            auto end = list.find_first_of(", \t", i);
            std::string item(list.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i));
            i = end == std::string_view::npos ? list.size() : end + 1;
            if (item.empty()) continue;
            auto bad = [&] { return std::invalid_argument("fetch_allow: \"" + item + "\" is not host:port[-port]"); };
            auto colon = item.rfind(':');
            if (colon == std::string::npos || colon == 0) throw bad();
            Entry e;
            e.host = item.substr(0, colon);
            if (e.host.front() == '[') {
                if (e.host.size() < 3 || e.host.back() != ']') throw bad();
                e.host = e.host.substr(1, e.host.size() - 2);
            }
            for (auto &c : e.host)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            std::string ports = item.substr(colon + 1);
            auto dash = ports.find('-');
            try {
                std::size_t used = 0;
                unsigned long first = std::stoul(ports.substr(0, dash), &used);
                if (used != (dash == std::string::npos ? ports.size() : dash)) throw bad();
                unsigned long last = first;
                if (dash != std::string::npos) {
                    last = std::stoul(ports.substr(dash + 1), &used);
                    if (used != ports.size() - dash - 1) throw bad();
                }
                if (first == 0 || last > 65535 || first > last) throw bad();
                e.first = static_cast<std::uint16_t>(first);
                e.last = static_cast<std::uint16_t>(last);
            } catch (const std::logic_error &) {
                throw bad();
            }
            p.allow.push_back(std::move(e));
        }
        return p;
    }

    bool listed(std::string_view host, std::uint16_t port) const {
        std::string h(host);
        if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
        for (auto &c : h)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        for (const auto &e : allow)
            if (e.host == h && port >= e.first && port <= e.last) return true;
        return false;
    }

    // Why the server may not connect to `a` (port `port`), or nullopt when it may.
    std::optional<std::string> problem(const Address &a, std::uint16_t port) const {
        if (listed(a.text(), port)) return std::nullopt;
        bool hard = false;
        auto why = special(a.get(), &hard);
        if (why && (hard || !allow_private_networks)) return why;
        if (own_address(a)) return std::string("an address of this server");
        return std::nullopt;
    }
};

// Every address of `host`, resolved once, with no check: for connections made from inside a
// sandbox's own network namespace, where the host's addresses are out of reach anyway.
inline std::vector<Address> resolve_any(const std::string &host, std::uint16_t port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo *res = nullptr;
    std::string h =
        host.size() > 2 && host.front() == '[' && host.back() == ']' ? host.substr(1, host.size() - 2) : host;
    if (int rc = ::getaddrinfo(h.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
        throw ResolveError("cannot resolve " + host + ": " + ::gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
    std::vector<Address> out;
    for (addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_addrlen > sizeof(sockaddr_storage)) continue;
        Address a;
        std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
        a.length = static_cast<socklen_t>(ai->ai_addrlen);
        out.push_back(a);
    }
    if (out.empty()) throw ResolveError("cannot resolve " + host + ": no address");
    return out;
}

// The addresses of `host` the server may connect to on `port`, resolved once: all of them, or
// Refused when any is not allowed (a name that also answers with a private address is refused
// whole rather than tried address by address). A host listed by name skips the checks.
inline std::vector<Address> resolve(const std::string &host, std::uint16_t port, const Policy &policy) {
    auto addresses = resolve_any(host, port);
    if (policy.listed(host, port)) return addresses;
    for (const auto &a : addresses)
        if (auto why = policy.problem(a, port))
            throw Refused(host + ":" + std::to_string(port) + " resolves to " + a.text() + ", " + *why +
                          ", which this server does not connect to for a tenant (the operator can allow it with "
                          "[server] fetch_allow)");
    return addresses;
}

} // namespace hangar::egress
