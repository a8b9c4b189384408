// The browsers plugin: browser sessions (server role) and the Chromium they run (instance role).
// One class, two halves; start() registers the half that belongs to the process's role. The
// server half is in server.cpp, the instance half in instance.cpp.
#pragma once

#include "chromium.hpp"
#include "curl.hpp"
#include "session_model.hpp"
#include "teardowns.hpp"

#include <hangar/metrics.hpp>
#include <hangar/plugin.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace hangar::browsers {

class BrowsersPlugin final : public hangar::Plugin {
private:
    // ---- server role (server.cpp) ----
    void start_server() override;
    void stop_server() override;

    void create(Request &req, Response &res);
    json create_session(const json &body, const std::string &project, const json &caller, const std::string &base_url);
    // Ends `s` (found by `id_or_name`, named in the 404 when another caller ended it first).
    void remove_session(const Session &s, const std::string &id_or_name);
    void retrieve(Request &req, Response &res);
    void update(Request &req, Response &res);
    // PATCH location: restarts Chromium with the new overrides and stores them.
    // POST /chromium/restart on the instance with `body`; the agent's error, reworded with `what`.
    void restart_chromium(const std::string &id, const json &body, const char *what);
    void update_location(const Session &s, const UpdateOptions &opts);
    // PATCH network: the allowlist replaced or lifted in the instance's forwarder, under the
    // revision check (409 stale_network), and stored.
    void update_network(const Session &s, const UpdateOptions::NetworkUpdate &u);
    void check_start_url_allowed(const Session &s, const UpdateOptions &opts) const;
    std::mutex network_mutex_; // one allowlist change at a time: the revision check holds
    void list(Request &req, Response &res);
    void remove(Request &req, Response &res);
    void cdp_browser_socket(Request &req, Response &res);
    void cdp_target_socket(Request &req, Response &res);
    void cdp_json(Request &req, Response &res, const std::string &agent_path);
    void webdriver_socket(Request &req, Response &res);

    std::optional<Session> find(const std::string &project, const std::string &id_or_name, bool include_deleted) const;
    Session require(const std::string &project, const std::string &id_or_name, bool include_deleted) const;
    json render(const Session &s, const Request &req) const;
    json render(const Session &s, const std::string &base_url) const;
    // The session a capability token names, checked: 401 for a bad token, 404 once it ended.
    std::string session_from_token(const std::string &token, const char *type) const;
    // The session of a base_url route ({session_id} and its jwt): 401 unless they match.
    std::string vm_session(const Request &req) const;
    // The public URL of node `name` (from the host's node list, re-read when unknown).
    std::optional<std::string> node_url(const std::string &name) const;
    // For an active session another node runs, throws Error::on_node (the host relays the
    // request to that node), or 502 when its address cannot be read now.
    void require_here(const std::string &id, const std::optional<std::string> &node) const;
    // agent_socket(sid), or require_here's answer when another node runs the session.
    std::string session_socket(const std::string &sid) const;
    // Where a POST /browsers runs (issue 24 point 3): returns here, or throws Error::on_node for
    // a node with clearly more room, or 503 when no node has room. `relayed`: another node placed
    // it here already, so it runs here if it can. A `region` (0.131) this node does not serve goes
    // to the node serving it with the most room; 400 when no live node serves it.
    void place_create(Response &res, bool relayed, const std::string &region) const;
    void relay_curl(Request &req, Response &res, const std::string &sid, const std::string &agent_path);
    // Writes the session's row; fills in its region (this node's) and memory (its instance's
    // real limit) first, so the caller renders what was stored.
    void insert(Session &s);
    // ---- region and memory (server.cpp) ----
    // `[node] region`: the one region this node serves.
    std::string region_ = "us-east";
    // What every instance of this node gets ([sandbox] memory_limit_mb), in bytes; 0: no limit.
    std::uint64_t instance_memory_bytes_ = 0;
    // The largest `memory` a browser may ask for ([sandbox] max_browser_memory_mb; the machine's
    // memory by default: a limit above it would promise what the node does not have).
    std::uint64_t max_browser_memory_bytes_ = 0;
    // Its BrowserMemory name (the machine's memory when there is no limit): what an instance
    // without a readable cgroup, and a row from before memory was recorded, show.
    std::string default_memory_;
    // The memory limit the instance's cgroup really has (memory.max / memory.limit_in_bytes),
    // else the machine's memory, as a BrowserMemory name.
    std::string instance_memory(const std::string &id) const;
    // Refuses (400) a create's region or memory this node cannot give.
    void check_placement(const CreateOptions &o) const;
    void write_tags(const std::string &id, const Tags &tags);
    // Marks the sessions deleted (once) and stops their instances, in parallel.
    void end_sessions(const std::vector<std::string> &ids, const char *why);
    bool mark_deleted(const std::string &id, std::int64_t at);
    // Stops an ended session's instance; a profile with save_changes gets its state first.
    void stop_session_instance(const std::string &id);
    // The profile as the profiles plugin describes it; nullopt when it (or the plugin) is gone.
    std::optional<json> profile_json(const std::string &project, const std::string &profile_id) const;
    void attach_profile(const Session &s, const ProfileRef &ref);
    // The telemetry plugin's `telemetry.session` service ({op, session_id, ...}; see its README).
    // Without that plugin, a request that would capture answers 501 and anything else is a no-op.
    std::optional<json> telemetry(const json &in, bool captures) const;
    // The same after the session exists: telemetry never fails it, a problem is only logged.
    void telemetry_after_start(const json &in) const;
    void sweep_idle();
    // Ends the sessions of nodes that stopped heartbeating, and stops this node's instances whose
    // sessions another node ended (a DELETE sent to it, or this node was stale for a while).
    void sweep_other_nodes();
    // `hangar drain`: creates go to other nodes (place_create) and pool acquires are refused
    // (503, Retry-After: through a load balancer the SDK's retry reaches another node), warm
    // spares stop, and once this node's last session ended the host is told to stop.
    bool draining() const { return config_bool("node.draining", false); }
    void refuse_while_draining(Response &res) const;
    void sweep_draining();
    std::mutex spares_stop_mutex_;
    bool drain_began_ = false;   // sweep thread only
    bool drain_done_ = false;    // sweep thread only
    int drain_quiet_sweeps_ = 0; // sweep thread only: sweeps in a row that found nothing running
    std::atomic<int> ending_{0}; // stop_session_instance calls under way (a DELETE not yet answered)
    void reap_orphans();

