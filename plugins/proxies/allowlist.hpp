// A browser's egress allowlist (Kernel's `network.allowed_hosts`, kernel-api-0131 §2.1): the
// destinations its forwarder carries; everything else is refused with 403 and
// `X-Kernel-Proxy-Error: network_policy_denied`. Pure: the grammar and the matching, so the unit
// tests pin every rule, and the server (validating a request) and the forwarder (enforcing it)
// read the same entries the same way.
#pragma once

#include <hangar/plugin.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace proxies {

class Allowlist {
public:
    static constexpr std::size_t kMaxEntries = 1000;

    // Entries as a tenant sends them:
    //   exact host names ("example.com"), one leading "*." for every subdomain at any depth
    //   ("*.example.com", never over a public suffix: "*.com", "*.co.uk", "*.github.io"),
    //   public IPv4 ("203.0.113.7"), bracketed public IPv6 ("[2606:4700::1111]"), and public
    //   CIDRs in canonical form ("203.0.113.0/24", "2606:4700::/32"; IPv6 networks /32 or longer).
    // No scheme, port or path. Throws hangar::Error 400 naming `field[i]` and why; an empty list
    // is refused too (no entries would refuse everything: leave the field out instead).
    static Allowlist parse(const hangar::json &entries, const std::string &field = "network.allowed_hosts");

    // `host` as a URL or a CONNECT target names it (an IPv6 address without brackets). Names
    // match names and addresses match addresses: a name is not resolved to find an address
    // entry it would reach.
    bool allows(std::string_view host) const;
    // The host of an absolute http(s)/ws(s) URL is allowed; other URLs (about:blank) reach
    // nothing and are.
    bool allows_url(std::string_view url) const;

    // The entries as given, lower-case.
    const std::vector<std::string> &entries() const { return entries_; }

private:
    struct Network {
        int family = 0; // AF_INET or AF_INET6
        std::array<unsigned char, 16> bytes{};
        int bits = 0;
    };
    std::vector<std::string> entries_;
    std::set<std::string> exact_;       // names, and addresses in inet_ntop's text
    std::vector<std::string> suffixes_; // ".example.com" for "*.example.com"
    std::vector<Network> networks_;
};

// Kernel's `network.private_hosts` (kernel-api-0131 §2.1): destinations a browser reaches through
// its instance's own network, never through its proxy or a proxy route. What that network reaches
// is the sandbox's business ([sandbox] allow_private_networks): private ranges are unreachable
// there unless the operator opens them.
class PrivateHosts {
public:
    // Without the field: RFC 1918, 100.64.0.0/10 and fc00::/7.
    static PrivateHosts defaults();
    // Entries: host names ("preview.internal") and one leading "*." over a name of two labels or
    // more that is not a public suffix, IPv4 and bracketed IPv6 addresses inside those ranges,
    // each with an optional ":port", and canonical networks inside them (no port). `[]` is none.
    // Throws hangar::Error 400 naming `field[i]` and why.
    static PrivateHosts parse(const hangar::json &entries, const std::string &field = "network.private_hosts");

    // Names match names, addresses match addresses and networks (a name is never resolved); an
    // entry with a port matches that port only.
    bool matches(std::string_view host, std::uint16_t port) const;
    const std::vector<std::string> &entries() const { return entries_; }
    // The name entries as an allowlist writes them ("db.example", "*.corp.example"), ports
    // dropped: a host may not be in both lists whatever port the private entry names.
    std::vector<std::string> name_patterns() const;

private:
    struct Entry {
        std::string name; // exact name, ".suffix" for a wildcard, or an address's text
        bool wildcard = false;
        bool address = false;
        std::array<unsigned char, 16> net{}; // a network (bits > 0)
        int family = 0;
        int bits = 0;
        std::uint16_t port = 0; // 0: any
    };
    std::vector<Entry> list_;
    std::vector<std::string> entries_;
};

} // namespace proxies
