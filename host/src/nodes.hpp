// Nodes (issue 24 point 2): every `hangar serve` is a node of the store it opened. It claims its
// name in the `nodes` table at start, after the refusals below, and a heartbeat thread keeps its
// row fresh with a small status until a planned stop marks it stopped.
//
// Refused at start, before anything is written: a name a live node holds, a plugin set or ABI that
// differs from a live node's, a public URL that is not http(s). A stale row of the same name (a
// node that stopped heartbeating: killed, machine lost) is taken over.
#pragma once

#include <nlohmann/json.hpp>

#include <Poco/Logger.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace hangar::host {

class Store;

// A refusal at start: the message names the setting.
class NodeError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A node whose last heartbeat is older than this many of its own intervals is stale.
inline constexpr int kMissedHeartbeats = 3;

enum class NodeState { live, stale, stopped };
const char *to_string(NodeState state);
// How old a heartbeat may get before its node reads stale: kMissedHeartbeats of its intervals.
std::int64_t stale_after_ms(std::int64_t heartbeat_seconds);
// `heartbeat_seconds` is the interval the row's own node promised (each node may have another).
NodeState node_state(bool stopped, std::int64_t heartbeat_at_ms, std::int64_t heartbeat_seconds, std::int64_t now_ms);

// Plugin name → version, the plugins a node runs.
using PluginSet = std::map<std::string, std::string>;

// Why a node with `mine` cannot join a live node `other` that runs `theirs` (empty: it can).
// Names each plugin one side lacks or runs at another version, and an ABI mismatch.
std::string plugin_set_difference(const PluginSet &mine, unsigned my_abi, const PluginSet &theirs, unsigned their_abi);

// Throws NodeError unless `url` is empty (derived from the listen address) or an http(s) URL
// with a host.
void check_public_url(const std::string &url);
// Nodes of a shared store relay to each other's public URL: before anything is written, this node
// listens on `listen` for a moment and fetches `url`; the answer must come from that listener (a
// nonce only it knows). NodeError naming the setting when the URL leads nowhere within
// `patience`, or to another server. https URLs are not probed (relays speak plain http).
void probe_public_url(const std::string &listen, const std::string &url, std::chrono::milliseconds patience);
// The host name (the default node name).
std::string host_name();
// MemAvailable from /proc/meminfo's text, in bytes (-1 when absent).
std::int64_t mem_available_bytes(const std::string &meminfo);

struct NodeSettings {
    std::string name;       // [node] name, HANGAR_NODE_NAME
    std::string public_url; // [server] public_url, HANGAR_PUBLIC_URL; empty until derived
    std::int64_t heartbeat_seconds = 3;
    std::int64_t max_browsers = 0; // [node] max_browsers: active sessions placed here at most; 0 = no cap
    std::string region;            // [node] region: what creates naming a region are placed by
    PluginSet plugins;
};

struct NodeStatus {
    std::int64_t browsers = 0; // instances the runtime runs
    std::int64_t spares = 0;   // of them, warm spares waiting to be handed out
    std::int64_t mem_available_bytes = -1;
};

// This process's row in `nodes`.
class NodeRegistration {
public:
    NodeRegistration(Store &store, NodeSettings settings);
    // Marks the row stopped if claimed and not yet marked (an exception unwinding the start too).
    ~NodeRegistration();
    NodeRegistration(const NodeRegistration &) = delete;
    NodeRegistration &operator=(const NodeRegistration &) = delete;

    // Checks every refusal and claims the name in one transaction; throws NodeError.
    void claim();
    // Once the listener is up: the URL (derived when no public URL was set).
    void publish(const std::string &public_url);
    // Returns false when another node took the name over (this one had gone stale).
    bool beat(const NodeStatus &status);
    void mark_stopped();

    const std::string &instance_id() const { return instance_id_; }
    // Set by the first beat that finds `hangar drain` asked for it; it stays set until the process
    // ends (a restart claims the name afresh, not draining).
    bool draining() const { return draining_; }
    const NodeSettings &settings() const { return settings_; }
    // Whether this node may call another stale (and end its sessions): only once its own beats
    // have succeeded without a gap for longer than any node's allowance. After a store outage
    // every node's heartbeat is old; each must first have had the time to beat again.
    bool may_judge_others(const nlohmann::json &nodes, std::int64_t now) const;

private:
    Store &store_;
    NodeSettings settings_;
    std::string instance_id_;
    std::string boot_id_;
    bool claimed_ = false;
    std::atomic<bool> draining_{false};
    std::atomic<std::int64_t> beating_since_{-1}; // since when beats succeed without a gap; -1: failing
};

// `hangar drain NAME`: marks the live node NAME draining (it takes no new browsers and stops once
// its sessions ended); returns since when. Throws NodeError for an unknown or not live node.
std::int64_t request_drain(Store &store, const std::string &name, std::int64_t now);

// Creates the host-owned `nodes` table (the same SQL on both engines).
void migrate_nodes(Store &store);
// Every row, oldest first, with its state at `now_ms` (for `hangar nodes`).
nlohmann::json list_nodes(Store &store, std::int64_t now_ms);
// The public URL of node `name` while it serves (live or draining) at `now_ms`, from the store's
// node table: where requests for what it runs are relayed. nullopt when unknown, stale or stopped.
std::optional<std::string> serving_node_url(Store &store, const std::string &name, std::int64_t now_ms);
// The `hangar nodes` table for people.
std::string format_nodes(const nlohmann::json &nodes);

// Calls registration.beat(status()) every interval on its own thread until destroyed; a failed
// beat (store unreachable) is logged and retried at the next tick. Destruction wakes the thread
// at once and joins it.
class Heartbeat {
public:
    Heartbeat(NodeRegistration &registration, std::function<NodeStatus()> status, Poco::Logger &log);
    ~Heartbeat();
    Heartbeat(const Heartbeat &) = delete;
    Heartbeat &operator=(const Heartbeat &) = delete;

private:
    void run();
    NodeRegistration &registration_;
    std::function<NodeStatus()> status_;
    Poco::Logger &log_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

} // namespace hangar::host
