// Server role: the public /browsers API, the CDP and WebDriver URLs, idle deletion.
#include "browsers.hpp"

#include <hangar/resource.hpp>
#include <hangar/service.hpp>

#include <unistd.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

namespace hangar::browsers {

namespace {

constexpr const char *kSelect = "SELECT * FROM browsers_sessions";
// How often the idle sweep also reads the node list (a store query) for sweep_other_nodes.
constexpr std::int64_t kOtherNodesCheckMs = 2000;
// How far back sweep_other_nodes looks for this node's sessions that another node ended (the
// index on (node, deleted_at) keeps it a short range scan). A node stalled for longer leaves such
// instances running until its next start, which stops every instance no active session claims.
constexpr std::int64_t kEndedElsewhereWindowMs = std::int64_t{10} * 60 * 1000;

std::optional<std::string> node_of(const json &row) {
    auto node = row.value("node", json());
    return node.is_string() ? std::optional(node.get<std::string>()) : std::nullopt;
}

std::string reservation_key(const std::string &project, const std::string &name) {
    return project + "\n" + name;
}

// The host adds `x-should-retry: false` to every 409 (a second copy here would reach the SDK as
// "false, false", which it does not read as false).
[[noreturn]] void name_conflict(const std::string &name) {
    throw Error::conflict("a browser session named \"" + name + "\" is already active in this project");
}

bool is_unique_violation(const Error &e) {
    std::string_view m = e.what();
    return m.find("UNIQUE") != std::string_view::npos || m.find("unique") != std::string_view::npos;
}

} // namespace

// Holds a name for one create or rename until the row carries it; released on every exit path.
class BrowsersPlugin::NameReservation {
public:
    NameReservation() = default;
    NameReservation(BrowsersPlugin &p, std::string key) : plugin_(&p), key_(std::move(key)) {}
    NameReservation(const NameReservation &) = delete;
    NameReservation &operator=(const NameReservation &) = delete;
    NameReservation(NameReservation &&o) noexcept
        : plugin_(std::exchange(o.plugin_, nullptr)), key_(std::move(o.key_)) {}
    NameReservation &operator=(NameReservation &&o) noexcept {
        release();
        plugin_ = std::exchange(o.plugin_, nullptr);
        key_ = std::move(o.key_);
        return *this;
    }
    ~NameReservation() { release(); }

private:
    void release() {
        if (!plugin_) return;
        std::lock_guard lock(plugin_->names_mutex_);
        plugin_->pending_names_.erase(key_);
        plugin_ = nullptr;
    }
    BrowsersPlugin *plugin_ = nullptr;
    std::string key_;
};

class BrowsersPlugin::AdmissionSlot {
public:
    AdmissionSlot(BrowsersPlugin &p, std::string project) : plugin_(&p), project_(std::move(project)) {}
    AdmissionSlot(const AdmissionSlot &) = delete;
    AdmissionSlot &operator=(const AdmissionSlot &) = delete;
    AdmissionSlot(AdmissionSlot &&o) noexcept
        : plugin_(std::exchange(o.plugin_, nullptr)), project_(std::move(o.project_)) {}
    AdmissionSlot &operator=(AdmissionSlot &&) = delete;
    ~AdmissionSlot() {
        if (!plugin_) return;
        std::lock_guard lock(plugin_->admission_mutex_);
        if (--plugin_->admitting_[project_] == 0) plugin_->admitting_.erase(project_);
    }

private:
    BrowsersPlugin *plugin_;
    std::string project_;
};

// Over the project's limit: 429 at once, with Retry-After, never a queue that hangs the caller.
BrowsersPlugin::AdmissionSlot BrowsersPlugin::admit(const std::string &project, int cap) {
    std::lock_guard lock(admission_mutex_);
    if (cap > 0) {
        // Leased pooled sessions are part of their pool's capacity, which counts whole.
        int active = unpooled_active(project);
        {
            std::lock_guard pools_lock(pools_mutex_);
            active += pooled_capacity_locked(project);
        }
        auto it = admitting_.find(project);
        int starting = it == admitting_.end() ? 0 : it->second;
        if (active + starting >= cap) {
            ++admission_rejections_;
            throw Error(429, "rate_limited",
                        "this project already has " + std::to_string(active + starting) + " browsers (limit " +
                            std::to_string(cap) + "); delete one or try again later");
        }
    }
    admitting_[project]++;
    return {*this, project};
}

namespace {

// The machine's memory (MemTotal), for instances without a cgroup limit.
std::uint64_t machine_memory_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    std::uint64_t kb = 0;
    while (in >> key >> kb >> unit)
        if (key == "MemTotal:") return kb << 10;
    return 0;
}

} // namespace

