// HostCore: everything one `hangar` process (server or agent) shares, and the concrete types
// behind the ABI's opaque handles.
#pragma once

#include "audit.hpp"
#include "auth.hpp"
#include "blobs.hpp"
#include "config.hpp"
#include "event_loop.hpp"
#include "metrics.hpp"
#include "relay_watch.hpp"
#include "router.hpp"
#include "store.hpp"
#include "tokens.hpp"

#include <hangar/plugin.h>

#include <Poco/Logger.h>
#include <Poco/Net/HTTPServerRequest.h>
#include <Poco/Net/HTTPServerResponse.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/Net/WebSocket.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hangar::host {

class Runtime;
class NodeRegistration;
struct PluginRecord;

struct RouteTarget {
    PluginRecord *plugin;
    hangar_handler_fn fn;
    void *user;
    std::uint32_t flags;
};

// Per-key activity: open connections and in-flight calls keep a session from idling out.
class ActivityTracker {
public:
    void begin(const std::string &key);
    void end(const std::string &key);
    // 0 while active, ms since the last end otherwise, -1 if never seen.
    std::int64_t idle_ms(const std::string &key) const;

private:
    struct Entry {
        int active = 0;
        std::int64_t last_end = 0;
    };
    mutable std::mutex mutex_;
    std::map<std::string, Entry> entries_;
};

// Tenant ↔ tenant load: how many long requests (an answer an instance decides the length of, an
// SSE stream, a live-view bridge, a route flagged HANGAR_ROUTE_LONG) each project has open at
// once. Beyond `[server] max_long_requests_per_project` a project's next one is refused (429), so
// one tenant cannot hold every request thread or stream while others wait.
class LongRequests {
public:
    // Holds one of a project's places until the last copy is gone (a stream's close callback
    // keeps a copy after the request thread has moved on).
    using Slot = std::shared_ptr<const void>;
    void set_limit(std::size_t limit) { limit_ = limit; } // 0: no cap; set before serving
    std::size_t limit() const { return limit_; }
    // Null when `project` already holds `limit` places.
    Slot try_acquire(const std::string &project);
    std::size_t held(const std::string &project) const;

private:
    void release(const std::string &project);
    std::size_t limit_ = 0;
    mutable std::mutex mutex_;
    std::map<std::string, std::size_t> held_;
};

class Services {
public:
    bool add(const std::string &name, const std::string &owner, hangar_service_fn fn, void *user);
    // A stopped plugin's services answer 404 from then on instead of calling into it.
    void remove_owned_by(const std::string &owner);
    // A service of the host's own (owner "host"): JSON text in, JSON text out, status 200; an
    // exception answers 503 `store_unavailable` with its message (host.nodes fails only when the
    // store does; host.drained refuses a node that is not draining the same way).
    void offer(const std::string &name, std::function<std::string(std::string_view)> fn);
    // Returns 404 with a wire error when nobody offers `name`.
    int call(const std::string &name, std::string_view in, std::string &out) const;

private:
    mutable std::mutex mutex_;
    std::map<std::string, std::function<std::string(std::string_view)>> host_services_;
    struct Entry {
        std::string owner;
        hangar_service_fn fn;
        void *user;
    };
    std::map<std::string, Entry> services_;
};

// Threads that carry a WebSocket's messages to a plain byte stream and back (ws_bridge_unix).
// One thread per bridge: they serve live-view viewers, a handful per instance, and blocking
// frame I/O on a thread of its own keeps WebSocket framing out of the splice-only event loop.
class WsBridges {
public:
    WsBridges() = default;
    WsBridges(const WsBridges &) = delete;
    WsBridges &operator=(const WsBridges &) = delete;
    ~WsBridges();
    // Runs one bridge until either side closes; `on_end` runs on its thread afterwards.
    void start(const Poco::Net::WebSocket &ws, const Poco::Net::StreamSocket &upstream, std::function<void()> on_end);
    void stop(); // shuts every bridge's sockets down and joins the threads; idempotent
    std::size_t active();
    // A thread each: beyond this many at once, new upgrades are refused (503) rather than
    // letting one link holder open threads without end.
    static constexpr std::size_t kMaxBridges = 64;

private:
    struct Bridge {
        std::optional<Poco::Net::WebSocket> ws;
        Poco::Net::StreamSocket upstream;
        std::function<void()> on_end;
        std::thread thread;
        std::atomic<bool> done{false};
    };
    static void run(Bridge &b);
    std::mutex mutex_;
    std::list<std::unique_ptr<Bridge>> bridges_;
    bool stopping_ = false;
};

struct HostCore {
    HostCore(hangar_role role, Config &config);
    ~HostCore();

