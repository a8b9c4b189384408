#include "routes.hpp"

#include "allowlist.hpp"

#include <algorithm>
#include <map>

namespace proxies {

using hangar::Error;
using hangar::json;

std::vector<std::vector<std::string>> parse_route_hosts(const json &routes) {
    std::vector<std::vector<std::string>> out;
    std::map<std::string, std::size_t> seen; // pattern → its route
    std::size_t total = 0;
    for (std::size_t i = 0; i < routes.size(); ++i) {
        std::string field = "network.proxy_routes[" + std::to_string(i) + "].hosts";
        const json &hosts = routes[i].at("hosts");
        total += hosts.size();
        if (total > kMaxRouteHosts)
            throw Error::invalid(field, "the routes name more than " + std::to_string(kMaxRouteHosts) + " hosts");
        auto entries = Allowlist::parse(hosts, field).entries();
        for (std::size_t j = 0; j < entries.size(); ++j) {
            const auto &e = entries[j];
            if (e.find('/') != std::string::npos)
                throw Error::invalid(field + "[" + std::to_string(j) + "]",
                                     "a route names hosts (exact, or *.example.com) and addresses, not networks");
            auto [at, fresh] = seen.emplace(e, i);
            if (!fresh && at->second != i)
                throw Error::invalid(field + "[" + std::to_string(j) + "]",
                                     "\"" + e + "\" is in network.proxy_routes[" + std::to_string(at->second) +
                                         "] too: a host pattern may be in one route only");
        }
        out.push_back(std::move(entries));
    }
    return out;
}

const HostRoute *route_for(const std::vector<HostRoute> &routes, std::string_view host) {
    std::string h = lower(host);
    if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
    while (!h.empty() && h.back() == '.')
        h.pop_back();
    const HostRoute *best = nullptr;
    std::size_t best_suffix = 0;
    for (const auto &r : routes)
        for (const auto &p : r.hosts) {
            std::string entry = p.size() > 2 && p.front() == '[' && p.back() == ']' ? p.substr(1, p.size() - 2) : p;
            if (entry == h) return &r; // exact beats any wildcard
            if (entry.starts_with("*.")) {
                std::string_view suffix = std::string_view(entry).substr(1); // ".example.com"
                if (h.size() > suffix.size() && h.ends_with(suffix) && suffix.size() > best_suffix) {
                    best = &r;
                    best_suffix = suffix.size();
                }
            }
        }
    return best;
}

const Upstream *upstream_for(const Route &route, std::string_view host) {
    if (const HostRoute *r = route_for(route.host_routes, host))
        return bypassed(r->bypass_hosts, host) ? nullptr : &r->upstream;
    return route.upstream && !bypassed(route.bypass_hosts, host) ? &*route.upstream : nullptr;
}

} // namespace proxies
