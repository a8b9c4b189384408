// Browser pools (Kernel API §3.17 [90]-[97], kernel-behaviour §15): see browsers.hpp.
#include "browsers.hpp"
#include "pool_model.hpp"

#include <hangar/resource.hpp>

#include <algorithm>
#include <cmath>
#include <set>

namespace hangar::browsers {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxPoolSize = 1000;
constexpr int kDefaultPoolTimeout = 600;
// An acquire waits at most this long, well inside the SDK's 60 s request timeout.
constexpr double kMaxAcquireWaitSeconds = 50;
// How often a waiting acquire looks for an idle member on another node.
constexpr auto kPoolPeerCheck = std::chrono::milliseconds(500);

// The launch fields of a pool config, checked exactly as POST /browsers checks them.
const char *const kLaunchFields[] = {"headless",      "stealth",    "kiosk_mode", "viewport",  "start_url",
                                     "chrome_policy", "extensions", "proxy_id",   "telemetry", "profile",
                                     "memory",        "region",     "network"};

// What a pool's config keeps of a request body: the fields a pool takes, without nulls (a null is
// "not given" on create and "unchanged" on PATCH, as the contract has it for telemetry). Anything
// else would be stored and echoed back in browser_pool_config.
json pool_fields(const json &body) {
    static const std::set<std::string> pool_only = {"size", "fill_rate_per_minute",      "timeout_seconds",
                                                    "name", "refresh_on_profile_update", "vaults"};
    json out = json::object();
    if (!body.is_object()) return out;
    for (const auto &[k, val] : body.items()) {
        bool known = pool_only.count(k) > 0 ||
                     std::find(std::begin(kLaunchFields), std::end(kLaunchFields), k) != std::end(kLaunchFields);
        if (known && !val.is_null()) out[k] = val;
    }
    return out;
}

struct PoolSettings {
    int size = 0;
    double fill_rate = 25;
    int timeout_seconds = kDefaultPoolTimeout;
    std::optional<std::string> name;
    CreateOptions launch;
};

// Validates a whole pool config (create, or an update merged onto the old one).
PoolSettings parse_pool(const json &config) {
    Validation v;
    PoolSettings p;
    auto size = config.find("size");
    if (size == config.end() || !size->is_number_integer() || size->get<std::int64_t>() < 0 ||
        size->get<std::int64_t>() > kMaxPoolSize)
        v.fail("size", "must be an integer from 0 to " + std::to_string(kMaxPoolSize));
    else
        p.size = size->get<int>();
    if (auto f = config.find("fill_rate_per_minute"); f != config.end() && !f->is_null()) {
        if (!f->is_number() || f->get<double>() < 0)
            v.fail("fill_rate_per_minute", "must be a number ≥ 0 (percent of size per minute)");
        else
            p.fill_rate = f->get<double>();
    }
    if (auto f = config.find("timeout_seconds"); f != config.end() && !f->is_null()) {
        if (!f->is_number_integer() || f->get<std::int64_t>() < kMinTimeoutSeconds ||
            f->get<std::int64_t>() > kMaxTimeoutSeconds)
            v.fail("timeout_seconds", "must be an integer from 10 to 259200");
        else
            p.timeout_seconds = f->get<int>();
    }
    if (auto f = config.find("name"); f != config.end() && !f->is_null()) {
        if (!f->is_string() || !hangar::valid_resource_name(f->get_ref<const std::string &>()))
            v.fail("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        else
            p.name = f->get<std::string>();
    }
    if (auto f = config.find("refresh_on_profile_update"); f != config.end() && !f->is_null()) {
        if (!f->is_boolean()) v.fail("refresh_on_profile_update", "must be a boolean");
        if (!config.contains("profile") || config["profile"].is_null())
            v.fail("refresh_on_profile_update", "needs a profile");
    }
    v.throw_if_failed("invalid browser pool");
    json launch = json::object();
    for (const char *k : kLaunchFields)
        if (config.contains(k)) launch[k] = config[k];
    if (launch.contains("profile") && launch["profile"].is_object())
        launch["profile"].erase("save_changes"); // pooled browsers never write a profile back
    p.launch = parse_create(launch);
    return p;
}

// The config with its network as the proxies plugin checked it (or without one), read again:
// what pool browsers are built from and what an update's expected_network is compared with.
PoolSettings settle_network(json &config, const std::optional<json> &allowed_hosts,
                            const std::optional<json> &proxy_routes_wire, const std::optional<json> &private_hosts) {
    json n = network_config(allowed_hosts, proxy_routes_wire, private_hosts);
    if (n.empty())
        config.erase("network");
    else
        config["network"] = n;
    return parse_pool(config);
}

double number_field(const json &body, const char *name, double fallback, double min, double max) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_number() || it->get<double>() < min || it->get<double>() > max)
        throw Error::invalid(name, "must be a number from " + std::to_string(static_cast<int>(min)) + " to " +
                                       std::to_string(static_cast<int>(max)));
    return it->get<double>();
}

} // namespace

// `vaults` of a pool config as sent ([{id} | {name}], checked as on POST /browsers) becomes the
// resolved [{id, name}] every lease is attached to; [] removes it. Resolved in the pool's project
// when it is set (404 for another project's vault), so a lease never resolves anything.
void BrowsersPlugin::settle_pool_vaults(const std::string &project, json &config) const {
    auto v = config.find("vaults");
    if (v == config.end()) return;
    auto selectors = parse_create(json{{"vaults", *v}}).vaults;
    if (!selectors)
        config.erase(v);
    else
        *v = resolve_vaults(project, *selectors);
}

// ---- lifecycle -----------------------------------------------------------------------------------

bool BrowsersPlugin::same_settings(const Pool &p, const json &row) {
    const json name = p.name ? json(*p.name) : json();
    return row.value("config", "") == p.config.dump() && row.value("name", json()) == name;
}

