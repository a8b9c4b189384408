// telemetry: what happened in a browser, as events (kernel-api.md §2.5, [21]-[22], §4.7;
// kernel-behaviour.md §11).
//
// Instance half (in each agent): the event ring of the session (bounded; seq per agent), the CDP
// collector (one DevTools connection the agent owns), a Chromium watcher for `system`, the live
// SSE stream served from the ring, and the batch the server archives.
// Server half: the configuration rules (the browsers plugin calls `telemetry.session` at create,
// update, acquire, release and end), the archive (SQLite, one row per pulled batch), the events
// query, the stream relay, and the retention reaper.
#include "collector.hpp"
#include "export_model.hpp"
#include "exporter.hpp"
#include "telemetry_model.hpp"

#include <hangar/cdp.hpp>
#include <hangar/egress.hpp>
#include <hangar/name_fold.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/service.hpp>
#include <hangar/text.hpp>

#include <Poco/Net/SSLManager.h>

#include <fcntl.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <limits>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using namespace hangar::telemetry;

const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE telemetry_sessions (session_id TEXT PRIMARY KEY, project_id TEXT NOT NULL, config TEXT, "
        "baseline TEXT, archived_seq INTEGER NOT NULL DEFAULT 0, updated_at INTEGER NOT NULL);"
        "CREATE TABLE telemetry_batches (session_id TEXT NOT NULL, project_id TEXT NOT NULL, "
        "first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, first_ts INTEGER NOT NULL, last_ts INTEGER NOT NULL, "
        "categories INTEGER NOT NULL, events TEXT NOT NULL, PRIMARY KEY (session_id, first_seq));"
        "CREATE INDEX telemetry_batches_age ON telemetry_batches (last_ts);"},
    // 0.131 OTLP export (kernel-api-0131.md §1E): destinations, and what each session exports.
    {2, "CREATE TABLE telemetry_destinations (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, name TEXT NOT NULL, "
        "endpoint TEXT NOT NULL, description TEXT, header_names TEXT NOT NULL DEFAULT '[]', headers_sealed TEXT, "
        "consecutive_failures INTEGER NOT NULL DEFAULT 0, last_export_at BIGINT, last_error TEXT, "
        "last_error_at BIGINT, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL);"
        "CREATE UNIQUE INDEX telemetry_destinations_name ON telemetry_destinations (project_id, name);"
        "INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES "
        "('telemetry', 'telemetry_destinations', 'id', 'headers_sealed');"
        "ALTER TABLE telemetry_sessions ADD COLUMN export_destination TEXT;"
        "ALTER TABLE telemetry_sessions ADD COLUMN storage INTEGER NOT NULL DEFAULT 1;"},
    // Destinations are the organisation's (§1E: names unique in the org, selectable from any of
    // its projects). Each row takes its project's org; a name a second project of the org also
    // used gets the row's id appended (the older row keeps it), as the unique index needs. The
    // project column goes: the org plugin counts every project_id row as a project's resource.
    {3, "ALTER TABLE telemetry_destinations ADD COLUMN org_id TEXT NOT NULL DEFAULT '';"
        "UPDATE telemetry_destinations SET org_id = COALESCE((SELECT org_id FROM projects "
        "WHERE projects.id = telemetry_destinations.project_id), '');"
        "UPDATE telemetry_destinations SET name = name || '-' || id WHERE EXISTS (SELECT 1 FROM "
        "telemetry_destinations d2 WHERE d2.org_id = telemetry_destinations.org_id AND LOWER(d2.name) = "
        "LOWER(telemetry_destinations.name) AND (d2.created_at < telemetry_destinations.created_at OR "
        "(d2.created_at = telemetry_destinations.created_at AND d2.id < telemetry_destinations.id)));"
        "DROP INDEX telemetry_destinations_name;"
        "ALTER TABLE telemetry_destinations DROP COLUMN project_id;"
        "CREATE UNIQUE INDEX telemetry_destinations_org_name ON telemetry_destinations (org_id, LOWER(name));"},
    // §1E: names are matched case- and accent-insensitively. The key is hangar::fold_name's (the
    // store's LOWER() folds ASCII only on SQLite), filled in by start_server for older rows.
    {4, "ALTER TABLE telemetry_destinations ADD COLUMN name_key TEXT;"},
};

constexpr std::size_t kPullLimit = 2000;
constexpr std::size_t kMaxPosted = 10000; // server-side events waiting for one agent
constexpr std::chrono::milliseconds kPostCoalesce{20};
constexpr int kDefaultPage = 100, kMaxPage = 1000;
constexpr std::int64_t kDefaultSinceUs = std::int64_t{5} * 60 * 1'000'000;

class TelemetryPlugin final : public hangar::Plugin {
public:
    void start_server() override;
    void stop_server() override;
    void start_instance() override;
    void stop_instance() override;

private:
    // ---- server ----
    json session_op(const json &in);
    void apply(const std::string &sid, const std::string &project, const Selection &sel, const ExportState &x,
               const json &baseline);
    Selection current(const std::string &sid) const;
    ExportState current_export(const std::string &sid) const;
    // The id of the destination an `export.otlp.destination` names in `project`'s organisation
    // ("" when the request names none); 400 naming the field when there is no such destination.
    std::string resolve_destination(const std::string &project, const ConfigRequest &r, const std::string &field);

    // ---- OTLP destinations (kernel-api-0131.md §1E) ----
    void destinations_routes();
    json render_destination(const json &row) const;
    void refuse_if_selected(const std::string &org, const json &row, bool renaming) const;
    json destination_row(const Request &req) const; // 404 when not in the caller's org
    // The org's destinations whose name folds as `name` does (hangar::fold_name), oldest first.
    json destinations_named(const std::string &org, const std::string &name, const std::string &except_id = {}) const;
    void fill_name_keys();
    void check_reachable(const std::string &endpoint, const std::string &field) const;
    std::optional<Exporter::Target> export_target(const std::string &id) const;
    void export_outcome(const std::string &id, bool ok, const std::string &error_class);
    std::unique_ptr<hangar::Secrets> secrets_;
    hangar::egress::Policy fetch_policy_; // [server] fetch_allow*: which collectors the server dials
    std::unique_ptr<Exporter> exporter_;
    // Moves what the agent holds beyond the archived seq into the archive (one row per batch).
    void pull(const std::string &sid);
    void pull_all();
    void resume_adopted();
    void reap();
    void events(Request &req, Response &res);

    std::mutex pull_mutex_;
    std::mutex live_mutex_;
    struct Live {
        std::string project;
        Selection selection;
    };
    std::map<std::string, Live> live_; // sessions with an agent to pull from
    bool captures(const std::string &sid, const char *category);
    void api_call(const json &in);
    std::int64_t retention_us_ = 0;

    // Events seen by the server (API calls, relayed CDP and live-view connections) wait here
    // and are posted to their agent's ring in batches by one thread, so neither a request
    // thread nor the host's event loop ever waits for an agent.
    void post(const std::string &sid, json event);
    void send_posted(const std::stop_token &stop);
    std::mutex outbox_mutex_;
    std::condition_variable_any outbox_cv_;
    std::map<std::string, std::vector<json>> outbox_;
    // Held while a batch taken from the outbox is on its way: a session's end waits for it, so
    // its last pull finds every event posted before the end.
    std::mutex posting_mutex_;
    std::jthread sender_;
    // Posts what waits for `sid` now, and waits for a post under way (a session ending).
    void flush_posted(const std::string &sid);

    // Sessions that ended with relays still open: the disconnects that follow are archived
    // directly (the agent is gone), for a while.
    struct Ended {
        std::string project;
        Selection selection;
        std::chrono::steady_clock::time_point until;
    };
    std::map<std::string, Ended> ended_; // under relays_mutex_
    struct Late {
        std::string sid, project;
        json event;
    };
    std::vector<Late> late_; // under relays_mutex_; archived by pull_all
    void archive_direct(const std::string &sid, const std::string &project, json event);