void BrowsersPlugin::start_server() {
    max_browsers_per_project_ = static_cast<int>(std::max<std::int64_t>(0, config_int("max_browsers_per_project", 50)));
    start_slots_free_ = static_cast<int>(std::clamp<std::int64_t>(config_int("max_parallel_starts", 2), 1, 64));
    token_grace_seconds_ = static_cast<std::uint32_t>(config_int("token_grace_seconds", token_grace_seconds_));
    node_ = config("node.name", "");
    region_ = config("node.region", "us-east");
    if (region_.empty() || region_.size() > 64 || !std::all_of(region_.begin(), region_.end(), [](unsigned char c) {
            return std::islower(c) || std::isdigit(c) || c == '-';
        }))
        throw std::runtime_error("[node] region \"" + region_ +
                                 "\" is not a region name (lowercase letters, digits and '-', e.g. us-east)");
    instance_memory_bytes_ =
        static_cast<std::uint64_t>(std::max<std::int64_t>(0, config_int("sandbox.memory_limit_mb", 4096))) << 20;
    default_memory_ = memory_name(instance_memory_bytes_ ? instance_memory_bytes_ : machine_memory_bytes());
    max_browser_memory_bytes_ = std::min(
        machine_memory_bytes(),
        static_cast<std::uint64_t>(std::max<std::int64_t>(
            0, config_int("sandbox.max_browser_memory_mb", static_cast<std::int64_t>(machine_memory_bytes() >> 20))))
            << 20);
    reap_orphans();
    start_metrics();

    route("POST", "/browsers", [this](Request &q, Response &r) { create(q, r); });
    route("GET", "/browsers", [this](Request &q, Response &r) { list(q, r); });
    route("GET", "/browsers/{id_or_name}", [this](Request &q, Response &r) { retrieve(q, r); });
    route("PATCH", "/browsers/{id_or_name}", [this](Request &q, Response &r) { update(q, r); });
    route("DELETE", "/browsers/{id_or_name}", [this](Request &q, Response &r) { remove(q, r); });
    // Kernel's retired persistence: the Go SDK and the CLI (`kernel browsers delete`) still send
    // DELETE /browsers?persistent_id=X. No Hangar browser has a persistent id (create answers
    // `persistence` with 501), so it is never found; the CLI takes that 404 as "already gone".
    route("DELETE", "/browsers", [](Request &q, Response &) {
        auto id = q.query("persistent_id");
        if (!id || id->empty()) throw Error::invalid("persistent_id", "is required");
        throw Error(404, "not_found",
                    "no browser has the persistent id " + *id + " (Hangar has no persistent browsers)");
    });

    // Capability-token routes: the jwt is the credential, no API key.
    constexpr auto open = HANGAR_ROUTE_PUBLIC | HANGAR_ROUTE_STREAMING;
    route(
        "GET", "/browser/cdp", [this](Request &q, Response &r) { cdp_browser_socket(q, r); }, open);
    route(
        "GET", "/browser/cdp/{token}/devtools/{rest*}", [this](Request &q, Response &r) { cdp_target_socket(q, r); },
        open);
    route(
        "GET", "/browser/cdp/json/version", [this](Request &q, Response &r) { cdp_json(q, r, "/json/version"); },
        HANGAR_ROUTE_PUBLIC);
    route(
        "GET", "/browser/cdp/json/list", [this](Request &q, Response &r) { cdp_json(q, r, "/json/list"); },
        HANGAR_ROUTE_PUBLIC);
    route(
        "GET", "/browser/cdp/json", [this](Request &q, Response &r) { cdp_json(q, r, "/json/list"); },
        HANGAR_ROUTE_PUBLIC);
    route(
        "GET", "/browser/webdriver", [this](Request &q, Response &r) { webdriver_socket(q, r); }, open);

    // curl through the browser: on the API, and at the session's base_url, where the SDK sends
    // it directly with the jwt of cdp_ws_url instead of the API key (kernel-api.md §1.11).
    route("POST", "/browsers/{id}/curl", [this](Request &q, Response &r) {
        auto s = require(q.project(), q.param("id"), false);
        relay_curl(q, r, s.id, "/chromium/curl");
    });
    route(
        "POST", "/browser/vm/{session_id}/curl",
        [this](Request &q, Response &r) { relay_curl(q, r, vm_session(q), "/chromium/curl"); }, HANGAR_ROUTE_PUBLIC);
    for (const char *method : {"GET", "POST", "PUT", "PATCH", "DELETE"})
        route(
            method, "/browser/vm/{session_id}/curl/raw",
            [this](Request &q, Response &r) { relay_curl(q, r, vm_session(q), "/chromium/curl/raw"); },
            HANGAR_ROUTE_PUBLIC);
    // The telemetry plugin's agent half serves the stream; 404 from the agent when it is off.
    route(
        "GET", "/browser/vm/{session_id}/telemetry/stream",
        [this](Request &q, Response &r) {
            std::string sid = vm_session(q);
            relay_unix(q, r, session_socket(sid), "/telemetry/stream", sid);
        },
        open);

    // For instance-feature plugins (fs, process, ...): the caller's active session by id or name,
    // with what a relay needs. 404 when it is not the caller's or has ended.
    // With "include_deleted": true an ended session is found too ("ended": true), for what
    // outlives sessions (replays).
    service("browsers.session", [this](const json &in) {
        auto s = require(in.value("project_id", ""), in.value("id", ""), in.value("include_deleted", false));
        // What outlives a session (its recordings, its telemetry) is complete once its teardown
        // ended, which a DELETE no longer waits for.
        if (s.deleted_ms && !teardowns_.wait(s.id, std::chrono::seconds(30)))
            warn("browser session " + s.id + " is still ending; what it kept may be incomplete");
        // An active session's instance, and what is kept of it so far (replays, telemetry), are on
        // its node: another node's request is relayed there (421, see require_here).
        if (!s.deleted_ms) require_here(s.id, s.node);
        return json{{"session_id", s.id},
                    {"headless", s.headless},
                    {"ended", s.deleted_ms.has_value()},
                    {"viewport", {{"width", s.viewport.width}, {"height", s.viewport.height}}},
                    {"vaults", s.vaults.value_or(json::array())}};
    });

    // For the org plugin's /org/limits (kernel-api-0131 §2.10): {org_id} → {sessions}, what counts
    // toward the session limits across the org's projects, counted as admission counts it per
    // project: active browsers outside pools, and every pool's whole size (its idle and leased
    // members; every node holds every pool).
    service("browsers.usage", [this](const json &in) {
        std::string org = in.value("org_id", "");
        int sessions = unpooled_active(org, CountScope::Org);
        std::lock_guard pools_lock(pools_mutex_);
        return json{{"sessions", sessions + pooled_capacity_locked(org, CountScope::Org)}};
    });

    // For the apps plugin: the browsers created in one invocation ({project_id, invocation_id,
    // base_url}), rendered as the API renders them; with "delete": true they are ended first
    // (the invocation ended or its browsers were deleted) and the list is empty.
    service("browsers.by_invocation", [this](const json &in) {
        auto rows = sql("SELECT * FROM browsers_sessions WHERE project_id = ? AND invocation_id = ? AND deleted_at "
                        "IS NULL ORDER BY created_at",
                        {in.value("project_id", ""), in.value("invocation_id", "")});
        json out = json::array();
        bool remove = in.value("delete", false);
        for (const auto &row : rows) {
            Session s = session_from_row(row);
            if (remove) {
                if (!mark_deleted(s.id, now_ms())) continue;
                {
                    std::lock_guard lock(idle_mutex_);
                    idle_baseline_ms_.erase(s.id);
                }
                stop_session_instance(s.id);
            } else {
                out.push_back(render(s, in.value("base_url", "")));
            }
        }
        return json{{"browsers", out}};
    });
    // For plugins that run browsers of their own (managed auth): the body of POST /browsers plus
    // the caller's project, org and the API base URL -> the session as POST /browsers renders it.
    service("browsers.create", [this](const json &in) {
        json caller = in.value("caller", json::object());
        caller["project_id"] = in.value("project_id", "");
        return create_session(in.value("body", json::object()), in.value("project_id", ""), caller,
                              in.value("base_url", ""));
    });
    service("browsers.delete", [this](const json &in) {
        const std::string id = in.value("id", "");
        remove_session(require(in.value("project_id", ""), id, false), id);
        return json::object();
    });
    // For the search plugin's contents: {project_id, id, url, mode, format, timeout_ms, max_chars} ->
    // what the instance's Chromium saw and read of the page (instance route /chromium/page_text).
    // The fetch and the parsing happen in the sandbox; this only relays bounded JSON.
    service("browsers.page_text", [this](const json &in) {
        auto s = require(in.value("project_id", ""), in.value("id", ""), false);
        require_here(s.id, s.node);
        json body = in;
        body.erase("project_id");
        body.erase("id");
        const auto timeout = std::clamp<std::int64_t>(in.value("timeout_ms", 30000), 1, 300000);
        auto busy = activity(s.id); // the session is in use while its page loads
        auto r = instance_call(s.id, "POST", "/chromium/page_text", body.dump(),
                               static_cast<std::uint32_t>(timeout + 15000));
        json out = json::parse(r.body, nullptr, false);
        if (r.status != 200 || !out.is_object())
            throw Error(r.status == 200 ? 502 : r.status,
                        out.is_object() ? out.value("code", "bad_gateway") : "bad_gateway",
                        out.is_object() ? out.value("message", "the browser instance did not answer")
                                        : "the browser instance did not answer");
        return out;
    });
    // For the host's direct-to-browser routes (host/src/direct_vm.cpp): whose an active session is.
    service("browsers.session_owner", [this](const json &in) {
        auto rows = sql("SELECT project_id, node FROM browsers_sessions WHERE id = ? AND deleted_at IS NULL",
                        {in.value("session_id", "")});
        if (rows.empty()) throw Error::not_found("browser session not found");
        require_here(in.value("session_id", ""), node_of(rows[0]));
        return json{{"project_id", rows[0].at("project_id")}};
    });

    route("POST", "/browser_pools", [this](Request &q, Response &r) { pool_create(q, r); });
    route("GET", "/browser_pools", [this](Request &q, Response &r) { pool_list(q, r); });
    route("GET", "/browser_pools/{id_or_name}", [this](Request &q, Response &r) {
        know_pool(q.project(), q.param("id_or_name"));
        std::lock_guard lock(pools_mutex_);
        r.json(render_pool_everywhere(pool_locked(q.project(), q.param("id_or_name"))));
    });
    route("PATCH", "/browser_pools/{id_or_name}", [this](Request &q, Response &r) { pool_update(q, r); });
    route("DELETE", "/browser_pools/{id_or_name}", [this](Request &q, Response &r) { pool_delete(q, r); });
    route("POST", "/browser_pools/{id_or_name}/acquire", [this](Request &q, Response &r) { pool_acquire(q, r); });
    route("POST", "/browser_pools/{id_or_name}/release", [this](Request &q, Response &r) { pool_release(q, r); });
    route("POST", "/browser_pools/{id_or_name}/flush", [this](Request &q, Response &r) { pool_flush(q, r); });

    auto interval = config_int("idle_check_ms", 1000);
    every(static_cast<std::uint32_t>(std::clamp<std::int64_t>(interval, 100, 5000)), [this] { sweep_idle(); });
    start_spares();
    start_pools();
}

void BrowsersPlugin::stop_server() {
    stopping_ = true;
    stop_spares();
    stop_pools();
    teardowns_.wait_all(); // deleted sessions' saves and recordings complete before the host stops
    // The host ends every instance when it stops, so the sessions end now; recording it here keeps
    // deleted_at and usage.uptime_ms true instead of "whenever the server next starts". A planned
    // restart (the host says so) leaves them running: the next start adopts them.
    if (!config_bool("end_sessions_on_shutdown", true) || config_bool("runtime.stopping_keeps_sessions", false)) return;
    std::vector<std::string> ids;
    for (const auto &row : sql("SELECT id FROM browsers_sessions WHERE deleted_at IS NULL AND node = ?", {node_}))
        ids.push_back(row.at("id").get<std::string>());
    end_sessions(ids, "the server is stopping");
}

// ---- helpers -------------------------------------------------------------------------------------

std::optional<Session> BrowsersPlugin::find(const std::string &project, const std::string &id_or_name,
                                            bool include_deleted) const {
    std::string live = include_deleted ? "" : " AND deleted_at IS NULL";
    if (looks_like_session_id(id_or_name)) {
        auto rows = sql(std::string(kSelect) + " WHERE project_id = ? AND id = ?" + live, {project, id_or_name});
        if (!rows.empty()) return session_from_row(rows.front());
    }
    // Names are unique among active sessions only: prefer the active one, then the newest.
    auto rows = sql(std::string(kSelect) + " WHERE project_id = ? AND name = ?" + live +
                        " ORDER BY CASE WHEN deleted_at IS NULL THEN 0 ELSE 1 END, created_at DESC LIMIT 1",
                    {project, id_or_name});
    if (!rows.empty()) return session_from_row(rows.front());
    return std::nullopt;
}

Session BrowsersPlugin::require(const std::string &project, const std::string &id_or_name, bool include_deleted) const {
    if (auto s = find(project, id_or_name, include_deleted)) return *s;
    throw Error::not_found("browser session \"" + id_or_name + "\" not found");
}