BrowsersPlugin::Pool BrowsersPlugin::pool_from_row(const json &row) const {
    Pool p;
    p.id = row.at("id").get<std::string>();
    p.org_id = row.value("org_id", "");
    p.project_id = row.value("project_id", "");
    if (row.value("name", json()).is_string()) p.name = row.at("name").get<std::string>();
    p.created_ms = row.value("created_at", std::int64_t{0});
    p.flushes = row.value("flush_count", std::int64_t{0});
    p.config = json::parse(row.value("config", "{}"), nullptr, false);
    try {
        auto s = parse_pool(p.config);
        p.size = s.size;
        p.fill_rate = s.fill_rate;
        p.timeout_seconds = s.timeout_seconds;
        p.launch = s.launch;
        json unused;
        p.extension_ids = add_extension_inputs(unused, p.project_id, s.launch.extensions);
        try {
            resolve_pool_profile(p.project_id, p.launch);
        } catch (const std::exception &) {
            // a profile deleted meanwhile: its fills fail on their own, and say so
        }
    } catch (const Error &e) {
        p.size = 0;
        warn("browser pool " + p.id + " is not filled: its config is no longer valid here: " + e.what());
    }
    return p;
}

void BrowsersPlugin::start_pools() {
    sync_pools();
    {
        // Leased sessions a restart kept on this node (reap_orphans ended those whose instance
        // was gone) still count toward their pool and go back to it on release. Idle members
        // were stopped with the previous server and are built again.
        std::lock_guard lock(pools_mutex_);
        for (const auto &row : sql("SELECT id, pool_id FROM browsers_sessions WHERE deleted_at IS NULL AND "
                                   "pool_id IS NOT NULL AND node = ?",
                                   {node_})) {
            auto it = pools_.find(row.value("pool_id", ""));
            if (it == pools_.end()) continue;
            auto id = row.at("id").get<std::string>();
            it->second.leased.insert(id);
            it->second.built_with[id] = it->second.launch;
        }
    }
    pool_filler_ = std::jthread([this](const std::stop_token &stop) { fill_pools(stop); });
    every(1000, [this] {
        sync_pools();
        refresh_pool_profiles();
    });
}

void BrowsersPlugin::sync_pools() {
    std::vector<NodeRoom> rooms;
    try {
        for (const auto &n : read_nodes().value("nodes", json::array()))
            if (n.value("state", "") == "live" && n.value("name", "") != node_)
                rooms.push_back({n.value("name", ""), n.value("max_browsers", std::int64_t{0}), 0});
    } catch (const Error &) {
        return; // the store is away: pools stay as they are until it is back
    }
    // This node takes its share while it runs and does not drain, even when its own row reads
    // stale for a moment (just after a store outage, before its next heartbeat).
    if (!draining()) rooms.push_back({node_, std::max<std::int64_t>(0, config_int("node.max_browsers", 0)), 0});
    std::vector<std::string> nodes;
    nodes.reserve(rooms.size());
    for (const auto &room : rooms)
        nodes.push_back(room.name);
    std::sort(nodes.begin(), nodes.end());
    // Several nodes: where the members of each pool go (pool_model.hpp) and how many each pool
    // has on the others, from their sessions and published idle counts. Without pools known here,
    // not read: a pool another node created is weighed at the next sync, a second later.
    std::map<std::string, int> elsewhere;
    bool any_pools = false;
    {
        std::lock_guard lock(pools_mutex_);
        any_pools = !pools_.empty();
    }
    if (nodes.size() > 1 && any_pools) try {
            std::map<std::string, std::int64_t> own_sessions;
            for (const auto &row : sql("SELECT node, pool_id, COUNT(*) AS n FROM browsers_sessions WHERE deleted_at IS "
                                       "NULL AND node IS NOT NULL GROUP BY node, pool_id")) {
                auto node = row.value("node", "");
                auto n = row.value("n", std::int64_t{0});
                if (row["pool_id"].is_string()) {
                    if (node != node_) elsewhere[row["pool_id"].get<std::string>()] += static_cast<int>(n);
                } else {
                    own_sessions[node] += n;
                }
            }
            for (auto &room : rooms)
                room.sessions = own_sessions[room.name];
            for (const auto &row : sql("SELECT pool_id, node, idle FROM browsers_pool_idle WHERE node <> ?", {node_}))
                if (std::binary_search(nodes.begin(), nodes.end(), row.value("node", "")))
                    elsewhere[row.value("pool_id", "")] += static_cast<int>(row.value("idle", std::int64_t{0}));
        } catch (const Error &) {
            return;
        }
    std::vector<std::string> dropped;
    try {
        // Under the lock, as create, update and delete write their rows: none is half-seen.
        std::lock_guard lock(pools_mutex_);
        const bool nodes_changed = pool_nodes_ != nodes;
        pool_nodes_ = std::move(nodes);
        std::set<std::string> listed;
        for (const auto &row : sql("SELECT * FROM browsers_pools")) {
            const auto id = row.at("id").get<std::string>();
            listed.insert(id);
            auto it = pools_.find(id);
            if (it == pools_.end()) {
                pools_.emplace(id, pool_from_row(row));
                continue;
            }
            Pool &p = it->second;
            if (!same_settings(p, row)) {
                Pool changed = pool_from_row(row); // a PATCH through another node
                p.config = changed.config;
                p.name = changed.name;
                p.size = changed.size;
                p.fill_rate = changed.fill_rate;
                p.timeout_seconds = changed.timeout_seconds;
                p.launch = changed.launch;
                p.extension_ids = changed.extension_ids;
                p.next_start = {};
            }
            if (auto flushes = row.value("flush_count", std::int64_t{0}); flushes != p.flushes) {
                p.flushes = flushes; // a flush or discard_all_idle through another node
                p.generation++;
                dropped.insert(dropped.end(), p.idle.begin(), p.idle.end());
                p.idle.clear();
            }
        }
        for (auto it = pools_.begin(); it != pools_.end();) {
            if (listed.count(it->first)) {
                ++it;
                continue;
            }
            // Deleted through another node, which ended its leases.
            dropped.insert(dropped.end(), it->second.idle.begin(), it->second.idle.end());
            it = pools_.erase(it);
        }
        pool_split_.clear();
        if (pool_nodes_.size() > 1 && any_pools) {
            std::vector<PoolSize> sizes;
            for (const auto &[id, p] : pools_)
                sizes.push_back({id, p.size});
            for (auto &[id, split] : pool_shares(sizes, rooms))
                pool_split_[id] = {pools_.at(id).size, split[node_]};
        }
        // Idle members past this node's share go when a node came or went, when this one drains,
        // or when the pool has more members than its size. Otherwise a share that shrank because
        // this node got busier keeps its idle members (no browser ended to be built again
        // elsewhere); what leaves the pool later is refilled where there is room.
        for (auto &[id, p] : pools_) {
            p.elsewhere = elsewhere[id];
            auto have = static_cast<int>(p.idle.size() + p.leased.size());
            if (!nodes_changed && !draining() && have + p.elsewhere <= p.size) continue;
            for (const int share = pool_share_locked(p).value_or(have); !p.idle.empty() && have > share; --have) {
                dropped.push_back(p.idle.back());
                p.idle.pop_back();
            }
        }
        for (auto &[_, p] : pools_)
            for (const auto &id : dropped) {
                p.built_with.erase(id);
                p.profile_version.erase(id);
            }
    } catch (const Error &e) {
        warn(std::string("browser pools could not be read from the store: ") + e.what());
    }
    poke_pools();
    destroy_pool_instances(std::move(dropped));
    publish_pool_idle();
}