    // `connection` and `cdp_command`, from the host's relay observer (relay_observe).
    std::uint32_t relay_event(const RelayEvent &e, bool cdp);
    struct WatchedRelay {
        std::string sid;
        bool cdp;
        std::string live_view_id;
    };
    std::mutex relays_mutex_;
    std::map<std::uint64_t, WatchedRelay> relays_;

    // `system_oom_kill`: each live session's cgroup OOM kill counter.
    void watch_oom();
    void emit_oom(const std::string &sid, const json &data);
    struct Proc {
        long pid = 0; // as the sandbox sees it
        std::string name;
        long rss_kb = 0;
    };
    struct OomWatch {
        std::uint64_t kills = 0;
        std::uint64_t pending = 0; // counted, not reported yet (waiting one poll for the kernel log)
        int pending_polls = 0;
        std::map<long, Proc> procs;      // at the last poll, by host pid
        std::map<long, Proc> candidates; // at the last poll before the counter rose
    };
    std::mutex oom_mutex_;
    std::map<std::string, OomWatch> oom_;
    std::map<long, KernelOomKill> kernel_kills_; // from /dev/kmsg, by host pid, not matched yet
    hangar::proc::Fd kmsg_;

    // ---- instance ----
    void emit(json event);
    void stream(Request &req, Response &res);
    void watch_system(const std::stop_token &stop);

    std::mutex ring_mutex_;
    std::condition_variable ring_cv_;
    std::unique_ptr<Ring> ring_;
    Selection selection_;
    std::uint64_t stream_epoch_ = 0; // bumped when a lease ends: its streams close
    std::atomic<bool> stopping_{false};
    std::unique_ptr<Collector> collector_;
    std::jthread watcher_;
    struct Stream {
        std::thread thread;
        std::atomic<bool> done{false};
    };
    std::mutex streams_mutex_;
    std::list<Stream> streams_;
};

// ================================ server half ====================================================

void TelemetryPlugin::start_server() {
    retention_us_ = config_int("retention_days", 30) * 86400LL * 1'000'000;
    secrets_ = std::make_unique<hangar::Secrets>(
        hangar::secrets::key_file(config("secrets.key_file"), config("server.data_dir")));
    // Kernel's "must resolve to a public address" is the operator's egress policy here.
    fetch_policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                  config_bool("server.fetch_allow_private_networks", false));
    fill_name_keys();
    Poco::Net::initializeSSL();
    Exporter::Settings xs;
    xs.queue_records =
        static_cast<std::size_t>(std::clamp<std::int64_t>(config_int("export_queue_records", 10000), 1, 1'000'000));
    xs.batch_records =
        static_cast<std::size_t>(std::clamp<std::int64_t>(config_int("export_batch_records", 512), 1, 10000));
    xs.backoff_base =
        std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("export_backoff_ms", 500), 10, 60000));
    xs.backoff_cap =
        std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("export_backoff_max_ms", 30000), 10, 600000));
    xs.timeout =
        std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("export_timeout_ms", 10000), 100, 120000));
    xs.policy = fetch_policy_;
    xs.node = node_name();
    const std::string encoding = config("export_encoding", "protobuf");
    auto parsed_encoding = otlp::parse_encoding(encoding);
    if (!parsed_encoding)
        throw std::runtime_error("export_encoding in telemetry.ini must be protobuf or json, not \"" + encoding + "\"");
    xs.encoding = *parsed_encoding;
    exporter_ = std::make_unique<Exporter>(
        xs, [this](const std::string &id) { return export_target(id); },
        [this](const std::string &id, bool ok, const std::string &error) { export_outcome(id, ok, error); });
    service("telemetry.metrics", [this](const json &) { return json{{"families", exporter_->metric_families()}}; });
    destinations_routes();
    service("telemetry.session", [this](const json &in) { return session_op(in); });
    service("telemetry.api_call", [this](const json &in) {
        api_call(in);
        return json::object();
    });
    sender_ = std::jthread([this](const std::stop_token &st) { send_posted(st); });
    observe_relays("/cdp", [this](const RelayEvent &e) { return relay_event(e, true); });
    observe_relays("/liveview/ws", [this](const RelayEvent &e) { return relay_event(e, false); });
    // The kernel log names an OOM kill's victim; without it (not root) the cgroup's process list
    // of the poll before stands in.
    kmsg_ = hangar::proc::Fd(::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    if (kmsg_) ::lseek(kmsg_.get(), 0, SEEK_END);
    every(static_cast<std::uint32_t>(std::clamp<std::int64_t>(config_int("oom_poll_ms", 1000), 50, 60000)),
          [this] { watch_oom(); });
    route(
        "GET", "/browsers/{id}/telemetry/stream",
        [this](Request &q, Response &r) { relay_to_session(q, r, "/telemetry/stream"); }, HANGAR_ROUTE_STREAMING);
    route("GET", "/browsers/{id}/telemetry/events", [this](Request &q, Response &r) { events(q, r); });
    every(static_cast<std::uint32_t>(std::clamp<std::int64_t>(config_int("archive_interval_ms", 1000), 100, 60000)),
          [this] { pull_all(); });
    every(3600 * 1000, [this] { reap(); });
    reap();
    try {
        resume_adopted();
    } catch (const std::exception &e) {
        warn(std::string("telemetry of adopted sessions not resumed: ") + e.what());
    }
}

// After a restart the instances that outlived the old server still capture (their agents kept
// their configuration); the new one takes up pulling their events and adding its own.
void TelemetryPlugin::resume_adopted() {
    for (const auto &row :
         sql("SELECT session_id, project_id FROM telemetry_sessions WHERE config IS NOT NULL", json::array())) {
        const std::string sid = row["session_id"].get<std::string>();
        auto r = instance_call(sid, "GET", "/telemetry/config", {}, 2000);
        if (r.status != 200) continue; // its instance is gone: the session ended
        json now = json::parse(r.body, nullptr, false);
        if (!now.is_object() || now["telemetry"].is_null()) continue; // idle, between leases
        std::lock_guard lock(live_mutex_);
        live_[sid] = Live{row["project_id"].get<std::string>(), selection_from_json(now["telemetry"])};
    }
}

void TelemetryPlugin::stop_server() {
    sender_ = {}; // posts what is queued, then stops
    pull_all();
    // What the last pull queued goes out while collectors answer; what a dead one would have
    // taken is lost with the process (README).
    exporter_->drain(
        std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("export_drain_ms", 2000), 0, 60000)));
    exporter_.reset();
    Poco::Net::uninitializeSSL();
}

bool TelemetryPlugin::captures(const std::string &sid, const char *category) {
    std::lock_guard lock(live_mutex_);
    auto it = live_.find(sid);
    return it != live_.end() && it->second.selection.count(category) > 0;
}

void TelemetryPlugin::post(const std::string &sid, json event) {
    {
        std::lock_guard lock(outbox_mutex_);
        auto &queued = outbox_[sid];
        if (queued.size() >= kMaxPosted) return; // an agent this far behind: its ring counts the loss
        queued.push_back(std::move(event));
    }
    outbox_cv_.notify_one();
}

void TelemetryPlugin::send_posted(const std::stop_token &stop) {
    while (true) {
        std::map<std::string, std::vector<json>> batch;
        {
            std::unique_lock lock(outbox_mutex_);
            outbox_cv_.wait(lock, stop, [this] { return !outbox_.empty(); });
            if (outbox_.empty() && stop.stop_requested()) return;
            // A burst (a CDP client's commands) becomes one post instead of one per event.
            outbox_cv_.wait_for(lock, stop, kPostCoalesce, [] { return false; });
        }
        std::lock_guard posting(posting_mutex_);
        {
            std::lock_guard lock(outbox_mutex_);
            batch.swap(outbox_);
        }
        for (auto &[sid, events] : batch) {
            auto r = instance_call(sid, "POST", "/telemetry/event", json{{"events", std::move(events)}}.dump(), 2000);
            if (r.status >= 300 && r.status != 404)
                warn("telemetry of browser session " + sid + " not posted: " + r.body);
        }
        if (stop.stop_requested()) {
            std::lock_guard lock(outbox_mutex_);
            if (outbox_.empty()) return;
        }
    }
}

