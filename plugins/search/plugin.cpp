// search: web search through a provider the operator runs or pays for (kernel-api-0131.md §1C,
// /search). SearXNG (self-hosted metasearch, its JSON API) serves; the SDK's ten paid providers are
// listed as unavailable until Hangar has their clients. See README.md.
#include "search_model.hpp"

#include <hangar/egress.hpp>
#include <hangar/outbound.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <Poco/Net/SSLManager.h>
#include <Poco/URI.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <string>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace sx = hangar::search;

// A retained search is a cache that expires within a day, not a resource that should keep its
// project from being deleted: the column is `owner_project`, not `project_id`, because the org
// plugin counts every table with a project_id column as the project's resources (409
// project_not_empty). Every read still filters by it.
const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE search_searches (id TEXT PRIMARY KEY, owner_project TEXT NOT NULL, body TEXT NOT NULL, "
        "provider_content TEXT NOT NULL, created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL);"
        "CREATE INDEX search_searches_expiry ON search_searches (expires_at);"},
};

class SearchPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        settings_.searxng_url = config("searxng_url", "");
        while (!settings_.searxng_url.empty() && settings_.searxng_url.back() == '/')
            settings_.searxng_url.pop_back();
        settings_.searxng_cap =
            static_cast<int>(std::clamp<std::int64_t>(config_int("searxng_max_results", 20), 1, 100));
        settings_.retention_ms = std::clamp<std::int64_t>(config_int("retention_seconds", 86400), 1, 86400) * 1000;
        timeout_ = std::chrono::milliseconds(std::clamp<std::int64_t>(config_int("timeout_ms", 10000), 100, 120000));
        max_answer_ =
            static_cast<std::size_t>(std::clamp<std::int64_t>(config_int("max_answer_bytes", 4 << 20), 4096, 64 << 20));
        std::string order = config("providers", "searxng");
        for (auto &c : order)
            if (c == ',') c = ' ';
        std::istringstream words(order);
        for (std::string slug; words >> slug;) {
            if (!sx::known_slug(slug)) {
                warn("search.ini providers: '" + slug + "' is not a provider; skipped");
                continue;
            }
            if (std::find(settings_.order.begin(), settings_.order.end(), slug) == settings_.order.end())
                settings_.order.push_back(slug);
        }
        for (const auto &slug : sx::sdk_slugs())
            if (!config(slug + "_api_key", "").empty()) settings_.keyed.insert(slug);
        policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                config_bool("server.fetch_allow_private_networks", false));
        // The SearXNG URL is the operator's own setting, trusted as such: its host and port join the
        // egress policy (the connection is still pinned to the addresses checked).
        if (!settings_.searxng_url.empty()) {
            try {
                Poco::URI u(settings_.searxng_url);
                if (u.getScheme() != "http" && u.getScheme() != "https") throw std::invalid_argument("not http(s)");
                std::string host = u.getHost();
                std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
                policy_.allow.push_back({host, u.getPort(), u.getPort()});
            } catch (const std::exception &e) {
                throw std::runtime_error("search.ini searxng_url is not an http(s) URL: " + std::string(e.what()));
            }
        }
        Poco::Net::initializeSSL();
        routes();
    }
    void stop_server() override { Poco::Net::uninitializeSSL(); }

private:
    struct Outcome {
        std::string outcome; // success | empty | error | timeout
        std::string error_code;
        bool retryable = false;
        sx::Parsed parsed;
        sx::SearxngCall call;
    };

    void routes();
    Outcome ask_searxng(const sx::Query &q, const sx::Target &t, std::chrono::milliseconds timeout) const;
    json search(Request &req);
    json require(const std::string &project, const std::string &id) const;
    json contents(Request &req);

    sx::Settings settings_;
    hangar::egress::Policy policy_;
    std::chrono::milliseconds timeout_{10000};
    std::size_t max_answer_ = 4 << 20;
};