std::optional<int> BrowsersPlugin::pool_share_locked(const Pool &p) const {
    if (pool_nodes_.empty()) return draining() ? 0 : p.size; // alone, or the node list unread yet
    if (std::find(pool_nodes_.begin(), pool_nodes_.end(), node_) == pool_nodes_.end())
        return 0; // draining (or not live): members are not replaced
    if (pool_nodes_.size() == 1) return p.size;
    if (auto split = pool_split_.find(p.id); split != pool_split_.end() && split->second.first == p.size)
        return split->second.second;
    return std::nullopt; // created or resized since the last sync weighed the nodes
}

bool BrowsersPlugin::room_for_member_locked(const Pool &p, int have) const {
    return have < pool_share_locked(p).value_or(0) && have + p.elsewhere < p.size;
}

void BrowsersPlugin::publish_pool_idle() {
    std::vector<std::pair<std::string, int>> changed;
    {
        std::lock_guard lock(pools_mutex_);
        for (auto &[id, p] : pools_)
            if (auto idle = static_cast<int>(p.idle.size()); idle != p.published_idle) {
                changed.emplace_back(id, idle);
                p.published_idle = idle;
            }
    }
    for (const auto &[id, idle] : changed)
        try {
            sql("INSERT INTO browsers_pool_idle (pool_id, node, idle) VALUES (?, ?, ?) "
                "ON CONFLICT (pool_id, node) DO UPDATE SET idle = excluded.idle",
                {id, node_, idle});
        } catch (const Error &) {
            std::lock_guard lock(pools_mutex_);
            if (auto it = pools_.find(id); it != pools_.end()) it->second.published_idle = -1; // next time
        }
}

std::optional<std::pair<std::string, std::string>>
BrowsersPlugin::pool_idle_elsewhere(const std::string &pool_id, const std::vector<std::string> &nodes) const {
    if (nodes.size() < 2) return std::nullopt;
    for (const auto &row : sql("SELECT node FROM browsers_pool_idle WHERE pool_id = ? AND node <> ? AND idle > 0 "
                               "ORDER BY idle DESC",
                               {pool_id, node_})) {
        auto name = row.value("node", "");
        if (std::find(nodes.begin(), nodes.end(), name) == nodes.end()) continue; // gone or draining
        if (auto url = node_url(name)) return std::make_pair(name, *url);
    }
    return std::nullopt;
}

std::int64_t BrowsersPlugin::count_pool_flush(const std::string &pool_id) {
    auto rows =
        sql("UPDATE browsers_pools SET flush_count = flush_count + 1 WHERE id = ? RETURNING flush_count", {pool_id});
    return rows.empty() ? 0 : rows[0].value("flush_count", std::int64_t{0});
}

void BrowsersPlugin::know_pool(const std::string &project, const std::string &id_or_name) {
    {
        std::lock_guard lock(pools_mutex_);
        try {
            const Pool &p = pool_locked(project, id_or_name);
            if (pool_nodes_.size() < 2) return; // one node: its pools are the store's
            // Several: a change another node made a moment ago (a delete, PATCH or flush) holds
            // for this request too, not only from the next sync on.
            auto row = sql("SELECT name, config, flush_count FROM browsers_pools WHERE id = ?", {p.id});
            if (!row.empty() && same_settings(p, row[0]) && row[0].value("flush_count", std::int64_t{0}) == p.flushes)
                return;
        } catch (const Error &e) {
            if (e.status() != 404) throw;
            // not here yet: created through another node
        }
    }
    sync_pools();
}

json BrowsersPlugin::render_pool_everywhere(const Pool &p) const {
    json out = render_pool(p);
    if (pool_nodes_.size() < 2) return out; // one node: its own counts are the pool's
    std::int64_t available = 0;
    for (const auto &row : sql("SELECT node, idle FROM browsers_pool_idle WHERE pool_id = ?", {p.id}))
        if (auto name = row.value("node", "");
            name != node_ && std::find(pool_nodes_.begin(), pool_nodes_.end(), name) != pool_nodes_.end())
            available += row.value("idle", std::int64_t{0});
    out["available_count"] = available + static_cast<std::int64_t>(p.idle.size());
    auto leased = sql("SELECT COUNT(*) AS n FROM browsers_sessions WHERE pool_id = ? AND deleted_at IS NULL", {p.id});
    out["acquired_count"] = leased.empty() ? 0 : leased[0].value("n", std::int64_t{0});
    return out;
}

void BrowsersPlugin::stop_pools() {
    pool_filler_.request_stop(); // wakes the filler's stop-aware waits
    if (pool_filler_.joinable()) pool_filler_.join();
    std::vector<std::string> idle;
    {
        std::lock_guard lock(pools_mutex_);
        for (auto &[_, p] : pools_)
            idle.insert(idle.end(), p.idle.begin(), p.idle.end());
        pools_.clear();
    }
    destroy_pool_instances(std::move(idle));
    try {
        sql("DELETE FROM browsers_pool_idle WHERE node = ?", {node_}); // its idle members are gone
    } catch (const Error &) {
        // the store is away: other nodes read this node as stopped and skip its counts
    }
}

