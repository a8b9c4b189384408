// managed_auth: Kernel API §3.14 (auth connections, [69]-[77]) with the behaviour of
// kernel-behaviour.md §16, without an LLM: a deterministic flow engine (engine.cpp) drives a
// stealth browser that runs on the connection's profile.
//
// Server half: connections and their timeline in the store, one thread per running login flow,
// the SSE stream, the hosted login page and its handoff. Agent half (inside the auth browser's
// instance): page operations over CDP on the instance's own Chromium, which the server half calls
// through instance_call, so the server never dials a sandboxed DevTools port.
#include "engine.hpp"
#include "hosted_page.hpp"
#include "managed_auth_model.hpp"

#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/web.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using namespace managed_auth;
using namespace std::chrono_literals;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE managed_auth_connections (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    domain TEXT NOT NULL,
    profile_name TEXT NOT NULL,
    settings TEXT NOT NULL,
    status TEXT NOT NULL,
    flow TEXT,
    plan TEXT,
    post_login_url TEXT,
    last_auth_check_at BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX managed_auth_connections_key ON managed_auth_connections (project_id, domain, LOWER(profile_name));
CREATE INDEX managed_auth_connections_project ON managed_auth_connections (project_id, created_at);
CREATE TABLE managed_auth_timeline (
    id TEXT PRIMARY KEY,
    connection_id TEXT NOT NULL,
    type TEXT NOT NULL,
    status TEXT NOT NULL,
    step TEXT,
    data TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX managed_auth_timeline_connection ON managed_auth_timeline (connection_id, created_at);
)sql"},
    // The node whose memory holds the connection's latest flow (nodes of one store): requests
    // that need that flow are relayed there.
    {2, R"sql(
ALTER TABLE managed_auth_connections ADD COLUMN flow_node TEXT;
)sql"},
};

// ManagedAuth's flow fields: null until a flow ran (kernel-api.md §2.17).
constexpr const char *kFlowFields[] = {"browser_session_id",
                                       "choices",
                                       "discovered_fields",
                                       "error_code",
                                       "error_message",
                                       "external_action_message",
                                       "fields",
                                       "flow_expires_at",
                                       "flow_status",
                                       "flow_step",
                                       "flow_type",
                                       "hosted_url",
                                       "interaction_id",
                                       "live_view_url",
                                       "mfa_options",
                                       "pending_sso_buttons",
                                       "sign_in_options",
                                       "sso_provider",
                                       "website_error"};

bool terminal(const std::string &status) {
    return status == "SUCCESS" || status == "FAILED" || status == "EXPIRED" || status == "CANCELED";
}

std::string random_code() {
    std::random_device rd;
    std::string out;
    static constexpr char hex[] = "0123456789abcdef";
    for (int i = 0; i < 32; ++i)
        out.push_back(hex[rd() % 16]);
    return out;
}

json parse_or(const json &row, const char *column, json fallback) {
    auto it = row.find(column);
    if (it == row.end() || !it->is_string()) return fallback;
    json parsed = json::parse(it->get<std::string>(), nullptr, false);
    return parsed.is_discarded() ? fallback : parsed;
}

// One login or re-auth flow. `m` guards everything below it.
struct Flow {
    std::string id, connection_id, project, org, type, session_id, base_url;
    json caller;
    std::mutex m;
    std::condition_variable cv;
    json state = json::object();
    bool awaiting = false;
    std::string interaction_id; // of the current pause (0.131): a submit naming another is stale
    std::optional<Submit> input;
    std::string ended; // CANCELED or EXPIRED when ended from outside
    std::string ended_code, ended_message;
    std::int64_t expires_ms = 0, input_deadline_ms = 0;
    std::string handoff_code;
    bool handoff_used = false;
    bool recorded = false;                       // record_session: the replay ends with the browser
    bool skills = true;                          // skill_mode enabled: the learned plan is read and written
    std::int64_t started_ms = 0, browser_ms = 0; // login() called; its browser answered
    std::atomic<bool> done{false};
    std::jthread thread;
};

class ManagedAuthPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        flow_timeout_ms_ = config_int("flow_timeout_seconds", 1200) * 1000;
        input_timeout_ms_ = config_int("input_timeout_seconds", 600) * 1000;
        min_interval_ = static_cast<int>(config_int("min_health_check_interval", 300));
        headless_ = config_bool("headless", false);
        // Where this node's browsers run (the browsers plugin refuses any other region).
        node_region_ = config("node.region", "us-east");
        std::vector<std::string> bad;
        redirect_origins_ = hangar::web::origin_list(config("server.redirect_origins", ""), &bad);
        for (const auto &b : bad)
            warn("[server] redirect_origins: \"" + b + "\" is not an http(s) origin; ignored");
        // Flows do not survive a restart: whatever this node was running is over (another node's
        // flows are its own; those of a node that is gone end in expire_lost_flows).
        for (const auto &row : sql("SELECT id, flow FROM managed_auth_connections WHERE flow IS NOT NULL AND "
                                   "(flow_node IS NULL OR flow_node = ?)",
                                   {node_name()}))
            expire_flow(row);

        route("POST", "/auth/connections", [this](Request &q, Response &r) { create(q, r); });
        route("GET", "/auth/connections", [this](Request &q, Response &r) { list(q, r); });
        // With an API key, or with the flow JWT the hosted page got for a handoff code.
        route(
            "GET", "/auth/connections/{id}", [this](Request &q, Response &r) { r.json(render(authorize(q))); },
            HANGAR_ROUTE_OPTIONAL_AUTH);
        route("PATCH", "/auth/connections/{id}", [this](Request &q, Response &r) { update(q, r); });
        route("DELETE", "/auth/connections/{id}", [this](Request &q, Response &r) { remove(q, r); });
        route("POST", "/auth/connections/{id}/login", [this](Request &q, Response &r) { login(q, r); });
        route(
            "POST", "/auth/connections/{id}/submit", [this](Request &q, Response &r) { submit(q, r); },
            HANGAR_ROUTE_OPTIONAL_AUTH);
        // The handoff code is the credential here; no API key.
        route(
            "POST", "/auth/connections/{id}/exchange", [this](Request &q, Response &r) { exchange(q, r); },
            HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/auth/connections/{id}/hosted", [this](Request &q, Response &r) { hosted_page(q, r); },
            HANGAR_ROUTE_PUBLIC);
        route("GET", "/auth/connections/{id}/timeline", [this](Request &q, Response &r) { timeline(q, r); });
        route(
            "GET", "/auth/connections/{id}/events", [this](Request &q, Response &r) { events(q, r); },
            HANGAR_ROUTE_STREAMING);

        // For the org plugin's /org/limits (kernel-api-0131 §2.10): {org_id} →
        // {connections, min_health_check_interval_seconds}.
        // For the vaults plugin (kernel-api-0131 §1A, managed_auth credential items): a connection
        // by id, whatever its project → {id, project_id, domain, credential} (the credential
        // reference as stored: {name} of a saved credential, a provider's, or null). 404 if none.
        service("managed_auth.connection", [this](const json &in) {
            auto rows = sql("SELECT id, project_id, domain, settings FROM managed_auth_connections WHERE id = ?",
                            json::array({in.value("id", "")}));
            if (rows.empty()) throw Error::not_found("auth connection not found");
            json settings = parse_or(rows[0], "settings", json::object());
            return json{{"id", rows[0].at("id")},
                        {"project_id", rows[0].at("project_id")},
                        {"domain", rows[0].at("domain")},
                        {"credential", settings.value("credential", json())}};
        });
        // For the telemetry plugin (kernel-api-0131 §1E): {org_id, id, name} → {connections:
        // [{id, project_id, by: "id"|"name"}]}, the org's connections whose browser.telemetry
        // selects that OTLP destination (at most 10: enough to name them in a 409).
        service("managed_auth.selects_destination", [this](const json &in) {
            json out = json::array();
            const std::string id = in.value("id", ""), name = in.value("name", "");
            // The LIKE skips, without parsing, every connection that names no destination at all.
            for (const auto &row : sql("SELECT id, project_id, settings FROM managed_auth_connections WHERE org_id = ? "
                                       "AND settings LIKE ? ORDER BY created_at, id",
                                       {in.value("org_id", ""), "%\"destination\"%"})) {
                std::string by = destination_selection(parse_or(row, "settings", json::object()), id, name);
                if (by.empty()) continue;
                out.push_back({{"id", row.at("id")}, {"project_id", row.at("project_id")}, {"by", by}});
                if (out.size() == 10) break;
            }
            return json{{"connections", out}};
        });
        service("managed_auth.usage", [this](const json &in) {
            auto rows =
                sql("SELECT COUNT(*) AS n FROM managed_auth_connections WHERE org_id = ?", {in.value("org_id", "")});
            return json{{"connections", rows.empty() ? 0 : rows[0].value("n", 0)},
                        {"min_health_check_interval_seconds", min_interval_}};
        });

        every(1000, [this] { sweep(); });
    }

    // The hosted login page. Its success_url and error_url are followed by the page's script in
    // the user's browser, so one that is not an http(s) URL on this server or an origin the
    // operator allows is refused here, before any script runs.
    void hosted_page(Request &req, Response &res) const {
        for (const char *field : {"success_url", "error_url"})
            if (auto url = req.query(field); url && !url->empty())
                if (auto why = hangar::web::redirect_problem(*url, req.base_url(), redirect_origins_))
                    throw Error::invalid(field, *why);
        hangar::web::PagePolicy policy;
        // The live view of the auth browser; another node's when the flow runs there.
        policy.frame_src = "'self' http: https:";
        hangar::web::html(res, kHostedPage, policy);
    }

    // The sweep timer outlives stop_server() (the base class cancels timers afterwards), so
    // `stopping_` keeps it from starting a health check, and a running check from starting a
    // re-auth, while the flows are collected and joined. The check is joined first: a flow it
    // started after the collection would otherwise run on past the stop.
    void stop_server() override {
        stopping_ = true;
        if (health_thread_.joinable()) health_thread_.join();
        std::vector<std::shared_ptr<Flow>> all;
        {
            std::lock_guard lock(flows_mutex_);
            for (auto &[id, f] : flows_)
                all.push_back(f);
            for (auto &f : retired_)
                all.push_back(f);
        }
        for (auto &f : all)
            end_from_outside(*f, "CANCELED", "server_stopping", "the server is stopping");
        for (auto &f : all) {
            if (!f->thread.joinable()) continue;
            auto started = std::chrono::steady_clock::now();
            f->thread.join();
            // A flow holds the stop only as long as the page operation it is in (at most 30 s);
            // name the slow ones so a stop that runs long says what held it.
            auto held =
                std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started);
            if (held > 2s)
                warn("stopping: the login flow of auth connection " + f->connection_id + " took " +
                     std::to_string(held.count()) + " ms to end");
        }
        std::lock_guard lock(subs_mutex_);
        subs_.clear();
    }

    // ---- agent half: page operations over CDP -----------------------------------------------------

    void start_instance() override {
        route("POST", "/managed_auth/page", [this](Request &q, Response &r) { r.json(page_op(q.json_body())); });
    }

