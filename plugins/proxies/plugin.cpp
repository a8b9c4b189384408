// proxies: Kernel API §2.9 and [78]-[83] (kernel-behaviour.md §14), and the route every
// browser's traffic takes.
//
// Server role: the /proxies routes, the operator's upstream pools for the managed types
// (etc/plugins.d/proxies.ini), health checks through the proxy, and the `proxies.attach` service
// the browsers plugin calls to check a proxy_id and to point a running instance at it. Passwords
// and CA bundles are sealed with hangar::Secrets and only opened to hand a route to an instance.
//
// Instance role: one forwarding proxy per browser (forwarder.hpp) that Chromium is pointed at
// once through the `proxies.forwarder` service; PUT /proxies/route swaps its upstream live.
#include "forwarder.hpp"
#include "net.hpp"
#include "proxies_model.hpp"

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using proxies::Upstream;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE proxies_proxies (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT,
    type TEXT NOT NULL,
    protocol TEXT NOT NULL,
    config TEXT NOT NULL,
    bypass_hosts TEXT NOT NULL DEFAULT '[]',
    password_sealed TEXT,
    ca_bundle_sealed TEXT,
    status TEXT,
    ip_address TEXT,
    last_checked BIGINT,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE INDEX proxies_proxies_project ON proxies_proxies (project_id, deleted_at, created_at);
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES
    ('proxies', 'proxies_proxies', 'id', 'password_sealed'),
    ('proxies', 'proxies_proxies', 'id', 'ca_bundle_sealed');
)sql"},
};

const char *const kManagedTypes[] = {"datacenter", "isp", "residential", "mobile"};

class ProxiesPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        secrets_ = std::make_unique<hangar::Secrets>(
            hangar::secrets::key_file(config("secrets.key_file"), config("server.data_dir")));
        check_url_ = config("check_url", "https://api.ipify.org/?format=json");
        check_timeout_ = std::chrono::milliseconds(config_int("check_timeout_ms", 10000));
        for (const char *type : kManagedTypes) {
            try {
                pools_[type] = proxies::parse_pool(config(type, ""));
            } catch (const std::invalid_argument &e) {
                // Never quote the line: it may carry a password.
                warn(std::string("proxies.ini: ") + type + ": " + e.what() + "; no " + type + " upstreams");
            }
        }

        route("POST", "/proxies", [this](Request &q, Response &r) { create(q, r); });
        route("GET", "/proxies", [this](Request &q, Response &r) { list(q, r); });
        route("GET", "/proxies/{id}",
              [this](Request &q, Response &r) { r.json(render(require(q.project(), q.param("id")))); });
        route("PATCH", "/proxies/{id}", [this](Request &q, Response &r) {
            std::string project = q.project();
            std::string name = proxies::parse_rename(q.json_body());
            json row = require(project, q.param("id"));
            sql("UPDATE proxies_proxies SET name = ? WHERE id = ?", {name, row.at("id")});
            r.json(render(require(project, row.at("id").get<std::string>())));
        });
        route("DELETE", "/proxies/{id}", [this](Request &q, Response &r) {
            json row = require(q.project(), q.param("id"));
            sql("UPDATE proxies_proxies SET deleted_at = ? WHERE id = ?", {hangar::now_ms(), row.at("id")});
            r.no_content();
        });
        route("POST", "/proxies/{id}/check", [this](Request &q, Response &r) { check(q, r); });

        service("proxies.attach", [this](const json &in) { return attach(in); });
    }

    void start_instance() override {
        json spec = instance_spec();
        bool asked = spec.is_object() && spec.contains("proxy");
        // Without a proxy at create, a forwarder still runs so a later PATCH can swap one in live.
        if (!asked && !config_bool("forward_all", true)) return;
        forwarder_ = std::make_unique<proxies::Forwarder>(asked, static_cast<int>(config_int("hold_ms", 15000)));
        service("proxies.forwarder", [this](const json &) {
            return json{{"proxy_server", "http://127.0.0.1:" + std::to_string(forwarder_->port())}};
        });
        route("PUT", "/proxies/route", [this](Request &q, Response &r) {
            json body = q.json_body();
            proxies::Route route;
            if (auto it = body.find("upstream"); it != body.end() && !it->is_null())
                route.upstream = Upstream::from_json(*it);
            route.bypass_hosts = body.value("bypass_hosts", std::vector<std::string>{});
            auto t0 = std::chrono::steady_clock::now();
            forwarder_->set_route(std::move(route));
            auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
            r.json({{"swap_us", us.count()}});
        });
    }

    void stop_instance() override { forwarder_.reset(); }