// One start at a time across all pools (Chromium starts are CPU-bound), each pool at its rate.
void BrowsersPlugin::fill_pools(const std::stop_token &stop) {
    while (!stop.stop_requested()) {
        std::string pool_id, project;
        CreateOptions launch;
        std::uint64_t generation = 0;
        {
            std::unique_lock lock(pools_mutex_);
            const auto seen = pools_epoch_.load();
            auto now = Clock::now();
            std::optional<Clock::time_point> wake;
            for (auto &[id, p] : pools_) {
                if (!room_for_member_locked(p, static_cast<int>(p.idle.size() + p.leased.size()) + p.starting) ||
                    p.fill_rate <= 0)
                    continue;
                if (p.next_start <= now) {
                    pool_id = id;
                    break;
                }
                if (!wake || p.next_start < *wake) wake = p.next_start;
            }
            if (pool_id.empty()) {
                // Until a pool changes (poke_pools) or the next start is due.
                auto changed = [&] { return pools_epoch_.load() != seen; };
                if (wake)
                    pools_cv_.wait_until(lock, stop, *wake, changed);
                else
                    pools_cv_.wait(lock, stop, changed);
                continue;
            }
            Pool &p = pools_.at(pool_id);
            p.starting++;
            double per_minute = std::max(pool_share_locked(p).value_or(0) * p.fill_rate / 100.0, 0.01);
            p.next_start = now + std::chrono::milliseconds(static_cast<std::int64_t>(60000.0 / per_minute));
            launch = p.launch;
            project = p.project_id;
            generation = p.generation;
        }
        std::string id = new_session_id();
        std::string profile_version;
        bool ok = start_pool_instance(id, launch, project, profile_version);
        bool keep = false;
        {
            std::lock_guard lock(pools_mutex_);
            auto it = pools_.find(pool_id);
            if (it != pools_.end()) {
                it->second.starting--;
                const Pool &p = it->second;
                keep = ok && p.generation == generation &&
                       room_for_member_locked(p, static_cast<int>(p.idle.size() + p.leased.size()));
                if (keep) {
                    it->second.idle.push_back(id);
                    it->second.built_with[id] = launch;
                    it->second.profile_version[id] = profile_version;
                }
            }
        }
        if (ok && !keep) destroy_pool_instance(id);
        poke_pools(); // acquirers waiting for this pool
        publish_pool_idle();
    }
}

bool BrowsersPlugin::start_pool_instance(const std::string &id, const CreateOptions &launch, const std::string &project,
                                         std::string &profile_version) {
    json spec = make_instance_spec(id, launch);
    bool leased = false;
    try {
        if (launch.profile) {
            // A read-only lease under the instance's id, which is also its future session id.
            json in = {{"project_id", project}, {"session_id", id}, {"save_changes", false}};
            if (launch.profile->id) in["id"] = *launch.profile->id;
            if (launch.profile->name) in["name"] = *launch.profile->name;
            json lease = call("profiles.acquire", in);
            leased = true;
            profile_version = lease["profile"].value("updated_at", json()).dump();
            if (auto archive = lease.value("archive", json()); archive.is_string())
                spec["inputs"] = {{"profile.tar.zst", archive}};
        }
        ProxyPlan plan = proxy_plan(project, launch);
        plan.apply(spec);
        add_extension_inputs(spec, project, launch.extensions);
        instance_start(spec);
        proxy_handover(id, project, launch, plan, {});
        if (plan.sign) open_start_url(id, launch.start_url);
        return true;
    } catch (const std::exception &e) {
        instance_stop(id);
        if (leased) try {
                call("profiles.release", {{"session_id", id}});
            } catch (const std::exception &) {
                // nothing left to give back
            }
        warn(std::string("could not start a pooled browser: ") + e.what());
        return false;
    }
}

void BrowsersPlugin::refresh_pool_profiles(const std::optional<std::string> &only_pool) {
    struct Check {
        std::string pool, project;
        ProfileRef profile;
    };
    std::vector<Check> checks;
    {
        std::lock_guard lock(pools_mutex_);
        for (const auto &[id, p] : pools_)
            if ((!only_pool || *only_pool == id) && p.launch.profile &&
                p.config.value("refresh_on_profile_update", false) && !p.idle.empty())
                checks.push_back({id, p.project_id, *p.launch.profile});
    }
    std::vector<std::string> stale;
    for (const auto &c : checks) {
        std::string version;
        try {
            json profile =
                call("profiles.get",
                     {{"project_id", c.project}, {"id", c.profile.id.value_or(*c.profile.name)}, {"saved", true}});
            version = profile.value("updated_at", json()).dump();
        } catch (const std::exception &) {
            continue; // the profile is gone: its acquires fail on their own
        }
        std::lock_guard lock(pools_mutex_);
        auto it = pools_.find(c.pool);
        if (it == pools_.end()) continue;
        Pool &p = it->second;
        for (auto idle = p.idle.begin(); idle != p.idle.end();) {
            if (p.profile_version[*idle] == version) {
                ++idle;
                continue;
            }
            stale.push_back(*idle);
            p.built_with.erase(*idle);
            p.profile_version.erase(*idle);
            idle = p.idle.erase(idle);
            p.next_start = {};
        }
    }
    if (stale.empty()) return;
    poke_pools();
    destroy_pool_instances(std::move(stale));
}

void BrowsersPlugin::destroy_pool_instance(const std::string &id) {
    try {
        call("profiles.release", {{"session_id", id}}); // read-only: never saves
    } catch (const std::exception &) {
        // no profiles plugin, or no lease: nothing to give back
    }
    instance_stop(id);
}

void BrowsersPlugin::destroy_pool_instances(std::vector<std::string> ids) {
    std::vector<std::jthread> stoppers;
    stoppers.reserve(ids.size());
    for (auto &id : ids)
        stoppers.emplace_back([this, id = std::move(id)] { destroy_pool_instance(id); });
}

int BrowsersPlugin::unpooled_active(const std::string &id, CountScope scope) const {
    const std::string column = scope == CountScope::Org ? "org_id" : "project_id";
    auto rows = sql("SELECT COUNT(*) AS n FROM browsers_sessions WHERE " + column +
                        " = ? AND deleted_at IS NULL AND pool_id IS NULL",
                    {id});
    return rows.empty() ? 0 : rows[0].value("n", 0);
}

void BrowsersPlugin::poke_pools() {
    ++pools_epoch_;
    pools_cv_.notify_all();
}

int BrowsersPlugin::pooled_capacity_locked(const std::string &id, CountScope scope) const {
    int n = 0;
    for (const auto &[_, p] : pools_)
        if ((scope == CountScope::Org ? p.org_id : p.project_id) == id) n += p.size;
    return n;
}

void BrowsersPlugin::pool_session_ended(const std::string &id) {
    std::lock_guard lock(pools_mutex_);
    for (auto &[_, p] : pools_)
        if (p.leased.erase(id)) {
            p.built_with.erase(id);
            p.profile_version.erase(id);
            poke_pools(); // the filler builds a replacement
        }
}