SearchPlugin::Outcome SearchPlugin::ask_searxng(const sx::Query &q, const sx::Target &t,
                                                std::chrono::milliseconds timeout) const {
    Outcome o;
    o.call = sx::searxng_call(q, t.options, settings_.searxng_cap);
    hangar::outbound::Request r;
    r.url = settings_.searxng_url + "/search?" + o.call.query_string;
    r.timeout = timeout;
    r.headers.emplace_back("Accept", "application/json");
    try {
        auto answer = hangar::outbound::send(r, policy_, max_answer_);
        if (answer.status != 200) {
            o.outcome = "error";
            o.error_code = "http_" + std::to_string(answer.status);
            o.retryable = answer.status == 429 || answer.status >= 500;
            return o;
        }
        o.parsed = sx::parse_searxng(
            answer.body, o.call, [] { return "sr_" + hangar::new_id(); }, q.include_raw);
        o.outcome = o.parsed.results.empty() ? "empty" : "success";
    } catch (const hangar::outbound::Failure &f) {
        using Kind = hangar::outbound::Failure::Kind;
        o.outcome = f.kind() == Kind::timeout ? "timeout" : "error";
        o.error_code = f.kind() == Kind::timeout   ? "timeout"
                       : f.kind() == Kind::refused ? "address_refused"
                                                   : "unreachable";
        o.retryable = f.kind() != Kind::refused;
        warn(std::string("search: SearXNG: ") + f.what());
    } catch (const std::invalid_argument &e) {
        o.outcome = "error";
        o.error_code = "invalid_response";
        warn(std::string("search: SearXNG's answer: ") + e.what());
    }
    return o;
}

json SearchPlugin::search(Request &req) {
    const std::string project = req.project();
    const sx::Query q = sx::parse_query(req.json_body());
    sx::Plan plan = sx::plan(q, settings_);
    const auto start = std::chrono::steady_clock::now();
    const auto deadline =
        q.timeout_ms ? start + std::chrono::milliseconds(*q.timeout_ms) : std::chrono::steady_clock::time_point::max();
    json attempts = json::array();
    std::optional<Outcome> served, first_empty;
    std::string served_by;
    for (const auto &t : plan.attempts) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break; // no new attempt after the deadline
        auto left = deadline == std::chrono::steady_clock::time_point::max()
                        ? timeout_
                        : std::min(timeout_, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
        const auto began = std::chrono::steady_clock::now();
        // Only SearXNG is ever available (sx::availability), so every planned attempt is one.
        Outcome o = ask_searxng(q, t, std::max(left, std::chrono::milliseconds(1)));
        json a = {
            {"provider", t.provider},
            {"outcome", o.outcome},
            {"duration_ms",
             std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count()}};
        if (!o.error_code.empty()) {
            a["error_code"] = o.error_code;
            a["retryable"] = o.retryable;
        }
        attempts.push_back(a);
        if (o.outcome == "success") {
            served = std::move(o);
            served_by = t.provider;
            break;
        }
        if (o.outcome == "empty" && !first_empty) {
            first_empty = std::move(o);
            served_by = t.provider;
        }
        // A pinned provider has no next; otherwise fallback_on decides (an error that retrying
        // cannot mend does not advance either).
        const bool advance = q.strategy != "pinned" && q.fallback_on.count(attempts.back()["outcome"]) &&
                             (attempts.back()["outcome"] != "error" || attempts.back().value("retryable", false));
        if (!advance) break;
    }
    if (!served) served = std::move(first_empty);
    if (!served) {
        std::string trail;
        for (const auto &a : attempts)
            trail += (trail.empty() ? "" : "; ") + a["provider"].get<std::string>() + ": " +
                     a["outcome"].get<std::string>() +
                     (a.contains("error_code") ? " (" + a["error_code"].get<std::string>() + ")" : "");
        throw Error(502, "bad_gateway",
                    "no search provider answered: " +
                        (trail.empty() ? std::string("the deadline passed first") : trail));
    }
    const auto completed = hangar::now_ms();
    json warnings = plan.warnings;
    for (const auto &w : served->call.warnings)
        warnings.push_back(w);
    json results = served->parsed.results;
    json retained = json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
        const auto &text = served->parsed.content[i];
        retained.push_back(text ? json(*text) : json(nullptr));
        if (q.content) results[i]["content"] = sx::provider_content(text, completed, *q.content);
    }
    json out = {{"id", "srch_" + hangar::new_id()},
                {"query", q.query},
                {"provider", served_by},
                {"results", results},
                {"attempts", attempts},
                {"warnings", warnings},
                // A self-hosted SearXNG costs the caller nothing.
                {"usage", {{"results_count", results.size()}, {"content_fetches", 0}, {"cost", 0}}},
                {"expires_at", hangar::rfc3339(completed + settings_.retention_ms)}};
    if (served->parsed.answer) out["answer"] = *served->parsed.answer;
    if (q.include_raw) out["raw"] = served->parsed.raw;
    sql("DELETE FROM search_searches WHERE expires_at <= ?", {completed});
    sql("INSERT INTO search_searches (id, owner_project, body, provider_content, created_at, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        {out["id"], project, out.dump(), retained.dump(), completed, completed + settings_.retention_ms});
    return out;
}