void TelemetryPlugin::flush_posted(const std::string &sid) {
    std::lock_guard posting(posting_mutex_);
    std::vector<json> waiting;
    {
        std::lock_guard lock(outbox_mutex_);
        auto it = outbox_.find(sid);
        if (it == outbox_.end()) return;
        waiting = std::move(it->second);
        outbox_.erase(it);
    }
    instance_call(sid, "POST", "/telemetry/event", json{{"events", std::move(waiting)}}.dump(), 2000);
}

void TelemetryPlugin::archive_direct(const std::string &sid, const std::string &project, json event) {
    std::lock_guard lock(pull_mutex_);
    auto rows = sql("SELECT archived_seq FROM telemetry_sessions WHERE session_id = ?", {sid});
    if (rows.empty()) return;
    std::int64_t seq = rows[0]["archived_seq"].get<std::int64_t>() + 1;
    std::int64_t ts = event.value("ts", std::int64_t{0});
    std::set<std::string> cats = {event.value("category", "")};
    json batch = json::array({json{{"seq", seq}, {"event", std::move(event)}}});
    sql("INSERT INTO telemetry_batches (session_id, project_id, first_seq, last_seq, first_ts, last_ts, categories, "
        "events) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        {sid, project, seq, seq, ts, ts, category_mask(cats), batch.dump()});
    sql("UPDATE telemetry_sessions SET archived_seq = ? WHERE session_id = ?", {seq, sid});
}

// A CDP client (agent paths /cdp, /cdp/devtools/…) or a live viewer (/liveview/ws) through the
// server's relay. Relays of sessions capturing neither `connection` nor `control` when they open
// are not watched at all: their bytes are spliced with nothing read out of them.
std::uint32_t TelemetryPlugin::relay_event(const RelayEvent &e, bool cdp) {
    const std::int64_t ts = now_us();
    if (e.kind == HANGAR_RELAY_OPENED) {
        if (cdp && !(e.path == "/cdp" || e.path.starts_with("/cdp/") || e.path.starts_with("/cdp?"))) return 0;
        std::string sid(e.activity_key);
        bool connection = captures(sid, "connection");
        bool control = cdp && captures(sid, "control");
        if (!connection && !control) return 0;
        WatchedRelay w{sid, cdp, {}};
        if (!cdp) {
            // The viewer's link identifies its live-view session across reconnects; the link is a
            // capability, so only a digest of it is shown.
            w.live_view_id = "lv_" + hangar::telemetry::digest_hex(e.client_path);
        }
        if (connection) {
            json data = cdp ? json(nullptr) : json{{"session_id", w.live_view_id}};
            post(sid, make_event("connection", cdp ? "cdp_connect" : "live_view_connect", ts, "kernel_api",
                                 cdp ? "cdp_proxy" : "live_view", data));
        }
        {
            std::lock_guard lock(relays_mutex_);
            relays_[e.relay_id] = std::move(w);
        }
        return HANGAR_RELAY_WATCH_CLOSE | (cdp ? std::uint32_t{HANGAR_RELAY_WATCH_MESSAGES} : 0u);
    }
    WatchedRelay w;
    {
        std::lock_guard lock(relays_mutex_);
        auto it = relays_.find(e.relay_id);
        if (it == relays_.end()) return 0;
        if (e.kind == HANGAR_RELAY_CLOSED) {
            w = std::move(it->second);
            relays_.erase(it);
        } else {
            w = it->second;
        }
    }
    if (e.kind == HANGAR_RELAY_MESSAGE) {
        // The method's name only: the observer never hands over the rest of the message.
        if (captures(w.sid, "control"))
            post(w.sid, make_event("control", "cdp_command", ts, "cdp", e.method, {{"method", std::string(e.method)}}));
        return 0;
    }
    json event = w.cdp ? make_event("connection", "cdp_disconnect", ts, "kernel_api", "cdp_proxy",
                                    {{"duration_ms", e.duration_ms},
                                     {"message_count", e.message_count},
                                     {"reason", disconnect_reason(e.reason)}})
                       : make_event("connection", "live_view_disconnect", ts, "kernel_api", "live_view",
                                    {{"duration_ms", e.duration_ms}, {"session_id", w.live_view_id}});
    if (captures(w.sid, "connection")) {
        post(w.sid, std::move(event));
        return 0;
    }
    // The session ended while this connection was open: its close comes after the last pull.
    std::optional<std::string> project;
    {
        std::lock_guard lock(relays_mutex_);
        auto it = ended_.find(w.sid);
        if (it != ended_.end() && it->second.selection.count("connection")) project = it->second.project;
        bool more = std::any_of(relays_.begin(), relays_.end(), [&](const auto &r) { return r.second.sid == w.sid; });
        if (it != ended_.end() && (!more || it->second.until < std::chrono::steady_clock::now())) ended_.erase(it);
    }
    if (project) {
        // Archived by the pull timer, off the event loop (the archive is SQLite).
        std::lock_guard lock(relays_mutex_);
        late_.push_back({w.sid, *project, std::move(event)});
    }
    return 0;
}

json TelemetryPlugin::session_op(const json &in) {
    const std::string op = in.value("op", "");
    const std::string sid = in.value("session_id", "");
    const std::string project = in.value("project_id", "");
    const json request = in.value("request", json());
    if (op == "check") {
        const std::string field = in.value("field", "telemetry");
        ConfigRequest r = parse_request(request, field);
        // With a project (browser create and update), the export rules and the destination are
        // checked here too: create and update themselves must not fail once the browser exists.
        if (!project.empty() && (r.otlp || r.storage)) {
            const bool create = sid.empty();
            Selection sel = create ? apply_create(r) : apply_update(current(sid), r);
            apply_export(create ? ExportState{} : current_export(sid), r, sel, create,
                         resolve_destination(project, r, field), field);
        }
        return json::object();
    }
    if (op == "config") {
        auto rows = sql("SELECT config FROM telemetry_sessions WHERE session_id = ?", {sid});
        json cfg = rows.empty() || !rows[0]["config"].is_string() ? json(nullptr)
                                                                  : json::parse(rows[0]["config"].get<std::string>());
        return {{"telemetry", cfg}};
    }
    Selection sel;
    ExportState x;
    json baseline = nullptr;
    if (op == "create") {
        ConfigRequest r = parse_request(request);
        sel = apply_create(r);
        x = apply_export({}, r, sel, true, resolve_destination(project, r, "telemetry"));
    } else if (op == "update") {
        ConfigRequest r = parse_request(request);
        sel = apply_update(current(sid), r);
        x = apply_export(current_export(sid), r, sel, false, resolve_destination(project, r, "telemetry"));
    } else if (op == "acquire") {
        // The pool's configuration is the lease's baseline; the override applies as a PATCH would.
        baseline = in.value("baseline", json());
        ConfigRequest base = parse_request(baseline, "browser_pool.telemetry"), r = parse_request(request);
        Selection base_sel = apply_create(base);
        std::string base_destination;
        try {
            base_destination = resolve_destination(project, base, "browser_pool.telemetry");
        } catch (const Error &e) {
            // The pool's destination was deleted after the pool was made (a destination's delete
            // cannot see pools): the lease captures without exporting rather than not at all.
            warn("browser session " + sid + ": the pool's telemetry destination is gone, not exporting: " + e.what());
            base.otlp.reset();
            base.storage.reset();
        }
        ExportState base_x = apply_export({}, base, base_sel, true, base_destination);
        sel = apply_update(base_sel, r);
        x = apply_export(base_x, r, sel, false, resolve_destination(project, r, "telemetry"));
    } else if (op == "release" || op == "end") {
        // The lease or session is over: archive what the agent holds (the server's own events
        // still queued for it first), close its streams, and stop capture (a reused browser
        // starts its next lease from the pool's configuration).
        flush_posted(sid);
        if (op == "end") {
            // Connections still open close once the instance is gone: their disconnects are
            // archived without it.
            std::scoped_lock lock(live_mutex_, relays_mutex_);
            auto live = live_.find(sid);
            bool open = std::any_of(relays_.begin(), relays_.end(), [&](const auto &r) { return r.second.sid == sid; });
            if (live != live_.end() && open)
                ended_[sid] = {live->second.project, live->second.selection,
                               std::chrono::steady_clock::now() + std::chrono::seconds(30)};
        }
        pull(sid);
        // What was pulled last is on its way to the collector; the session no longer binds its
        // destination (a destination can be deleted once no live session exports to it).
        sql("UPDATE telemetry_sessions SET export_destination = NULL WHERE session_id = ?", {sid});
        instance_call(sid, "PUT", "/telemetry/config", json{{"telemetry", nullptr}, {"end_streams", true}}.dump(),
                      5000);
        std::lock_guard lock(live_mutex_);
        live_.erase(sid);
        return json::object();
    } else {
        throw Error::invalid("op", "unknown telemetry operation");
    }
    apply(sid, project, sel, x, baseline);
    return {{"telemetry", render(sel, x)}};
}

ExportState TelemetryPlugin::current_export(const std::string &sid) const {
    auto rows = sql("SELECT export_destination, storage FROM telemetry_sessions WHERE session_id = ?", {sid});
    ExportState x;
    if (rows.empty()) return x;
    if (rows[0]["export_destination"].is_string()) x.destination = rows[0]["export_destination"].get<std::string>();
    x.storage = rows[0].value("storage", std::int64_t{1}) != 0;
    return x;
}

std::string TelemetryPlugin::resolve_destination(const std::string &project, const ConfigRequest &r,
                                                 const std::string &field) {
    if (!r.otlp || !r.otlp->names_destination()) return {};
    const bool by_id = !r.otlp->destination_id.empty();
    const std::string key = by_id ? r.otlp->destination_id : r.otlp->destination_name;
    // Destinations are the organisation's: a browser or pool of any of its projects selects them.
    auto org = sql("SELECT org_id FROM projects WHERE id = ?", {project});
    const std::string org_id = org.empty() ? std::string() : org[0].value("org_id", "");
    json rows = by_id ? sql("SELECT id FROM telemetry_destinations WHERE org_id = ? AND id = ?", {org_id, key})
                      : destinations_named(org_id, key);
    if (rows.empty())
        throw Error::invalid(field + ".export.otlp.destination." + (by_id ? "id" : "name"),
                             "no telemetry destination \"" + key + "\" in this organisation");
    return rows[0]["id"].get<std::string>();
}

Selection TelemetryPlugin::current(const std::string &sid) const {
    auto rows = sql("SELECT config FROM telemetry_sessions WHERE session_id = ?", {sid});
    if (rows.empty() || !rows[0]["config"].is_string()) return {};
    return selection_from_json(json::parse(rows[0]["config"].get<std::string>()));
}

void TelemetryPlugin::apply(const std::string &sid, const std::string &project, const Selection &sel,
                            const ExportState &x, const json &baseline) {
    json rendered = render(sel, x);
    json cfg = rendered.is_null() ? json(nullptr) : json(rendered.dump());
    json base = baseline.is_null() ? json(nullptr) : json(baseline.dump());
    // A reused pooled browser keeps its session id: the row is replaced, its seq goes on.
    sql("INSERT INTO telemetry_sessions (session_id, project_id, config, baseline, export_destination, storage, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET project_id = excluded.project_id, config = excluded.config, "
        "baseline = excluded.baseline, export_destination = excluded.export_destination, storage = excluded.storage, "
        "updated_at = excluded.updated_at",
        {sid, project, cfg, base, x.destination.empty() ? json(nullptr) : json(x.destination), x.storage ? 1 : 0,
         hangar::now_ms()});
    {
        std::lock_guard lock(live_mutex_);
        live_[sid] = Live{project, sel};
    }
    // Telemetry never breaks a session: an agent that does not take it is logged, not an error.
    auto r = instance_call(sid, "PUT", "/telemetry/config", json{{"telemetry", rendered}}.dump(), 5000);
    if (r.status != 200) warn("browser session " + sid + ": telemetry not configured in the instance: " + r.body);
}

// `control`: a per-browser API request the host answered (its hook, after the response went
// out). operation_id is the route's words in camelCase, as Kernel's in-VM API names them
// (/browsers/{id}/process/exec → processExec).
void TelemetryPlugin::api_call(const json &in) {
    const std::string sid = in.value("session_id", "");
    const std::string path = in.value("path", "");
    int status = in.value("status", 0);
    // A call sent straight to the browser's base_url is Kernel's in-VM API call (0.131's
    // `platform` category); one through /browsers/{id}/... is an API call (`control`).
    const bool in_vm = in.value("direct_vm", false);
    const char *category = in_vm ? "platform" : "control";
    {
        std::lock_guard lock(live_mutex_);
        auto it = live_.find(sid);
        const json caller = in.value("caller", json::object());
        if (it == live_.end() || !it->second.selection.count(category) ||
            caller.value("project_id", "") != it->second.project)
            return;
    }
    // Reading telemetry is not an action on the browser; refused calls never reached it.
    if (path.find("/telemetry/") != std::string::npos || status == 401 || status == 403 || status == 404) return;
    std::string rest = path.substr(std::min(path.size(), path.find('/', std::string("/browsers/").size())));
    std::string operation;
    std::size_t start = 0;
    while (start < rest.size()) {
        auto end = rest.find('/', start);
        std::string seg = rest.substr(start, end == std::string::npos ? std::string::npos : end - start);
        start = end == std::string::npos ? rest.size() : end + 1;
        if (seg.empty() || seg.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos) continue;
        bool upper = !operation.empty();
        for (char c : seg) {
            if (c == '_') {
                upper = true;
                continue;
            }
            operation += upper ? static_cast<char>(c - 'a' + 'A') : c;
            upper = false;
        }
    }
    if (operation.empty()) operation = "browser";
    json data = {{"duration_ms", in.value("duration_ms", 0)}, {"operation_id", operation},
                 {"request_id", in.value("request_id", "")},  {"status", status},
                 {"method", in.value("method", "")},          {"route", path}};
    post(sid, make_event(category, in_vm ? "platform_api_call" : "api_call", now_us(), "kernel_api", {}, data));
}

void TelemetryPlugin::pull(const std::string &sid) {
    std::lock_guard lock(pull_mutex_);
    auto rows = sql("SELECT project_id, archived_seq, export_destination, storage FROM telemetry_sessions "
                    "WHERE session_id = ?",
                    {sid});
    if (rows.empty()) return;
    std::string project = rows[0]["project_id"].get<std::string>();
    std::int64_t after = rows[0]["archived_seq"].get<std::int64_t>();
    const std::string destination =
        rows[0]["export_destination"].is_string() ? rows[0]["export_destination"].get<std::string>() : "";
    const bool storage = rows[0].value("storage", std::int64_t{1}) != 0;
    for (int round = 0; round < 50; ++round) {
        auto r = instance_call(
            sid, "GET", "/telemetry/batch?after=" + std::to_string(after) + "&limit=" + std::to_string(kPullLimit), {},
            5000);
        if (r.status != 200) return;
        json batch = json::parse(r.body, nullptr, false);
        if (!batch.is_object() || !batch["events"].is_array() || batch["events"].empty()) return;
        const json &evs = batch["events"];
        std::set<std::string> cats;
        std::int64_t first_ts = std::numeric_limits<std::int64_t>::max(), last_ts = 0;
        for (const auto &e : evs) {
            cats.insert(e["event"].value("category", ""));
            std::int64_t ts = e["event"].value("ts", std::int64_t{0});
            first_ts = std::min(first_ts, ts);
            last_ts = std::max(last_ts, ts);
        }
        std::int64_t first = evs.front()["seq"].get<std::int64_t>(), last = evs.back()["seq"].get<std::int64_t>();
        // Queued for the collector before the archive commits: a queue never waits on the network.
        if (!destination.empty()) exporter_->enqueue(destination, sid, project, evs);
        if (storage)
            sql("INSERT INTO telemetry_batches (session_id, project_id, first_seq, last_seq, first_ts, last_ts, "
                "categories, events) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                {sid, project, first, last, first_ts, last_ts, category_mask(cats), evs.dump()});
        sql("UPDATE telemetry_sessions SET archived_seq = ? WHERE session_id = ?", {last, sid});
        after = last;
        if (evs.size() < kPullLimit) return;
    }
}

void TelemetryPlugin::pull_all() {
    std::vector<Late> late;
    {
        std::lock_guard lock(relays_mutex_);
        late.swap(late_);
    }
    for (auto &l : late)
        try {
            archive_direct(l.sid, l.project, std::move(l.event));
        } catch (const std::exception &e) {
            warn("telemetry of browser session " + l.sid +
                 ": a disconnect after its end was not archived: " + e.what());
        }
    std::vector<std::string> ids;
    {
        std::lock_guard lock(live_mutex_);
        for (const auto &[id, _] : live_)
            ids.push_back(id);
    }
    for (const auto &id : ids) {
        try {
            pull(id);
        } catch (const std::exception &e) {
            warn("telemetry of browser session " + id + " not archived: " + e.what());
        }
    }
}

// ---- OTLP destinations -------------------------------------------------------------------------

namespace {
// Destinations are the organisation's: every route acts in the caller's org.
std::string caller_org(const Request &req) {
    std::string org = req.caller().value("org_id", "");
    if (org.empty()) throw Error::unauthorized("no organisation for this caller");
    return org;
}

// Kernel: writes need an org-wide credential (a project-scoped key may list and read, to select).
std::string require_org_wide(const Request &req) {
    if (req.caller().value("project_scoped", false))
        throw Error::forbidden("telemetry destinations are changed with an org-wide API key: a project-scoped key can "
                               "only list and read them");
    return caller_org(req);
}

json optional_time(const json &ms) {
    return ms.is_number() ? json(hangar::rfc3339(ms.get<std::int64_t>())) : json(nullptr);
}
} // namespace

// 409 while a managed-auth connection of the organisation selects the destination (its next login
// would fail to find it): any selection blocks a delete, a selection by name blocks a rename.
void TelemetryPlugin::refuse_if_selected(const std::string &org, const json &row, bool renaming) const {
    json found;
    try {
        found = call("managed_auth.selects_destination",
                     {{"org_id", org}, {"id", row["id"]}, {"name", row["name"]}})["connections"];
    } catch (const Error &e) {
        if (hangar::service_missing(e)) return; // no managed_auth plugin: no connection can select it
        throw;
    }
    std::vector<std::string> ids;
    for (const auto &c : found)
        if (!renaming || c.value("by", "") == "name") ids.push_back(c.value("id", ""));
    if (ids.empty()) return;
    std::string list;
    for (const auto &id : ids)
        list += (list.empty() ? "" : ", ") + id;
    throw Error::conflict(std::string(renaming ? "managed-auth connections select this telemetry destination by name ("
                                               : "managed-auth connections select this telemetry destination (") +
                          list + "): change their browser.telemetry.export.otlp.destination first");
}

json TelemetryPlugin::render_destination(const json &row) const {
    json headers = json::object();
    // Values are write-only: the names show what is configured, never what it is.
    for (const auto &name : json::parse(row.value("header_names", std::string("[]")), nullptr, false))
        if (name.is_string()) headers[name.get<std::string>()] = "";
    json out = {{"id", row["id"]},
                {"name", row["name"]},
                {"endpoint", row["endpoint"]},
                {"headers", headers},
                {"consecutive_failures", row.value("consecutive_failures", std::int64_t{0})},
                {"created_at", hangar::rfc3339(row["created_at"].get<std::int64_t>())},
                {"updated_at", hangar::rfc3339(row["updated_at"].get<std::int64_t>())}};
    if (row["description"].is_string()) out["description"] = row["description"];
    for (const char *k : {"last_export_at", "last_error_at"})
        if (row[k].is_number()) out[k] = optional_time(row[k]);
    if (row["last_error"].is_string()) out["last_error"] = row["last_error"];
    return out;
}

json TelemetryPlugin::destination_row(const Request &req) const {
    const std::string org = caller_org(req), key = req.param("id_or_name");
    json rows = sql("SELECT * FROM telemetry_destinations WHERE org_id = ? AND id = ?", {org, key});
    if (rows.empty()) rows = destinations_named(org, key);
    if (rows.empty()) throw Error::not_found("telemetry destination not found");
    return rows[0];
}

json TelemetryPlugin::destinations_named(const std::string &org, const std::string &name,
                                         const std::string &except_id) const {
    return sql("SELECT * FROM telemetry_destinations WHERE org_id = ? AND name_key = ? AND id <> ? "
               "ORDER BY created_at, id",
               {org, hangar::fold_name(name), except_id});
}

void TelemetryPlugin::fill_name_keys() {
    for (const auto &row : sql("SELECT id, name FROM telemetry_destinations WHERE name_key IS NULL", json::array()))
        sql("UPDATE telemetry_destinations SET name_key = ? WHERE id = ?",
            {hangar::fold_name(row["name"].get<std::string>()), row["id"]});
    // The store holds two names that fold alike only if they were made before the key existed
    // (accents apart): the code refuses new ones either way, the index makes it a rule.
    try {
        sql("CREATE UNIQUE INDEX IF NOT EXISTS telemetry_destinations_org_key ON telemetry_destinations "
            "(org_id, name_key)",
            json::array());
    } catch (const std::exception &e) {
        warn(std::string("telemetry destinations: two names differ only in accents; no unique index on the "
                         "folded name until one is renamed: ") +
             e.what());
    }
}

void TelemetryPlugin::check_reachable(const std::string &endpoint, const std::string &field) const {
    // Checked now for a clear 400; checked again (resolved once, pinned) on every export.
    auto scheme_end = endpoint.find("://");
    std::string authority = endpoint.substr(scheme_end + 3);
    authority = authority.substr(0, authority.find('/'));
    std::string host = authority;
    std::uint16_t port = endpoint.starts_with("https") ? 443 : 80;
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        if (close + 1 < host.size()) port = static_cast<std::uint16_t>(std::stoi(host.substr(close + 2)));
        host = host.substr(1, close - 1);
    } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
        port = static_cast<std::uint16_t>(std::stoi(host.substr(colon + 1)));
        host = host.substr(0, colon);
    }
    try {
        hangar::egress::resolve(host, port, fetch_policy_);
    } catch (const hangar::egress::Refused &e) {
        throw Error::invalid(field, std::string("must resolve to an address this server may send to: ") + e.what());
    } catch (const hangar::egress::ResolveError &e) {
        throw Error::invalid(field, std::string("does not resolve: ") + e.what());
    }
}