    // Names being created or renamed right now (project + '\n' + name): the store has no
    // transactions across calls, so uniqueness is decided here, backed by a unique index.
    class NameReservation;
    std::mutex names_mutex_;
    std::set<std::string> pending_names_;

    std::mutex delete_mutex_; // decides which caller ends a session

    std::mutex idle_mutex_;
    std::unordered_map<std::string, std::int64_t> idle_baseline_ms_; // for keys the host never saw
    std::atomic<bool> sweeping_{false};
    std::string node_;                  // this node's name (config node.name); every session row names its node
    std::int64_t nodes_checked_ms_ = 0; // sweep_other_nodes' last run (sweep thread only)
    mutable std::mutex node_urls_mutex_;
    mutable std::map<std::string, std::string> node_urls_; // node name -> public URL
    // The host's node list (`host.nodes`), each node's URL remembered; Error when the store is away.
    json read_nodes() const;
    std::atomic<bool> stopping_{false};
    std::uint32_t token_grace_seconds_ = 7 * 24 * 3600;

    // ---- admission (server.cpp) ----
    // Sessions being created per project count toward its limit until their row exists.
    class AdmissionSlot;
    AdmissionSlot admit(const std::string &project, int cap);
    // The caller's project cap on concurrent browsers (on-demand + pool capacity), which the host
    // works out from the org plugin's limits and the operator's max_browsers_per_project; 0: none.
    int session_cap(const Request &req) const {
        return static_cast<int>(req.caller().value("max_concurrent_sessions", max_browsers_per_project_));
    }
    std::mutex admission_mutex_;
    std::map<std::string, int> admitting_;
    int max_browsers_per_project_ = 0; // 0: no limit
    // Cold starts at once (`max_parallel_starts`), shared by creates and the spare fillers:
    // Chromium start-ups are CPU-bound, so a burst is staggered instead of thrashing the machine.
    // A create waiting for a slot takes a spare that becomes ready meanwhile, and the fillers
    // start nothing while a create waits: before, they started two spares beside the creates'
    // own starts during a burst, and the burst's waiting creates could not take them.
    class StartSlot {
    public:
        StartSlot() = default;
        explicit StartSlot(BrowsersPlugin *plugin) : plugin_(plugin) {}
        StartSlot(StartSlot &&o) noexcept : plugin_(std::exchange(o.plugin_, nullptr)) {}
        StartSlot &operator=(StartSlot &&o) noexcept {
            if (this != &o) {
                release();
                plugin_ = std::exchange(o.plugin_, nullptr);
            }
            return *this;
        }
        StartSlot(const StartSlot &) = delete;
        StartSlot &operator=(const StartSlot &) = delete;
        ~StartSlot() { release(); }
        bool held() const { return plugin_ != nullptr; }
        void release();

