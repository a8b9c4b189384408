// config_registry: which browser settings and proxy get past a site's bot protection
// (kernel-api-0131.md §1D, /config-registry), learned by this installation itself. An analysis
// loads the target in real Hangar browsers (each candidate configuration its own sandboxed
// browser, created and deleted through the browsers plugin) and keeps what each load showed;
// lookups answer from those analyses and the operator's seed file. See README.md.
#include "config_registry_model.hpp"

#include <hangar/cdp.hpp>
#include <hangar/egress.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace cr = hangar::config_registry;
using namespace std::chrono_literals;

// Analyses are learned history, not resources a tenant manages: the column is `owner_project`,
// not `project_id`, so they do not keep a project from being deleted (the org plugin counts every
// table with a project_id column). Every read filters by it.
const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE config_registry_analyses (id TEXT PRIMARY KEY, owner_project TEXT NOT NULL, "
        "url TEXT NOT NULL, target TEXT NOT NULL, host TEXT NOT NULL, domain TEXT NOT NULL, "
        "status TEXT NOT NULL, intent TEXT, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, "
        "finished_at BIGINT, failure TEXT, runs TEXT NOT NULL);"
        "CREATE INDEX config_registry_analyses_project ON config_registry_analyses (owner_project, created_at);"},
};

// Read inside the instance after the load settled: the main document's HTTP status (Navigation
// Timing's responseStatus), the title and the start of the visible text, all bounded here and
// again by the server (cr::load_from_json).
const char *const kReadScript = R"js((() => {
  const n = performance.getEntriesByType('navigation')[0];
  const m = document.querySelector('meta[name="bot-verdict"]');
  return {
    status: n && n.responseStatus ? n.responseStatus : 0,
    title: String(document.title || '').slice(0, 200),
    text: String(document.body ? document.body.innerText : '').slice(0, 4000),
    verdict: String((m && m.content) || '').slice(0, 40),
  };
})())js";

class ConfigRegistryPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        parallelism_ = static_cast<int>(std::clamp<std::int64_t>(config_int("parallelism", 2), 1, 8));
        try_headful_ = config_bool("try_headful", true);
        max_running_ = std::clamp<std::int64_t>(config_int("max_running_per_project", 2), 1, 100);
        load_timeout_ms_ = std::clamp<std::int64_t>(config_int("load_timeout_ms", 20000), 1000, 120000);
        settle_ms_ = std::clamp<std::int64_t>(config_int("settle_ms", 1000), 0, 10000);
        retention_ms_ = std::clamp<std::int64_t>(config_int("retention_days", 30), 1, 3650) * 86400000;
        policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                config_bool("server.fetch_allow_private_networks", false));
        if (auto path = config("seed_file", ""); !path.empty()) {
            std::ifstream in(path);
            if (!in) throw std::runtime_error("config_registry.ini seed_file " + path + " cannot be read");
            json file = json::parse(in, nullptr, false);
            if (file.is_discarded()) throw std::runtime_error("config_registry.ini seed_file " + path + " is not JSON");
            seeds_ = cr::parse_seed(file, hangar::now_ms());
            info("config registry: " + std::to_string(seeds_.size()) + " seed entries from " + path);
        }
        // A run the last server left running has lost its browsers and its thread.
        sql("UPDATE config_registry_analyses SET status = 'failed', finished_at = ?, failure = ? WHERE status = "
            "'running'",
            {hangar::now_ms(),
             json{{"code", "interrupted"}, {"message", "the server restarted during the analysis; resolve again"}}
                 .dump()});
        routes();
    }

    void stop_server() override {
        std::map<std::string, std::shared_ptr<Job>> jobs;
        {
            std::lock_guard lock(jobs_mutex_);
            jobs = jobs_;
        }
        for (auto &[id, job] : jobs)
            cancel_job(*job);
        for (auto &[id, job] : jobs)
            if (job->thread.joinable()) job->thread.join();
    }

    void start_instance() override {
        route("POST", "/config_registry/probe", [this](Request &q, Response &r) { r.json(probe(q.json_body())); });
    }

