// Which way a destination leaves a browser's forwarder: Kernel's `network.proxy_routes`
// (kernel-api-0131 §2.1) send chosen hosts through chosen proxies, everything else takes the
// browser's own proxy (or goes direct). Pure: the grammar, the precedence and the choice, so the
// unit tests pin them and the server (validating a create) and the forwarder read them alike.
#pragma once

#include "proxies_model.hpp"

#include <hangar/plugin.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace proxies {

struct HostRoute {
    std::vector<std::string> hosts; // lower-case: exact names or addresses, and "*.suffix"
    Upstream upstream;
    std::vector<std::string> bypass_hosts; // the route proxy's own
};

struct Route {
    std::optional<Upstream> upstream; // none: direct
    std::vector<std::string> bypass_hosts;
    std::vector<HostRoute> host_routes;
};

inline constexpr std::size_t kMaxRouteHosts = 1000;

// The hosts of each route in `routes` ([{hosts: [...]}, ...]) as the allowlist's grammar reads
// names and addresses (exact, or one leading "*." never over a public suffix), no networks; a
// pattern in one route only. Lower-case, in the routes' order. Throws hangar::Error 400 naming
// `network.proxy_routes[i].hosts[j]`.
std::vector<std::vector<std::string>> parse_route_hosts(const hangar::json &routes);

// The route `host` takes: one naming it exactly over any wildcard, a longer wildcard suffix over a
// shorter; null when none fits.
const HostRoute *route_for(const std::vector<HostRoute> &routes, std::string_view host);

// The upstream a connection to `host` dials (null: direct): its route's proxy unless that proxy
// bypasses it, else the browser's own under the same rule. A route's proxy that cannot be reached
// fails the connection: it never falls back to another way out.
const Upstream *upstream_for(const Route &route, std::string_view host);

} // namespace proxies