    private:
        BrowsersPlugin *plugin_ = nullptr;
    };
    StartSlot wait_for_start_slot();
    int start_slots_free_ = 2; // guarded by spares_mutex_
    int creates_waiting_ = 0;  // creates waiting for a slot or a spare; guarded by spares_mutex_

    // ---- warm spares (spares.cpp) ----
    // Started instances of the default configuration, per kind (headless or not, stealth or not),
    // that were never handed to anyone; POST /browsers takes one when its options need nothing
    // else. How many are kept follows demand: at least warm_spares (stealth kinds: none), at most
    // warm_spares_max, and in between as many as the recent creates of that kind would have taken
    // within one start-up time (bursts and steady rates both). Two filler threads start
    // replacements (through the start slots), and retire spares demand no longer asks for.
    struct SpareKind {
        bool headless = false;
        bool stealth = false;
        bool operator<(const SpareKind &o) const {
            return std::pair(headless, stealth) < std::pair(o.headless, o.stealth);
        }
        std::string label() const {
            return std::string(headless ? "headless" : "headful") + (stealth ? "_stealth" : "");
        }
    };
    static constexpr SpareKind kSpareKinds[] = {{false, false}, {true, false}, {false, true}, {true, true}};
    // A create's profile must also have no saved archive (profiles.has_state): a spare starts on
    // an empty user-data folder, which is what a profile without one gives.
    static bool spare_can_serve(const CreateOptions &o);
    // Whether a warm spare's memory limit is the one `o` asks for.
    bool spares_fit(const CreateOptions &o) const;
    int spare_minimum(SpareKind kind) const;
    // A ready spare of this kind, else whichever comes first: a spare the fillers finish, or a
    // start slot for the create's own start.
    std::variant<std::string, StartSlot> spare_or_start_slot(SpareKind kind);
    void start_spares();
    void stop_spares();
    void fill_spares(const std::stop_token &stop);
    struct SpareDemand {
        std::deque<std::chrono::steady_clock::time_point> creates; // spare-eligible, in the window
        double start_ms = 1000;                                    // moving average of spare starts
        int starting = 0;
    };
    int spare_target(SpareKind kind, std::chrono::steady_clock::time_point now);
    int warm_spares_ = 0;     // the minimum per non-stealth kind
    int warm_spares_max_ = 0; // the cap per kind
    std::chrono::seconds spares_window_{120};
    std::int64_t spares_min_free_mb_ = 2048; // beyond the minimum, only while this much memory is free
    mutable std::mutex spares_mutex_;
    std::condition_variable_any spares_cv_;
    std::map<SpareKind, std::deque<std::string>> spares_; // ready instance ids
    std::map<SpareKind, SpareDemand> spare_demand_;
    std::vector<std::jthread> spare_fillers_;

    // ---- browser pools (pools.cpp) ----
    // A pool keeps `size` started instances of one configuration. Idle ones are instances only
    // (no session row, no timeout); acquire turns one into a session (its id is the instance id,
    // kept across reuse), release puts it back or destroys it, and one filler thread tops pools
    // up at their fill rate. Definitions live in browsers_pools; instances are re-filled at start.
    // Resolves `extensions` selectors through the extensions plugin (404 for one the project does
    // not have) and hands their zips to the instance as inputs; returns their ids.
    std::vector<std::string> add_extension_inputs(json &spec, const std::string &project, const json &selectors) const;
    void resolve_pool_profile(const std::string &project, CreateOptions &launch) const;