std::optional<Exporter::Target> TelemetryPlugin::export_target(const std::string &id) const {
    auto rows = sql("SELECT endpoint, headers_sealed FROM telemetry_destinations WHERE id = ?", {id});
    if (rows.empty()) return std::nullopt;
    Exporter::Target t;
    t.url = otlp::logs_url(rows[0]["endpoint"].get<std::string>());
    if (rows[0]["headers_sealed"].is_string()) {
        json h = json::parse(secrets_->open(rows[0]["headers_sealed"].get<std::string>()), nullptr, false);
        if (h.is_object())
            for (const auto &[k, v] : h.items())
                if (v.is_string()) t.headers[k] = v.get<std::string>();
    }
    return t;
}

void TelemetryPlugin::export_outcome(const std::string &id, bool ok, const std::string &error_class) {
    try {
        if (ok)
            sql("UPDATE telemetry_destinations SET consecutive_failures = 0, last_export_at = ? WHERE id = ?",
                {hangar::now_ms(), id});
        else
            sql("UPDATE telemetry_destinations SET consecutive_failures = consecutive_failures + 1, last_error = ?, "
                "last_error_at = ? WHERE id = ?",
                {error_class, hangar::now_ms(), id});
    } catch (const std::exception &e) {
        warn(std::string("telemetry destination status not recorded: ") + e.what());
    }
}

