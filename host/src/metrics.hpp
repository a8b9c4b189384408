// Operations endpoints: Prometheus `GET /metrics`, `GET /readyz`, and the optional unauthenticated
// metrics listener (`[metrics] listen`). What is counted lives here; the middleware, the relays
// and the ABI's instance_start report into it.
#pragma once

#include <hangar/metrics.hpp>

#include <Poco/Net/HTTPServer.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct hangar_request;

namespace hangar::host {

struct HostCore;
struct PluginRecord;

class Metrics {
public:
    // One answered API request. `route` is the matched pattern (never the path, which may carry
    // a capability token or a tenant's file path); null for an unmatched request.
    void observe_request(const std::string &method, const std::string *route, int status, double seconds);
    // One instance start through the ABI (sandbox + agent + plugins ready), failed or not.
    void observe_instance_start(double seconds, bool ok);
    // Long-lived connections by kind (cdp, live_view, sse, webdriver, websocket).
    void connection_opened(const std::string &kind);
    void connection_closed(const std::string &kind);

    struct PluginState {
        std::string name;
        std::string state; // started | failed | refused | disabled
    };
    void set_plugins(std::vector<PluginState> plugins);

    // Set once the server listens with every plugin started; cleared when it begins to stop.
    std::atomic<bool> ready{false};

    // The whole text exposition: the host's families and each started plugin's
    // `<plugin>.metrics` service.
    std::string render(HostCore &core) const;

private:
    struct RequestSeries {
        std::string method, route, status;
        hangar::metrics::Histogram latency;
    };
    mutable std::mutex mutex_;
    std::map<std::string, RequestSeries> requests_; // method \n route \n status
    std::map<bool, hangar::metrics::Histogram> instance_starts_;
    std::map<std::string, long long> connections_;
    std::vector<PluginState> plugins_;
};

// What kind of long-lived connection a request that leaves the HTTP server becomes.
std::string connection_kind(const hangar_request &req);

// Adds GET /metrics (an org-wide key; 403 for a project-scoped one) and GET /readyz (public).
void add_ops_routes(HostCore &core, PluginRecord &owner);

// `[metrics] listen = host:port`: /metrics (and /healthz) without a key, for a scraper on a
// private network. Null when not configured.
std::unique_ptr<Poco::Net::HTTPServer> make_metrics_server(HostCore &core, const std::string &listen,
                                                           std::uint16_t &port);

} // namespace hangar::host