    // What the proxies plugin adds to a launch: whether the browser signs its requests (the
    // web-bot-auth extension, or the operator's sign_requests) and the proxy's CA bundle, which
    // the instance installs in its own trust store before Chromium starts (so such a browser
    // never comes from a spare). 404 for another project's proxy; 501 for signing without the
    // proxies plugin.
    struct ProxyPlan {
        bool sign = false;
        // The instance installs the signer extension (WebSockets) before Chromium starts, which
        // a warm spare did not: such a browser always starts cold.
        bool signer_extension = false;
        std::optional<std::string> ca_bundle;
        std::optional<json> allowed_hosts; // as the proxies plugin checked them
        std::optional<json> proxy_routes;  // [{hosts, proxy_id}], checked the same way
        std::optional<json> private_hosts; // as sent and checked ([] included)
        std::optional<json> routes_wire() const {
            return proxy_routes ? std::optional<json>(proxy_routes_wire(*proxy_routes)) : std::nullopt;
        }
        // The CA bundle and allowlist into the instance spec, and the start URL held back while
        // signing starts.
        void apply(json &spec) const;
    };
    ProxyPlan proxy_plan(const std::string &project, const CreateOptions &o) const;
    // network.proxy_routes with each route's proxy selector resolved: [{hosts, proxy_id}].
    json resolve_proxy_routes(const std::string &project, const json &routes) const;
    // `vaults` of POST /browsers through the vaults plugin: [{id, name}] (501 without it).
    json resolve_vaults(const std::string &project, const json &selectors) const;
    void settle_pool_vaults(const std::string &project, json &config) const;
    // The proxy_id a 0.131 `proxy` selector names ("" = direct); 404 for a proxy not the project's.
    std::string proxy_of(const std::string &project, const ProxySelector &selector) const;
    // Once the instance runs: its route and signing key. A signing browser's start URL was held
    // back (its first request is signed too): open_start_url opens it after this.
    void proxy_handover(const std::string &instance, const std::string &project, const CreateOptions &o,
                        const ProxyPlan &plan, const std::string &base_url) const;
    // The start URL in the instance's Chromium, when one is asked for (a spare, a signing browser,
    // a Chromium restarted on a profile); 502 when it does not open.
    void open_start_url(const std::string &instance, const std::optional<std::string> &url) const;

    struct Pool {
        std::string id, org_id, project_id;
        std::vector<std::string> extension_ids; // what its browsers load (resolved from its config)
        std::optional<std::string> name;
        std::int64_t created_ms = 0;
        json config; // browser_pool_config as sent (size included)
        int size = 0;
        double fill_rate = 25; // % of size per minute
        int timeout_seconds = 600;
        CreateOptions launch;
        std::deque<std::string> idle;
        std::set<std::string> leased;
        // What each instance was started with: a PATCH without discard_all_idle leaves older
        // browsers on the old settings, and their sessions must say so.
        std::map<std::string, CreateOptions> built_with;
        // With refresh_on_profile_update: the profile's updated_at each instance was started on.
        std::map<std::string, std::string> profile_version;
        int starting = 0;
        std::chrono::steady_clock::time_point next_start{};
        std::uint64_t generation = 0; // bumped by flush/discard: instances started before are not kept
        std::int64_t flushes = 0;     // the store's flush_count this node last applied (any node flushes)
        int published_idle = -1;      // idle count last written to browsers_pool_idle
        int elsewhere = 0;            // members on the other live nodes (idle or leased), at the last sync
    };
    void start_pools();
    void stop_pools();
    void fill_pools(const std::stop_token &stop);
    void pool_create(Request &req, Response &res);
    void pool_list(Request &req, Response &res);
    void pool_update(Request &req, Response &res);
    void pool_delete(Request &req, Response &res);
    void pool_acquire(Request &req, Response &res);
    void pool_release(Request &req, Response &res);
    void pool_flush(Request &req, Response &res);
    Pool &pool_locked(const std::string &project, const std::string &id_or_name);
    json render_pool(const Pool &p) const;
    void save_pool(const Pool &p, bool insert);
    // Starts / ends one idle pool instance (with its read-only profile lease).
    // `profile_version` receives the updated_at of the profile it started on ("" without one).
    bool start_pool_instance(const std::string &id, const CreateOptions &launch, const std::string &project,
                             std::string &profile_version);
    // Pools with refresh_on_profile_update: idle instances started on an older version of the
    // profile are discarded (and replaced by the filler). One pool, or every such pool.
    void refresh_pool_profiles(const std::optional<std::string> &only_pool = std::nullopt);
    void destroy_pool_instance(const std::string &id);
    void destroy_pool_instances(std::vector<std::string> ids);
    // Whose browsers are counted: one project's (admission), or every project's of an org (what
    // /org/limits reports as used).
    enum class CountScope { Project, Org };
    // Pool capacity a project (or org) holds (counts toward the browser limit). Caller holds
    // pools_mutex_.
    int pooled_capacity_locked(const std::string &id, CountScope scope = CountScope::Project) const;
    // Active sessions of the project (or org) that are not pool leases.
    int unpooled_active(const std::string &id, CountScope scope = CountScope::Project) const;
    // A leased pooled session ended (DELETE, idle timeout): the pool forgets it and refills.
    void pool_session_ended(const std::string &id);
    std::optional<std::pair<std::string, std::optional<std::string>>> pool_ref(const std::string &pool_id) const;
    // Wakes the filler and acquirers after any change to a pool.
    void poke_pools();