std::optional<std::pair<std::string, std::optional<std::string>>>
BrowsersPlugin::pool_ref(const std::string &pool_id) const {
    std::lock_guard lock(pools_mutex_);
    auto it = pools_.find(pool_id);
    if (it == pools_.end()) return std::nullopt;
    return std::make_pair(it->second.id, it->second.name);
}

// A profile named by name gets its id now: `profile_id` of the pool is the resolved one (the
// contract calls it authoritative), and a missing profile is a 404 at create, not a failed fill.
void BrowsersPlugin::resolve_pool_profile(const std::string &project, CreateOptions &launch) const {
    if (!launch.profile || launch.profile->id || !launch.profile->name) return;
    json profile = call("profiles.get", {{"project_id", project}, {"id", *launch.profile->name}});
    launch.profile->id = profile.at("id").get<std::string>();
}

// ---- handlers ------------------------------------------------------------------------------------

BrowsersPlugin::Pool &BrowsersPlugin::pool_locked(const std::string &project, const std::string &id_or_name) {
    auto it = pools_.find(id_or_name);
    if (it != pools_.end() && it->second.project_id == project) return it->second;
    for (auto &[_, p] : pools_)
        if (p.project_id == project && p.name && *p.name == id_or_name) return p;
    throw Error::not_found("browser pool \"" + id_or_name + "\" not found");
}

json BrowsersPlugin::render_pool(const Pool &p) const {
    json out = {{"id", p.id},
                {"created_at", rfc3339(p.created_ms)},
                {"browser_pool_config", p.config},
                {"available_count", p.idle.size()},
                {"acquired_count", p.leased.size()},
                {"extension_ids", p.extension_ids},
                {"region", region_}};
    if (p.name) out["name"] = *p.name;
    if (p.launch.profile && p.launch.profile->id) out["profile_id"] = *p.launch.profile->id;
    return out;
}

void BrowsersPlugin::save_pool(const Pool &p, bool insert) {
    json name = p.name ? json(*p.name) : json();
    if (insert)
        sql("INSERT INTO browsers_pools (id, org_id, project_id, name, created_at, config) VALUES (?, ?, ?, ?, ?, ?)",
            {p.id, p.org_id, p.project_id, name, p.created_ms, p.config.dump()});
    else
        sql("UPDATE browsers_pools SET name = ?, config = ? WHERE id = ?", {name, p.config.dump(), p.id});
}

void BrowsersPlugin::pool_create(Request &req, Response &res) {
    std::string project = req.project();
    json body = pool_fields(req.json_body(false));
    if (!body.contains("size")) throw Error::invalid("size", "is required");
    auto settings = parse_pool(body);
    check_placement(settings.launch);
    // 404 for a proxy, 400 for the network's lists, 501 for signing without its plugin.
    auto plan = proxy_plan(project, settings.launch);
    settings = settle_network(body, plan.allowed_hosts, plan.routes_wire(), plan.private_hosts);
    json unused;
    auto extension_ids = add_extension_inputs(unused, project, settings.launch.extensions); // 404 now, not at fill
    resolve_pool_profile(project, settings.launch);
    settle_pool_vaults(project, body);
    if (settings.launch.telemetry)
        telemetry({{"op", "check"}, {"project_id", project}, {"request", *settings.launch.telemetry}},
                  settings.launch.telemetry_captures);
    std::unique_lock lock(pools_mutex_);
    if (settings.name)
        for (const auto &[_, p] : pools_)
            if (p.project_id == project && p.name == settings.name)
                throw Error::conflict("a browser pool named \"" + *settings.name + "\" already exists in this project");
    const int cap = session_cap(req);
    if (cap > 0 && unpooled_active(project) + pooled_capacity_locked(project) + settings.size > cap) {
        res.header("Retry-After", "2");
        ++admission_rejections_;
        throw Error(429, "rate_limited",
                    "this pool would take the project past its limit of " + std::to_string(cap) +
                        " browsers (pool capacity counts whether or not browsers are acquired)");
    }
    Pool p;
    p.id = hangar::new_id();
    p.org_id = req.caller().value("org_id", "");
    p.project_id = project;
    p.name = settings.name;
    p.created_ms = now_ms();
    p.config = body;
    p.size = settings.size;
    p.fill_rate = settings.fill_rate;
    p.timeout_seconds = settings.timeout_seconds;
    p.launch = settings.launch;
    p.extension_ids = std::move(extension_ids);
    save_pool(p, true);
    auto &stored = pools_.emplace(p.id, std::move(p)).first->second;
    res.json(render_pool(stored));
    if (pool_nodes_.size() > 1) {
        lock.unlock();
        sync_pools(); // weighs the nodes for the new pool now, not at the next sync
    }
    poke_pools();
}

void BrowsersPlugin::pool_list(Request &req, Response &res) {
    std::string project = req.project();
    Validation v;
    auto paging = hangar::parse_paging(req, v);
    v.throw_if_failed("invalid list query");
    auto lower = [](std::string s) {
        std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
        return s;
    };
    auto name = req.query("name");
    auto query = req.query("query");
    bool several_nodes = false;
    {
        std::lock_guard lock(pools_mutex_);
        several_nodes = pool_nodes_.size() > 1;
    }
    if (several_nodes) sync_pools(); // pools created or deleted through another node just now
    std::lock_guard lock(pools_mutex_);
    std::vector<const Pool *> matches;
    for (const auto &[_, p] : pools_) {
        if (p.project_id != project) continue;
        if (name && !name->empty() && (!p.name || lower(*p.name) != lower(*name))) continue;
        if (query && !query->empty() && p.id != *query &&
            (!p.name || lower(*p.name).find(lower(*query)) == std::string::npos))
            continue;
        matches.push_back(&p);
    }
    std::sort(matches.begin(), matches.end(), [](const Pool *a, const Pool *b) {
        return a->created_ms != b->created_ms ? a->created_ms > b->created_ms : a->id > b->id;
    });
    json items = json::array();
    for (std::size_t i = static_cast<std::size_t>(paging.offset);
         i < matches.size() && items.size() < static_cast<std::size_t>(paging.limit); ++i)
        items.push_back(render_pool_everywhere(*matches[i]));
    res.page(items, paging.offset, static_cast<std::size_t>(paging.offset) + items.size() < matches.size());
}