private:
    // One DevTools connection to the page, kept across operations (a flow makes dozens: every
    // settle poll is one) and opened again when Chromium moved or the socket broke.
    std::mutex page_mutex_;
    std::unique_ptr<hangar::cdp::Connection> page_conn_;
    int page_port_ = 0;

    json page_op(const json &body) {
        json s = call("browsers.chromium", json::object());
        if (!s.contains("port") || !s.at("port").is_number())
            throw Error(503, "unavailable", "Chromium is not running");
        int port = s.at("port").get<int>();
        std::lock_guard lock(page_mutex_);
        for (;;) {
            bool reused = page_conn_ && page_port_ == port;
            if (!reused) {
                page_conn_ = std::make_unique<hangar::cdp::Connection>(port, hangar::cdp::first_page_path(port), 5s);
                page_port_ = port;
            }
            try {
                return page_op_on(*page_conn_, body);
            } catch (const hangar::cdp::Failure &f) {
                page_conn_.reset(); // a late answer must not meet the next call
                // A kept socket that had closed (the page went away) failed before the command
                // ran: once more on a new one. A timeout may have run it: never twice.
                if (!reused || f.timed_out()) throw;
            }
        }
    }

    json page_op_on(hangar::cdp::Connection &c, const json &body) {
        std::string op = body.value("op", "");
        auto wait_loaded = [&] {
            auto deadline = hangar::cdp::Clock::now() + 15s;
            std::this_thread::sleep_for(100ms);
            while (hangar::cdp::Clock::now() < deadline) {
                try {
                    json r =
                        c.call("Runtime.evaluate", {{"expression", "document.readyState"}, {"returnByValue", true}});
                    if (r["result"].value("value", "") == "complete") return;
                } catch (const hangar::cdp::Failure &f) {
                    if (f.timed_out()) throw;
                }
                std::this_thread::sleep_for(100ms);
            }
        };
        auto evaluate = [&](const std::string &expression) {
            json r = c.call("Runtime.evaluate",
                            {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
            if (r.contains("exceptionDetails"))
                throw Error(422, "page_script_failed",
                            "the page script threw: " + r["exceptionDetails"].value("text", std::string("error")));
            return r["result"].value("value", json());
        };
        if (op == "navigate") {
            json r = c.call("Page.navigate", {{"url", body.value("url", "")}});
            if (r.contains("errorText")) throw Error(502, "navigation_failed", r.value("errorText", ""));
            wait_loaded();
            return json::object();
        }
        if (op == "reload") {
            c.call("Page.reload", json::object());
            wait_loaded();
            return json::object();
        }
        if (op == "eval") return {{"value", evaluate(body.value("expression", ""))}};
        if (op == "fill") {
            std::string sel = json(body.value("selector", "")).dump();
            json found = evaluate("(() => { const el = document.querySelector(" + sel +
                                  "); if (!el) return false; el.focus(); el.select && el.select(); el.value = ''; "
                                  "el.dispatchEvent(new Event('input', {bubbles: true})); return true; })()");
            if (!found.is_boolean() || !found.get<bool>())
                throw Error(404, "element_not_found", "no element matches " + body.value("selector", ""));
            c.call("Input.insertText", {{"text", body.value("value", "")}});
            evaluate("(() => { const el = document.querySelector(" + sel +
                     "); el && el.dispatchEvent(new Event('change', {bubbles: true})); return true; })()");
            return json::object();
        }
        throw Error::invalid("op", "must be navigate, reload, eval or fill");
    }

    // ---- store -------------------------------------------------------------------------------------

    std::optional<json> find(const std::string &project, const std::string &id) const {
        auto rows = sql("SELECT * FROM managed_auth_connections WHERE project_id = ? AND id = ?", {project, id});
        if (rows.empty()) return std::nullopt;
        return rows.front();
    }

    json require(const std::string &project, const std::string &id) const {
        if (auto row = find(project, id)) return *row;
        throw Error::not_found("auth connection \"" + id + "\" not found");
    }

    json render(const json &row) const {
        json s = parse_or(row, "settings", json::object());
        json plan = parse_or(row, "plan", json());
        json flow = parse_or(row, "flow", json::object());
        json out = {{"id", row.at("id")},
                    {"domain", row.at("domain")},
                    {"profile_name", row.at("profile_name")},
                    {"record_session", s.value("record_session", false)},
                    {"save_credentials", s.value("save_credentials", true)},
                    {"status", row.at("status")},
                    {"allowed_domains", s.value("allowed_domains", json::array())},
                    {"auto_reauth", s.value("auto_reauth", true)},
                    {"health_checks", s.value("health_checks", true)},
                    {"health_check_interval", s.value("health_check_interval", 3600)}};
        // 0.131's browser, and the deprecated fields that are parts of it under their old names.
        json browser = stored_browser(s);
        out["browser"] = render_browser(browser, node_region_);
        out["browser_telemetry"] = browser.value("telemetry", json());
        if (browser.value("proxy", json()).is_object() && browser["proxy"].contains("id"))
            out["proxy_id"] = browser["proxy"]["id"];
        if (s.value("login_url", "") != "") out["login_url"] = s.at("login_url");
        json credential = s.value("credential", json());
        if (credential.is_object()) out["credential"] = credential;
        Reauth r = reauth_status(credential, plan.is_object(), plan);
        out["can_reauth"] = r.can;
        out["can_reauth_reason"] = r.reason;
        bool has_post_login_url = row.value("post_login_url", json()).is_string();
        if (has_post_login_url) out["post_login_url"] = row.at("post_login_url");
        if (auto why = health_check_unavailable_reason(s.value("health_checks", true), has_post_login_url);
            !why.empty())
            out["health_check_unavailable_reason"] = why;
        if (row.value("last_auth_check_at", json()).is_number()) {
            out["last_auth_check_at"] = hangar::rfc3339(row.at("last_auth_check_at").get<std::int64_t>());
            out["last_auth_at"] = out["last_auth_check_at"];
        }
        for (const char *k : kFlowFields)
            out[k] = flow.value(k, json());
        return out;
    }

    json settings_json(const Settings &s, json base) const {
        if (s.login_url) base["login_url"] = *s.login_url;
        if (s.allowed_domains) base["allowed_domains"] = *s.allowed_domains;
        if (s.credential) base["credential"] = *s.credential;
        if (s.save_credentials) base["save_credentials"] = *s.save_credentials;
        if (s.health_checks) base["health_checks"] = *s.health_checks;
        if (s.health_check_interval) base["health_check_interval"] = *s.health_check_interval;
        if (s.auto_reauth) base["auto_reauth"] = *s.auto_reauth;
        if (s.record_session) base["record_session"] = *s.record_session;
        return base;
    }

    // The connection's browser config after a create or update: the request's `browser` (the
    // deprecated `proxy` and `browser_telemetry` folded in) over what it had. Kept in `browser`
    // only, so the old keys never disagree with it.
    json stored_with(const std::string &project, const Settings &s, json stored) const {
        json b = request_browser(project, s.browser, s.proxy);
        stored["browser"] = layer_browser(stored_browser(stored), b);
        stored.erase("proxy_id");
        stored.erase("browser_telemetry");
        return stored;
    }

    // A request's browser config, checked now rather than at the next login: its proxy resolved
    // (and the same as the deprecated `proxy`, when both are sent), its region one this node
    // serves, its telemetry one the telemetry plugin takes.
    json request_browser(const std::string &project, const std::optional<json> &browser,
                         const std::optional<json> &deprecated_proxy) const {
        json b = browser.value_or(json::object());
        std::optional<json> legacy, successor;
        if (deprecated_proxy) legacy = json{{"id", proxy_id_of(project, *deprecated_proxy)}};
        if (b.value("proxy", json()).is_object()) {
            const json &sel = b.at("proxy");
            successor = sel.contains("mode") ? json{{"mode", sel.at("mode")}} : json{{"id", proxy_id_of(project, sel)}};
        }
        if (auto proxy = supersede(legacy, "proxy", successor, "browser.proxy")) b["proxy"] = *proxy;
        if (b.value("region", json()).is_string() && b.at("region") != node_region_)
            throw Error::invalid("browser.region", "this Hangar node serves region " + node_region_ +
                                                       " only (its [node] region), not " +
                                                       b.at("region").get<std::string>() +
                                                       "; leave region out or ask for " + node_region_);
        if (b.value("telemetry", json()).is_object()) {
            try {
                call("telemetry.session",
                     {{"op", "check"}, {"request", b.at("telemetry")}, {"field", "browser.telemetry"}});
            } catch (const Error &e) {
                // Without the telemetry plugin, the login's browsers.create refuses telemetry (501).
                if (e.status() == 400) throw;
            }
        }
        return b;
    }

    // {id} or {name}, resolved to the id by the proxies plugin now (404 unknown, 400 ambiguous);
    // the connection keeps the id, so renaming the proxy later changes nothing.
    std::string proxy_id_of(const std::string &project, const json &proxy) const {
        return call("proxies.resolve", {{"project_id", project}, {"proxy", proxy}}).at("id").get<std::string>();
    }

    // An org credential provider's login named by path must be for the connection's domain (the
    // flow types it into that site's pages): refused now with the reason, when the provider can
    // tell. One it cannot reach now is checked again when a flow resolves the values.
    void check_credential(const json &caller, const json &credential, const std::string &domain) const {
        if (!credential.is_object() || !credential.contains("provider") || !credential.contains("path")) return;
        try {
            call("credentials.resolve", {{"project_id", caller.value("project_id", "")},
                                         {"org_id", caller.value("org_id", "")},
                                         {"credential", credential},
                                         {"domain", domain},
                                         {"check_only", true}});
        } catch (const Error &e) {
            if (e.status() >= 500) return;
            throw Error(e.status(), e.code(), "credential: " + std::string(e.what()), e.details());
        }
    }

    // ---- handlers ----------------------------------------------------------------------------------

    void create(Request &req, Response &res) {
        std::string project = req.project();
        json caller = req.caller();
        Settings s = parse_settings(req.json_body(false), true, min_interval_);
        json stored = settings_json(s, {{"login_url", ""},
                                        {"allowed_domains", json::array()},
                                        {"credential", nullptr},
                                        {"save_credentials", true},
                                        {"health_checks", true},
                                        {"health_check_interval", 3600},
                                        {"auto_reauth", true},
                                        {"record_session", false},
                                        {"browser", json::object()}});
        stored = stored_with(project, s, stored);
        check_credential(caller, stored.at("credential"), *s.domain);
        std::lock_guard lock(create_mutex_);
        if (!sql("SELECT id FROM managed_auth_connections WHERE project_id = ? AND domain = ? AND LOWER(profile_name) "
                 "= "
                 "LOWER(?)",
                 {project, *s.domain, *s.profile_name})
                 .empty())
            throw Error::conflict("an auth connection for profile \"" + *s.profile_name + "\" and domain " + *s.domain +
                                  " already exists");
        call("profiles.ensure",
             {{"project_id", project}, {"org_id", caller.value("org_id", "")}, {"name", *s.profile_name}});
        std::string id = hangar::new_id();
        auto now = hangar::now_ms();
        sql("INSERT INTO managed_auth_connections (id, org_id, project_id, domain, profile_name, settings, status, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'NEEDS_AUTH', ?, ?)",
            {id, caller.value("org_id", ""), project, *s.domain, *s.profile_name, stored.dump(), now, now});
        res.json(render(require(project, id)));
    }

    void list(Request &req, Response &res) {
        std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE project_id = ?";
        json params = json::array({project});
        if (auto d = req.query("domain"); d && !d->empty()) {
            where += " AND domain = LOWER(?)";
            params.push_back(*d);
        }
        if (auto p = req.query("profile_name"); p && !p->empty()) {
            where += " AND LOWER(profile_name) = LOWER(?)";
            params.push_back(*p);
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(id), LOWER(?)) > 0 OR INSTR(domain, LOWER(?)) > 0 OR "
                     "INSTR(LOWER(profile_name), LOWER(?)) > 0)";
            for (int i = 0; i < 3; ++i)
                params.push_back(*q);
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM managed_auth_connections" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [this](const json &row) { return render(row); });
    }

    void update(Request &req, Response &res) {
        std::string project = req.project();
        Settings s = parse_settings(req.json_body(false), false, min_interval_);
        json row = require(project, req.param("id"));
        json stored = stored_with(project, s, settings_json(s, parse_or(row, "settings", json::object())));
        if (s.credential)
            check_credential(req.caller(), stored.value("credential", json()), row.at("domain").get<std::string>());
        sql("UPDATE managed_auth_connections SET settings = ?, updated_at = ? WHERE id = ?",
            {stored.dump(), hangar::now_ms(), row.at("id")});
        res.json(render(require(project, row.at("id").get<std::string>())));
    }

    void remove(Request &req, Response &res) {
        json row = require(req.project(), req.param("id"));
        relay_to_flow_node(row); // its flow is canceled where it runs
        std::string id = row.at("id").get<std::string>();
        if (auto f = current_flow(id)) {
            end_from_outside(*f, "CANCELED", "connection_deleted", "the auth connection was deleted");
            std::lock_guard lock(flows_mutex_);
            retired_.push_back(f); // joined later; the connection no longer names it
            flows_.erase(id);
        }
        {
            std::lock_guard lock(subs_mutex_);
            subs_.erase(id); // followers' streams end with the connection
        }
        sql("DELETE FROM managed_auth_connections WHERE id = ?", {id});
        sql("DELETE FROM managed_auth_timeline WHERE connection_id = ?", {id});
        res.no_content();
    }

    void timeline(Request &req, Response &res) {
        json row = require(req.project(), req.param("id"));
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        std::string where = " WHERE connection_id = ?";
        json params = json::array({row.at("id")});
        if (auto t = req.query("type"); t && !t->empty()) {
            if (*t != "login" && *t != "reauth" && *t != "health_check")
                v.fail("type", "must be login, reauth or health_check");
            where += " AND type = ?";
            params.push_back(*t);
        }
        v.throw_if_failed("invalid timeline query");
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM managed_auth_timeline" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [](const json &r) {
                json out = parse_or(r, "data", json::object());
                out["id"] = r.at("id");
                out["type"] = r.at("type");
                out["status"] = r.at("status");
                out["timestamp"] = hangar::rfc3339(r.at("created_at").get<std::int64_t>());
                if (r.at("type") != "health_check") {
                    out["updated_at"] = hangar::rfc3339(r.at("updated_at").get<std::int64_t>());
                    if (r.value("step", json()).is_string()) out["step"] = r.at("step");
                }
                return out;
            });
    }

    // ---- login flows -------------------------------------------------------------------------------

    std::shared_ptr<Flow> current_flow(const std::string &connection_id) {
        std::lock_guard lock(flows_mutex_);
        auto it = flows_.find(connection_id);
        return it == flows_.end() ? nullptr : it->second;
    }

    // The connection's latest flow runs in another node's memory (nodes of one store): this
    // request is relayed there (the host does it on Error::on_node). Its engine, the input it
    // waits for, its handoff code and its followers are all there.
    // `over_too`: also once it ended (the hosted page reads how it ended from the flow itself).
    void relay_to_flow_node(const json &row, bool over_too = false) const {
        const json node = row.value("flow_node", json());
        if (!node.is_string() || node.get<std::string>() == node_name()) return;
        if (!over_too && !flow_in_progress(row)) return; // over: what is left of it is in the row
        relay_to_node(node.get<std::string>(), "the login flow of auth connection " + row.value("id", ""));
    }
    // The same for a connection known by id only (routes that reach it without an API key).
    void relay_to_flow_node(const std::string &connection_id, bool over_too = false) const {
        auto rows = sql("SELECT id, flow, flow_node FROM managed_auth_connections WHERE id = ?", {connection_id});
        if (!rows.empty()) relay_to_flow_node(rows[0], over_too);
    }
    static bool flow_in_progress(const json &row) {
        return parse_or(row, "flow", json::object()).value("flow_status", "") == "IN_PROGRESS";
    }

    // A flow whose node is gone (this one restarted, or another stopped heartbeating): over.
    void expire_flow(const json &row) {
        json flow = parse_or(row, "flow", json::object());
        if (flow.value("flow_status", "") != "IN_PROGRESS") return;
        flow["flow_status"] = "EXPIRED";
        flow["hosted_url"] = nullptr;
        flow["live_view_url"] = nullptr;
        auto now = hangar::now_ms();
        std::vector<std::pair<std::string, json>> batch = {
            {"UPDATE managed_auth_connections SET flow = ? WHERE id = ?", json::array({flow.dump(), row.at("id")})}};
        for (const auto &t : sql("SELECT id, data FROM managed_auth_timeline WHERE connection_id = ? AND status = "
                                 "'IN_PROGRESS'",
                                 {row.at("id")})) {
            json data = parse_or(t, "data", json::object());
            data["completed_at"] = hangar::rfc3339(now); // it ended here: its first terminal status
            batch.push_back({"UPDATE managed_auth_timeline SET status = 'EXPIRED', step = 'EXPIRED', data = ?, "
                             "updated_at = ? WHERE id = ? AND status = 'IN_PROGRESS'",
                             json::array({data.dump(), now, t.at("id")})});
        }
        sql_batch(batch);
    }
    void expire_lost_flows() {
        ServingNodes nodes(*this);
        for (const auto &row : sql("SELECT id, flow, flow_node FROM managed_auth_connections WHERE flow_node IS NOT "
                                   "NULL AND flow_node <> ? AND INSTR(flow, 'IN_PROGRESS') > 0",
                                   {node_name()})) {
            const auto node = row.at("flow_node").get<std::string>();
            if (!nodes.other_serves(node)) {
                info("auth connection " + row.value("id", "") + ": its login flow ended with node " + node);
                expire_flow(row);
            }
        }
    }

    void login(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body(true);
        json row = require(project, req.param("id"));
        relay_to_flow_node(row); // that node supersedes its own flow
        json s = parse_or(row, "settings", json::object());
        std::string id = row.at("id").get<std::string>();
        if (auto it = body.find("record_session"); it != body.end() && !it->is_null() && !it->is_boolean())
            throw Error::invalid("record_session", "must be a boolean");
        bool record = body.value("record_session", json()).is_boolean() ? body.at("record_session").get<bool>()
                                                                        : s.value("record_session", false);
        // This login's browser: its `browser` (and the deprecated `proxy` / `browser_telemetry`)
        // over the connection's, for this login only.
        hangar::Validation v;
        std::optional<json> over, proxy;
        if (auto it = body.find("browser"); it != body.end() && !it->is_null()) over = parse_browser_config(*it, v);
        if (auto it = body.find("proxy"); it != body.end() && !it->is_null()) {
            if (it->is_object() && (it->contains("id") || it->contains("name")) && !it->contains("mode"))
                proxy = *it;
            else
                v.fail("proxy", "must be {id} or {name}");
        }
        std::optional<json> telemetry;
        if (auto it = body.find("browser_telemetry"); it != body.end()) {
            if (it->is_null() || it->is_object())
                telemetry = *it;
            else
                v.fail("browser_telemetry", "must be an object or null");
        }
        v.throw_if_failed("invalid login");
        bool skills = parse_skill_mode(body);
        std::optional<json> successor;
        if (over && over->contains("telemetry")) successor = over->at("telemetry");
        if (auto t = supersede(telemetry, "browser_telemetry", successor, "browser.telemetry")) {
            if (!over) over = json::object();
            (*over)["telemetry"] = *t;
        }
        json browser = layer_browser(stored_browser(s), request_browser(project, over, proxy));
        // Background re-auths after a health check start their browsers as this caller would, and
        // read or leave the learned plan as this login chose.
        json before = s;
        s["base_url"] = req.base_url();
        s["skill_mode"] = skills ? "enabled" : "disabled";
        sql("UPDATE managed_auth_connections SET settings = ? WHERE id = ?", {s.dump(), id});
        try {
            res.json(start_flow(row, req.caller(), req.base_url(), browser, record, skills, false));
        } catch (...) {
            // Not accepted: the choice re-auths inherit stays the last accepted login's.
            sql("UPDATE managed_auth_connections SET settings = ? WHERE id = ?", {before.dump(), id});
            throw;
        }
    }

    // Starts a login (or re-auth) flow: its browser now, the engine on a thread of its own.
    // `browser`: the effective browser config; `skills`: skill_mode enabled; `automatic`: a
    // re-auth after a health check.
    json start_flow(const json &row, const json &caller, const std::string &base_url, const json &browser_config,
                    bool record, bool skills, bool automatic) {
        json s = parse_or(row, "settings", json::object());
        std::string id = row.at("id").get<std::string>();
        std::string project = row.at("project_id").get<std::string>();
        // A new login supersedes whatever flow is still running.
        if (auto old = current_flow(id); old && !old->done)
            end_from_outside(*old, "CANCELED", "flow_superseded", "a newer login() superseded this flow");

        auto flow = std::make_shared<Flow>();
        flow->id = hangar::new_id();
        flow->connection_id = id;
        flow->project = project;
        flow->caller = caller;
        flow->org = row.at("org_id").get<std::string>();
        flow->base_url = base_url;
        flow->recorded = record;
        flow->skills = skills;
        // A re-auth replays what was learned; with skill_mode disabled the plan is not read.
        json plan = skills ? parse_or(row, "plan", json()) : json();
        json credential = s.value("credential", json());
        flow->type = flow_type(automatic, plan.is_object(), credential.is_object());
        auto now = hangar::now_ms();
        flow->expires_ms = now + flow_timeout_ms_;
        flow->handoff_code = random_code();

        json browser_body = browser_create_fields(browser_config);
        // A recording needs a screen: recorded flows run headful.
        browser_body["headless"] = headless_ && !record;
        browser_body["timeout_seconds"] = flow_timeout_ms_ / 1000 + 60;
        browser_body["profile"] = {{"name", row.at("profile_name")}, {"save_changes", false}};
        flow->started_ms = hangar::now_ms();
        json browser = call(
            "browsers.create",
            {{"project_id", project}, {"caller", flow->caller}, {"base_url", flow->base_url}, {"body", browser_body}});
        flow->browser_ms = hangar::now_ms();
        flow->session_id = browser.value("session_id", "");
        // What the browser captures, not what was asked: `{}` or `enabled: false` start nothing.
        json timeline_data = {{"browser_session_id", flow->session_id},
                              {"telemetry_captured", browser.value("telemetry", json()).is_object()}};
        if (record) {
            // The replay ends with the auth browser (the replays plugin finishes it when the
            // session goes) and stays listed under that session; the timeline names it.
            try {
                timeline_data["replay_id"] =
                    call("replays.start",
                         {{"session_id", flow->session_id}, {"project_id", project}, {"org_id", flow->org}})
                        .at("replay_id");
            } catch (const std::exception &e) {
                call("browsers.delete", {{"project_id", project}, {"id", flow->session_id}});
                throw Error(502, "upstream_unavailable",
                            std::string("record_session: the recording of the auth browser did not start: ") +
                                e.what());
            }
        }
        std::string hosted = flow->base_url + "/auth/connections/" + id + "/hosted?code=" + flow->handoff_code;
        flow->state = {{"flow_status", "IN_PROGRESS"},
                       {"flow_step", "DISCOVERING"},
                       {"flow_type", flow->type},
                       {"flow_expires_at", hangar::rfc3339(flow->expires_ms)},
                       {"browser_session_id", flow->session_id},
                       {"hosted_url", hosted},
                       {"live_view_url", browser.value("browser_live_view_url", json())}};
        sql_batch(
            {{"INSERT INTO managed_auth_timeline (id, connection_id, type, status, step, data, created_at, "
              "updated_at) VALUES (?, ?, ?, 'IN_PROGRESS', 'INITIALIZED', ?, ?, ?)",
              json::array({flow->id, id, flow->type == "REAUTH" ? "reauth" : "login", timeline_data.dump(), now, now})},
             {"UPDATE managed_auth_connections SET flow_node = ? WHERE id = ?", json::array({node_name(), id})}});
        {
            std::lock_guard lock(flows_mutex_);
            if (auto it = flows_.find(id); it != flows_.end()) retired_.push_back(it->second);
            flows_[id] = flow;
            // Finished flows' threads are joined here, so they do not pile up.
            retired_.remove_if([](const std::shared_ptr<Flow> &f) {
                if (!f->done) return false;
                if (f->thread.joinable()) f->thread.join();
                return true;
            });
        }
        persist(*flow, flow->state);
        EngineSettings es;
        es.external_action_timeout_ms = static_cast<int>(input_timeout_ms_);
        es.domain = row.at("domain").get<std::string>();
        for (const auto &d : s.value("allowed_domains", json::array()))
            es.allowed_domains.push_back(d.get<std::string>());
        es.start_url = s.value("login_url", "").empty() ? "https://" + es.domain + "/" : s.value("login_url", "");
        flow->thread = std::jthread([this, flow, es, credential] { run_flow(flow, es, credential); });

        json out = {{"id", id},
                    {"flow_expires_at", flow->state["flow_expires_at"]},
                    {"flow_type", flow->type},
                    {"hosted_url", hosted},
                    {"handoff_code", flow->handoff_code}};
        if (browser.value("browser_live_view_url", json()).is_string())
            out["live_view_url"] = browser["browser_live_view_url"];
        return out;
    }

    // ---- health checks -----------------------------------------------------------------------------

    // Connections whose check is due, one at a time on the health thread: a headless browser on
    // the profile opens the logged-in page; a login form there means the session is gone.
    void schedule_health_checks(std::int64_t now) {
        if (health_busy_ || stopping_) return;
        for (const auto &row : sql("SELECT * FROM managed_auth_connections WHERE status = 'AUTHENTICATED'")) {
            json s = parse_or(row, "settings", json::object());
            if (!s.value("health_checks", true)) continue;
            // Only a page seen logged in tells a session from a login page (no_auth_check_url).
            if (!row.value("post_login_url", json()).is_string()) continue;
            std::int64_t last = row.value("last_auth_check_at", json()).is_number()
                                    ? row.at("last_auth_check_at").get<std::int64_t>()
                                    : row.at("updated_at").get<std::int64_t>();
            if (now < last + static_cast<std::int64_t>(s.value("health_check_interval", 3600)) * 1000) continue;
            if (auto f = current_flow(row.at("id").get<std::string>()); f && !f->done) continue;
            if (flow_in_progress(row)) continue; // a login runs on another node
            // Nodes of one store: the one whose claim moves last_auth_check_at first checks.
            const json seen = row.value("last_auth_check_at", json());
            if (sql("UPDATE managed_auth_connections SET last_auth_check_at = ? WHERE id = ? AND "
                    "COALESCE(last_auth_check_at, -1) = ? RETURNING id",
                    {now, row.at("id"), seen.is_number() ? seen.get<std::int64_t>() : std::int64_t{-1}})
                    .empty())
                continue;
            health_busy_ = true;
            if (health_thread_.joinable()) health_thread_.join();
            health_thread_ = std::jthread([this, row] {
                try {
                    health_check(row);
                } catch (const std::exception &e) {
                    warn("health check of auth connection " + row.value("id", std::string()) + " failed: " + e.what());
                }
                health_busy_ = false;
            });
            return;
        }
    }

    void health_check(const json &row) {
        std::string id = row.at("id").get<std::string>();
        std::string project = row.at("project_id").get<std::string>();
        json s = parse_or(row, "settings", json::object());
        json caller = {{"project_id", project}, {"org_id", row.at("org_id")}};
        json body = browser_create_fields(stored_browser(s));
        body["headless"] = true;
        body["timeout_seconds"] = 120;
        body["profile"] = {{"name", row.at("profile_name")}, {"save_changes", false}};
        json browser =
            call("browsers.create",
                 {{"project_id", project}, {"caller", caller}, {"base_url", s.value("base_url", "")}, {"body", body}});
        std::string session = browser.value("session_id", "");
        if (stopping_) {
            call("browsers.delete", {{"project_id", project}, {"id", session}});
            return;
        }
        bool logged_in = false;
        try {
            InstancePage page(*this, session);
            page.navigate(row.at("post_login_url").get<std::string>());
            std::this_thread::sleep_for(500ms); // a client-side redirect to the login page
            json d = page.eval(kDiscoverScript);
            logged_in = d.is_object() && !shows_login_form(d);
        } catch (...) {
            call("browsers.delete", {{"project_id", project}, {"id", session}});
            throw;
        }
        call("browsers.delete", {{"project_id", project}, {"id", session}});
        if (stopping_) return; // the check's verdict waits for the next start
        auto now = hangar::now_ms();
        std::string previous = row.at("status").get<std::string>();
        std::string observed = logged_in ? "AUTHENTICATED" : "NEEDS_AUTH";
        sql("UPDATE managed_auth_connections SET status = ?, last_auth_check_at = ? WHERE id = ?", {observed, now, id});
        sql("INSERT INTO managed_auth_timeline (id, connection_id, type, status, step, data, created_at, updated_at) "
            "VALUES (?, ?, 'health_check', ?, NULL, ?, ?, ?)",
            {hangar::new_id(), id, observed,
             json{{"previous_status", previous},
                  {"browser_session_id", session},
                  {"telemetry_captured", browser.value("telemetry", json()).is_object()}}
                 .dump(),
             now, now});
        info("health check of auth connection " + id + ": " + observed);
        if (logged_in || !s.value("auto_reauth", true)) return;
        Reauth r = reauth_status(s.value("credential", json()), row.value("plan", json()).is_string(),
                                 parse_or(row, "plan", json()));
        if (!r.can) return;
        auto fresh = sql("SELECT * FROM managed_auth_connections WHERE id = ?", {id});
        if (fresh.empty()) return;
        // The connection's browser config (a login's override was for that login only) and the
        // last accepted login's skill_mode.
        start_flow(fresh.front(), caller, s.value("base_url", ""), stored_browser(s), s.value("record_session", false),
                   inherited_skill_mode(s), true);
    }

    // The connection a request may see: its project's with an API key; with a flow JWT, the
    // connection the token names while that flow runs (401 for a bad token, 410 once it is over).
    json authorize(Request &req) {
        json caller = req.caller();
        if (caller.is_object() && caller.value("project_id", "") != "") return require(req.project(), req.param("id"));
        std::string authz = req.header("Authorization").value_or("");
        std::string token = authz.starts_with("Bearer ") ? authz.substr(7) : "";
        auto claims = token.empty() ? std::nullopt : token_verify(token);
        if (!claims || claims->value("typ", "") != "managed_auth_flow" || claims->value("cid", "") != req.param("id"))
            throw Error(401, "invalid_flow_token", "missing, invalid or expired API key or flow token");
        auto flow = current_flow(req.param("id"));
        if (!flow || flow->id != claims->value("fid", "")) relay_to_flow_node(req.param("id"), true);
        // The page must still see how its flow ended (SUCCESS or FAILED) to redirect; submits,
        // expired, canceled and superseded flows get 410.
        bool read_outcome = false;
        if (req.method() == "GET" && flow && flow->id == claims->value("fid", "")) {
            std::lock_guard lock(flow->m); // set as the outcome is known, before its browser is gone
            read_outcome = flow->ended == "SUCCESS" || flow->ended == "FAILED";
        }
        if (!read_outcome) flow_must_run(flow, claims->value("fid", ""));
        return require(flow->project, flow->connection_id);
    }

    // 410 Gone, with the reason as the code, unless `flow` is the running flow `flow_id`.
    static void flow_must_run(const std::shared_ptr<Flow> &flow, const std::string &flow_id) {
        if (!flow || flow->id != flow_id)
            throw Error(410, "flow_superseded", "this login flow was superseded by a newer one");
        std::lock_guard lock(flow->m);
        // Superseded, but the newer flow is still starting its browser and not yet current.
        if (flow->ended_code == "flow_superseded")
            throw Error(410, "flow_superseded", "this login flow was superseded by a newer one");
        std::string status = flow->state.value("flow_status", "");
        if (status == "EXPIRED" || flow->ended == "EXPIRED")
            throw Error(410, "flow_expired", "this login flow expired");
        if (flow->done || !flow->ended.empty())
            throw Error(410, "flow_ended", "this login flow is over (" + (status.empty() ? flow->ended : status) + ")");
    }

    void exchange(Request &req, Response &res) {
        json body = req.json_body(false);
        std::string code = body.value("code", json()).is_string() ? body.at("code").get<std::string>() : "";
        if (code.empty()) throw Error::invalid("code", "is required");
        auto flow = current_flow(req.param("id"));
        if (!flow) relay_to_flow_node(req.param("id"));
        if (!flow) throw Error(401, "invalid_handoff_code", "the handoff code is not valid");
        {
            std::lock_guard lock(flow->m);
            if (code != flow->handoff_code) throw Error(401, "invalid_handoff_code", "the handoff code is not valid");
            if (flow->handoff_used)
                throw Error(401, "handoff_code_used", "the handoff code was used already; start a new login");
        }
        flow_must_run(flow, flow->id);
        auto left_ms = std::max<std::int64_t>(1000, flow->expires_ms - hangar::now_ms());
        std::string jwt = token_sign({{"typ", "managed_auth_flow"}, {"cid", flow->connection_id}, {"fid", flow->id}},
                                     static_cast<std::uint32_t>(left_ms / 1000 + 1));
        {
            std::lock_guard lock(flow->m);
            flow->handoff_used = true;
        }
        res.json({{"jwt", jwt}, {"expires_at", hangar::rfc3339(flow->expires_ms)}});
    }

    void submit(Request &req, Response &res) {
        Submit in = parse_submit(req.json_body(false));
        json row = authorize(req);
        relay_to_flow_node(row);
        auto flow = current_flow(row.at("id").get<std::string>());
        accept_input(flow, std::move(in));
        res.json({{"accepted", true}});
    }

    void accept_input(const std::shared_ptr<Flow> &flow, Submit in) {
        if (!flow) throw Error(400, "no_flow_awaiting_input", "no login flow is running for this connection");
        {
            std::lock_guard lock(flow->m);
            if (!flow->awaiting || flow->input)
                throw Error(400, "no_flow_awaiting_input",
                            "the login flow is not waiting for input (flow_step " +
                                flow->state.value("flow_step", std::string("none")) + ")");
            if (!in.interaction_id.empty() && in.interaction_id != flow->interaction_id)
                throw Error::conflict("interaction_id " + in.interaction_id + " is not the flow's current pause (" +
                                      flow->interaction_id +
                                      "): read the connection again and answer what it asks now");
            flow->input = std::move(in);
        }
        flow->cv.notify_all();
    }

    // Ends a flow from outside (delete, supersede, expiry, shutdown); its thread notices.
    void end_from_outside(Flow &f, const std::string &status, const std::string &code, const std::string &message) {
        {
            std::lock_guard lock(f.m);
            if (!f.ended.empty() || f.done) return;
            f.ended = status;
            f.ended_code = code;
            f.ended_message = message;
        }
        f.cv.notify_all();
    }

    void sweep() {
        std::vector<std::shared_ptr<Flow>> all;
        {
            std::lock_guard lock(flows_mutex_);
            for (auto &[id, f] : flows_)
                all.push_back(f);
        }
        auto now = hangar::now_ms();
        for (auto &f : all) {
            if (f->done) continue;
            bool overall = now > f->expires_ms, waiting = false;
            {
                std::lock_guard lock(f->m);
                waiting = f->awaiting && !f->input && f->input_deadline_ms > 0 && now > f->input_deadline_ms;
            }
            if (overall || waiting)
                end_from_outside(*f, "EXPIRED", "flow_expired",
                                 waiting ? "nobody submitted the requested input in time"
                                         : "the login flow ran out of time");
        }
        heartbeat(now);
        if (now - lost_flows_checked_ms_ >= 5000) {
            lost_flows_checked_ms_ = now;
            expire_lost_flows();
        }
        schedule_health_checks(now);
    }

    // Merges `patch` into the flow's state, stores it, updates the timeline and tells followers.
    void persist(Flow &f, const json &patch) {
        json snapshot;
        {
            std::lock_guard lock(f.m);
            for (const auto &[k, v] : patch.items())
                f.state[k] = v;
            snapshot = f.state;
        }
        auto now = hangar::now_ms();
        // A superseded flow still finishes its timeline entry, but the connection shows the new one.
        bool current = current_flow(f.connection_id).get() == &f;
        if (current)
            sql("UPDATE managed_auth_connections SET flow = ?, updated_at = ? WHERE id = ?",
                {snapshot.dump(), now, f.connection_id});
        json data = {{"browser_session_id", f.session_id}};
        for (const char *k : {"error_code", "error_message", "website_error"})
            if (snapshot.value(k, json()).is_string()) data[k] = snapshot[k];
        std::string status = snapshot.value("flow_status", "IN_PROGRESS");
        std::string step = snapshot.value("flow_step", "DISCOVERING");
        if (status == "EXPIRED") step = "EXPIRED";
        auto old = sql("SELECT data FROM managed_auth_timeline WHERE id = ?", {f.id});
        if (!old.empty()) {
            // What the flow's start recorded stays: whether telemetry ran, and the replay.
            json started = parse_or(old.front(), "data", json::object());
            data["telemetry_captured"] = started.value("telemetry_captured", false);
            if (started.contains("replay_id")) data["replay_id"] = started["replay_id"];
            if (started.contains("completed_at")) data["completed_at"] = started["completed_at"];
        }
        // The first time the attempt reached a terminal status, unchanged by later writes.
        if (terminal(status) && !data.contains("completed_at")) data["completed_at"] = hangar::rfc3339(now);
        sql("UPDATE managed_auth_timeline SET status = ?, step = ?, data = ?, updated_at = ? WHERE id = ?",
            {status, step, data.dump(), now, f.id});
        if (current) broadcast(f.connection_id, snapshot, terminal(status));
    }

    class Run final : public FlowHost {
    public:
        Run(ManagedAuthPlugin &p, std::shared_ptr<Flow> f, json credential, std::string domain)
            : p_(p), f_(std::move(f)), credential_(std::move(credential)), domain_(std::move(domain)) {}

        void publish(const json &patch) override {
            check();
            p_.persist(*f_, patch);
        }

        Submit await_input(const json &awaiting) override {
            // Each pause has its own id, so an answer meant for an earlier one is refused.
            std::string interaction = "int_" + hangar::new_id(20);
            json patch = {{"flow_step", "AWAITING_INPUT"}, {"interaction_id", interaction}};
            for (const char *k :
                 {"discovered_fields", "fields", "choices", "mfa_options", "pending_sso_buttons", "sign_in_options"})
                patch[k] = awaiting.value(k, json());
            {
                std::lock_guard lock(f_->m);
                f_->awaiting = true;
                f_->interaction_id = interaction;
                f_->input.reset();
                f_->input_deadline_ms = hangar::now_ms() + p_.input_timeout_ms_;
            }
            publish(patch);
            std::unique_lock lock(f_->m);
            f_->cv.wait(lock, [&] { return f_->input.has_value() || !f_->ended.empty(); });
            f_->awaiting = false;
            if (!f_->ended.empty()) throw FlowEnded(f_->ended);
            Submit in = std::move(*f_->input);
            f_->input.reset();
            return in;
        }

        void check() override {
            std::lock_guard lock(f_->m);
            if (!f_->ended.empty()) throw FlowEnded(f_->ended);
        }

        json credential_values(bool fresh) override {
            if (!credential_.is_object()) return json::object();
            json in = {
                {"project_id", f_->project}, {"org_id", f_->org}, {"credential", credential_}, {"domain", domain_}};
            json r = p_.call("credentials.resolve", in);
            if (fresh && r.contains("totp_code_expires_at")) {
                // A code of the next window: the one just refused may have been about to expire.
                auto until = hangar::parse_rfc3339_us(r.value("totp_code_expires_at", ""));
                if (until) {
                    auto wait_ms = *until / 1000 - hangar::now_ms() + 500;
                    for (; wait_ms > 0; wait_ms -= 200) {
                        check();
                        std::this_thread::sleep_for(200ms);
                    }
                }
                r = p_.call("credentials.resolve", in);
            }
            json values = r.value("values", json::object());
            if (r.contains("totp_code")) values["totp_code"] = r["totp_code"];
            sso_provider_ = r.value("sso_provider", json()).is_string() ? r["sso_provider"].get<std::string>() : "";
            std::transform(sso_provider_.begin(), sso_provider_.end(), sso_provider_.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            return values;
        }

        std::string credential_sso_provider() override { return sso_provider_; }

    private:
        ManagedAuthPlugin &p_;
        std::shared_ptr<Flow> f_;
        json credential_;
        std::string domain_;       // the connection's: an org provider's login must be for it
        std::string sso_provider_; // from the last credential_values()
    };

    class InstancePage final : public Page {
    public:
        InstancePage(const ManagedAuthPlugin &p, std::string session) : p_(p), session_(std::move(session)) {}
        void navigate(const std::string &url) override { op({{"op", "navigate"}, {"url", url}}, 30000); }
        void reload() override { op({{"op", "reload"}}, 30000); }
        json eval(const std::string &expression) override {
            return op({{"op", "eval"}, {"expression", expression}}, 15000).value("value", json());
        }
        void fill(const std::string &selector, const std::string &value) override {
            op({{"op", "fill"}, {"selector", selector}, {"value", value}}, 15000);
        }

    private:
        json op(const json &body, std::uint32_t timeout_ms) {
            auto r = p_.instance_call(session_, "POST", "/managed_auth/page", body.dump(), timeout_ms);
            json answer = json::parse(r.body, nullptr, false);
            if (r.status != 200) // the agent's message names the operation, never a value
                throw std::runtime_error("the auth browser could not " + body.value("op", std::string()) + ": " +
                                         (answer.is_object() ? answer.value("message", "") : "no answer"));
            return answer.is_object() ? answer : json::object();
        }
        const ManagedAuthPlugin &p_;
        std::string session_;
    };

    void run_flow(const std::shared_ptr<Flow> &flow, const EngineSettings &es, const json &credential) {
        Run run(*this, flow, credential, es.domain);
        InstancePage page(*this, flow->session_id);
        json final_patch;
        std::int64_t engine_ms = 0;
        try {
            Outcome out = run_login(page, run, es);
            engine_ms = hangar::now_ms();
            if (out.success) {
                finish_success(*flow, out, credential);
                final_patch = {{"flow_status", "SUCCESS"}, {"flow_step", "COMPLETED"}};
            } else {
                final_patch = {{"flow_status", "FAILED"},
                               {"error_code", out.error_code},
                               {"error_message", out.error_message},
                               {"website_error", out.website_error.empty() ? json() : json(out.website_error)}};
            }
        } catch (const FlowEnded &) {
            std::lock_guard lock(flow->m);
            final_patch = {
                {"flow_status", flow->ended}, {"error_code", flow->ended_code}, {"error_message", flow->ended_message}};
        } catch (const std::exception &e) {
            final_patch = {{"flow_status", "FAILED"}, {"error_code", "flow_error"}, {"error_message", e.what()}};
        }
        final_patch["hosted_url"] = nullptr;
        final_patch["live_view_url"] = nullptr;
        final_patch["discovered_fields"] = nullptr;
        final_patch["fields"] = nullptr;
        final_patch["external_action_message"] = nullptr;
        {
            std::lock_guard lock(flow->m);
            flow->awaiting = false;
            if (flow->ended.empty()) flow->ended = final_patch.value("flow_status", "FAILED");
        }
        auto stop_browser = [&] {
            try {
                call("browsers.delete", {{"project_id", flow->project}, {"id", flow->session_id}});
            } catch (const std::exception &e) {
                warn("auth flow " + flow->id + ": its browser did not end cleanly: " + e.what());
            }
        };
        // The outcome is known and the profile saved: say so before the browser is stopped,
        // which takes a while and changes nothing the caller waits for. A recorded flow's replay
        // is finished by that stop, so there the stop comes first.
        if (flow->recorded) stop_browser();
        std::int64_t saved_ms = hangar::now_ms();
        persist(*flow, final_patch);
        if (!flow->recorded) stop_browser();
        flow->done = true;
        // Where a login's time went, for an operator chasing a slow one.
        auto ms = [](std::int64_t from, std::int64_t to) { return std::to_string(to > from ? to - from : 0) + " ms"; };
        info("auth flow " + flow->id + " for connection " + flow->connection_id + ": " +
             final_patch.value("flow_status", std::string()) + " (browser " + ms(flow->started_ms, flow->browser_ms) +
             ", login " + ms(flow->browser_ms, engine_ms) + ", save " + ms(engine_ms, saved_ms) + ", total " +
             ms(flow->started_ms, saved_ms) + ")");
    }

    void finish_success(Flow &f, const Outcome &out, const json &credential) {
        // The browser reloaded the logged-in page already: its state now goes into the profile.
        call("profiles.save", {{"session_id", f.session_id}, {"instance_id", f.session_id}});
        auto rows = sql("SELECT * FROM managed_auth_connections WHERE id = ?", {f.connection_id});
        if (rows.empty()) return;
        json row = rows.front();
        json s = parse_or(row, "settings", json::object());
        if (s.value("save_credentials", true) && !out.learned.empty()) {
            std::string name =
                credential.is_object() && credential.contains("name")
                    ? credential.value("name", "")
                    : row.at("profile_name").get<std::string>() + "-" + row.at("domain").get<std::string>();
            call("credentials.merge", {{"project_id", f.project},
                                       {"org_id", f.org},
                                       {"name", name},
                                       {"domain", row.at("domain")},
                                       {"values", out.learned}});
            if (!credential.is_object()) s["credential"] = {{"name", name}};
        }
        if (!f.skills) { // skill_mode disabled: the learned plan is left as it was
            sql("UPDATE managed_auth_connections SET status = 'AUTHENTICATED', post_login_url = ?, settings = ?, "
                "updated_at = ? WHERE id = ?",
                {out.post_login_url, s.dump(), hangar::now_ms(), f.connection_id});
            return;
        }
        json plan = out.plan;
        // Values the user typed and nobody saved: a re-auth would have to ask again.
        if (!s.value("save_credentials", true) && !out.learned.empty()) plan["needs_customer_input"] = true;
        sql("UPDATE managed_auth_connections SET status = 'AUTHENTICATED', post_login_url = ?, plan = ?, settings = ?, "
            "updated_at = ? WHERE id = ?",
            {out.post_login_url, plan.dump(), s.dump(), hangar::now_ms(), f.connection_id});
    }

    // ---- events ------------------------------------------------------------------------------------

    static json state_event(const json &state) {
        json e = {{"event", "managed_auth_state"}, {"timestamp", hangar::rfc3339(hangar::now_ms())}};
        for (const auto &[k, v] : state.items())
            if (!v.is_null()) e[k] = v;
        return e;
    }

    void events(Request &req, Response &res) {
        json row = require(req.project(), req.param("id"));
        relay_to_flow_node(row); // its followers are told where it runs
        std::string id = row.at("id").get<std::string>();
        json flow = parse_or(row, "flow", json::object());
        std::shared_ptr<hangar::SseStream> sse = res.sse();
        if (auto f = current_flow(id); f && !f->done) {
            // The snapshot is taken under the subscribers' lock: a terminal state persisted
            // after it is broadcast to this stream too, and one persisted before it is in it.
            std::lock_guard subs(subs_mutex_);
            json snapshot;
            {
                std::lock_guard lock(f->m);
                snapshot = f->state;
            }
            std::string status = snapshot.value("flow_status", "");
            if (status != "SUCCESS" && status != "FAILED" && status != "CANCELED" && status != "EXPIRED") {
                sse->send(state_event(snapshot));
                subs_[id].push_back(sse);
                return;
            }
            flow = snapshot; // over, its browser still stopping: the last state, then the end
        }
        // No flow running: the last state, then the stream ends.
        if (flow.contains("flow_status")) sse->send(state_event(flow));
    }

    void broadcast(const std::string &connection_id, const json &state, bool last) {
        std::lock_guard lock(subs_mutex_);
        auto it = subs_.find(connection_id);
        if (it == subs_.end()) return;
        json e = state_event(state);
        for (auto &s : it->second)
            s->send(e);
        if (last) subs_.erase(it); // the streams close as their last owner lets go
    }

    void heartbeat(std::int64_t now) {
        if (now - last_heartbeat_ms_ < 15000) return;
        last_heartbeat_ms_ = now;
        json e = {{"event", "sse_heartbeat"}, {"timestamp", hangar::rfc3339(now)}};
        std::lock_guard lock(subs_mutex_);
        for (auto &[id, list] : subs_)
            std::erase_if(list, [&](const std::shared_ptr<hangar::SseStream> &s) { return !s->send(e); });
    }

    std::int64_t flow_timeout_ms_ = 1200000, input_timeout_ms_ = 600000;
    int min_interval_ = 300;
    bool headless_ = false;
    std::string node_region_ = "us-east";
    std::vector<std::string> redirect_origins_; // [server] redirect_origins: success_url / error_url may go there
    std::mutex create_mutex_;
    std::mutex flows_mutex_;
    std::map<std::string, std::shared_ptr<Flow>> flows_; // connection id -> its newest flow
    std::int64_t lost_flows_checked_ms_ = 0;             // sweep thread only
    std::list<std::shared_ptr<Flow>> retired_;           // superseded flows whose threads may still run
    std::mutex subs_mutex_;
    std::map<std::string, std::vector<std::shared_ptr<hangar::SseStream>>> subs_;
    std::int64_t last_heartbeat_ms_ = 0;
    std::atomic<bool> health_busy_{false};
    std::atomic<bool> stopping_{false};
    std::jthread health_thread_;
};

} // namespace

HANGAR_PLUGIN(ManagedAuthPlugin, "managed_auth", "0.1.0", "profiles,browsers,credentials,proxies?", migrations,
              sizeof(migrations) / sizeof(migrations[0]))