    // ---- pools across nodes (pools.cpp): one pool, its size shared by the live nodes ----
    // A pool as its row describes it (config parsed, extensions and profile resolved).
    Pool pool_from_row(const json &row) const;
    // Whether a pool's row in the store has the name and settings this node holds (a PATCH
    // through another node changes them).
    static bool same_settings(const Pool &p, const json &row);
    // Brings this node's pools in line with the store: pools created, changed, flushed or
    // deleted through another node, and this node's share of each after a node came or went.
    void sync_pools();
    // This node's part of the pool's size: all of it alone; with other live nodes, what the last
    // sync weighed for it (pool_model.hpp), nullopt until a sync weighed the pool at its size;
    // nothing while draining.
    std::optional<int> pool_share_locked(const Pool &p) const;
    // Whether this node may start (or keep) one more member of p, holding `have`: under its
    // share, and the pool over all nodes under its size.
    bool room_for_member_locked(const Pool &p, int have) const;
    // Writes each pool's idle count here to browsers_pool_idle, where acquires on other nodes look.
    void publish_pool_idle();
    // Another live node with an idle member of the pool: {name, public URL}.
    std::optional<std::pair<std::string, std::string>> pool_idle_elsewhere(const std::string &pool_id,
                                                                           const std::vector<std::string> &nodes) const;
    // A flush or discard_all_idle, counted in the store for the other nodes; returns the count.
    std::int64_t count_pool_flush(const std::string &pool_id);
    // A pool created through another node a moment ago is read before a request says 404.
    void know_pool(const std::string &project, const std::string &id_or_name);
    // render_pool with the counts of every node (a pool spans nodes); on one node, the same.
    json render_pool_everywhere(const Pool &p) const;
    std::vector<std::string> pool_nodes_; // live nodes taking browsers, by name; empty: not read yet
    // With several nodes: pool id → {the size it was computed for, this node's share} (pool_model.hpp).
    std::map<std::string, std::pair<int, int>> pool_split_;
    mutable std::mutex pools_mutex_;
    std::condition_variable_any pools_cv_;
    std::atomic<std::uint64_t> pools_epoch_{0};
    std::map<std::string, Pool> pools_;
    std::jthread pool_filler_;

    // ---- metrics (metrics.cpp): the `browsers.metrics` service the host's /metrics renders ----
    void start_metrics();
    json metrics_families() const;
    // A session handed out: `source` is spare, cold or pool; `started` when its request began.
    void count_create(const char *source, std::chrono::steady_clock::time_point started);
    std::atomic<std::uint64_t> deletes_{0};
    std::atomic<std::uint64_t> admission_rejections_{0};
    mutable std::mutex metrics_mutex_;
    std::map<std::string, hangar::metrics::Histogram> create_seconds_; // by source

    // ---- instance role (instance.cpp) ----
    void start_instance() override;
    void stop_instance() override;
    void relay_to_chromium(Request &req, Response &res, const std::string &path);
    CurlResponse run_curl(const CurlRequest &r, Response &res);
    void curl_raw(Request &req, Response &res);

    std::unique_ptr<ChromiumRunner> chromium_;
    std::unique_ptr<BrowserCurl> curl_;

    // Last, so it is destroyed first: its threads use everything above.
    Teardowns teardowns_; // sessions whose DELETE was answered and which are still ending
};

} // namespace hangar::browsers