void BrowsersPlugin::pool_update(Request &req, Response &res) {
    std::string project = req.project();
    json body = req.json_body(false);
    bool discard = false;
    if (auto d = body.find("discard_all_idle"); d != body.end() && !d->is_null()) {
        if (!d->is_boolean()) throw Error::invalid("discard_all_idle", "must be a boolean");
        discard = d->get<bool>();
        body.erase("discard_all_idle");
    }
    know_pool(project, req.param("id_or_name"));
    std::vector<std::string> dropped;
    json out;
    bool several_nodes = false;
    {
        std::lock_guard lock(pools_mutex_);
        Pool &p = pool_locked(project, req.param("id_or_name"));
        // expected_network: the network last seen ({} for none); another one now fails the
        // whole update, as on Kernel.
        if (auto e = body.find("expected_network"); e != body.end() && !e->is_null()) {
            if (!e->is_object()) throw Error::invalid("expected_network", "must be the network last read, or {}");
            if (*e != p.config.value("network", json::object()))
                throw Error(409, "stale_network",
                            "the pool's network is no longer the one in expected_network: read the pool again");
        }
        json config = p.config;
        const json changes = pool_fields(body);
        for (const auto &[k, val] : changes.items()) {
            if (k == "name" && val.is_string() && val.get_ref<const std::string &>().empty()) continue; // no-op
            bool clears = (val.is_string() && val.get_ref<const std::string &>().empty() &&
                           (k == "proxy_id" || k == "start_url")) ||
                          (k == "profile" && val.is_object() && val.value("id", json()) == json("")) ||
                          (k == "network" && val.is_object() && val.empty());
            if (clears)
                config.erase(k);
            else
                config[k] = val;
        }
        auto settings = parse_pool(config);
        check_placement(settings.launch);
        auto plan = proxy_plan(project, settings.launch);
        settings = settle_network(config, plan.allowed_hosts, plan.routes_wire(), plan.private_hosts);
        // Idle browsers built on another network are replaced; leased ones on release.
        if (config.value("network", json::object()) != p.config.value("network", json::object())) discard = true;
        json unused;
        auto extension_ids = add_extension_inputs(unused, project, settings.launch.extensions);
        resolve_pool_profile(project, settings.launch);
        // Leases from now on are attached to the new vaults; idle browsers hold none (a lease's
        // vaults are its session's), so nothing is replaced.
        if (changes.contains("vaults")) settle_pool_vaults(project, config);
        if (settings.launch.telemetry)
            telemetry({{"op", "check"}, {"project_id", project}, {"request", *settings.launch.telemetry}},
                      settings.launch.telemetry_captures);
        if (settings.name && settings.name != p.name)
            for (const auto &[_, other] : pools_)
                if (other.project_id == project && other.name == settings.name)
                    throw Error::conflict("a browser pool named \"" + *settings.name + "\" already exists");
        if (const int cap = session_cap(req);
            settings.size > p.size && cap > 0 &&
            unpooled_active(project) + pooled_capacity_locked(project) - p.size + settings.size > cap) {
            res.header("Retry-After", "2");
            ++admission_rejections_;
            throw Error(429, "rate_limited",
                        "this size would take the project past its limit of " + std::to_string(cap) + " browsers");
        }
        p.config = config;
        p.name = settings.name;
        p.size = settings.size;
        p.fill_rate = settings.fill_rate;
        p.timeout_seconds = settings.timeout_seconds;
        p.launch = settings.launch;
        p.extension_ids = std::move(extension_ids);
        save_pool(p, false);
        if (discard) {
            dropped.assign(p.idle.begin(), p.idle.end());
            p.idle.clear();
            p.generation++;
            p.flushes = count_pool_flush(p.id); // the other nodes discard theirs too
        }
        for (const auto &id : dropped) {
            p.built_with.erase(id);
            p.profile_version.erase(id);
        }
        // A smaller pool gives back idle browsers first; leased ones finish their lease. With
        // several nodes the next sync weighs the new size and trims what is past it.
        const int share = pool_share_locked(p).value_or(static_cast<int>(p.idle.size() + p.leased.size()));
        while (!p.idle.empty() && static_cast<int>(p.idle.size() + p.leased.size()) > share) {
            p.built_with.erase(p.idle.back());
            p.profile_version.erase(p.idle.back());
            dropped.push_back(p.idle.back());
            p.idle.pop_back();
        }
        p.next_start = {};
        out = render_pool_everywhere(p);
        several_nodes = pool_nodes_.size() > 1;
    }
    if (several_nodes) sync_pools(); // weighs the nodes for the new size now
    poke_pools();
    destroy_pool_instances(std::move(dropped));
    publish_pool_idle();
    res.json(out);
}

void BrowsersPlugin::pool_delete(Request &req, Response &res) {
    std::string project = req.project();
    json body = req.json_body(true);
    bool force = false;
    if (auto f = body.find("force"); f != body.end() && !f->is_null()) {
        if (!f->is_boolean()) throw Error::invalid("force", "must be a boolean");
        force = f->get<bool>();
    }
    know_pool(project, req.param("id_or_name"));
    std::vector<std::string> idle, leased;
    {
        std::lock_guard lock(pools_mutex_);
        Pool &p = pool_locked(project, req.param("id_or_name"));
        // Leases on every node: those of other nodes end there once their rows read deleted.
        for (const auto &row : sql("SELECT id FROM browsers_sessions WHERE pool_id = ? AND deleted_at IS NULL", {p.id}))
            leased.push_back(row.at("id").get<std::string>());
        for (const auto &id : p.leased)
            if (std::find(leased.begin(), leased.end(), id) == leased.end()) leased.push_back(id);
        if (!leased.empty() && !force)
            throw Error::conflict("browser pool " + p.id + " has " + std::to_string(leased.size()) +
                                  " leased browser(s); release them or delete with force: true");
        idle.assign(p.idle.begin(), p.idle.end());
        sql_batch({{"DELETE FROM browsers_pools WHERE id = ?", json::array({p.id})},
                   {"DELETE FROM browsers_pool_idle WHERE pool_id = ?", json::array({p.id})}});
        pools_.erase(p.id);
    }
    poke_pools();
    end_sessions(leased, "its browser pool was deleted");
    destroy_pool_instances(std::move(idle));
    res.no_content();
}