void TelemetryPlugin::destinations_routes() {
    route("GET", "/telemetry/destinations", [this](Request &req, Response &res) {
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v, 20, 100);
        v.throw_if_failed("invalid telemetry destinations query");
        std::string where = " WHERE org_id = ?";
        json params = json::array({caller_org(req)});
        if (auto name = req.query("name"); name && !name->empty()) {
            where += " AND name_key = ?";
            params.push_back(hangar::fold_name(*name));
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (id = ? OR name_key LIKE ? OR LOWER(endpoint) LIKE ?)";
            std::string like = "%";
            for (char c : *q)
                like += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            like += "%";
            params.push_back(*q);
            params.push_back("%" + hangar::fold_name(*q) + "%");
            params.push_back(like);
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM telemetry_destinations" + where + " ORDER BY created_at, id", params, paging,
            [this](const json &row) { return render_destination(row); });
    });
    route("POST", "/telemetry/destinations", [this](Request &req, Response &res) {
        const std::string org = require_org_wide(req);
        json body = req.json_body();
        for (const auto &[k, _] : body.items())
            if (k != "name" && k != "endpoint" && k != "description" && k != "headers")
                throw Error::invalid(k, "is not a telemetry destination field");
        if (!body.contains("name")) throw Error::invalid("name", "is required");
        if (!body.contains("endpoint")) throw Error::invalid("endpoint", "is required");
        const std::string name = otlp::check_name(body["name"], "name");
        const std::string endpoint = otlp::check_endpoint(body["endpoint"], "endpoint");
        json description = body.value("description", json());
        if (!description.is_null() && !description.is_string()) throw Error::invalid("description", "must be a string");
        otlp::Headers headers = otlp::merge_headers({}, body.value("headers", json()), "headers", false);
        check_reachable(endpoint, "endpoint");
        if (!destinations_named(org, name).empty())
            throw Error::conflict("a telemetry destination named \"" + name +
                                  "\" already exists (names are compared ignoring case and accents)");
        json names = json::array();
        for (const auto &[k, _] : headers)
            names.push_back(k);
        const std::string id = hangar::new_id();
        const auto now = hangar::now_ms();
        sql("INSERT INTO telemetry_destinations (id, org_id, name, name_key, endpoint, description, header_names, "
            "headers_sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            {id, org, name, hangar::fold_name(name), endpoint, description, names.dump(),
             secrets_->seal(json(headers).dump()), now, now});
        res.json(render_destination(sql("SELECT * FROM telemetry_destinations WHERE id = ?", {id})[0]));
    });
    route("GET", "/telemetry/destinations/{id_or_name}",
          [this](Request &req, Response &res) { res.json(render_destination(destination_row(req))); });
    route("PATCH", "/telemetry/destinations/{id_or_name}", [this](Request &req, Response &res) {
        const std::string org = require_org_wide(req);
        json row = destination_row(req);
        json body = req.json_body();
        for (const auto &[k, _] : body.items())
            if (k != "name" && k != "endpoint" && k != "description" && k != "headers")
                throw Error::invalid(k, "is not a telemetry destination field");
        const std::string id = row["id"].get<std::string>();
        std::string name = row["name"].get<std::string>(), endpoint = row["endpoint"].get<std::string>();
        json description = row["description"];
        if (body.contains("name") && !body["name"].is_null()) name = otlp::check_name(body["name"], "name");
        if (body.contains("endpoint") && !body["endpoint"].is_null()) {
            endpoint = otlp::check_endpoint(body["endpoint"], "endpoint");
            check_reachable(endpoint, "endpoint");
        }
        if (body.contains("description")) {
            if (!body["description"].is_null() && !body["description"].is_string())
                throw Error::invalid("description", "must be a string");
            description = body["description"];
        }
        otlp::Headers headers;
        if (auto t = export_target(id)) headers = t->headers;
        headers = otlp::merge_headers(headers, body.value("headers", json()), "headers", true);
        if (!destinations_named(org, name, id).empty())
            throw Error::conflict("a telemetry destination named \"" + name +
                                  "\" already exists (names are compared ignoring case and accents)");
        if (hangar::fold_name(name) != hangar::fold_name(row["name"].get<std::string>()))
            refuse_if_selected(org, row, true);
        json names = json::array();
        for (const auto &[k, _] : headers)
            names.push_back(k);
        // Exporting sessions read the destination before each request: the new headers (the
        // credential-rotation path) and endpoint apply without a restart.
        sql("UPDATE telemetry_destinations SET name = ?, name_key = ?, endpoint = ?, description = ?, "
            "header_names = ?, headers_sealed = ?, updated_at = ? WHERE id = ?",
            {name, hangar::fold_name(name), endpoint, description, names.dump(), secrets_->seal(json(headers).dump()),
             hangar::now_ms(), id});
        res.json(render_destination(sql("SELECT * FROM telemetry_destinations WHERE id = ?", {id})[0]));
    });
    route("DELETE", "/telemetry/destinations/{id_or_name}", [this](Request &req, Response &res) {
        const std::string org = require_org_wide(req);
        json row = destination_row(req);
        const std::string id = row["id"].get<std::string>();
        if (!sql("SELECT session_id FROM telemetry_sessions WHERE export_destination = ? LIMIT 1", {id}).empty())
            throw Error::conflict("browser sessions export to this telemetry destination: stop their export "
                                  "(telemetry.export.otlp.enabled: false) or end them first");
        refuse_if_selected(org, row, false);
        sql("DELETE FROM telemetry_destinations WHERE id = ?", {id});
        exporter_->forget(id);
        res.no_content();
    });
}