private:
    struct Job {
        std::string id, project;
        std::atomic<bool> canceled{false};
        std::mutex mutex;
        std::set<std::string> sessions; // browsers alive now
        std::jthread thread;
    };

    // ---- instance half: one page load, read back bounded --------------------------------------

    json probe(const json &body) {
        json s = call("browsers.chromium", json::object());
        if (!s.contains("port") || !s.at("port").is_number())
            throw Error(503, "unavailable", "Chromium is not running");
        int port = s.at("port").get<int>();
        auto timeout =
            std::chrono::milliseconds(std::clamp<std::int64_t>(body.value("timeout_ms", 20000), 1000, 120000));
        hangar::cdp::Connection c(port, hangar::cdp::first_page_path(port), timeout);
        json nav = c.call("Page.navigate", {{"url", body.value("url", "")}});
        if (nav.contains("errorText") && !nav["errorText"].get<std::string>().empty())
            return {{"error", nav["errorText"]}};
        auto deadline = hangar::cdp::Clock::now() + timeout;
        std::this_thread::sleep_for(100ms);
        while (hangar::cdp::Clock::now() < deadline) {
            try {
                json r = c.call("Runtime.evaluate", {{"expression", "document.readyState"}, {"returnByValue", true}});
                if (r["result"].value("value", "") == "complete") break;
            } catch (const hangar::cdp::Failure &f) {
                if (f.timed_out()) throw;
            }
            std::this_thread::sleep_for(100ms);
        }
        // Bot checks run in page script after load: give them the operator's settle time.
        std::this_thread::sleep_for(
            std::chrono::milliseconds(std::clamp<std::int64_t>(body.value("settle_ms", 1000), 0, 10000)));
        json r = c.call("Runtime.evaluate", {{"expression", kReadScript}, {"returnByValue", true}});
        if (r.contains("exceptionDetails")) return {{"error", "the read script failed"}};
        return r["result"].value("value", json::object());
    }

    // ---- server half ---------------------------------------------------------------------------

    void routes() {
        route("POST", "/config-registry/lookup", [this](Request &req, Response &res) {
            const std::string project = req.project();
            auto l = cr::parse_lookup(req.json_body());
            refuse_literal(l.target);
            res.json(lookup(project, l));
        });
        route("POST", "/config-registry/resolve", [this](Request &req, Response &res) { res.json(resolve(req)); });
        route("GET", "/config-registry", [this](Request &req, Response &res) { list_targets(req, res); });
        route("GET", "/config-registry/analyses", [this](Request &req, Response &res) { list_analyses(req, res); });
        route("GET", "/config-registry/analyses/{id}",
              [this](Request &req, Response &res) { res.json(frozen(require(req.project(), req.param("id")))); });
        route("POST", "/config-registry/analyses/{id}/cancel", [this](Request &req, Response &res) {
            json row = require(req.project(), req.param("id"));
            if (row["status"] == "running") {
                std::shared_ptr<Job> job;
                {
                    std::lock_guard lock(jobs_mutex_);
                    if (auto it = jobs_.find(row["id"].get<std::string>()); it != jobs_.end()) job = it->second;
                }
                if (job) cancel_job(*job);
            }
            res.json(frozen(require(req.project(), req.param("id"))));
        });
    }

    // Literal private addresses are refused without DNS (lookup makes none) unless the operator
    // allowed that host:port in [server] fetch_allow.
    void refuse_literal(const cr::Target &t) const {
        if (cr::literal_non_public(t.host) && !policy_.listed(t.host, t.port))
            throw Error::invalid("url", "must be a public http(s) URL (" + t.host +
                                            " is not public; the operator can allow it with [server] fetch_allow)");
    }

    json require(const std::string &project, const std::string &id) const {
        json rows = sql("SELECT * FROM config_registry_analyses WHERE id = ? AND owner_project = ?", {id, project});
        if (rows.empty()) throw Error::not_found("analysis \"" + id + "\" not found");
        return rows[0];
    }

    static std::vector<cr::Run> runs_of(const json &row) {
        std::vector<cr::Run> out;
        json runs = json::parse(row.value("runs", std::string("[]")), nullptr, false);
        if (runs.is_array())
            for (const auto &r : runs)
                out.push_back(cr::run_from_json(r));
        return out;
    }

    static cr::Target target_of(const json &row) {
        cr::Target t;
        t.normalized = row["target"].get<std::string>();
        t.host = row["host"].get<std::string>();
        t.domain = row["domain"].get<std::string>();
        return t;
    }

    json analysis_json(const json &row) const {
        json a = {{"id", row["id"]},
                  {"status", row["status"]},
                  {"created_at", hangar::rfc3339(row["created_at"].get<std::int64_t>())},
                  {"expires_at", hangar::rfc3339(row["expires_at"].get<std::int64_t>())},
                  {"finished_at", row["finished_at"].is_number()
                                      ? json(hangar::rfc3339(row["finished_at"].get<std::int64_t>()))
                                      : json(nullptr)}};
        if (row["failure"].is_string()) a["failure"] = json::parse(row["failure"].get<std::string>(), nullptr, false);
        if (row["intent"].is_string()) a["intent"] = row["intent"];
        return a;
    }

    // The answer for knowledge at one scope: working configurations cheapest first, or why none.
    struct Answer {
        json working = json::array();
        json recommendation;
        std::string guidance;
    };

    static Answer answer_from(const std::vector<cr::Aggregate> &all, const std::string &scope,
                              const std::string &matched, const std::optional<std::vector<std::string>> &countries) {
        Answer a;
        auto ok = cr::working(all, countries);
        for (const auto &w : ok)
            a.working.push_back(cr::recommendation_json(w, scope, matched));
        if (!a.working.empty()) {
            a.recommendation = a.working[0];
            return a;
        }
        auto any = cr::working(all, std::nullopt);
        int blocked = 0, seen = 0;
        for (const auto &g : all) {
            blocked += g.blocked;
            seen += g.sample_size();
        }
        if (!any.empty())
            a.recommendation = cr::no_recommendation("proxy_restricted",
                                                     "only proxies outside allowed_proxy_countries reached " + matched);
        else if (blocked > 0)
            a.recommendation =
                cr::no_recommendation("no_working_configuration",
                                      "every configuration this installation can offer was blocked by " + matched +
                                          " (" + std::to_string(blocked) + " of " + std::to_string(seen) + " loads)");
        else
            a.recommendation = cr::no_recommendation(
                "inconclusive", "no load of " + matched + " was conclusive (the page did not load or said nothing)");
        return a;
    }

    // Knowledge for a target: this project's finished analyses, then the operator's seed, at the
    // narrowest scope that has any (exact target, then host, then registrable domain).
    json lookup(const std::string &project, const cr::LookupRequest &l) const {
        json rows = sql("SELECT * FROM config_registry_analyses WHERE owner_project = ? AND domain = ? AND status IN "
                        "('completed', 'canceled') ORDER BY created_at",
                        {project, l.target.domain});
        json out = {{"target", cr::target_json(l.target)}, {"working_configurations", json::array()}};
        for (const char *scope : {"exact", "host", "domain"}) {
            std::vector<std::vector<cr::Run>> analyses;
            std::string matched;
            for (const auto &row : rows) {
                auto s = cr::match_scope(l.target, target_of(row));
                if (s && *s == scope) {
                    auto runs = runs_of(row);
                    if (runs.empty()) continue;
                    analyses.push_back(std::move(runs));
                    matched = row["target"].get<std::string>();
                }
            }
            if (!analyses.empty()) {
                Answer a = answer_from(cr::aggregate(analyses), scope, matched, l.countries);
                out["working_configurations"] = a.working;
                out["recommendation"] = a.recommendation;
                return out;
            }
            for (const auto &seed : seeds_) {
                auto s = cr::match_scope(l.target, seed.target);
                // A seed entry reaches as wide as its own `match` says.
                const int want = std::string(scope) == "exact" ? 0 : std::string(scope) == "host" ? 1 : 2;
                const int may = seed.match == "exact" ? 0 : seed.match == "host" ? 1 : 2;
                if (!s || *s != scope || want > may) continue;
                if (l.countries && !seed.candidate.proxy_id.empty() &&
                    std::find(l.countries->begin(), l.countries->end(), seed.candidate.country) == l.countries->end())
                    continue;
                out["working_configurations"].push_back(
                    cr::recommendation_json(seed.evidence, scope, seed.target.normalized));
            }
            if (!out["working_configurations"].empty()) {
                out["recommendation"] = out["working_configurations"][0];
                return out;
            }
        }
        out["recommendation"] =
            cr::no_recommendation("inconclusive", "this installation knows nothing about " + l.target.normalized +
                                                      " yet: POST /config-registry/resolve runs an analysis");
        return out;
    }

    json frozen(const json &row) const {
        cr::Target t = target_of(row);
        auto runs = runs_of(row);
        json out = {{"target", cr::target_json(t)}, {"working_configurations", json::array()}};
        if (!runs.empty()) {
            Answer a = answer_from(cr::aggregate({runs}), "exact", t.normalized, std::nullopt);
            out["working_configurations"] = a.working;
            out["recommendation"] = a.recommendation;
            json notes = json::array();
            for (const auto &r : runs)
                notes.push_back("- " + r.candidate.label() + ": " + cr::verdict_name(r.verdict) + " (" + r.reason +
                                ")");
            std::string g = "Configurations tried, cheapest first:\n";
            for (const auto &n : notes)
                g += n.get<std::string>() + "\n";
            out["guidance"] = g;
        }
        out["analysis"] = analysis_json(row);
        return out;
    }

    json resolve(Request &req) {
        const std::string project = req.project();
        auto r = cr::parse_resolve(req.json_body());
        refuse_literal(r.lookup.target);
        if (r.intent)
            throw Error::not_implemented("intent: driving a described workload through the target (a workload "
                                         "pass) is not built in this Hangar server; resolve without intent tests "
                                         "connectivity");
        // A name must not resolve to a non-public address unless the operator allowed it: the
        // browsers load it from their sandboxes, but the tenant names it.
        if (!cr::literal_non_public(r.lookup.target.host) &&
            !policy_.listed(r.lookup.target.host, r.lookup.target.port)) {
            try {
                hangar::egress::resolve(r.lookup.target.host, r.lookup.target.port, policy_);
            } catch (const hangar::egress::Refused &e) {
                throw Error::invalid("url", std::string("must be a public http(s) URL: ") + e.what());
            } catch (const hangar::egress::ResolveError &) {
                // Unresolvable here: a proxy may still reach it; the loads will tell.
            }
        }
        json running = sql("SELECT * FROM config_registry_analyses WHERE owner_project = ? AND target = ? AND "
                           "status = 'running' ORDER BY created_at DESC",
                           {project, r.lookup.target.normalized});
        json row;
        if (!running.empty()) {
            row = running[0];
        } else {
            // Each analysis runs up to `parallelism` browsers: a project gets a bounded number at once.
            auto busy = sql("SELECT COUNT(*) AS n FROM config_registry_analyses WHERE owner_project = ? AND status = "
                            "'running'",
                            {project});
            if (!busy.empty() && busy[0]["n"].get<std::int64_t>() >= max_running_)
                throw Error(429, "rate_limited",
                            "this project already has " + std::to_string(max_running_) +
                                " analyses running (config_registry.ini max_running_per_project); wait for one to "
                                "finish or cancel one");
            json proxies = json::array();
            try {
                proxies = call("proxies.list", {{"project_id", project}}).value("proxies", json::array());
            } catch (const Error &) {
                // The proxies plugin is off: direct candidates only.
            }
            std::vector<cr::ProxyOffer> offers;
            for (const auto &p : proxies) {
                cr::ProxyOffer o;
                o.id = p.value("id", "");
                o.name = p.value("name", "");
                o.type = p.value("type", "custom");
                o.protocol = p.value("protocol", "");
                o.config = p.value("config", json::object());
                if (o.config.is_object()) {
                    o.country = o.config.value("country", "");
                    std::transform(o.country.begin(), o.country.end(), o.country.begin(),
                                   [](unsigned char c) { return std::toupper(c); });
                    for (const char *k : {"password", "has_password", "has_ca_bundle", "ca_bundle"})
                        o.config.erase(k);
                }
                offers.push_back(std::move(o));
            }
            auto all = cr::candidates(offers, try_headful_);
            if (r.lookup.countries)
                all.erase(std::remove_if(all.begin(), all.end(),
                                         [&](const cr::Candidate &c) {
                                             return !c.proxy_id.empty() &&
                                                    std::find(r.lookup.countries->begin(), r.lookup.countries->end(),
                                                              c.country) == r.lookup.countries->end();
                                         }),
                          all.end());
            const auto now = hangar::now_ms();
            const std::string id = "cra_" + hangar::new_id();
            sql("INSERT INTO config_registry_analyses (id, owner_project, url, target, host, domain, status, intent, "
                "created_at, expires_at, finished_at, failure, runs) VALUES (?, ?, ?, ?, ?, ?, 'running', NULL, ?, ?, "
                "NULL, NULL, '[]')",
                {id, project, req.json_body()["url"], r.lookup.target.normalized, r.lookup.target.host,
                 r.lookup.target.domain, now, now + retention_ms_});
            auto job = std::make_shared<Job>();
            job->id = id;
            job->project = project;
            json caller = req.caller();
            std::string base_url = req.base_url();
            {
                std::lock_guard lock(jobs_mutex_);
                // Finished runs' threads are joined here (they ended, or end right after done_).
                for (const auto &d : done_)
                    if (auto it = jobs_.find(d); it != jobs_.end()) {
                        if (it->second->thread.joinable()) it->second->thread.join();
                        jobs_.erase(it);
                    }
                done_.clear();
                jobs_[id] = job;
            }
            job->thread = std::jthread([this, job, all, caller, base_url, url = r.lookup.target.normalized] {
                run_analysis(*job, all, caller, base_url, url);
            });
            row = require(project, id);
        }
        json out = lookup(project, r.lookup);
        out["analysis"] = analysis_json(row);
        return out;
    }

    void cancel_job(Job &job) {
        job.canceled = true;
        std::set<std::string> sessions;
        {
            std::lock_guard lock(job.mutex);
            sessions = job.sessions;
        }
        // Ending the browsers ends their page loads too.
        for (const auto &s : sessions)
            try {
                call("browsers.delete", {{"project_id", job.project}, {"id", s}});
            } catch (const std::exception &) {
            }
    }

    cr::Run try_candidate(Job &job, const cr::Candidate &c, const json &caller, const std::string &base_url,
                          const std::string &url) {
        cr::Run run;
        run.candidate = c;
        json body = {{"headless", c.headless}, {"stealth", c.stealth}, {"timeout_seconds", 120}};
        body["proxy"] = c.proxy_id.empty() ? json{{"mode", "direct"}} : json{{"id", c.proxy_id}};
        std::string session;
        try {
            json b = call("browsers.create",
                          {{"project_id", job.project}, {"caller", caller}, {"base_url", base_url}, {"body", body}});
            session = b.value("session_id", "");
            {
                std::lock_guard lock(job.mutex);
                job.sessions.insert(session);
            }
            if (job.canceled) throw std::runtime_error("canceled");
            auto answer =
                instance_call(session, "POST", "/config_registry/probe",
                              json{{"url", url}, {"timeout_ms", load_timeout_ms_}, {"settle_ms", settle_ms_}}.dump(),
                              static_cast<std::uint32_t>(load_timeout_ms_ + settle_ms_ + 10000));
            json probe = json::parse(answer.body, nullptr, false);
            if (answer.status != 200 || !probe.is_object())
                throw std::runtime_error(
                    "the browser could not load the page (" +
                    (probe.is_object() ? probe.value("message", std::string("no answer")) : std::string("no answer")) +
                    ")");
            cr::Load l = cr::load_from_json(probe);
            auto v = cr::classify(l);
            run.verdict = v.verdict;
            run.reason = v.reason;
            run.evidence = {{"title", l.title}};
            if (l.status) run.evidence["status"] = *l.status;
            if (!l.error.empty()) run.evidence["error"] = l.error;
        } catch (const std::exception &e) {
            run.verdict = cr::Verdict::inconclusive;
            run.reason = job.canceled ? "canceled" : std::string(e.what()).substr(0, 300);
        }
        if (!session.empty()) {
            try {
                call("browsers.delete", {{"project_id", job.project}, {"id", session}});
            } catch (const std::exception &) {
            }
            std::lock_guard lock(job.mutex);
            job.sessions.erase(session);
        }
        run.observed_at = hangar::now_ms();
        return run;
    }

    void run_analysis(Job &job, const std::vector<cr::Candidate> &all, const json &caller, const std::string &base_url,
                      const std::string &url) {
        std::vector<cr::Run> runs;
        std::string failure;
        try {
            for (const auto &batch : cr::batches(all, parallelism_)) {
                if (job.canceled) break;
                std::vector<cr::Run> got(batch.size());
                {
                    std::vector<std::jthread> workers;
                    for (std::size_t i = 0; i < batch.size(); ++i)
                        workers.emplace_back([&, i] { got[i] = try_candidate(job, batch[i], caller, base_url, url); });
                }
                bool passed = false;
                for (auto &r : got) {
                    if (job.canceled && r.reason == "canceled") continue;
                    passed = passed || r.verdict == cr::Verdict::accessed;
                    runs.push_back(std::move(r));
                }
                json stored = json::array();
                for (const auto &r : runs)
                    stored.push_back(cr::run_json(r));
                sql("UPDATE config_registry_analyses SET runs = ? WHERE id = ?", {stored.dump(), job.id});
                if (passed) break; // every cheaper candidate has run: this batch holds the cheapest pass
            }
        } catch (const std::exception &e) {
            failure = e.what();
        }
        std::string status = job.canceled ? "canceled" : failure.empty() ? "completed" : "failed";
        json f = failure.empty() ? json(nullptr)
                                 : json(json{{"code", "analysis_failed"},
                                             {"message", "the analysis could not run its browsers; resolve again"}}
                                            .dump());
        sql("UPDATE config_registry_analyses SET status = ?, finished_at = ?, failure = ? WHERE id = ?",
            {status, hangar::now_ms(), f, job.id});
        if (!failure.empty()) warn("config registry analysis " + job.id + " failed: " + failure);
        std::lock_guard lock(jobs_mutex_);
        done_.insert(job.id);
    }

    void list_targets(Request &req, Response &res) {
        const std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        std::string search = req.query("search").value_or("");
        std::string sort_by = req.query("sort_by").value_or("last_requested_at");
        std::string order = req.query("sort_order").value_or("desc");
        static const std::set<std::string> kSorts = {"target", "analysis_status", "recommended_config",
                                                     "last_requested_at", "success_rate"};
        if (!kSorts.count(sort_by))
            v.fail("sort_by",
                   "must be one of target, analysis_status, recommended_config, last_requested_at, success_rate");
        if (order != "asc" && order != "desc") v.fail("sort_order", "must be asc or desc");
        v.throw_if_failed();
        std::transform(search.begin(), search.end(), search.begin(), [](unsigned char c) { return std::tolower(c); });
        json rows =
            sql("SELECT * FROM config_registry_analyses WHERE owner_project = ? ORDER BY created_at DESC, id DESC",
                {project});
        std::set<std::string> seen;
        std::vector<json> items;
        for (const auto &row : rows) {
            std::string t = row["target"].get<std::string>();
            if (!seen.insert(t).second) continue;
            if (!search.empty() && t.find(search) == std::string::npos) continue;
            json s = {{"target", t},
                      {"analysis_id", row["id"]},
                      {"analysis_status", row["status"]},
                      {"last_requested_at", hangar::rfc3339(row["created_at"].get<std::int64_t>())}};
            auto runs = runs_of(row);
            auto ok = cr::working(cr::aggregate({runs}), std::nullopt);
            if (!ok.empty()) {
                s["recommendation"] = cr::recommendation_json(ok[0], "exact", t);
                s["recommended_config_label"] = ok[0].candidate.label();
                s["success_rate"] = ok[0].success_rate();
            }
            s["_at"] = row["created_at"];
            items.push_back(std::move(s));
        }
        auto key = [&](const json &s) -> json {
            if (sort_by == "target") return s["target"];
            if (sort_by == "analysis_status") return s["analysis_status"];
            if (sort_by == "recommended_config") return s.value("recommended_config_label", "");
            if (sort_by == "success_rate") return s.value("success_rate", -1.0);
            return s["_at"];
        };
        std::stable_sort(items.begin(), items.end(), [&](const json &a, const json &b) {
            return order == "asc" ? key(a) < key(b) : key(b) < key(a);
        });
        json page = json::array();
        for (std::size_t i = static_cast<std::size_t>(paging.offset);
             i < items.size() && page.size() < static_cast<std::size_t>(paging.limit); ++i) {
            items[i].erase("_at");
            page.push_back(items[i]);
        }
        res.page(page, paging.offset, static_cast<std::size_t>(paging.offset) + page.size() < items.size());
    }

    void list_analyses(Request &req, Response &res) {
        const std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed();
        std::string search = req.query("search").value_or("");
        std::string like = "%";
        for (char c : search) {
            if (c == '%' || c == '_' || c == '\\') like += '\\';
            like += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
        like += "%";
        json rows =
            sql("SELECT * FROM config_registry_analyses WHERE owner_project = ? AND LOWER(url) LIKE ? ESCAPE '\\' "
                "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                {project, like, paging.limit + 1, paging.offset});
        json out = json::array();
        for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(paging.limit); ++i)
            out.push_back({{"analysis", analysis_json(rows[i])}, {"target", cr::target_json(target_of(rows[i]))}});
        res.page(out, paging.offset, rows.size() > static_cast<std::size_t>(paging.limit));
    }

    int parallelism_ = 2;
    std::int64_t max_running_ = 2;
    bool try_headful_ = true;
    std::int64_t load_timeout_ms_ = 20000, settle_ms_ = 1000, retention_ms_ = 30LL * 86400000;
    hangar::egress::Policy policy_;
    std::vector<cr::Seed> seeds_;
    std::mutex jobs_mutex_;
    std::map<std::string, std::shared_ptr<Job>> jobs_;
    std::set<std::string> done_;
};

} // namespace

HANGAR_PLUGIN(ConfigRegistryPlugin, "config_registry", "0.1.0", "browsers,proxies?", kMigrations,
              sizeof(kMigrations) / sizeof(kMigrations[0]))