void BrowsersPlugin::pool_flush(Request &req, Response &res) {
    know_pool(req.project(), req.param("id_or_name"));
    std::vector<std::string> idle;
    {
        std::lock_guard lock(pools_mutex_);
        Pool &p = pool_locked(req.project(), req.param("id_or_name"));
        idle.assign(p.idle.begin(), p.idle.end());
        for (const auto &id : idle) {
            p.built_with.erase(id);
            p.profile_version.erase(id);
        }
        p.idle.clear();
        p.generation++;
        p.flushes = count_pool_flush(p.id); // the other nodes flush theirs too
        p.next_start = {};
    }
    poke_pools();
    destroy_pool_instances(std::move(idle));
    publish_pool_idle();
    res.no_content();
}

void BrowsersPlugin::pool_acquire(Request &req, Response &res) {
    const auto started = Clock::now();
    std::string project = req.project();
    json body = req.json_body(true);
    // An acquire another node sent here takes from this node's members or waits here: one hop.
    const bool relayed = req.header("X-Hangar-Relayed-By").has_value();
    json lease_body = json::object();
    for (const char *k : {"name", "tags"})
        if (body.contains(k)) lease_body[k] = body[k];
    CreateOptions lease = parse_create(lease_body); // name and tags, checked as on create
    // Lease overrides: telemetry as on a browser update onto the pool's ({} and null change
    // nothing), a start_url opened before the browser is handed out (an empty one is none).
    json telemetry_override = nullptr;
    if (body.contains("telemetry")) {
        UpdateOptions t = parse_update(json{{"telemetry", body["telemetry"]}});
        telemetry_override = t.telemetry.value_or(json(nullptr));
        if (t.telemetry) telemetry({{"op", "check"}, {"request", *t.telemetry}}, t.telemetry_captures);
    }
    std::optional<std::string> start_url;
    if (auto s = body.find("start_url"); s != body.end() && !s->is_null()) {
        CreateOptions u = parse_create(json{{"start_url", *s}}); // the same checks as on create
        start_url = u.start_url;
    }
    json pool_telemetry = nullptr;
    std::string id, pool_id;
    int timeout_seconds = 0;
    know_pool(project, req.param("id_or_name"));
    {
        std::lock_guard lock(pools_mutex_);
        pool_id = pool_locked(project, req.param("id_or_name")).id;
    }
    // A profile saved a moment ago (a login just finished) is what this lease must start on.
    refresh_pool_profiles(pool_id);
    {
        std::unique_lock lock(pools_mutex_);
        Pool &p = pool_locked(project, req.param("id_or_name"));
        pool_id = p.id;
        double per_minute = std::max(p.size * p.fill_rate / 100.0, 0.01);
        double fill_time = p.size / per_minute * 60.0;
        double wait = number_field(body, "acquire_timeout_seconds", std::min(fill_time, kMaxAcquireWaitSeconds), 0,
                                   kMaxAcquireWaitSeconds);
        auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(wait * 1000));
        auto ready = [&] {
            auto it = pools_.find(pool_id);
            return it == pools_.end() || !it->second.idle.empty();
        };
        // Nothing idle here: a member idle on another node is handed out there (the host relays
        // this request), looked for again every half second while the wait lasts. A draining node
        // hands out none of its own.
        for (;;) {
            if (ready() && !draining()) break;
            if (!relayed) {
                auto nodes = pool_nodes_;
                lock.unlock();
                auto elsewhere = pool_idle_elsewhere(pool_id, nodes);
                lock.lock();
                if (elsewhere)
                    throw Error::on_node(elsewhere->first, elsewhere->second,
                                         "browser pool " + pool_id + " has an idle browser on node " +
                                             elsewhere->first);
            }
            if (draining()) refuse_while_draining(res);
            if (Clock::now() >= deadline) break;
            pools_cv_.wait_until(lock, std::min(deadline, Clock::now() + kPoolPeerCheck), ready);
        }
        auto it = pools_.find(pool_id);
        if (it == pools_.end()) throw Error::not_found("browser pool " + pool_id + " was deleted");
        if (it->second.idle.empty()) {
            res.no_content(); // the SDK returns null: nothing became free in time
            return;
        }
        id = it->second.idle.front();
        it->second.idle.pop_front();
        it->second.leased.insert(id);
        timeout_seconds = it->second.timeout_seconds;
        pool_telemetry = it->second.config.value("telemetry", json(nullptr));
        if (auto v = it->second.config.find("vaults"); v != it->second.config.end() && v->is_array() && !v->empty())
            lease.vaults = *v; // resolved when the pool took them
        auto built = it->second.built_with.find(id);
        const CreateOptions &launch = built == it->second.built_with.end() ? it->second.launch : built->second;
        lease.headless = launch.headless;
        lease.stealth = launch.stealth;
        lease.kiosk_mode = launch.kiosk_mode;
        lease.viewport = launch.viewport;
        lease.start_url = launch.start_url;
        lease.chrome_policy = launch.chrome_policy;
        lease.profile = launch.profile;
        lease.proxy_id = launch.proxy_id;
        lease.allowed_hosts = launch.allowed_hosts;
        lease.proxy_routes = launch.proxy_routes;
        lease.private_hosts = launch.private_hosts;
    }
    publish_pool_idle();
    auto give_back = [&] {
        {
            std::lock_guard lock(pools_mutex_);
            if (auto it = pools_.find(pool_id); it != pools_.end() && it->second.leased.erase(id))
                it->second.idle.push_front(id);
        }
        poke_pools();
        publish_pool_idle();
    };

    Session s;
    s.id = id;
    s.org_id = req.caller().value("org_id", "");
    s.project_id = project;
    s.name = lease.name;
    s.tags = lease.tags;
    s.created_ms = now_ms();
    s.timeout_seconds = timeout_seconds;
    s.headless = lease.headless;
    s.stealth = lease.stealth;
    s.kiosk_mode = lease.kiosk_mode;
    s.viewport = lease.viewport;
    s.start_url = lease.start_url;
    s.chrome_policy = lease.chrome_policy;
    s.pool_id = pool_id;
    s.proxy_id = lease.proxy_id;
    // As a browser created with it has it: the allowlist with a fresh revision, which a lessee can
    // PATCH (its release then replaces the browser). The pool's config holds its routes by id.
    s.network = browser_network(lease.allowed_hosts, lease.proxy_routes, lease.private_hosts);
    s.vaults = lease.vaults;
    if (lease.profile) {
        // The pool's instance holds a read-only lease under this id already.
        if (auto rows = sql("SELECT profile_id FROM browsers_sessions WHERE id = ?", {id});
            !rows.empty() && rows[0].value("profile_id", json()).is_string())
            s.profile_id = rows[0]["profile_id"].get<std::string>();
        else if (lease.profile->id)
            s.profile_id = *lease.profile->id;
    }
    try {
        if (s.name && !sql("SELECT id FROM browsers_sessions WHERE project_id = ? AND name = ? AND deleted_at IS NULL",
                           {project, *s.name})
                           .empty())
            throw Error::conflict("a browser session named \"" + *s.name + "\" is already active in this project");
        // A browser released with reuse keeps its session id: its row comes back to life. The
        // unique index on active names settles a race with a create of the same name.
        sql("DELETE FROM browsers_tags WHERE session_id = ?", {id});
        sql("DELETE FROM browsers_sessions WHERE id = ?", {id});
        insert(s);
    } catch (const Error &e) {
        give_back();
        if (std::string_view(e.what()).find("UNIQUE") != std::string_view::npos)
            throw Error::conflict("a browser session named \"" + s.name.value_or("") + "\" is already active");
        throw;
    }
    {
        std::lock_guard lock(idle_mutex_);
        idle_baseline_ms_[s.id] = now_ms(); // the pool's timeout runs from the lease
    }
    count_create("pool", started);
    activity(s.id);
    telemetry_after_start({{"op", "acquire"},
                           {"session_id", id},
                           {"project_id", project},
                           {"baseline", pool_telemetry},
                           {"request", telemetry_override}});
    // After telemetry, so the lease records its own first page.
    if (start_url) {
        // Best effort, as on create: the browser is handed out either way.
        auto r = instance_call(id, "POST", "/chromium/open", json{{"url", *start_url}}.dump(), 10000);
        if (r.status != 200) warn("browser session " + id + ": the acquire start_url was not opened: " + r.body);
        sql("UPDATE browsers_sessions SET start_url = ? WHERE id = ?", {*start_url, id});
        s.start_url = start_url;
    }
    res.json(render(s, req));
}