void TelemetryPlugin::reap() {
    sql("DELETE FROM telemetry_batches WHERE last_ts < ?", {now_us() - retention_us_});
}

void TelemetryPlugin::events(Request &req, Response &res) {
    json session =
        call("browsers.session", {{"project_id", req.project()}, {"id", req.param("id")}, {"include_deleted", true}});
    const std::string sid = session.value("session_id", "");
    hangar::Validation v;
    std::set<std::string> wanted, wanted_types;
    parse_event_filter(hangar::query_pairs(req.query_string()), v, &wanted, wanted_types);
    std::string order = req.query("order").value_or("asc");
    if (order.empty()) order = "asc";
    if (order != "asc" && order != "desc") v.fail("order", "must be asc or desc");
    auto since_text = req.query("since");
    if (order == "desc" && since_text && !since_text->empty())
        v.fail("since", "cannot be combined with order=desc (use until)");
    std::int64_t now = now_us();
    std::optional<std::int64_t> since, until;
    if (since_text && !since_text->empty()) {
        since = parse_time_bound(*since_text, now);
        if (!since) v.fail("since", "must be an RFC 3339 time or a duration such as 5m");
    }
    if (auto u = req.query("until"); u && !u->empty()) {
        until = parse_time_bound(*u, now);
        if (!until) v.fail("until", "must be an RFC 3339 time or a duration such as 5m");
    }
    auto paging = hangar::parse_paging(req, v, kDefaultPage, kMaxPage);
    v.throw_if_failed("invalid telemetry query");
    auto offset_text = req.query("offset");
    bool cursor = offset_text && !offset_text->empty() && !(order == "desc" && paging.offset == 0);
    if (!cursor && order == "asc" && !since) since = now - kDefaultSinceUs;
    if (cursor) since.reset(); // the offset is the cursor; since only places the first page

    if (!session.value("ended", false)) {
        try {
            pull(sid); // the newest second is not archived yet otherwise
        } catch (const std::exception &) {
            // the archive answers with what it has
        }
    }
    const bool asc = order == "asc";
    std::int64_t mask = wanted.empty() ? ~std::int64_t{0} : category_mask(wanted);
    std::string where = " WHERE session_id = ? AND (categories & ?) <> 0";
    json params = json::array({sid, mask});
    if (since) {
        where += " AND last_ts >= ?";
        params.push_back(*since);
    }
    if (until) {
        where += " AND first_ts < ?";
        params.push_back(*until);
    }
    if (cursor) {
        where += asc ? " AND last_seq >= ?" : " AND first_seq < ?";
        params.push_back(paging.offset);
    }
    const auto limit = static_cast<std::size_t>(paging.limit);
    const std::int64_t lowest = since.value_or(std::numeric_limits<std::int64_t>::min()),
                       highest = until.value_or(std::numeric_limits<std::int64_t>::max());
    json items = json::array();
    std::optional<std::int64_t> next;
    constexpr int kRowsPerRead = 32;
    for (int read = 0; !next; ++read) {
        json p = params;
        p.push_back(kRowsPerRead);
        p.push_back(read * kRowsPerRead);
        json rows = sql("SELECT events FROM telemetry_batches" + where + " ORDER BY first_seq " +
                            (asc ? "ASC" : "DESC") + " LIMIT ? OFFSET ?",
                        p);
        for (const auto &row : rows) {
            json evs = json::parse(row["events"].get<std::string>(), nullptr, false);
            if (!evs.is_array()) continue;
            if (!asc) std::reverse(evs.begin(), evs.end());
            for (auto &e : evs) {
                std::int64_t seq = e["seq"].get<std::int64_t>();
                std::int64_t ts = e["event"].value("ts", std::int64_t{0});
                if (cursor && (asc ? seq < paging.offset : seq >= paging.offset)) continue;
                if (ts < lowest || ts >= highest) continue;
                if (!wanted.empty() && !wanted.count(e["event"].value("category", ""))) continue;
                if (!wanted_types.empty() && !wanted_types.count(e["event"].value("type", ""))) continue;
                if (items.size() == limit) {
                    // One more exists: the next page starts at it (asc) or below the last (desc).
                    next = asc ? seq : items.back()["seq"].get<std::int64_t>();
                    break;
                }
                items.push_back(std::move(e));
            }
            if (next) break;
        }
        if (rows.size() < static_cast<std::size_t>(kRowsPerRead)) break;
    }
    res.header("X-Has-More", next ? "true" : "false");
    res.header("X-Next-Offset", std::to_string(next.value_or(0)));
    res.json(items);
}