std::vector<std::string> BrowsersPlugin::add_extension_inputs(json &spec, const std::string &project,
                                                              const json &selectors) const {
    std::vector<std::string> ids;
    json wanted = json::array();
    for (const auto &e : selectors)
        if (!is_signing_extension(e)) wanted.push_back(e); // built in: no folder to load
    if (wanted.empty()) return ids;
    // Loaded at launch: the agent unpacks them before Chromium starts, so nothing restarts.
    for (const auto &e : call("extensions.resolve", {{"project_id", project}, {"extensions", wanted}})) {
        spec["inputs"]["extension-" + e.at("name").get<std::string>() + ".zip"] = e.at("path");
        ids.push_back(e.value("id", ""));
    }
    return ids;
}

json BrowsersPlugin::resolve_vaults(const std::string &project, const json &selectors) const {
    try {
        return call("vaults.resolve", {{"project_id", project}, {"vaults", selectors}}).at("vaults");
    } catch (const Error &e) {
        if (hangar::service_missing(e))
            throw Error::not_implemented("vaults need the vaults plugin, which is not enabled on this server");
        throw;
    }
}

std::string BrowsersPlugin::proxy_of(const std::string &project, const ProxySelector &selector) const {
    // Both modes are direct here: Hangar has no default (stealth) proxy of its own.
    if (selector.mode) return "";
    json which = selector.id ? json{{"id", *selector.id}} : json{{"name", *selector.name}};
    return call("proxies.resolve", {{"project_id", project}, {"proxy", which}}).at("id").get<std::string>();
}

json BrowsersPlugin::resolve_proxy_routes(const std::string &project, const json &routes) const {
    json out = json::array();
    for (const auto &r : routes) {
        const json &p = r.at("proxy");
        ProxySelector selector;
        if (p.contains("id"))
            selector.id = p["id"].get<std::string>();
        else
            selector.name = p["name"].get<std::string>();
        out.push_back({{"hosts", r.at("hosts")}, {"proxy_id", proxy_of(project, selector)}});
    }
    return out;
}

BrowsersPlugin::ProxyPlan BrowsersPlugin::proxy_plan(const std::string &project, const CreateOptions &o) const {
    json in = {{"project_id", project}, {"sign", o.sign}};
    if (o.proxy_id) in["proxy_id"] = *o.proxy_id;
    if (o.proxy_routes) in["proxy_routes"] = resolve_proxy_routes(project, *o.proxy_routes);
    json answer;
    try {
        answer = call("proxies.attach", in);
    } catch (const Error &e) {
        // A 404 naming the proxy is the caller's; one for the service is a missing plugin.
        if (e.status() != 404 || o.proxy_id || o.proxy_routes) throw;
        if (o.allowed_hosts || o.private_hosts)
            throw Error::not_implemented("network.allowed_hosts and private_hosts are enforced by the proxies "
                                         "plugin, which is not enabled on this server");
        if (o.sign)
            throw Error::not_implemented("the web-bot-auth extension (request signing) needs the proxies plugin, "
                                         "which is not enabled on this server");
        return {};
    }
    ProxyPlan plan;
    plan.sign = answer.value("sign", false);
    plan.signer_extension = plan.sign && answer.value("signer_extension", false);
    if (auto ca = answer.value("ca_bundle", json()); ca.is_string()) plan.ca_bundle = ca.get<std::string>();
    if (auto routes = answer.value("proxy_routes", json()); routes.is_array()) plan.proxy_routes = routes;
    if (o.allowed_hosts || o.private_hosts) {
        json in = {{"allowed_hosts", o.allowed_hosts.value_or(json())}};
        if (o.private_hosts) in["private_hosts"] = *o.private_hosts;
        if (o.start_url) in["start_url"] = *o.start_url;
        json checked = call("proxies.network", in);
        if (o.allowed_hosts) plan.allowed_hosts = checked.at("allowed_hosts");
        if (o.private_hosts) plan.private_hosts = checked.at("private_hosts");
    }
    return plan;
}

void BrowsersPlugin::ProxyPlan::apply(json &spec) const {
    if (ca_bundle) spec["proxy_ca"] = *ca_bundle;
    if (allowed_hosts) spec["allowed_hosts"] = *allowed_hosts;
    if (private_hosts) spec["private_hosts"] = *private_hosts;
    // The forwarder holds the first requests until the routes arrive (proxy_handover): a routed
    // host never leaves another way first.
    if (proxy_routes) spec["proxy"] = true;
    if (sign) {
        spec.erase("start_url"); // proxy_handover opens it once the signer runs
        spec["sign"] = true;     // the instance installs the signer extension (WebSockets)
    }
}

void BrowsersPlugin::proxy_handover(const std::string &instance, const std::string &project, const CreateOptions &o,
                                    const ProxyPlan &plan, const std::string &base_url) const {
    if (!o.proxy_id && !plan.sign && !plan.proxy_routes) return;
    json in = {{"project_id", project}, {"instance_id", instance}, {"sign", plan.sign}, {"base_url", base_url}};
    if (o.proxy_id) in["proxy_id"] = *o.proxy_id;
    if (plan.proxy_routes) in["proxy_routes"] = *plan.proxy_routes;
    call("proxies.attach", in);
}

void BrowsersPlugin::open_start_url(const std::string &instance, const std::optional<std::string> &url) const {
    if (url && instance_call(instance, "POST", "/chromium/open", json{{"url", *url}}.dump(), 10000).status != 200)
        throw Error(502, "upstream_unavailable", "the browser could not open the start URL");
}

json BrowsersPlugin::render(const Session &s, const Request &req) const {
    return render(s, req.base_url());
}