private:
    // ---- store ----

    std::optional<json> find(const std::string &project, const std::string &id) const {
        json rows =
            sql("SELECT * FROM proxies_proxies WHERE project_id = ? AND id = ? AND deleted_at IS NULL", {project, id});
        if (rows.empty()) return std::nullopt;
        return rows.front();
    }

    json require(const std::string &project, const std::string &id) const {
        if (auto row = find(project, id)) return *row;
        throw Error::not_found("proxy \"" + id + "\" not found");
    }

    static json render(const json &row) {
        json out = {{"id", row.at("id")},
                    {"type", row.at("type")},
                    {"protocol", row.at("protocol")},
                    {"config", json::parse(row.at("config").get<std::string>())},
                    {"bypass_hosts", json::parse(row.at("bypass_hosts").get<std::string>())}};
        if (row.at("name").is_string()) out["name"] = row.at("name");
        if (row.at("status").is_string()) out["status"] = row.at("status");
        if (row.at("ip_address").is_string()) out["ip_address"] = row.at("ip_address");
        if (row.at("last_checked").is_number())
            out["last_checked"] = hangar::rfc3339(row.at("last_checked").get<std::int64_t>());
        return out;
    }

    // ---- routes ----

    void create(Request &req, Response &res) {
        std::string project = req.project();
        proxies::NewProxy p = proxies::parse_create(req.json_body());
        if (proxies::is_managed(p.type)) {
            const auto &pool = pools_[p.type];
            if (pool.empty())
                throw Error(400, "proxy_type_unavailable",
                            "no " + p.type + " upstreams are configured on this server (etc/plugins.d/proxies.ini)");
            auto match = proxies::match_pool(pool, p.config);
            if (match.upstreams.empty()) {
                std::vector<Error::Detail> details;
                for (const auto &s : match.suggestions)
                    details.push_back({"suggestion", s});
                throw Error(400, "no_matching_upstream",
                            "no " + p.type + " upstream matches the requested geo; configured: " +
                                (match.suggestions.empty()
                                     ? std::string("none")
                                     : match.suggestions.front() + (match.suggestions.size() > 1 ? ", ..." : "")),
                            details);
            }
        }
        std::string id = hangar::new_id();
        sql("INSERT INTO proxies_proxies (id, org_id, project_id, name, type, protocol, config, bypass_hosts, "
            "password_sealed, ca_bundle_sealed, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            {id, req.caller().value("org_id", ""), project, p.name ? json(*p.name) : json(), p.type, p.protocol,
             p.config.dump(), json(p.bypass_hosts).dump(), p.password ? json(secrets_->seal(*p.password)) : json(),
             p.ca_bundle ? json(secrets_->seal(*p.ca_bundle)) : json(), hangar::now_ms()});
        res.json(render(require(project, id)));
    }

    void list(Request &req, Response &res) {
        std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE project_id = ? AND deleted_at IS NULL";
        json params = json::array({project});
        if (auto name = req.query("name"); name && !name->empty()) {
            where += " AND LOWER(name) = LOWER(?)";
            params.push_back(*name);
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(COALESCE(name, '')), LOWER(?)) > 0 OR "
                     "INSTR(LOWER(COALESCE(json_extract(config, '$.host'), '')), LOWER(?)) > 0 OR "
                     "INSTR(LOWER(COALESCE(ip_address, '')), LOWER(?)) > 0 OR id = ?)";
            params.insert(params.end(), {*q, *q, *q, *q});
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM proxies_proxies" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [](const json &row) { return render(row); });
    }

    // The upstream a stored proxy resolves to now (secrets opened). Throws Error 400 when a
    // managed type lost its upstreams in the configuration.
    Upstream upstream_of(const json &row) {
        std::string type = row.at("type").get<std::string>();
        json config = json::parse(row.at("config").get<std::string>());
        if (type == "custom") {
            Upstream u;
            u.scheme = row.at("protocol").get<std::string>();
            u.host = config.at("host").get<std::string>();
            u.port = config.at("port").get<std::uint16_t>();
            u.username = config.value("username", "");
            if (row.at("password_sealed").is_string())
                u.password = secrets_->open(row.at("password_sealed").get<std::string>());
            if (row.at("ca_bundle_sealed").is_string())
                u.ca_bundle = secrets_->open(row.at("ca_bundle_sealed").get<std::string>());
            return u;
        }
        auto match = proxies::match_pool(pools_[type], config);
        if (match.upstreams.empty())
            throw Error(400, "no_matching_upstream",
                        "no " + type + " upstream configured on this server matches proxy " +
                            row.at("id").get<std::string>());
        // Residential and mobile exits rotate; datacenter and ISP keep one address.
        if (type == "residential" || type == "mobile") {
            std::lock_guard lock(rng_mutex_);
            return match.upstreams[std::uniform_int_distribution<std::size_t>(0, match.upstreams.size() - 1)(rng_)];
        }
        return match.upstreams.front();
    }

    void check(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body(true);
        std::optional<std::string> given;
        if (auto it = body.find("url"); it != body.end() && !it->is_null() && *it != "") {
            if (!it->is_string() || !proxies::parse_url(it->get_ref<const std::string &>()))
                throw Error::invalid("url", "must be an http or https URL");
            given = it->get<std::string>();
        }
        json row = require(project, req.param("id"));
        auto url = proxies::parse_url(given.value_or(check_url_));
        if (!url) throw Error::internal("check_url in proxies.ini is not an http(s) URL");
        proxies::CheckResult result;
        try {
            Upstream u = upstream_of(row);
            result = proxies::http_get(&u, *url, check_timeout_);
        } catch (const Error &e) {
            result.reason = e.what();
        }
        auto now = hangar::now_ms();
        std::string status = result.ok ? "available" : "unavailable";
        std::optional<std::string> ip = result.ok ? proxies::exit_address(result.body) : std::nullopt;
        if (!given) {
            sql("UPDATE proxies_proxies SET status = ?, last_checked = ?, ip_address = COALESCE(?, ip_address) WHERE "
                "id = ?",
                {status, now, ip ? json(*ip) : json(), row.at("id")});
            row = require(project, row.at("id").get<std::string>());
        } else {
            row["status"] = status;
            row["last_checked"] = now;
            if (ip) row["ip_address"] = *ip;
        }
        json out = render(row);
        if (!result.ok) out["status_reason"] = result.reason;
        res.json(out);
    }

    // ---- the service browsers call ----

    // {project_id, proxy_id, instance_id?}: 404 unless proxy_id ("" = direct) is a live proxy of
    // the project; with instance_id, that instance's forwarder takes the route now.
    json attach(const json &in) {
        std::string project = in.value("project_id", "");
        std::string proxy_id = in.value("proxy_id", "");
        json route = {{"upstream", nullptr}, {"bypass_hosts", json::array()}};
        if (!proxy_id.empty()) {
            json row = require(project, proxy_id);
            route["upstream"] = upstream_of(row).to_json();
            route["bypass_hosts"] = json::parse(row.at("bypass_hosts").get<std::string>());
        }
        std::string instance = in.value("instance_id", "");
        if (instance.empty()) return {{"proxy_id", proxy_id}};
        auto answer = instance_call(instance, "PUT", "/proxies/route", route.dump(), 10000);
        if (answer.status != 200)
            throw Error(502, "upstream_unavailable",
                        "the browser's forwarding proxy did not take the new route (status " +
                            std::to_string(answer.status) + ")");
        json reply = json::parse(answer.body, nullptr, false);
        return {{"proxy_id", proxy_id}, {"swap_us", reply.is_object() ? reply.value("swap_us", 0) : 0}};
    }

    std::unique_ptr<hangar::Secrets> secrets_;
    std::string check_url_;
    std::chrono::milliseconds check_timeout_{10000};
    std::map<std::string, std::vector<Upstream>> pools_;
    std::mutex rng_mutex_;
    std::mt19937_64 rng_{std::random_device{}()};
    std::unique_ptr<proxies::Forwarder> forwarder_;
};

} // namespace

HANGAR_PLUGIN(ProxiesPlugin, "proxies", "0.1.0", nullptr, migrations, sizeof(migrations) / sizeof(migrations[0]))
