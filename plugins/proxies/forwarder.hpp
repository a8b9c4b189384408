// The per-instance forwarding proxy Chromium is pointed at once (--proxy-server): it speaks HTTP
// CONNECT and plain-HTTP proxying to Chromium and carries each connection directly, or through
// the current upstream (HTTP/HTTPS proxy with Basic auth done here, or SOCKS5). Changing the
// route is one pointer swap; connections opened before it are cut so the next request takes the
// new way (Chromium retries a request whose idle connection closed).
#pragma once

#include "allowlist.hpp"
#include "net.hpp"
#include "proxies_model.hpp"
#include "routes.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace proxies {

class Forwarder {
public:
    // `hold`: no route yet; connections wait (up to hold_ms) until set_route() gives one.
    Forwarder(bool hold, int hold_ms);
    Forwarder(const Forwarder &) = delete;
    Forwarder &operator=(const Forwarder &) = delete;
    ~Forwarder();

    std::uint16_t port() const { return port_; }
    // Without `host_routes`, those of the route in place stay (they are fixed at create; a later
    // change swaps only the browser's own proxy).
    void set_route(Route route, bool with_host_routes = true);
    // The destinations carried from now on (null: any). Open connections are cut, so a host the
    // new list refuses is not reached over a kept-alive one.
    void set_allowlist(std::shared_ptr<const Allowlist> allowlist);
    // What goes direct, past every proxy and route (PrivateHosts::defaults() until set). Fixed at
    // create, so set before Chromium starts.
    void set_private_hosts(PrivateHosts hosts);

    // Why the last tunnel to host:port failed at the proxy, when that was in the last 30 s.
    // Chromium shows a refused CONNECT only as ERR_TUNNEL_CONNECTION_FAILED, without our answer,
    // so the telemetry collector asks here to name the failure.
    std::optional<ProxyFailure> recent_failure(const std::string &host, std::uint16_t port);

private:
    void accept_loop();
    void serve(int client_fd);
    std::shared_ptr<const Route> current_route();
    // Whether the allowlist lets `host` through; if not, `client` got the 403 and it is remembered.
    bool admitted(Conn &client, const std::string &host, std::uint16_t port);
    // A private host: reached through the instance's own network, past every proxy and the
    // allowlist (as on Kernel, where such traffic never meets the egress proxy that enforces it).
    bool goes_direct(const std::string &host, std::uint16_t port);
    void remember_failure(const std::string &host, std::uint16_t port, ProxyFailure failure);

    int listen_fd_ = -1;
    std::uint16_t port_ = 0;
    std::atomic<bool> stopping_{false};
    std::thread acceptor_;

    std::mutex mutex_;
    std::condition_variable changed_;
    std::shared_ptr<const Route> route_; // null while holding
    std::shared_ptr<const Allowlist> allowlist_;
    std::shared_ptr<const PrivateHosts> private_hosts_ = std::make_shared<const PrivateHosts>(PrivateHosts::defaults());
    int hold_ms_;
    std::set<int> clients_; // open client sockets, cut on a route change
    int active_ = 0;

    struct TunnelFailure {
        std::string authority; // lower-case host ":" port
        ProxyFailure failure;
        Clock::time_point at;
    };
    std::deque<TunnelFailure> failures_; // newest last, bounded
};

} // namespace proxies