std::string BrowsersPlugin::instance_memory(const std::string &id) const {
    if (auto cg = instance_cgroup(id); cg && cg->value("path", json()).is_string()) {
        std::ifstream in(cg->at("path").get<std::string>() +
                         (cg->value("version", 2) == 1 ? "/memory.limit_in_bytes" : "/memory.max"));
        std::string text;
        // "max" (v2) or a number near 2^63 (v1) is no limit.
        if (in >> text && !text.empty() && text.size() < 16 &&
            std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
            return memory_name(std::stoull(text));
    }
    return default_memory_;
}

void BrowsersPlugin::check_placement(const CreateOptions &o) const {
    if (o.region && *o.region != region_)
        throw Error::invalid("region", "this Hangar node serves region " + region_ + " only (its [node] region), not " +
                                           *o.region + "; leave region out or ask for " + region_);
    if (!o.memory) return;
    // A size is the instance's own cgroup memory limit (the runtime sets it from the spec).
    // The node's own size is what a browser gets without asking, so asking for it is fine too.
    const std::uint64_t bytes = *memory_request_bytes(*o.memory);
    if (bytes != instance_memory_bytes_ && bytes > max_browser_memory_bytes_)
        throw Error::invalid("memory", "this node gives a browser at most " +
                                           std::to_string(max_browser_memory_bytes_ >> 20) +
                                           " MiB ([sandbox] max_browser_memory_mb, at most the machine's memory); ask "
                                           "for less or leave memory out");
}

bool BrowsersPlugin::spares_fit(const CreateOptions &o) const {
    // A warm spare runs under the node's limit: another size needs its own start.
    return !o.memory || *memory_request_bytes(*o.memory) == instance_memory_bytes_;
}

json BrowsersPlugin::render(const Session &stored, const std::string &request_base_url) const {
    // Rows from before regions and memory were recorded: this node's (every node shared one
    // region and one instance size until then).
    Session s = stored;
    if (s.region.empty()) s.region = region_;
    if (s.memory.empty()) s.memory = default_memory_;
    // Another node's session: its URLs point at that node, so CDP and the live view take no extra
    // hop (tokens verify on every node: one signing key per store).
    std::string base_url = request_base_url;
    if (s.node && *s.node != node_ && s.active())
        if (auto owner = node_url(*s.node)) base_url = *owner;
    std::string base = ws_base(base_url);
    std::uint32_t ttl = static_cast<std::uint32_t>(s.timeout_seconds) + token_grace_seconds_;
    Links links{cdp_ws_url(base, token_sign({{"sid", s.id}, {"typ", "cdp"}}, ttl)),
                webdriver_ws_url(base, token_sign({{"sid", s.id}, {"typ", "webdriver"}}, ttl))};
    json out = render_session(s, links, now_ms());
    // Where the SDK sends curl and telemetry/stream directly (with the jwt of cdp_ws_url).
    out["base_url"] = base_url + "/browser/vm/" + s.id;
    // Sessions can be watched when the liveview plugin is enabled (it signs the link): headful ones
    // through x11vnc, headless ones through a CDP screencast.
    if (!s.deleted_ms) {
        try {
            out["browser_live_view_url"] =
                call("liveview.url",
                     {{"session_id", s.id}, {"project_id", s.project_id}, {"ttl_seconds", ttl}, {"base_url", base_url}})
                    .at("url");
        } catch (const std::exception &) {
            // liveview is switched off: no link
        }
    }
    if (s.profile_id)
        if (auto p = profile_json(s.project_id, *s.profile_id)) out["profile"] = std::move(*p);
    try {
        out["telemetry"] = call("telemetry.session", {{"op", "config"}, {"session_id", s.id}}).at("telemetry");
    } catch (const Error &) {
        // no telemetry plugin: the field is left out
    }
    if (s.pool_id) {
        json ref = {{"id", *s.pool_id}};
        if (auto p = pool_ref(*s.pool_id); p && p->second) ref["name"] = *p->second;
        out["pool"] = ref;
    }
    return out;
}

std::string BrowsersPlugin::vm_session(const Request &req) const {
    std::string sid = session_from_token(req.query("jwt").value_or(""), "cdp");
    if (sid != req.param("session_id")) throw Error::unauthorized("invalid or expired browser token");
    return sid;
}

void BrowsersPlugin::relay_curl(Request &req, Response &res, const std::string &sid, const std::string &agent_path) {
    std::string socket = session_socket(sid);
    // The query goes on (curl/raw's url and timeout_ms), the jwt does not: the sandbox never
    // holds a credential for its own session.
    std::string query;
    for (auto rest = req.query_string(); !rest.empty();) {
        auto amp = rest.find('&');
        auto pair = rest.substr(0, amp);
        rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
        if (pair.empty() || pair.starts_with("jwt=") || pair == "jwt") continue;
        query += (query.empty() ? "?" : "&") + std::string(pair);
    }
    relay_unix(req, res, socket, agent_path + (query.empty() ? "?" : query), sid);
}

std::string BrowsersPlugin::session_from_token(const std::string &token, const char *type) const {
    auto claims = token.empty() ? std::nullopt : token_verify(token);
    if (!claims || !claims->is_object() || claims->value("typ", "") != type || !claims->contains("sid") ||
        !claims->at("sid").is_string())
        throw Error::unauthorized("invalid or expired browser token");
    std::string sid = claims->at("sid").get<std::string>();
    auto rows = sql("SELECT id FROM browsers_sessions WHERE id = ? AND deleted_at IS NULL", {sid});
    if (rows.empty()) throw Error::not_found("browser session " + sid + " has ended");
    return sid;
}

void BrowsersPlugin::insert(Session &s) {
    s.region = region_;
    s.memory = instance_memory(s.id);
    auto opt = [](const auto &v) -> json { return v ? json(*v) : json(nullptr); };
    json tags = s.tags && !s.tags->empty() ? json(json(*s.tags).dump()) : json(nullptr);
    json policy = s.chrome_policy ? json(s.chrome_policy->dump()) : json(nullptr);
    sql("INSERT INTO browsers_sessions (id, org_id, project_id, key_id, name, created_at, deleted_at, timeout_seconds, "
        "headless, stealth, kiosk_mode, viewport_width, viewport_height, viewport_refresh_rate, start_url, tags, "
        "chrome_policy, profile_id, profile_save_changes, pool_id, proxy_id, invocation_id, node, region, memory, "
        "location_timezone, location_locale, network, vaults) VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, "
        "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        {s.id,
         s.org_id,
         s.project_id,
         nullptr,
         opt(s.name),
         s.created_ms,
         s.timeout_seconds,
         s.headless ? 1 : 0,
         s.stealth ? 1 : 0,
         s.kiosk_mode ? 1 : 0,
         s.viewport.width,
         s.viewport.height,
         s.viewport.refresh_rate,
         opt(s.start_url),
         tags,
         policy,
         opt(s.profile_id),
         s.profile_save_changes ? 1 : 0,
         opt(s.pool_id),
         opt(s.proxy_id),
         opt(s.invocation_id),
         node_,
         s.region,
         s.memory,
         opt(s.location.timezone),
         opt(s.location.locale),
         s.network ? json(s.network->dump()) : json(nullptr),
         s.vaults ? json(s.vaults->dump()) : json(nullptr)});
    if (s.tags) write_tags(s.id, *s.tags);
}

void BrowsersPlugin::write_tags(const std::string &id, const Tags &tags) {
    // One transaction. Its first statement updates the session's row, which on PostgreSQL holds a
    // second writer of the same session (on another node, say) until this one committed; that
    // writer's delete then sees these rows instead of inserting beside them.
    std::vector<std::pair<std::string, json>> statements = {
        {"UPDATE browsers_sessions SET tags = ? WHERE id = ?",
         {tags.empty() ? json(nullptr) : json(json(tags).dump()), id}},
        {"DELETE FROM browsers_tags WHERE session_id = ?", {id}}};
    for (const auto &[k, v] : tags)
        statements.emplace_back("INSERT INTO browsers_tags (session_id, tag_key, tag_value) VALUES (?, ?, ?)",
                                json{id, k, v});
    sql_batch(statements);
}

bool BrowsersPlugin::mark_deleted(const std::string &id, std::int64_t at) {
    std::lock_guard lock(delete_mutex_);
    if (sql("SELECT id FROM browsers_sessions WHERE id = ? AND deleted_at IS NULL", {id}).empty()) return false;
    sql("UPDATE browsers_sessions SET deleted_at = ?, ended_by = ? WHERE id = ? AND deleted_at IS NULL",
        {at, node_, id});
    ++deletes_;
    return true;
}

void BrowsersPlugin::end_sessions(const std::vector<std::string> &ids, const char *why) {
    std::vector<std::string> ended;
    auto at = now_ms();
    for (const auto &id : ids)
        if (mark_deleted(id, at)) ended.push_back(id);
    {
        std::lock_guard lock(idle_mutex_);
        for (const auto &id : ended)
            idle_baseline_ms_.erase(id);
    }
    // Stopping an instance waits for Chromium to close; many at once should not add up.
    std::vector<std::jthread> stoppers;
    for (const auto &id : ended) {
        info("ending browser session " + id + ": " + why);
        stoppers.emplace_back([this, id] { stop_session_instance(id); });
    }
}

std::optional<json> BrowsersPlugin::telemetry(const json &in, bool captures) const {
    try {
        return call("telemetry.session", in);
    } catch (const Error &e) {
        if (e.status() != 404) throw;
        if (captures) throw Error::not_implemented("telemetry is not available: the telemetry plugin is not enabled");
        return std::nullopt;
    }
}

void BrowsersPlugin::telemetry_after_start(const json &in) const {
    try {
        telemetry(in, false);
    } catch (const std::exception &e) {
        warn("browser session " + in.value("session_id", "") + ": telemetry not applied: " + e.what());
    }
}

void BrowsersPlugin::stop_session_instance(const std::string &id) {
    ++ending_;
    struct Ended {
        std::atomic<int> &count;
        ~Ended() { --count; }
    } ended{ending_};
    // Another node's instance: that node stops it on its next sweep, with its recordings, telemetry
    // and profile lease, which live there (sweep_other_nodes).
    auto owner = sql("SELECT node FROM browsers_sessions WHERE id = ?", {id});
    if (auto node = owner.empty() ? std::nullopt : node_of(owner[0]); node && *node != node_) return;
    // What the agent captured is archived before it goes (the telemetry plugin depends on this
    // one, so it is called by name).
    telemetry_after_start({{"op", "end"}, {"session_id", id}});
    try {
        // Running recordings are finished and moved out before the instance dir is removed.
        // The replays plugin depends on this one, so it is called by name, not declared.
        call("replays.session_ending", {{"session_id", id}});
    } catch (const Error &e) {
        if (e.status() != 404) warn("browser session " + id + ": its recordings were not finished: " + e.what());
    }
    auto rows = sql("SELECT profile_id FROM browsers_sessions WHERE id = ?", {id});
    if (!rows.empty() && rows[0].value("profile_id", json()).is_string()) {
        try {
            // Saves when the session asked for it (the profiles plugin knows), then forgets the lease.
            call("profiles.release", {{"session_id", id}, {"instance_id", id}});
        } catch (const std::exception &e) {
            warn("browser session " + id + ": its profile was not saved: " + e.what());
        }
    }
    instance_stop(id);
    pool_session_ended(id);
}

std::optional<json> BrowsersPlugin::profile_json(const std::string &project, const std::string &profile_id) const {
    try {
        return call("profiles.get", {{"project_id", project}, {"id", profile_id}});
    } catch (const Error &) {
        return std::nullopt;
    }
}