json SearchPlugin::require(const std::string &project, const std::string &id) const {
    json rows = sql("SELECT * FROM search_searches WHERE id = ? AND owner_project = ? AND expires_at > ?",
                    {id, project, hangar::now_ms()});
    if (rows.empty())
        throw Error::not_found("search not found (searches are kept " + std::to_string(settings_.retention_ms / 1000) +
                               " s)");
    return rows[0];
}

namespace {
// The request's own browser (kernel-api-0131 §1C: one per request, tagged with the search id,
// counted by admission like any other), deleted however the request ends.
class TemporaryBrowser {
public:
    explicit TemporaryBrowser(std::function<void(const std::string &)> remove) : remove_(std::move(remove)) {}
    TemporaryBrowser(const TemporaryBrowser &) = delete;
    TemporaryBrowser &operator=(const TemporaryBrowser &) = delete;
    ~TemporaryBrowser() {
        if (!id.empty()) remove_(id);
    }
    std::string id;

private:
    std::function<void(const std::string &)> remove_;
};
} // namespace

json SearchPlugin::contents(Request &req) {
    const std::string project = req.project();
    json row = require(project, req.param("id"));
    const json search = json::parse(row["body"].get<std::string>());
    const json retained = json::parse(row["provider_content"].get<std::string>());
    const auto r = sx::parse_contents(req.json_body(), search);
    const auto fetched = row["created_at"].get<std::int64_t>();
    const auto start = std::chrono::steady_clock::now();
    const auto deadline =
        r.timeout_ms ? start + std::chrono::milliseconds(*r.timeout_ms) : std::chrono::steady_clock::time_point::max();
    // Decided once, so the browser made (or not) matches the results that need one.
    const auto now_ms = hangar::now_ms();
    std::vector<std::size_t> index;
    std::vector<bool> needs_browser;
    for (const auto &id : r.result_ids) {
        std::size_t i = 0;
        while (search["results"][i]["id"] != id) // parse_contents checked every id
            ++i;
        index.push_back(i);
        needs_browser.push_back(r.options.source != "provider" &&
                                !sx::retained_serves(r.options, retained.at(i).is_string(), fetched, now_ms));
    }
    const bool browser_needed = std::find(needs_browser.begin(), needs_browser.end(), true) != needs_browser.end();
    const std::string mode = r.options.browser_mode.value_or("render");
    TemporaryBrowser temporary([this, &project](const std::string &id) {
        try {
            call("browsers.delete", {{"project_id", project}, {"id", id}});
        } catch (const std::exception &e) {
            warn("search: the contents' temporary browser " + id + " was not deleted: " + e.what());
        }
    });
    std::string browser;
    if (browser_needed) {
        if (r.options.browser_id) {
            // The caller's own browser: 404 unless it is this project's and active.
            browser = call("browsers.session", {{"project_id", project}, {"id", *r.options.browser_id}})
                          .value("session_id", "");
        } else {
            json body = {{"headless", true},
                         {"stealth", true},
                         {"timeout_seconds", 600},
                         {"tags", {{"search_id", search["id"]}}}};
            try {
                temporary.id = call("browsers.create", {{"project_id", project},
                                                        {"caller", req.caller()},
                                                        {"base_url", req.base_url()},
                                                        {"body", body}})
                                   .value("session_id", "");
            } catch (const Error &e) {
                if (e.status() == 404)
                    throw Error::not_implemented("content.source=" + r.options.source +
                                                 " needs the browsers plugin, which this server does not run");
                throw; // 429 from admission included
            }
            browser = temporary.id;
        }
    }
    json contents = json::array();
    int fetches = 0;
    for (std::size_t k = 0; k < r.result_ids.size(); ++k) {
        const std::string &id = r.result_ids[k];
        const json &result = search["results"][index[k]];
        const json &text = retained.at(index[k]);
        json c;
        if (!needs_browser[k]) {
            c = sx::provider_content(text.is_string() ? std::optional<std::string>(text.get<std::string>())
                                                      : std::nullopt,
                                     fetched, r.options);
        } else {
            const auto now = std::chrono::steady_clock::now();
            if (now >= deadline) {
                c = sx::failed_content("timeout", "deadline_exceeded",
                                       "the request's timeout_ms passed before this result's turn", true);
            } else {
                std::int64_t per = r.options.timeout_ms.value_or(30000);
                if (deadline != std::chrono::steady_clock::time_point::max())
                    per = std::min<std::int64_t>(
                        per, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1);
                json ask = {{"project_id", project},      {"id", browser},    {"url", result["url"]}, {"mode", mode},
                            {"format", r.options.format}, {"timeout_ms", per}};
                if (r.options.max_chars) ask["max_chars"] = *r.options.max_chars;
                ++fetches;
                try {
                    c = sx::browser_content(call("browsers.page_text", ask), mode, r.options, hangar::now_ms());
                } catch (const Error &e) {
                    c = sx::failed_content("error", e.code(), e.what(), e.status() >= 500);
                    c["method"] = mode == "curl" ? "browser_curl" : "browser_render";
                }
            }
        }
        c["result_id"] = id;
        c["url"] = result["url"];
        contents.push_back(std::move(c));
    }
    return {{"search_id", search["id"]},
            {"contents", contents},
            {"usage", {{"results_count", contents.size()}, {"content_fetches", fetches}, {"cost", 0}}},
            {"warnings", json::array()}};
}

void SearchPlugin::routes() {
    route("GET", "/search/providers", [this](Request &req, Response &res) {
        req.project();
        json out = json::array();
        auto slug = req.query("slug");
        std::vector<std::string> all = settings_.order;
        for (const auto &s : sx::sdk_slugs())
            if (std::find(all.begin(), all.end(), s) == all.end()) all.push_back(s);
        if (std::find(all.begin(), all.end(), sx::kSearxng) == all.end()) all.insert(all.begin(), sx::kSearxng);
        for (const auto &s : all)
            if (!slug || slug->empty() || *slug == s) out.push_back(sx::provider_entry(s, settings_));
        res.json(out);
    });
    route("POST", "/search", [this](Request &req, Response &res) { res.json(search(req)); });
    route("GET", "/search/{id}", [this](Request &req, Response &res) {
        json row = require(req.project(), req.param("id"));
        res.json(json::parse(row["body"].get<std::string>()));
    });
    route("POST", "/search/{id}/contents", [this](Request &req, Response &res) { res.json(contents(req)); });
}

} // namespace

HANGAR_PLUGIN(SearchPlugin, "search", "0.1.0", "browsers?", kMigrations, sizeof(kMigrations) / sizeof(kMigrations[0]))
