// The proxies plugin's pure logic, without the host: what a create body may hold, the bypass-host
// rule and its matching, the operator's upstream pools (etc/plugins.d/proxies.ini) and which of
// them a managed proxy's geo selects. Linked into the plugin and into the unit tests
// (proxies_model); named after the plugin because the unit-test runner sees every plugin's model
// folder on its include path.
#pragma once

#include <hangar/plugin.hpp>
#include <hangar/text.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace proxies {

using hangar::json;

// How the forwarder reaches a proxy: `http` (plain), `https` (TLS to the proxy) or `socks5`.
struct Upstream {
    std::string scheme;
    std::string host;
    std::uint16_t port = 0;
    std::string username;
    std::string password;
    std::string ca_bundle;                   // PEM; empty = the system's trust store
    std::map<std::string, std::string> tags; // country, state, city, asn (lower-case values)

    // What the forwarder receives (secrets included: it never leaves the server and the agent).
    json to_json() const;
    static Upstream from_json(const json &j); // throws hangar::Error 400
    // "socks5://host:port" without credentials: safe for logs and errors.
    std::string display() const;
};

// "http://user:pass@host:port country=US city=berlin" (userinfo percent-decoded). nullopt with
// `error` set when it is not one.
std::optional<Upstream> parse_upstream(std::string_view text, std::string &error);

// A comma-separated list of upstreams, as one line of proxies.ini. Throws std::invalid_argument
// naming the bad entry (without its credentials).
std::vector<Upstream> parse_pool(std::string_view line);

// The managed types and custom.
using hangar::lower;
// A host name: labels of 1 to 63 letters, digits, inner hyphens and underscores, 253 at most.
bool is_hostname(std::string_view s);
bool is_managed(std::string_view type);
bool is_type(std::string_view type);

// A validated POST /proxies body.
struct NewProxy {
    std::string type;
    std::optional<std::string> name;
    std::string protocol = "https";
    std::vector<std::string> bypass_hosts;
    json config = json::object(); // response side: no password, no CA bundle
    std::optional<std::string> password;
    std::optional<std::string> ca_bundle;
};

// Throws hangar::Error 400 naming the field.
NewProxy parse_create(const json &body);
// PATCH /proxies/{id}: the new name, trimmed (400 when missing, empty or too long).
std::string parse_rename(const json &body);

// Why `entry` is not a bypass host (an IP, a port, a path...), or nullopt when it is one.
std::optional<std::string> bypass_problem(std::string_view entry);
// Whether `host` (a hostname or IP, any case) is covered by one of `bypass`: equal, or below a
// "*." entry (which does not cover the bare domain itself).
bool bypassed(const std::vector<std::string> &bypass, std::string_view host);

// The upstreams of `pool` whose tags satisfy a managed proxy's `config` (country, state, city,
// asn; case-insensitive). When none does, `suggestions` lists up to 10 configured geos near the
// request (same country first), as "country=DE city=berlin".
struct PoolMatch {
    std::vector<Upstream> upstreams;
    std::vector<std::string> suggestions;
};
PoolMatch match_pool(const std::vector<Upstream> &pool, const json &config);

// A check target's answer as an exit address: a bare IP, or JSON with "ip"/"origin"/"ip_address".
std::optional<std::string> exit_address(std::string_view body);

// "http://host:port/path" → parts; nullopt unless http(s) with a host.
struct Url {
    std::string scheme, host, target; // target: "/path?query"
    std::uint16_t port = 0;
};
std::optional<Url> parse_url(std::string_view url);

} // namespace proxies