namespace {

std::string read_whole_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error::internal("cannot read the profile archive " + path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json profile_selector(const std::string &project, const std::string &session_id, const ProfileRef &ref) {
    json in = {{"project_id", project}, {"session_id", session_id}, {"save_changes", ref.save_changes}};
    if (ref.id) in["id"] = *ref.id;
    if (ref.name) in["name"] = *ref.name;
    return in;
}

} // namespace

// Kernel loads a profile into a running session that has none: Chromium restarts on its state.
void BrowsersPlugin::attach_profile(const Session &s, const ProfileRef &ref) {
    if (s.profile_id)
        throw Error::invalid("profile", "this browser session already has a profile; only one without may take one");
    json lease = call("profiles.acquire", profile_selector(s.project_id, s.id, ref));
    try {
        if (auto archive = lease.value("archive", json()); archive.is_string()) {
            auto r =
                instance_call(s.id, "PUT", "/chromium/profile", read_whole_file(archive.get<std::string>()), 60000);
            if (r.status != 200) throw Error(502, "upstream_unavailable", "Chromium could not restart on the profile");
        }
        sql("UPDATE browsers_sessions SET profile_id = ?, profile_save_changes = ? WHERE id = ?",
            {lease.at("profile").at("id"), ref.save_changes ? 1 : 0, s.id});
    } catch (...) {
        call("profiles.release", {{"session_id", s.id}});
        throw;
    }
}

// ---- handlers ------------------------------------------------------------------------------------

void BrowsersPlugin::create(Request &req, Response &res) {
    std::string project = req.project();
    json caller = req.caller();
    json body = req.json_body(true);
    const json region = body.is_object() ? body.value("region", json()) : json();
    place_create(res, req.header("X-Hangar-Relayed-By").has_value(),
                 region.is_string() ? region.get<std::string>() : "");
    try {
        res.json(create_session(body, project, caller, req.base_url()));
    } catch (const Error &e) {
        if (e.status() == 429) res.header("Retry-After", "2");
        throw;
    }
}

// POST /browsers, and the browsers.create service other plugins start their browsers through
// (managed auth), so both get the same admission, profile lease and telemetry.
json BrowsersPlugin::create_session(const json &body, const std::string &project, const json &caller,
                                    const std::string &base_url) {
    const auto started = std::chrono::steady_clock::now();
    CreateOptions opts = parse_create(body);
    if (opts.proxy)
        if (auto id = proxy_of(project, *opts.proxy); !id.empty()) opts.proxy_id = id;
    check_placement(opts);
    // With the project, the telemetry plugin also checks the export destination the request names.
    if (opts.telemetry)
        telemetry({{"op", "check"}, {"project_id", project}, {"request", *opts.telemetry}}, opts.telemetry_captures);
    if (opts.chrome_policy) {
        // The local runtime binds the instance's policy dir over this directory only when it
        // exists; without it Chromium would never read the policy we echo back.
        auto dir = config("policy_mount_dir", "/etc/chromium/policies/managed");
        if (!dir.empty() && ::access(dir.c_str(), F_OK) != 0)
            throw Error::not_implemented("chrome_policy is not available on this server: " + dir +
                                         " does not exist (create it, e.g. with `make setup`)");
    }

    // 404 for a proxy that is not the project's (or was deleted) before anything starts.
    ProxyPlan plan = proxy_plan(project, opts);
    // Vaults by id or name, resolved in the caller's project (404 for another project's).
    std::optional<json> vaults;
    if (opts.vaults) vaults = resolve_vaults(project, *opts.vaults);
    // The apps plugin says whether the invocation is the project's and still running (404 if not).
    if (opts.invocation_id) call("apps.invocation_active", {{"project_id", project}, {"id", *opts.invocation_id}});

    AdmissionSlot slot =
        admit(project, static_cast<int>(caller.value("max_concurrent_sessions", max_browsers_per_project_)));
    NameReservation reservation;
    if (opts.name) {
        std::lock_guard lock(names_mutex_);
        auto key = reservation_key(project, *opts.name);
        if (pending_names_.count(key) ||
            !sql("SELECT id FROM browsers_sessions WHERE project_id = ? AND name = ? AND deleted_at IS NULL",
                 {project, *opts.name})
                 .empty())
            name_conflict(*opts.name);
        pending_names_.insert(key);
        reservation = NameReservation(*this, key);
    }

    std::optional<std::string> spare;
    StartSlot start_slot;
    auto profile_has_state = [&] {
        return opts.profile &&
               call("profiles.has_state", profile_selector(project, "", *opts.profile)).value("has_state", true);
    };
    if (spare_can_serve(opts) && spares_fit(opts) && !plan.ca_bundle && !plan.signer_extension &&
        !profile_has_state()) {
        auto spare_or_slot = spare_or_start_slot({opts.headless, opts.stealth});
        if (auto *id = std::get_if<std::string>(&spare_or_slot))
            spare = *id;
        else
            start_slot = std::move(std::get<StartSlot>(spare_or_slot));
    }
    if (spare) {
        // Hand-over: the proxy is a live swap of the spare's route, signing starts before the
        // start URL opens.
        try {
            proxy_handover(*spare, project, opts, plan, base_url);
            open_start_url(*spare, opts.start_url);
        } catch (const std::exception &e) {
            warn(std::string("a warm spare could not be handed over (") + e.what() + "); starting a browser instead");
            instance_stop(*spare);
            spare.reset();
        }
    }

    // A spare handed over but not yet a session goes if the create fails on the way (a profile
    // deleted meanwhile, a bad extension): it may have state of this create by now.
    struct SpareGuard {
        const BrowsersPlugin *plugin = nullptr;
        std::string id;
        ~SpareGuard() {
            if (plugin) plugin->instance_stop(id);
        }
    } spare_guard{spare ? this : nullptr, spare.value_or("")};

    Session s;
    s.id = spare ? *spare : new_session_id();
    s.org_id = caller.value("org_id", "");
    s.project_id = project;
    s.name = opts.name;
    s.created_ms = now_ms();
    s.timeout_seconds = opts.timeout_seconds;
    s.headless = opts.headless;
    s.stealth = opts.stealth;
    s.kiosk_mode = opts.kiosk_mode;
    s.viewport = opts.viewport;
    s.start_url = opts.start_url;
    s.tags = opts.tags;
    s.chrome_policy = opts.chrome_policy;
    s.proxy_id = opts.proxy_id;
    s.invocation_id = opts.invocation_id;
    s.location = opts.location;
    s.network = browser_network(plan.allowed_hosts, plan.routes_wire(), plan.private_hosts);
    s.vaults = vaults;

    // A lease on the profile for as long as the session lives; given back if the create fails.
    struct ProfileLease {
        const BrowsersPlugin *plugin = nullptr;
        std::string session_id;
        ~ProfileLease() {
            if (plugin) try {
                    plugin->call("profiles.release", {{"session_id", session_id}});
                } catch (const std::exception &) {
                    // the profiles plugin is gone: there is no lease left to give back
                }
        }
    } profile_lease;
    json spec = make_instance_spec(s.id, opts);
    plan.apply(spec);
    add_extension_inputs(spec, project, opts.extensions);
    if (opts.profile) {
        json lease = call("profiles.acquire", profile_selector(project, s.id, *opts.profile));
        profile_lease.plugin = this;
        profile_lease.session_id = s.id;
        s.profile_id = lease.at("profile").at("id").get<std::string>();
        s.profile_save_changes = opts.profile->save_changes;
        if (auto archive = lease.value("archive", json()); archive.is_string()) {
            spec["inputs"]["profile.tar.zst"] = archive;
            // Saved between the check above and the lease: the spare restarts Chromium on it,
            // and opens the start URL again in the new Chromium.
            if (spare) {
                if (instance_call(*spare, "PUT", "/chromium/profile", read_whole_file(archive.get<std::string>()),
                                  60000)
                        .status != 200)
                    throw Error(502, "upstream_unavailable", "Chromium could not restart on the profile");
                open_start_url(*spare, opts.start_url);
            }
        }
    }

    // The row is written only once the instance runs, so a failed start leaves nothing behind.
    if (!spare) {
        // A spare-eligible create already holds its slot (or got a spare instead).
        if (!start_slot.held()) start_slot = wait_for_start_slot();
        try {
            instance_start(spec);
            proxy_handover(s.id, project, opts, plan, base_url);
            if (plan.sign) open_start_url(s.id, opts.start_url);
        } catch (...) {
            instance_stop(s.id); // idempotent; whatever half-started goes too
            throw;
        }
    }
    start_slot.release();
    try {
        insert(s);
    } catch (const Error &e) {
        instance_stop(s.id);
        sql("DELETE FROM browsers_tags WHERE session_id = ?", {s.id});
        sql("DELETE FROM browsers_sessions WHERE id = ?", {s.id}); // if only the tags failed
        if (is_unique_violation(e) && s.name) name_conflict(*s.name);
        throw;
    }
    profile_lease.plugin = nullptr; // the session holds it now; its end gives it back
    spare_guard.plugin = nullptr;
    count_create(spare ? "spare" : "cold", started);
    {
        std::lock_guard lock(idle_mutex_);
        idle_baseline_ms_[s.id] = now_ms(); // idle time counts from "ready", not from the request
    }
    activity(s.id); // marks the session seen by the host's activity counter
    if (opts.telemetry)
        telemetry_after_start(
            {{"op", "create"}, {"session_id", s.id}, {"project_id", project}, {"request", *opts.telemetry}});
    return render(s, base_url);
}

void BrowsersPlugin::retrieve(Request &req, Response &res) {
    bool include_deleted = parse_bool_param("include_deleted", req.query("include_deleted"), false);
    res.json(render(require(req.project(), req.param("id_or_name"), include_deleted), req));
}

void BrowsersPlugin::update(Request &req, Response &res) {
    std::string project = req.project();
    // Read the body before anything can fail: an unread body left on a keep-alive connection
    // would be taken for the start of the next request.
    UpdateOptions opts = parse_update(req.json_body(false));
    Session s = require(project, req.param("id_or_name"), false);
    if (opts.proxy) opts.proxy_id = proxy_of(project, *opts.proxy);
    // Name and tags live in the store; the rest changes the instance, which another node may run.
    if (opts.viewport || opts.profile || opts.proxy_id || opts.telemetry || opts.changes_location() || opts.network ||
        opts.start_url)
        require_here(s.id, s.node);
    if (opts.telemetry)
        telemetry({{"op", "check"}, {"project_id", project}, {"session_id", s.id}, {"request", *opts.telemetry}},
                  opts.telemetry_captures);
    check_start_url_allowed(s, opts);
    auto busy = activity(s.id); // a PATCH in flight (e.g. a Chromium restart) is activity

    NameReservation reservation;
    if (opts.name && *opts.name && *opts.name != s.name) {
        std::lock_guard lock(names_mutex_);
        auto key = reservation_key(project, **opts.name);
        if (pending_names_.count(key) || !sql("SELECT id FROM browsers_sessions WHERE project_id = ? AND name = ? AND "
                                              "deleted_at IS NULL AND id <> ?",
                                              {project, **opts.name, s.id})
                                              .empty())
            name_conflict(**opts.name);
        pending_names_.insert(key);
        reservation = NameReservation(*this, key);
    }

    if (opts.viewport && *opts.viewport != s.viewport) {
        // Chromium (headful: with its Xvfb) restarts at the new size, under any live viewer and
        // recording: as on Kernel, either refuses the resize unless `force`. Forced, a viewer
        // reconnects to the new screen, and a recording is split: finished now, and a new one
        // (same settings) started on the resized screen. Headless sessions are never recorded.
        json segments = json::array();
        auto count = [&](const char *service) {
            try {
                return call(service, {{"session_id", s.id}}).value("count", 0);
            } catch (const Error &) {
                return 0; // that plugin is not enabled: nothing of its kind is attached
            }
        };
        int recordings = s.headless ? 0 : count("replays.active");
        int viewers = count("liveview.viewers");
        if ((recordings > 0 || viewers > 0) && !opts.force)
            throw Error::conflict(std::string(recordings > 0 ? "a replay is recording" : "a live view is watching") +
                                  " this browser; resize with viewport.force = true (a live view reconnects, a "
                                  "recording goes on as a new replay)");
        if (recordings > 0) segments = call("replays.split_begin", {{"session_id", s.id}}).value("segments", segments);
        json body = {{"viewport", viewport_json(*opts.viewport)}};
        // The split ends whether or not Chromium came back; then the restart's error, if any.
        std::exception_ptr restart_failed;
        try {
            restart_chromium(s.id, body, "at the new viewport");
        } catch (...) {
            restart_failed = std::current_exception();
        }
        if (!segments.empty()) call("replays.split_end", {{"session_id", s.id}, {"segments", segments}});
        if (restart_failed) std::rethrow_exception(restart_failed);
        sql("UPDATE browsers_sessions SET viewport_width = ?, viewport_height = ?, viewport_refresh_rate = ? WHERE id "
            "= ?",
            {opts.viewport->width, opts.viewport->height, opts.viewport->refresh_rate, s.id});
    }
    if (opts.profile) attach_profile(s, *opts.profile);
    // Live: the instance's forwarder switches upstream; Chromium and its CDP connections stay.
    if (opts.proxy_id) {
        call("proxies.attach", {{"project_id", project}, {"proxy_id", *opts.proxy_id}, {"instance_id", s.id}});
        sql("UPDATE browsers_sessions SET proxy_id = ? WHERE id = ?",
            {opts.proxy_id->empty() ? json(nullptr) : json(*opts.proxy_id), s.id});
    }
    if (opts.network) update_network(s, *opts.network);
    if (opts.name) {
        try {
            sql("UPDATE browsers_sessions SET name = ? WHERE id = ?",
                {*opts.name ? json(**opts.name) : json(nullptr), s.id});
        } catch (const Error &e) {
            if (is_unique_violation(e) && *opts.name) name_conflict(**opts.name);
            throw;
        }
    }
    if (opts.tags) write_tags(s.id, *opts.tags);
    if (opts.telemetry)
        telemetry({{"op", "update"}, {"session_id", s.id}, {"project_id", project}, {"request", *opts.telemetry}},
                  opts.telemetry_captures);
    // Last, as Kernel applies it: the other changes stay if this fails, and start_url then
    // does not open.
    if (opts.changes_location()) update_location(s, opts);
    // Over whatever tabs are open, a profile's restored ones included (as on create). Best effort,
    // as Kernel documents it: the changes above are made, so a browser that cannot open it does
    // not fail the update.
    try {
        open_start_url(s.id, opts.start_url);
    } catch (const Error &e) {
        warn("browser " + s.id + ": the start_url of an update did not open: " + e.what());
    }
    res.json(render(require(project, s.id, true), req));
}

void BrowsersPlugin::restart_chromium(const std::string &id, const json &body, const char *what) {
    auto r = instance_call(id, "POST", "/chromium/restart", body.dump(), 60000);
    if (r.status == 200) return;
    // Pass the agent's wire error on (e.g. 404 when the instance is gone), reworded.
    json err = json::parse(r.body, nullptr, false);
    bool wire = err.is_object() && err.contains("code") && err.contains("message");
    throw Error(wire ? r.status : 502, wire ? err.value("code", "internal") : "upstream_unavailable",
                std::string("could not restart Chromium ") + what + ": " +
                    (wire ? err.value("message", "") : std::string("the browser instance did not answer")));
}

void BrowsersPlugin::update_location(const Session &s, const UpdateOptions &opts) {
    Location next = s.location;
    if (opts.timezone) next.timezone = *opts.timezone;
    if (opts.locale) next.locale = *opts.locale;
    if (next == s.location) return;
    // TZ and the language flags are fixed for a Chromium run: a restart (pages reopen at
    // about:blank, the user-data folder stays) is what makes them hold in every tab.
    restart_chromium(s.id, json{{"location", location_spec(next)}}, "with the new location");
    auto opt = [](const std::optional<std::string> &v) { return v ? json(*v) : json(nullptr); };
    sql("UPDATE browsers_sessions SET location_timezone = ?, location_locale = ? WHERE id = ?",
        {opt(next.timezone), opt(next.locale), s.id});
}

// A start_url the allowlist refuses would open only the forwarder's 403: refused before any change,
// as on create, against the list this PATCH leaves in place.
void BrowsersPlugin::check_start_url_allowed(const Session &s, const UpdateOptions &opts) const {
    if (!opts.start_url) return;
    json hosts;
    if (opts.network)
        hosts = opts.network->allowed_hosts;
    else if (s.network)
        hosts = s.network->value("allowed_hosts", json());
    if (hosts.is_array()) call("proxies.network", {{"allowed_hosts", hosts}, {"start_url", *opts.start_url}});
}

void BrowsersPlugin::update_network(const Session &s, const UpdateOptions::NetworkUpdate &u) {
    std::lock_guard lock(network_mutex_);
    // Read again under the lock: two changes based on one revision must not both apply.
    auto rows = sql("SELECT network FROM browsers_sessions WHERE id = ?", {s.id});
    json current = rows.empty() || !rows[0].value("network", json()).is_string()
                       ? json()
                       : json::parse(rows[0].at("network").get<std::string>(), nullptr, false);
    if (!current.is_object() || !current.contains("allowlist_state"))
        throw Error::invalid("network.allowed_hosts", "this browser was created without an allowlist, and one cannot "
                                                      "be added later: create a browser with network.allowed_hosts");
    json state = current.value("allowlist_state", json::object());
    std::string revision = state.value("revision", "");
    json hosts = u.allowed_hosts.is_null()
                     ? json()
                     : call("proxies.network", {{"allowed_hosts", u.allowed_hosts}}).at("allowed_hosts");
    if (u.expected_revision && *u.expected_revision != revision) {
        // The same change again (a retry after an answer that got lost) finds it made.
        bool retried = u.mutation_id && state.value("mutation_id", json()) == *u.mutation_id &&
                       state.value("base_revision", json()) == *u.expected_revision &&
                       current.value("allowed_hosts", json()) == hosts;
        if (retried) return;
        throw Error(409, "stale_network",
                    "the allowlist is at revision " + revision + ", not " + *u.expected_revision +
                        ": read the browser again and send its network.allowlist_state.revision");
    }
    call("proxies.network", {{"allowed_hosts", hosts}, {"instance_id", s.id}});
    // The rest of the network config (its proxy routes) stays as created.
    json next = current;
    next.erase("allowed_hosts");
    next["allowlist_state"] = {{"revision", new_id()}, {"base_revision", revision}};
    if (u.mutation_id) next["allowlist_state"]["mutation_id"] = *u.mutation_id;
    if (!hosts.is_null()) next["allowed_hosts"] = hosts;
    sql("UPDATE browsers_sessions SET network = ? WHERE id = ?", {next.dump(), s.id});
}

void BrowsersPlugin::list(Request &req, Response &res) {
    std::string project = req.project();
    ListQuery q = parse_list_query([&](std::string_view name) { return req.query(name); }, req.query_string());

    std::string where = " WHERE s.project_id = ?";
    json params = json::array({project});
    if (q.status == StatusFilter::Active) where += " AND s.deleted_at IS NULL";
    if (q.status == StatusFilter::Deleted) where += " AND s.deleted_at IS NOT NULL";
    if (q.query) {
        where += " AND (LOWER(s.name) LIKE LOWER(?) ESCAPE '\\' OR LOWER(s.id) LIKE LOWER(?) ESCAPE '\\')";
        params.push_back(like_contains(*q.query));
        params.push_back(like_contains(*q.query));
    }
    if (q.region) {
        // Rows from before regions were recorded are this node's region.
        where += " AND COALESCE(s.region, ?) = ?";
        params.push_back(region_);
        params.push_back(*q.region);
    }
    for (const auto &[k, v] : q.tags) {
        where += " AND EXISTS (SELECT 1 FROM browsers_tags t WHERE t.session_id = s.id AND t.tag_key = ? AND "
                 "t.tag_value = ?)";
        params.push_back(k);
        params.push_back(v);
    }
    hangar::answer_page(
        res, [this](const std::string &statement, const json &p) { return sql(statement, p); },
        "SELECT s.* FROM browsers_sessions s" + where + " ORDER BY s.created_at DESC, s.id DESC", params,
        hangar::Paging{q.offset, q.limit}, [&](const json &row) { return render(session_from_row(row), req); });
}

void BrowsersPlugin::remove(Request &req, Response &res) {
    Session s = require(req.project(), req.param("id_or_name"), false);
    // A session another node runs ends there, so that when this answers its profile is saved and
    // its instance gone, as on one node. When that node is gone, it ends here (its own sweep will
    // not come; the other nodes' sweeps would end it anyway).
    if (s.node && *s.node != node_) relay_to_node(*s.node, "browser session " + s.id);
    remove_session(s, req.param("id_or_name"));
    res.no_content();
}

void BrowsersPlugin::remove_session(const Session &s, const std::string &id_or_name) {
    if (!mark_deleted(s.id, now_ms())) throw Error::not_found("browser session \"" + id_or_name + "\" not found");
    {
        std::lock_guard lock(idle_mutex_);
        idle_baseline_ms_.erase(s.id);
    }
    // The session reads deleted and its slot is free from here; ending it (recordings, telemetry,
    // the profile's save, the sandbox) runs on in the background. Its profile learns first, so
    // that a create on it waits for that save rather than start from the archive before it.
    if (s.profile_id && (!s.node || *s.node == node_)) {
        try {
            call("profiles.ending", {{"session_id", s.id}});
        } catch (const Error &e) {
            warn("browser session " + s.id + ": its profile was not told it ends: " + e.what());
        }
    }
    teardowns_.start(s.id, [this, id = s.id] { stop_session_instance(id); });
}

namespace {
// cdp_ws_url and webdriver_ws_url are WebSocket endpoints. A plain GET would reach Chromium,
// which answers it with an empty 200 (schemathesis found it once it had valid tokens).
void require_websocket(const Request &req, const char *what) {
    std::string upgrade = req.header("Upgrade").value_or("");
    std::transform(upgrade.begin(), upgrade.end(), upgrade.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (upgrade != "websocket")
        throw Error::bad_request(std::string(what) + " is a WebSocket endpoint: connect with Upgrade: websocket");
}
} // namespace

void BrowsersPlugin::cdp_browser_socket(Request &req, Response &res) {
    std::string sid = session_from_token(req.query("jwt").value_or(""), "cdp");
    require_websocket(req, "cdp_ws_url");
    relay_unix(req, res, session_socket(sid), "/cdp", sid);
}

void BrowsersPlugin::cdp_target_socket(Request &req, Response &res) {
    std::string sid = session_from_token(req.param("token"), "cdp");
    require_websocket(req, "a DevTools target's webSocketDebuggerUrl");
    relay_unix(req, res, session_socket(sid), "/cdp/devtools/" + req.param("rest"), sid);
}

void BrowsersPlugin::cdp_json(Request &req, Response &res, const std::string &agent_path) {
    std::string token = req.query("jwt").value_or("");
    std::string sid = session_from_token(token, "cdp");
    auto busy = activity(sid);
    auto r = instance_call(sid, "GET", agent_path, {}, 10000);
    json body = r.status == 200 ? json::parse(r.body, nullptr, false) : json(nullptr);
    if (body.is_discarded() || body.is_null())
        throw Error(502, "upstream_unavailable", "the browser did not answer " + agent_path);
    res.json(rewrite_devtools_json(body, ws_base(req.base_url()), token));
}

// WebDriver BiDi: the bidi plugin's agent route serves it inside the instance; the token is
// checked first, so a bad one is refused before anything starts there.
void BrowsersPlugin::webdriver_socket(Request &req, Response &res) {
    std::string sid = session_from_token(req.query("jwt").value_or(""), "webdriver");
    require_websocket(req, "webdriver_ws_url");
    relay_unix(req, res, session_socket(sid), "/bidi", sid);
}

// ---- background ----------------------------------------------------------------------------------

void BrowsersPlugin::sweep_idle() {
    if (stopping_ || sweeping_.exchange(true)) return;
    struct Done {
        std::atomic<bool> &flag;
        ~Done() { flag = false; }
    } done{sweeping_};

    auto now = now_ms();
    std::vector<std::string> expired;
    for (const auto &row :
         sql("SELECT id, timeout_seconds FROM browsers_sessions WHERE deleted_at IS NULL AND node = ?", {node_})) {
        std::string id = row.at("id").get<std::string>();
        std::int64_t timeout_ms = row.at("timeout_seconds").get<std::int64_t>() * 1000;
        std::int64_t idle = idle_ms(id);
        if (idle < 0) {
            // Never seen by the host's counter: idle since we first knew of it.
            std::lock_guard lock(idle_mutex_);
            idle = now - idle_baseline_ms_.try_emplace(id, now).first->second;
        }
        if (idle >= timeout_ms) expired.push_back(id);
    }
    if (!expired.empty()) end_sessions(expired, "idle timeout");

    // A session's row is written only once its instance runs, so an active row without a
    // running instance lost it (agent crash, OOM kill): end it, which also cleans its folder.
    std::vector<std::string> lost;
    for (const auto &row : sql("SELECT id FROM browsers_sessions WHERE deleted_at IS NULL AND node = ?", {node_})) {
        std::string id = row.at("id").get<std::string>();
        if (!instance_socket(id)) lost.push_back(id);
    }
    if (!lost.empty()) end_sessions(lost, "its instance exited unexpectedly");

    if (now - nodes_checked_ms_ >= kOtherNodesCheckMs) {
        nodes_checked_ms_ = now;
        sweep_other_nodes();
    }
    if (draining()) sweep_draining();
}

void BrowsersPlugin::place_create(Response &res, bool relayed, const std::string &region) const {
    json nodes;
    try {
        nodes = read_nodes().value("nodes", json::array());
    } catch (const Error &) {
        nodes = json::array(); // the store is away: the create meets that itself
    }
    const std::int64_t my_cap = std::max<std::int64_t>(0, config_int("node.max_browsers", 0));
    const bool alone = std::none_of(nodes.begin(), nodes.end(), [&](const json &n) {
        return n.value("name", "") != node_ && n.value("state", "") == "live";
    });
    // A region this node does not serve ([node] region) is another node's to take.
    const bool other_region = !region.empty() && region != region_;
    if (other_region && relayed) return; // placed here by a node that knows better: check_placement answers
    if (alone && my_cap == 0 && !draining() && !other_region) return; // the common single machine

    std::map<std::string, std::int64_t> sessions;
    for (const auto &row : sql("SELECT node, COUNT(*) AS n FROM browsers_sessions WHERE deleted_at IS NULL AND "
                               "node IS NOT NULL GROUP BY node"))
        sessions[row.value("node", "")] = row.value("n", std::int64_t{0});
    // Sandboxes of deleted sessions still ending hold this node's memory until they are gone.
    sessions[node_] += static_cast<std::int64_t>(teardowns_.running());
    const bool room_here = !other_region && !draining() && (my_cap == 0 || sessions[node_] < my_cap);

    // The other live node with the fewest active sessions and room under its cap (then the most
    // free memory). Rows are written once an instance runs, so creates under way are not counted:
    // this node keeps a create unless the other has at least two fewer, which leaves a burst that
    // a load balancer spread where it landed.
    struct Candidate {
        std::string name;
        std::string url;
        std::int64_t sessions;
        std::int64_t mem_available;
    };
    std::optional<Candidate> best;
    for (const auto &n : nodes) {
        Candidate c{n.value("name", ""), n.value("public_url", ""), 0,
                    n.value("mem_available_bytes", std::int64_t{-1})};
        c.sessions = sessions[c.name];
        const std::int64_t cap = n.value("max_browsers", std::int64_t{0});
        if (c.name == node_ || c.url.empty() || n.value("state", "") != "live" || (cap > 0 && c.sessions >= cap))
            continue;
        if (!region.empty() && n.value("region", "") != region) continue;
        if (!best || c.sessions < best->sessions ||
            (c.sessions == best->sessions && c.mem_available > best->mem_available))
            best = c;
    }
    if (room_here && (relayed || !best || sessions[node_] <= best->sessions + 1)) return;
    if (best && !relayed)
        throw Error::on_node(best->name, best->url,
                             "node " + node_ + " places this browser on node " + best->name + " at " + best->url);
    if (other_region) {
        std::set<std::string> served = {region_};
        for (const auto &n : nodes)
            if (n.value("state", "") == "live" && !n.value("region", "").empty()) served.insert(n.value("region", ""));
        std::string list;
        for (const auto &r : served)
            list += (list.empty() ? "" : ", ") + r;
        if (!served.count(region))
            throw Error::invalid("region", "no node of this Hangar serves region " + region +
                                               " ([node] region); the regions served now: " + list);
        res.header("Retry-After", "2");
        throw Error(503, "no_capacity",
                    "no node serving region " + region + " has room now: retry once a browser ended there");
    }
    res.header("Retry-After", "2");
    if (draining())
        throw Error(503, "node_draining",
                    "node " + node_ +
                        " is draining (hangar drain): it takes no new browsers, and no other node has room");
    throw Error(503, "no_capacity",
                "node " + node_ + " runs its [node] max_browsers = " + std::to_string(my_cap) +
                    " sessions, and no other node has room: retry once a browser ended");
}

void BrowsersPlugin::refuse_while_draining(Response &res) const {
    if (!draining()) return;
    res.header("Retry-After", "2");
    throw Error(503, "node_draining",
                "node " + node_ + " is draining (hangar drain): it takes no new browsers; another node does");
}

void BrowsersPlugin::sweep_draining() {
    if (drain_done_) return;
    if (!drain_began_) {
        drain_began_ = true;
        info("node " + node_ + " is draining: no new browsers, warm spares stopped");
        stop_spares();
    }
    // Quiet twice in a row, with no end under way: a DELETE that just marked the last session is
    // answered before the server goes.
    if (ending_ > 0 || teardowns_.running() > 0 ||
        !sql("SELECT id FROM browsers_sessions WHERE deleted_at IS NULL AND node = ? LIMIT 1", {node_}).empty()) {
        drain_quiet_sweeps_ = 0;
        return;
    }
    if (++drain_quiet_sweeps_ < 2) return;
    drain_done_ = true;
    try {
        call("host.drained", json::object());
    } catch (const Error &e) {
        drain_done_ = false; // asked again at the next sweep
        warn(std::string("the drained node could not stop: ") + e.what());
    }
}

json BrowsersPlugin::read_nodes() const {
    auto answer = call("host.nodes", json::object());
    std::lock_guard lock(node_urls_mutex_);
    for (const auto &n : answer.value("nodes", json::array()))
        if (auto url = n.value("public_url", ""); !url.empty()) node_urls_[n.value("name", "")] = url;
    return answer;
}

std::optional<std::string> BrowsersPlugin::node_url(const std::string &name) const {
    {
        std::lock_guard lock(node_urls_mutex_);
        if (auto it = node_urls_.find(name); it != node_urls_.end()) return it->second;
    }
    try {
        read_nodes();
    } catch (const Error &) {
        return std::nullopt; // the store is away: the caller falls back to its own URL
    }
    std::lock_guard lock(node_urls_mutex_);
    if (auto it = node_urls_.find(name); it != node_urls_.end()) return it->second;
    return std::nullopt;
}

void BrowsersPlugin::require_here(const std::string &id, const std::optional<std::string> &node) const {
    if (!node || *node == node_) return;
    // The host relays the request to the owner (421 never reaches the client); without the
    // owner's address (the store is away) the client is told where the browser is.
    auto url = node_url(*node);
    if (!url)
        throw Error(502, "upstream_unavailable",
                    "browser session " + id + " runs on node " + *node + ", whose address this node (" + node_ +
                        ") cannot read from the store now");
    throw Error::on_node(*node, *url, "browser session " + id + " runs on node " + *node + " at " + *url);
}

std::string BrowsersPlugin::session_socket(const std::string &sid) const {
    if (auto socket = instance_socket(sid)) return *socket;
    auto rows = sql("SELECT node FROM browsers_sessions WHERE id = ? AND deleted_at IS NULL", {sid});
    if (!rows.empty()) require_here(sid, node_of(rows[0]));
    return agent_socket(sid); // not running here: its 404
}

void BrowsersPlugin::sweep_other_nodes() {
    json nodes;
    bool may_judge_stale = false;
    try {
        auto answer = read_nodes();
        nodes = answer.value("nodes", json::array());
        may_judge_stale = answer.value("may_judge_stale", false);
    } catch (const Error &e) {
        warn(std::string("the node list could not be read: ") + e.what());
        return;
    }
    // A stale node was killed or lost its machine (a planned stop is "stopped" and keeps its
    // sessions for its restart to adopt). Its instances are gone or unreachable: its sessions end
    // here, and its own next start stops whatever of them survived (they are no longer active).
    // Not while this node's own heartbeats are failing or just recovered (the host says): after
    // a store outage every node reads stale until it beats again, and none of them is gone.
    for (const auto &n : nodes) {
        const std::string name = n.value("name", "");
        if (!may_judge_stale || n.value("state", "") != "stale" || name == node_) continue;
        std::vector<std::string> orphaned;
        for (const auto &row : sql("SELECT id FROM browsers_sessions WHERE deleted_at IS NULL AND node = ?", {name}))
            orphaned.push_back(row.at("id").get<std::string>());
        const auto at = now_ms();
        for (const auto &id : orphaned)
            if (mark_deleted(id, at)) {
                std::string why = "ending browser session " + id;
                info(why.append(": its node ").append(name).append(" stopped heartbeating"));
            }
    }
    // Sessions of this node that another node ended: their instances stop here. Only recent ends
    // are looked at; an instance is stopped once, and then has no socket.
    std::vector<std::string> ended_elsewhere;
    for (const auto &row : sql("SELECT id FROM browsers_sessions WHERE node = ? AND deleted_at > ? AND ended_by <> ?",
                               {node_, now_ms() - kEndedElsewhereWindowMs, node_})) {
        std::string id = row.at("id").get<std::string>();
        if (instance_socket(id)) ended_elsewhere.push_back(id);
    }
    std::vector<std::jthread> stoppers;
    for (const auto &id : ended_elsewhere) {
        info("ending browser session " + id + ": another node ended it");
        stoppers.emplace_back([this, id] { stop_session_instance(id); });
    }
}

void BrowsersPlugin::reap_orphans() {
    // Sessions still active from a previous run: each claims the instance the host adopted for
    // it (one whose agent answered); a session whose instance did not survive ends. Instances
    // nobody claims (spares, idle pool members) the host stops once every plugin started.
    std::vector<std::string> gone;
    const auto now = now_ms();
    // Rows from before sessions named their node were all this (then only) node's.
    sql("UPDATE browsers_sessions SET node = ? WHERE node IS NULL", {node_});
    for (const auto &row : sql("SELECT id, project_id, profile_id, profile_save_changes FROM browsers_sessions WHERE "
                               "deleted_at IS NULL AND node = ?",
                               {node_})) {
        std::string id = row.at("id").get<std::string>();
        bool alive = false;
        try {
            instance_start({{"id", id}, {"adopt", true}});
            alive = instance_call(id, "GET", "/chromium", {}, 3000).status == 200;
        } catch (const Error &) {
            // not adopted: the instance is gone
        }
        if (!alive) {
            gone.push_back(id);
            continue;
        }
        // The profile lease lived in the previous server's memory: taken again, so the end of
        // the session still saves the profile when it asked for that.
        if (row.value("profile_id", json()).is_string()) try {
                call("profiles.acquire", {{"project_id", row.at("project_id")},
                                          {"id", row.at("profile_id")},
                                          {"session_id", id},
                                          {"save_changes", row.value("profile_save_changes", 0) != 0}});
            } catch (const std::exception &e) {
                warn("browser session " + id + ": its profile lease was not taken again: " + e.what());
            }
        // The idle timeout counts again from now: the time the server was down is not the
        // client's idleness (it could not reach the browser then).
        std::lock_guard lock(idle_mutex_);
        idle_baseline_ms_[id] = now;
    }
    if (!gone.empty()) end_sessions(gone, "its instance did not survive a server restart");
}

} // namespace hangar::browsers
