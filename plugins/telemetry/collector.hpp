// The CDP collector of the instance half: ONE DevTools connection, owned by the agent, attached
// to every page target of the instance's Chromium with its own flat sessions. Another client's
// sessions (Playwright, a user's CDP) are separate, so nothing they see changes.
#pragma once

#include "telemetry_model.hpp"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace hangar::telemetry {

struct CollectorSettings {
    int screenshot_interval_ms = 5000;
    int reconnect_attempts = 20; // 250 ms apart
    // Why the proxy refused a tunnel to host:port lately (a proxy_error code), or "". Chromium
    // reports such a request only as ERR_TUNNEL_CONNECTION_FAILED, without the proxy's answer.
    std::function<std::string(const std::string &host, int port)> tunnel_failure;
};

class Collector {
public:
    using Emit = std::function<void(json event)>;
    // The current Chromium's DevTools port and browser path; throws when it is not running.
    using Endpoint = std::function<std::pair<int, std::string>()>;

    Collector(Emit emit, Endpoint endpoint, CollectorSettings settings);
    Collector(const Collector &) = delete;
    Collector &operator=(const Collector &) = delete;
    ~Collector();

    // The categories to collect now; the CDP ones decide whether a connection is held.
    void configure(const Selection &selection);

private:
    void run(const std::stop_token &stop);
    // One connected period: returns when the configuration changed (true) or the connection
    // broke (false).
    bool session(const std::stop_token &stop, const Selection &cats, std::uint64_t generation,
                 const std::function<void()> &connected);

    Emit emit_;
    Endpoint endpoint_;
    CollectorSettings settings_;
    std::mutex mutex_;
    std::condition_variable_any cv_;
    Selection selection_;
    std::uint64_t generation_ = 0;
    std::jthread thread_;
};

// The page script of the interaction category, calling `binding` with one JSON string per
// click, key press (never inside a password field) and settled scroll.
std::string interaction_script(const std::string &binding);

} // namespace hangar::telemetry