void BrowsersPlugin::pool_release(Request &req, Response &res) {
    std::string project = req.project();
    json body = req.json_body(false);
    if (!body.contains("session_id") || !body["session_id"].is_string())
        throw Error::invalid("session_id", "is required");
    std::string id = body["session_id"].get<std::string>();
    bool reuse = true;
    if (auto r = body.find("reuse"); r != body.end() && !r->is_null()) {
        if (!r->is_boolean()) throw Error::invalid("reuse", "must be a boolean");
        reuse = r->get<bool>();
    }
    know_pool(project, req.param("id_or_name"));
    // A browser leased on another node goes back to its pool there.
    if (auto rows = sql("SELECT node FROM browsers_sessions WHERE id = ? AND deleted_at IS NULL", {id});
        !rows.empty() && rows[0].value("node", json()).is_string())
        require_here(id, rows[0]["node"].get<std::string>());
    std::string built_proxy; // a lessee's hot swap goes back to the pool's proxy ("" = direct)
    std::optional<json> built_hosts;
    {
        std::lock_guard lock(pools_mutex_);
        Pool &p = pool_locked(project, req.param("id_or_name"));
        if (!p.leased.count(id)) throw Error::not_found("browser " + id + " is not leased from browser pool " + p.id);
        const CreateOptions &built = p.built_with.count(id) ? p.built_with.at(id) : p.launch;
        built_proxy = built.proxy_id.value_or("");
        built_hosts = built.allowed_hosts;
        // Built on a network the pool no longer has: replaced, not reused.
        if (built.allowed_hosts != p.launch.allowed_hosts || built.proxy_routes != p.launch.proxy_routes ||
            built.private_hosts != p.launch.private_hosts)
            reuse = false;
    }
    // A lessee's allowlist change is not undone in place: the browser is replaced (the contract
    // allows either), so no next lessee can meet a list the pool does not have.
    if (reuse && built_hosts)
        if (auto rows = sql("SELECT network FROM browsers_sessions WHERE id = ?", {id}); !rows.empty()) {
            json now = rows[0].value("network", json()).is_string()
                           ? json::parse(rows[0]["network"].get<std::string>(), nullptr, false)
                           : json();
            if (!now.is_object() || now.value("allowed_hosts", json()) != *built_hosts) reuse = false;
        }
    // Before it is idle again, so the next lessee never meets a passkey armed in this lease: the
    // vaults plugin disarms the browser (a browser it cannot disarm is replaced, not reused).
    if (reuse)
        if (auto rows = sql("SELECT vaults FROM browsers_sessions WHERE id = ?", {id});
            !rows.empty() && rows[0].value("vaults", json()).is_string())
            try {
                call("vaults.release", {{"session_id", id}});
            } catch (const Error &e) {
                warn("browser " + id + " is replaced, not reused: its vaults were not released: " + e.what());
                reuse = false;
            }
    // Before it is idle again, so the next acquirer never sees the swapped route.
    if (reuse) try {
            call("proxies.attach", {{"project_id", project}, {"proxy_id", built_proxy}, {"instance_id", id}});
        } catch (const Error &e) {
            // No proxies plugin, or the pool's proxy was deleted since: the browser keeps its route.
            if (e.status() != 404) warn("a released browser kept its swapped proxy: " + std::string(e.what()));
        }
    {
        std::lock_guard lock(pools_mutex_);
        Pool &p = pool_locked(project, req.param("id_or_name"));
        if (!p.leased.count(id)) throw Error::not_found("browser " + id + " is not leased from browser pool " + p.id);
        if (reuse) {
            // Otherwise the same browser goes back as it is (Kernel does not reset it either).
            p.leased.erase(id);
            p.idle.push_back(id);
        }
    }
    {
        std::lock_guard lock(idle_mutex_);
        idle_baseline_ms_.erase(id);
    }
    if (reuse) {
        // The lease's telemetry is archived and stopped; the next lease starts from the pool's.
        telemetry_after_start({{"op", "release"}, {"session_id", id}});
        mark_deleted(id, now_ms()); // the lease ends; the row returns with the next acquire
        poke_pools();
        publish_pool_idle();
    } else if (mark_deleted(id, now_ms())) {
        stop_session_instance(id); // the pool forgets it and refills
    }
    res.no_content();
}

} // namespace hangar::browsers