    hangar_role role;
    Config &config;
    Poco::Logger &log;
    std::string data_dir;     // server role
    std::string instance_dir; // instance role
    std::unique_ptr<Store> store;
    std::unique_ptr<Blobs> blobs; // server role (blobs.hpp)
    std::unique_ptr<Auth> auth;
    std::unique_ptr<AuditLog> audit; // null: audit logging switched off ([audit] enabled = false)
    std::unique_ptr<Tokens> tokens;
    Runtime *runtime = nullptr;
    // Set as the server begins a stop that leaves sessions running for the next start to adopt;
    // plugins read it as the config key runtime.stopping_keeps_sessions.
    std::atomic<bool> stopping_keeps_sessions{false};
    // Before the loop and the bridges: their streams' close callbacks give places back.
    LongRequests long_requests;
    EventLoop loop;
    WsBridges bridges;
    Router<RouteTarget> router;
    std::mutex router_mutex; // routes are added during start only; guards against late adds
    ActivityTracker activity;
    Services services;
    RelayObservers relay_observers;
    Metrics metrics; // GET /metrics (metrics.cpp)
    std::size_t max_body_bytes = 64u << 20;
    std::string public_url;
    std::string node_name;                  // this node's name in the store (nodes.hpp); plugins read it as node.name
    const NodeRegistration *node = nullptr; // server role: plugins read node.draining through it
    // Where the API listens (server role; set before the first request), for req_dispatch and
    // for plugins that read `server.bound_listen` (host:port, port 0 resolved).
    std::string self_host;
    std::uint16_t self_port = 0;
    // Plugins that exist but are switched off, for a 404 that names them, and known API areas.
    std::set<std::string> disabled_plugins;
    // The plugins started, in start order; written while they start (before the server listens),
    // read by plugins as the config key host.plugins (what this installation serves).
    std::vector<std::string> started_plugins;
    std::vector<std::pair<std::string, std::string>> area_prefixes; // path pattern prefix → plugin
    // Features the operator switched in the configuration: scope ("" for [features], else the
    // project id a [project.<id or name>] section resolved to at start) → feature → on.
    std::map<std::string, std::map<std::string, bool>> feature_switches;

    const hangar_host_v1 *api() const;
};

struct PluginRecord {
    std::string name;
    std::string version;
    std::string file;
    std::vector<std::string> depends;
    std::vector<std::string> optional_depends; // "name?": started first when enabled, else ignored
    hangar_plugin_v1 desc{};
    void *dl = nullptr;
    bool started = false;
    Poco::Logger *logger = nullptr;
    std::unique_ptr<hangar_plugin_ctx> ctx;
    std::string last_error; // the plugin's latest error log line, to explain a failed start
};

} // namespace hangar::host

// The concrete types behind the ABI's opaque handles.
struct hangar_plugin_ctx {
    hangar::host::HostCore *core;
    hangar::host::PluginRecord *plugin;
};

struct hangar_request {
    hangar::host::HostCore *core;
    Poco::Net::HTTPServerRequest &http;
    std::string method;
    std::string path;                                       // decoded
    std::string raw_path;                                   // as received
    std::string query_string;                               // raw
    std::vector<std::pair<std::string, std::string>> query; // decoded
    std::map<std::string, std::string> params;
    std::string caller_json = "{}";
    std::string request_id;
    std::string base_url;
    std::uint32_t route_flags = 0;
    std::optional<std::string> body;
    bool body_failed = false;
    bool body_too_large = false;
    const std::string *route = nullptr;           // the matched pattern, for the audit log
    std::optional<hangar::host::Caller> caller{}; // set once authenticated
    std::string browser_session = {};             // {id} of a /browsers/{id}/... route: a per-browser API call
    bool direct_vm = false; // came as {base_url}/<subresource>?jwt= (the browser's own API, Kernel's in-VM calls)
    // The most body req_body reads: max_body_bytes, or far less for a request that carries no
    // credential (anyone may send it).
    std::size_t body_limit = 0;
    hangar::host::LongRequests::Slot long_slot = {}; // this request's place among its project's long ones
};

struct hangar_response {
    hangar::host::HostCore *core;
    hangar_request *req;
    Poco::Net::HTTPServerResponse &http;
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string content_type;
    std::string body;
    std::optional<std::string> file;
    bool taken_over = false; // the socket left the HTTP server (stream, relay, upgrade)
    bool sent = false;       // the response was written directly (plain relay)
    // Answered by the node that runs the browser (relay_to_owner_node), which audits it.
    bool relayed_to_node = false;
    // The node a plugin named in its own 421 wrong_node answer (set_error): only that is relayed,
    // to the URL the node table gives for it. A 421 copied from anywhere else never is.
    std::string owner_node = {};
};

struct hangar_stream {
    std::shared_ptr<hangar::host::SseConnection> conn;
};