namespace {
std::string read_text(const std::string &path) {
    std::ifstream in(path);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string status_field(const std::string &status, const std::string &key) {
    auto at = status.find("\n" + key + ":");
    if (at == std::string::npos) return {};
    at += key.size() + 2;
    auto end = status.find('\n', at);
    std::string v = status.substr(at, end == std::string::npos ? std::string::npos : end - at);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
}
} // namespace

// `system_oom_kill`, watched by the server: the sandbox mounts no /sys, so the instance cannot
// read its own cgroup. Each poll reads the oom_kill counter of every capturing session's memory
// cgroup (memory.events on v2, memory.oom_control on v1) and its process list; a kill is
// described from the kernel log when the server may read it, else by the largest process of the
// poll before that is gone.
void TelemetryPlugin::watch_oom() {
    std::set<std::string> ids;
    {
        std::lock_guard lock(live_mutex_);
        for (const auto &[id, l] : live_)
            if (l.selection.count("system")) ids.insert(id);
    }
    std::lock_guard lock(oom_mutex_);
    if (kmsg_) {
        char buf[8192];
        while (true) {
            ssize_t n = ::read(kmsg_.get(), buf, sizeof buf);
            if (n < 0 && (errno == EPIPE || errno == EINTR)) continue; // overwritten records: go on
            if (n <= 0) break;
            parse_kernel_oom_line(std::string_view(buf, static_cast<std::size_t>(n)), kernel_kills_);
        }
        while (kernel_kills_.size() > 64)
            kernel_kills_.erase(kernel_kills_.begin());
    }
    std::erase_if(oom_, [&](const auto &kv) { return !ids.count(kv.first); });
    for (const auto &sid : ids) {
        auto cg = instance_cgroup(sid);
        if (!cg) continue;
        const std::string dir = cg->value("path", "");
        auto count =
            oom_kill_count(read_text(dir + (cg->value("version", 1) == 2 ? "/memory.events" : "/memory.oom_control")));
        if (!count) continue;
        std::map<long, Proc> procs;
        std::istringstream pids(read_text(dir + "/cgroup.procs"));
        for (long host_pid = 0; pids >> host_pid;) {
            std::string status = read_text("/proc/" + std::to_string(host_pid) + "/status");
            if (status.empty()) continue;
            Proc p;
            p.name = status_field("\n" + status, "Name");
            std::string ns = status_field(status, "NSpid");
            auto last = ns.find_last_of(" \t");
            p.pid = std::atol((last == std::string::npos ? ns : ns.substr(last + 1)).c_str());
            if (p.pid == 0) p.pid = host_pid;
            p.rss_kb = std::atol(status_field(status, "VmRSS").c_str());
            procs.emplace(host_pid, std::move(p));
        }
        auto [it, fresh] = oom_.try_emplace(sid);
        OomWatch &w = it->second;
        if (fresh) w.kills = *count; // kills before capture began are not this session's events
        if (*count > w.kills) {
            w.pending += *count - w.kills;
            w.candidates = w.procs;
        }
        w.kills = *count;
        if (w.pending > 0) {
            // Top tasks: the largest processes before the kill (what the OOM killer chose among).
            std::vector<Proc> by_rss;
            for (const auto &[_, p] : w.candidates)
                by_rss.push_back(p);
            std::sort(by_rss.begin(), by_rss.end(), [](const Proc &a, const Proc &b) { return a.rss_kb > b.rss_kb; });
            json top = json::array();
            for (std::size_t i = 0; i < by_rss.size() && i < 5; ++i)
                top.push_back({{"name", by_rss[i].name}, {"pid", by_rss[i].pid}, {"rss_kb", by_rss[i].rss_kb}});
            auto report = [&](long pid, std::string name, long rss_kb, const std::string &constraint) {
                if (name.size() > 15) name.resize(15);
                json data = {{"pid", pid}, {"process_name", name}, {"rss_kb", rss_kb}, {"constraint", constraint}};
                if (!top.empty()) data["top_tasks"] = top;
                emit_oom(sid, data);
                --w.pending;
            };
            for (auto k = kernel_kills_.begin(); k != kernel_kills_.end() && w.pending > 0;) {
                const auto &kill = k->second;
                if (kill.rss_kb < 0 || !kill.task_memcg.ends_with("/" + sid)) {
                    ++k;
                    continue;
                }
                auto seen = w.candidates.find(kill.pid);
                report(seen != w.candidates.end() ? seen->second.pid : kill.pid, kill.name,
                       kill.rss_kb > 0 || seen == w.candidates.end() ? kill.rss_kb : seen->second.rss_kb,
                       kill.constraint.empty() ? "memcg" : kill.constraint);
                k = kernel_kills_.erase(k);
            }
            if (w.pending > 0 && !fresh && w.pending_polls++ > 0) {
                // No kernel record: the largest processes that are gone, then unnamed ones.
                for (const auto &p : by_rss) {
                    if (w.pending == 0) break;
                    bool gone = std::none_of(procs.begin(), procs.end(),
                                             [&](const auto &kv) { return kv.second.pid == p.pid; });
                    if (gone) report(p.pid, p.name, p.rss_kb, "memcg");
                }
                while (w.pending > 0)
                    report(0, "unknown", 0, "memcg");
            }
            if (w.pending == 0) w.pending_polls = 0;
        }
        w.procs = std::move(procs);
    }
}

void TelemetryPlugin::emit_oom(const std::string &sid, const json &data) {
    post(sid, make_event("system", "system_oom_kill", now_us(), "local_process", "memory_cgroup", data));
}

// ================================ instance half ==================================================

void TelemetryPlugin::start_instance() {
    ring_ =
        std::make_unique<Ring>(static_cast<std::size_t>(std::max<std::int64_t>(16, config_int("ring_size", 10000))));
    CollectorSettings settings;
    settings.screenshot_interval_ms =
        static_cast<int>(std::clamp<std::int64_t>(config_int("screenshot_interval_ms", 5000), 200, 3600000));
    settings.tunnel_failure = [this](const std::string &host, int port) -> std::string {
        try {
            return call("proxies.recent_failure", {{"host", host}, {"port", port}}).value("code", "");
        } catch (const std::exception &) {
            return ""; // no proxies plugin, or no forwarder in this instance
        }
    };
    collector_ = std::make_unique<Collector>([this](json e) { emit(std::move(e)); },
                                             [this] {
                                                 auto endpoint = hangar::cdp::endpoint_of(
                                                     call("browsers.chromium", json::object()));
                                                 if (!endpoint) throw std::runtime_error("Chromium is not running");
                                                 return std::pair<int, std::string>(endpoint->port, endpoint->ws_path);
                                             },
                                             std::move(settings));
    watcher_ = std::jthread([this](const std::stop_token &st) { watch_system(st); });

    route("PUT", "/telemetry/config", [this](Request &req, Response &res) {
        json body = req.json_body(false);
        Selection sel = selection_from_json(body.value("telemetry", json()));
        {
            std::lock_guard lock(ring_mutex_);
            selection_ = sel;
            if (body.value("end_streams", false)) ++stream_epoch_;
        }
        ring_cv_.notify_all();
        collector_->configure(sel);
        res.json({{"telemetry", render(sel)}});
    });
    // What this instance captures now: a restarted server asks, to take up an adopted session.
    route("GET", "/telemetry/config", [this](Request &, Response &res) {
        std::lock_guard lock(ring_mutex_);
        res.json({{"telemetry", render(selection_)}});
    });
    route("GET", "/telemetry/batch", [this](Request &req, Response &res) {
        auto number = [&](const char *k, std::uint64_t fallback) {
            auto s = req.query(k);
            return s && !s->empty() ? std::stoull(*s) : fallback;
        };
        std::uint64_t after = number("after", 0);
        std::lock_guard lock(ring_mutex_);
        ring_->ack(after); // the server holds everything up to here
        json out = json::array();
        for (auto &e : ring_->after(after, number("limit", kPullLimit)))
            out.push_back(std::move(e));
        res.json({{"events", out}, {"last_seq", ring_->last_seq()}});
    });
    // Events produced outside the agent's own collectors (the server's view of API calls).
    route("POST", "/telemetry/event", [this](Request &req, Response &res) {
        json body = req.json_body(false);
        if (body.contains("events") && body["events"].is_array()) {
            for (auto &e : body["events"])
                if (e.is_object()) emit(std::move(e));
            return res.no_content();
        }
        if (!body.contains("event") || !body["event"].is_object()) throw Error::invalid("event", "is required");
        emit(body["event"]);
        res.no_content();
    });
    route(
        "GET", "/telemetry/stream", [this](Request &q, Response &r) { stream(q, r); }, HANGAR_ROUTE_STREAMING);
}

void TelemetryPlugin::stop_instance() {
    stopping_ = true;
    ring_cv_.notify_all();
    collector_.reset();
    watcher_ = {};
    std::list<Stream> streams;
    {
        std::lock_guard lock(streams_mutex_);
        streams.swap(streams_);
    }
    for (auto &s : streams)
        s.thread.join();
}

void TelemetryPlugin::emit(json event) {
    std::string cat = event.value("category", "");
    {
        std::lock_guard lock(ring_mutex_);
        bool wanted = selection_.count(cat) > 0 || (cat == "monitor" && any_cdp(selection_));
        if (!wanted) return;
        ring_->push(std::move(event), now_us());
    }
    ring_cv_.notify_all();
}

void TelemetryPlugin::stream(Request &req, Response &res) {
    // 0.131's `type`: skipped events are not sent, but an id-only frame with the latest skipped
    // seq is, so a reconnect's Last-Event-ID resumes past them (see the sender below).
    hangar::Validation v;
    std::set<std::string> types;
    parse_event_filter(hangar::query_pairs(req.query_string()), v, nullptr, types);
    v.throw_if_failed();
    std::uint64_t after = 0;
    bool resume = false;
    if (auto id = req.header("Last-Event-ID"); id && !id->empty()) {
        try {
            after = std::stoull(*id);
            resume = true;
        } catch (const std::exception &) {
            throw Error::invalid("Last-Event-ID", "must be a sequence number");
        }
    }
    // A client that did not ask for an event stream (a plain GET) is relayed as a plain request,
    // which must end: it gets what is held now (per replay / Last-Event-ID), then the end.
    const bool follow = req.header("Accept").value_or("").find("text/event-stream") != std::string::npos;
    std::uint64_t epoch = 0;
    {
        std::lock_guard lock(ring_mutex_);
        // replay=all starts at the oldest event still held; otherwise only new events.
        if (!resume) after = req.query("replay").value_or("") == "all" ? 0 : ring_->last_seq();
        epoch = stream_epoch_;
    }
    std::shared_ptr<hangar::SseStream> sse = res.sse();
    std::lock_guard lock(streams_mutex_);
    streams_.remove_if([](Stream &s) {
        if (!s.done) return false;
        s.thread.join();
        return true;
    });
    auto &s = streams_.emplace_back();
    s.thread = std::thread([this, sse, after, epoch, follow, types = std::move(types), &done = s.done]() mutable {
        // Kernel's rhythm: the latest skipped seq goes out once 15 s passed without a frame
        // (while skipped events keep coming, or at the next keepalive), and when the stream ends.
        std::uint64_t skipped = 0; // not yet told; 0: nothing pending
        auto last_frame = std::chrono::steady_clock::now();
        bool ok = true;
        while (!stopping_ && ok) {
            std::vector<json> batch;
            {
                std::unique_lock lock(ring_mutex_);
                if (follow)
                    ring_cv_.wait_for(lock, std::chrono::seconds(1),
                                      [&] { return stopping_ || stream_epoch_ != epoch || ring_->last_seq() > after; });
                if (stream_epoch_ != epoch) break; // the session (or lease) ended
                batch = ring_->after(after, 500);
            }
            ok = sse->open();
            for (const auto &e : batch) {
                after = e["seq"].get<std::uint64_t>();
                if (!types.empty() && !types.count(e["event"].value("type", ""))) {
                    skipped = after;
                    continue;
                }
                if (!(ok = sse->send(e, after))) break;
                skipped = 0;
                last_frame = std::chrono::steady_clock::now();
            }
            if (ok && skipped && std::chrono::steady_clock::now() - last_frame >= std::chrono::seconds(15)) {
                ok = sse->send_id(skipped);
                skipped = 0;
                last_frame = std::chrono::steady_clock::now();
            }
            if (!follow && batch.size() < 500) break;
        }
        if (ok && skipped) sse->send_id(skipped);
        done = true;
    });
}

// `system`: Chromium found dead (a crash or an OOM kill) and the cgroup's OOM kill counter.
void TelemetryPlugin::watch_system(const std::stop_token &stop) {
    long last_pid = 0; // 0: none seen
    // A sleep that a stop interrupts: the agent's stop (and so every delete) waited out the rest
    // of a one-second sleep here.
    std::mutex pause_mutex;
    std::condition_variable_any pause;
    while (!stop.stop_requested()) {
        {
            std::unique_lock lock(pause_mutex);
            pause.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; });
            if (stop.stop_requested()) return;
        }
        {
            std::lock_guard lock(ring_mutex_);
            if (!selection_.count("system")) {
                last_pid = 0;
                continue;
            }
        }
        try {
            json s = call("browsers.chromium", json::object());
            if (s["pid"].is_number()) {
                last_pid = s["pid"].get<long>();
            } else if (last_pid != 0) {
                // A deliberate restart swaps the process under the runner's lock and is never seen
                // without one; no process at all means it died.
                emit(make_event("system", "service_crashed", now_us(), "local_process", {},
                                {{"service_name", "chromium"}, {"phase", "running"}, {"pid", last_pid}}));
                last_pid = 0;
            }
        } catch (const std::exception &) {
            // the browsers plugin is stopping
        }
    }
}

} // namespace

HANGAR_PLUGIN(TelemetryPlugin, "telemetry", "1.0.0", "browsers", kMigrations,
              sizeof(kMigrations) / sizeof(kMigrations[0]))
