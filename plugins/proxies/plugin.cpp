// proxies: Kernel API §2.9 and [78]-[83] (kernel-behaviour.md §14), and the route every
// browser's traffic takes.
//
// Server role: the /proxies routes, the operator's upstream pools for the managed types
// (etc/plugins.d/proxies.ini), health checks through the proxy, and the `proxies.attach` service
// the browsers plugin calls to check a proxy_id and to point a running instance at it. Passwords
// and CA bundles are sealed with hangar::Secrets and only opened to hand a route to an instance.
//
// Instance role: one forwarding proxy per browser (forwarder.hpp) that Chromium is pointed at
// once through the `proxies.forwarder` service; PUT /proxies/route swaps its upstream live. The
// request signer (signer.hpp) and the proxy's CA bundle in the instance's NSS trust store.
//
// Request signing (Web Bot Auth): one Ed25519 key per project, made on first use, the secret half
// sealed like passwords; the public keys at GET /.well-known/http-message-signatures-directory.
#include "allowlist.hpp"
#include "forwarder.hpp"
#include "net.hpp"
#include "proxies_model.hpp"
#include "routes.hpp"
#include "signer.hpp"
#include "signer_extension.hpp"
#include "signing.hpp"

#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>

#include <sodium.h>

#include <algorithm>
#include <fstream>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
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
    {2, R"sql(
CREATE TABLE proxies_signing_keys (
    project_id TEXT PRIMARY KEY,
    public_key TEXT NOT NULL,
    keyid TEXT NOT NULL,
    secret_key_sealed TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES
    ('proxies', 'proxies_signing_keys', 'project_id', 'secret_key_sealed');
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
        fetch_policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                      config_bool("server.fetch_allow_private_networks", false));
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
        service("proxies.network", [this](const json &in) { return network(in); });
        // A proxy selector {id?, name?} (auth connections): the id of the one active proxy of the
        // project it names. A name must match exactly one (ambiguous: 400), as Kernel's contract says.
        service("proxies.resolve", [this](const json &in) { return json{{"id", resolve(in)}}; });
        // The project's active proxies as GET /proxies renders them (no secrets): the config
        // registry's analyses try each one.
        service("proxies.list", [this](const json &in) {
            json out = json::array();
            for (const auto &row : sql("SELECT * FROM proxies_proxies WHERE project_id = ? AND deleted_at IS NULL "
                                       "ORDER BY created_at, id",
                                       {in.value("project_id", "")}))
                out.push_back(render(row));
            return json{{"proxies", out}};
        });

        sign_requests_ = config_bool("sign_requests", false);
        signature_ttl_ =
            static_cast<int>(std::clamp<std::int64_t>(config_int("signature_ttl_seconds", 3600), 1, 86400));
        std::string form = config("signature_agent_form", "string");
        if (!proxies::signing::parse_agent_form(form))
            throw std::runtime_error("signature_agent_form in proxies.ini must be string or dictionary, not \"" + form +
                                     "\"");
        signature_agent_form_ = form;
        signature_agent_ = config("signature_agent", config("server.public_url", ""));
        while (!signature_agent_.empty() && signature_agent_.back() == '/')
            signature_agent_.pop_back();
        route(
            "GET", proxies::signing::kDirectoryPath, [this](Request &, Response &r) { directory(r); },
            HANGAR_ROUTE_PUBLIC);
    }

    void start_instance() override {
        json spec = instance_spec();
        // Before Chromium starts (the browsers plugin depends on this one): it reads the trust
        // store once, at start.
        if (spec.is_object() && spec.contains("proxy_ca") && spec["proxy_ca"].is_string())
            install_ca(spec["proxy_ca"].get<std::string>());
        // A browser created to sign gets Hangar's signer extension (WebSockets): packed here, the
        // browsers plugin installs it by policy before Chromium starts (it depends on this plugin).
        bool extension = spec.is_object() && spec.value("sign", false) && sign_websockets();
        json forced = json::object();
        if (extension) forced = pack_signer_extension();
        service("proxies.signer_extension", [forced](const json &) { return forced; });
        signer_ = std::make_unique<proxies::Signer>(
            [this] {
                auto endpoint = hangar::cdp::endpoint_of(call("browsers.chromium", json::object()));
                if (!endpoint) throw std::runtime_error("Chromium is not running");
                return std::pair<int, std::string>(endpoint->port, endpoint->ws_path);
            },
            extension);
        route("PUT", "/proxies/signing", [this](Request &q, Response &r) {
            json body = q.json_body();
            std::optional<proxies::SigningKey> key;
            if (auto it = body.find("secret_key"); it != body.end() && it->is_string()) {
                key.emplace();
                key->secret_key = hangar::cdp::base64_decode(it->get<std::string>());
                key->keyid = body.value("keyid", "");
                key->agent = body.value("agent", "");
                key->ttl_seconds = body.value("ttl_seconds", 3600);
                key->form = proxies::signing::parse_agent_form(body.value("form", "string"))
                                .value_or(proxies::signing::AgentForm::string);
            }
            if (!signer_->set_key(std::move(key), std::chrono::seconds(10)))
                throw Error(502, "upstream_unavailable", "Chromium did not take request interception for signing");
            r.json({{"signing", body.contains("secret_key")}, {"signed", signer_->signed_count()}});
        });
        bool asked = spec.is_object() && spec.contains("proxy");
        // An allowlist is enforced here, so a browser that has one always gets a forwarder.
        bool fenced = spec.is_object() && spec.contains("allowed_hosts");
        // Without a proxy at create, a forwarder still runs so a later PATCH can swap one in live.
        if (!asked && !fenced && !config_bool("forward_all", true)) return;
        forwarder_ = std::make_unique<proxies::Forwarder>(asked, static_cast<int>(config_int("hold_ms", 15000)));
        // Fixed at create, in the spec: what goes direct (Kernel's defaults without the field).
        if (spec.is_object() && spec.contains("private_hosts"))
            forwarder_->set_private_hosts(proxies::PrivateHosts::parse(spec["private_hosts"]));
        // Before Chromium starts: its first request is already held to the list.
        if (fenced)
            forwarder_->set_allowlist(
                std::make_shared<const proxies::Allowlist>(proxies::Allowlist::parse(spec["allowed_hosts"])));
        // {allowed_hosts: [...] | null}: the server checked the list; null lifts it.
        route("PUT", "/proxies/allowlist", [this](Request &q, Response &r) {
            json hosts = q.json_body().value("allowed_hosts", json());
            forwarder_->set_allowlist(
                hosts.is_null() ? nullptr
                                : std::make_shared<const proxies::Allowlist>(proxies::Allowlist::parse(hosts)));
            r.json({{"allowed_hosts", hosts}});
        });
        service("proxies.forwarder", [this](const json &) {
            return json{{"proxy_server", "http://127.0.0.1:" + std::to_string(forwarder_->port())}};
        });
        // {host, port} → {code} when a tunnel there failed at the proxy lately, else {}.
        service("proxies.recent_failure", [this](const json &in) {
            auto port = in.value("port", 0);
            if (port < 1 || port > 65535) return json::object();
            auto failure = forwarder_->recent_failure(in.value("host", ""), static_cast<std::uint16_t>(port));
            return failure ? json{{"code", proxies::code_of(*failure)}} : json::object();
        });
        route("PUT", "/proxies/route", [this](Request &q, Response &r) {
            json body = q.json_body();
            proxies::Route route;
            if (auto it = body.find("upstream"); it != body.end() && !it->is_null())
                route.upstream = Upstream::from_json(*it);
            route.bypass_hosts = body.value("bypass_hosts", std::vector<std::string>{});
            // {hosts, upstream, bypass_hosts} each, from the create; a later swap leaves them out.
            bool with_routes = body.contains("routes");
            for (const auto &r : body.value("routes", json::array()))
                route.host_routes.push_back({r.at("hosts").get<std::vector<std::string>>(),
                                             Upstream::from_json(r.at("upstream")),
                                             r.value("bypass_hosts", std::vector<std::string>{})});
            auto t0 = std::chrono::steady_clock::now();
            forwarder_->set_route(std::move(route), with_routes);
            auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
            r.json({{"swap_us", us.count()}});
        });
    }

    void stop_instance() override {
        signer_.reset();
        forwarder_.reset();
    }

    // {id, update_url}: the CRX and its update manifest in <run dir>/signer/, which Chromium reads
    // as file:// URLs (no network).
    json pack_signer_extension() {
        namespace ext = proxies::extension;
        std::string dir = instance_run_dir() + "/signer";
        std::filesystem::create_directories(dir);
        auto packed = ext::pack(ext::zip(ext::files()));
        auto write = [](const std::string &path, const std::string &content) {
            std::ofstream out(path, std::ios::binary | std::ios::trunc);
            out << content;
            if (!out.flush()) throw std::runtime_error("cannot write " + path);
        };
        write(dir + "/signer.crx", packed.crx);
        write(dir + "/update.xml", ext::update_manifest(packed.id, "file://" + dir + "/signer.crx"));
        return {{"id", packed.id}, {"update_url", "file://" + dir + "/update.xml"}};
    }

private:
    // ---- store ----

    std::optional<json> find(const std::string &project, const std::string &id) const {
        json rows =
            sql("SELECT * FROM proxies_proxies WHERE project_id = ? AND id = ? AND deleted_at IS NULL", {project, id});
        if (rows.empty()) return std::nullopt;
        return rows.front();
    }

    std::string resolve(const json &in) const {
        std::string project = in.value("project_id", "");
        const json sel = in.value("proxy", json::object());
        if (sel.contains("id") && sel["id"].is_string()) {
            std::string id = sel["id"].get<std::string>();
            json row = require(project, id);
            if (sel.contains("name") && sel["name"].is_string() && row.at("name") != sel["name"])
                throw Error::invalid("proxy", "id and name name different proxies");
            return id;
        }
        if (!sel.contains("name") || !sel["name"].is_string()) throw Error::invalid("proxy", "must be {id} or {name}");
        std::string name = sel["name"].get<std::string>();
        json rows = sql("SELECT id FROM proxies_proxies WHERE project_id = ? AND name = ? AND deleted_at IS NULL",
                        {project, name});
        if (rows.empty()) throw Error::not_found("proxy \"" + name + "\" not found");
        if (rows.size() > 1)
            throw Error::invalid("proxy", "the name \"" + name + "\" matches " + std::to_string(rows.size()) +
                                              " proxies; select it by id");
        return rows.front().at("id").get<std::string>();
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
            // A custom proxy's host is the tenant's word, dialled from the server itself; the
            // pools' upstreams are the operator's.
            bool custom = row.at("type").get<std::string>() == "custom";
            result = proxies::http_get(&u, *url, check_timeout_, custom ? &fetch_policy_ : nullptr);
        } catch (const hangar::egress::Refused &e) {
            throw Error::bad_request(std::string("the proxy cannot be checked from this server: ") + e.what(),
                                     {{"invalid_input", "config.host: " + std::string(e.what())}});
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

    // {allowed_hosts, start_url?, instance_id?} -> {allowed_hosts}: the list checked (400 naming
    // the entry and the rule) and lower-cased; a start_url must be one it allows. With
    // instance_id, that instance's forwarder enforces it from now on (null lifts it).
    json network(const json &in) {
        json hosts = in.value("allowed_hosts", json());
        json out = {{"allowed_hosts", nullptr}};
        // private_hosts (create only): checked, lower-cased, and never also in the allowlist.
        std::set<std::string> private_names;
        if (auto p = in.value("private_hosts", json()); !p.is_null()) {
            auto direct = proxies::PrivateHosts::parse(p);
            out["private_hosts"] = direct.entries();
            for (auto &name : direct.name_patterns())
                private_names.insert(std::move(name));
        }
        if (!hosts.is_null()) {
            auto list = proxies::Allowlist::parse(hosts);
            if (auto url = in.value("start_url", json()); url.is_string() && !list.allows_url(url.get<std::string>()))
                throw Error::invalid("start_url", "must be a URL network.allowed_hosts allows");
            for (std::size_t i = 0; i < list.entries().size(); ++i)
                if (private_names.count(list.entries()[i]))
                    throw Error::invalid("network.allowed_hosts[" + std::to_string(i) + "]",
                                         "\"" + list.entries()[i] +
                                             "\" is in network.private_hosts too: a host is reached either through the "
                                             "allowlisted way out or directly");
            out["allowed_hosts"] = list.entries();
        }
        std::string instance = in.value("instance_id", "");
        if (instance.empty()) return out;
        auto answer = instance_call(instance, "PUT", "/proxies/allowlist", out.dump(), 10000);
        if (answer.status != 200)
            throw Error(502, "upstream_unavailable",
                        "the browser's forwarding proxy did not take the new allowlist (status " +
                            std::to_string(answer.status) + ")");
        return out;
    }

    // {project_id, proxy_id, instance_id?}: 404 unless proxy_id ("" = direct) is a live proxy of
    // the project; with instance_id, that instance's forwarder takes the route now.
    //
    // `sign` (the browser asked for the web-bot-auth extension) or the operator's sign_requests:
    // the answer says `sign`, and with instance_id that instance signs from now on with the
    // project's key. Without instance_id the answer also carries the proxy's `ca_bundle`, which
    // the instance installs in its trust store before Chromium starts. A missing `proxy_id`
    // leaves the route as it is.
    json attach(const json &in) {
        std::string project = in.value("project_id", "");
        bool has_proxy = in.contains("proxy_id") && in["proxy_id"].is_string();
        std::string proxy_id = has_proxy ? in["proxy_id"].get<std::string>() : "";
        // Only a launch or hand-over names `sign`; a swap or a release leaves signing as it is.
        bool sign = in.contains("sign") && (in.value("sign", false) || sign_requests_);
        // A signing instance gets the signer extension (start_instance), which only a cold start
        // installs: the browsers plugin serves it without a warm spare.
        json out = {{"proxy_id", proxy_id}, {"sign", sign}, {"signer_extension", sign && sign_websockets()}};
        json route = {{"upstream", nullptr}, {"bypass_hosts", json::array()}};
        std::string ca_bundles; // PEM, every proxy's on the way; the browser trusts them from its start
        auto add_ca = [&](const std::string &pem) {
            if (pem.empty()) return;
            if (!ca_bundles.empty() && ca_bundles.back() != '\n') ca_bundles += '\n';
            ca_bundles += pem;
        };
        // The forwarder's view of one project proxy: where to send, what goes around it.
        auto upstream_route = [&](const std::string &id) {
            json row = require(project, id);
            Upstream u = upstream_of(row);
            add_ca(u.ca_bundle);
            return json{{"upstream", u.to_json()},
                        {"bypass_hosts", json::parse(row.at("bypass_hosts").get<std::string>())}};
        };
        if (!proxy_id.empty()) route.update(upstream_route(proxy_id));
        // network.proxy_routes [{hosts, proxy_id}]: checked (400 naming the host, 404 for a proxy not
        // the project's) and answered lower-case; the instance gets each with its proxy's route.
        bool has_routes = in.contains("proxy_routes") && in["proxy_routes"].is_array();
        if (has_routes) {
            auto hosts = proxies::parse_route_hosts(in["proxy_routes"]);
            json checked = json::array(), routes = json::array();
            for (std::size_t i = 0; i < hosts.size(); ++i) {
                std::string id = in["proxy_routes"][i].value("proxy_id", "");
                json one = upstream_route(id);
                one["hosts"] = hosts[i];
                checked.push_back({{"hosts", hosts[i]}, {"proxy_id", id}});
                routes.push_back(std::move(one));
            }
            out["proxy_routes"] = checked;
            route["routes"] = routes;
        }
        if (!ca_bundles.empty()) out["ca_bundle"] = ca_bundles;
        std::string instance = in.value("instance_id", "");
        if (instance.empty()) return out;
        if (has_proxy || has_routes) {
            auto answer = instance_call(instance, "PUT", "/proxies/route", route.dump(), 10000);
            if (answer.status != 200)
                throw Error(502, "upstream_unavailable",
                            "the browser's forwarding proxy did not take the new route (status " +
                                std::to_string(answer.status) + ")");
            json reply = json::parse(answer.body, nullptr, false);
            out["swap_us"] = reply.is_object() ? reply.value("swap_us", 0) : 0;
        }
        if (sign) {
            auto key = signing_key(project);
            std::string agent = agent_url(in.value("base_url", ""));
            if (!proxies::signing::valid_agent(agent))
                throw Error::internal("request signing needs the server's public URL ([server] public_url, or "
                                      "signature_agent in proxies.ini)");
            json body = {{"secret_key", proxies::signing::base64(key.secret_key)},
                         {"keyid", key.keyid},
                         {"agent", agent},
                         {"ttl_seconds", signature_ttl_},
                         {"form", signature_agent_form_}};
            auto answer = instance_call(instance, "PUT", "/proxies/signing", body.dump(), 15000);
            if (answer.status != 200)
                throw Error(502, "upstream_unavailable",
                            "the browser did not start signing its requests (status " + std::to_string(answer.status) +
                                ")");
        }
        return out;
    }

    // ---- request signing ----

    struct ProjectKey {
        std::string public_key;
        std::string secret_key;
        std::string keyid;
    };

    // The project's key, made on first use. Two first uses at once both insert (the second does
    // nothing) and then read the one row that won.
    ProjectKey signing_key(const std::string &project) {
        auto read = [&]() -> std::optional<ProjectKey> {
            json rows = sql("SELECT * FROM proxies_signing_keys WHERE project_id = ?", {project});
            if (rows.empty()) return std::nullopt;
            ProjectKey k;
            k.public_key = hangar::cdp::base64_decode(rows[0].at("public_key").get<std::string>());
            k.keyid = rows[0].at("keyid").get<std::string>();
            k.secret_key = secrets_->open(rows[0].at("secret_key_sealed").get<std::string>());
            return k;
        };
        if (auto k = read()) return *k;
        auto pair = proxies::signing::generate();
        sql("INSERT INTO proxies_signing_keys (project_id, public_key, keyid, secret_key_sealed, created_at) VALUES "
            "(?, ?, ?, ?, ?) ON CONFLICT (project_id) DO NOTHING",
            {project, proxies::signing::base64(pair.public_key), proxies::signing::thumbprint(pair.public_key),
             secrets_->seal(pair.secret_key), hangar::now_ms()});
        sodium_memzero(pair.secret_key.data(), pair.secret_key.size());
        if (auto k = read()) return *k;
        throw Error::internal("the project's signing key could not be stored");
    }

    // Signature-Agent: the origin whose directory holds the keys. The operator's setting, else
    // the URL the client reached the API at (pools fill without a request: the last one seen).
    std::string agent_url(std::string base_url) {
        while (!base_url.empty() && base_url.back() == '/')
            base_url.pop_back();
        if (!signature_agent_.empty()) return signature_agent_;
        std::lock_guard lock(agent_mutex_);
        if (!base_url.empty()) last_base_url_ = base_url;
        if (!last_base_url_.empty()) return last_base_url_;
        return "http://" + config("server.listen", "127.0.0.1:8080");
    }

    // Every project's public key: a verifier finds the one a request names by its keyid.
    void directory(Response &res) {
        json keys = json::array();
        for (const auto &row : sql("SELECT public_key FROM proxies_signing_keys ORDER BY created_at, project_id"))
            keys.push_back(
                proxies::signing::public_jwk(hangar::cdp::base64_decode(row.at("public_key").get<std::string>())));
        res.header("Cache-Control", "max-age=300");
        res.body(proxies::signing::kDirectoryMediaType, json{{"keys", keys}}.dump());
    }

    // The proxy's CA bundle as trusted roots of this instance only: an NSS database in the
    // instance's home, which is where Chromium on Linux looks (~/.pki/nssdb), made with certutil
    // (Debian libnss3-tools). One nickname per certificate: certutil -A takes the first of a file.
    void install_ca(const std::string &pem) {
        std::string db_dir = instance_home_dir() + "/.pki/nssdb";
        hangar::proc::make_dirs(db_dir);
        std::string db = "sql:" + db_dir;
        std::string work = instance_run_dir() + "/proxy-ca";
        hangar::proc::make_dirs(work);
        auto certutil = config("certutil_path", "/usr/bin/certutil");
        if (!hangar::proc::run_capture(certutil, {"-N", "-d", db, "--empty-password"}, std::chrono::seconds(10))) {
            warn("the proxy's CA bundle was not installed: certutil could not create the trust store");
            return;
        }
        const std::string begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----";
        int n = 0;
        for (std::size_t at = pem.find(begin); at != std::string::npos; at = pem.find(begin, at + 1)) {
            auto stop = pem.find(end, at);
            if (stop == std::string::npos) break;
            std::string file = work + "/ca-" + std::to_string(n) + ".pem";
            std::ofstream(file) << pem.substr(at, stop + end.size() - at) << "\n";
            auto out = hangar::proc::run_capture(
                certutil, {"-A", "-d", db, "-n", "hangar-proxy-ca-" + std::to_string(n), "-t", "C,,", "-i", file},
                std::chrono::seconds(10));
            if (!out) warn("a certificate of the proxy's CA bundle was not installed");
            ++n;
        }
    }

    std::unique_ptr<hangar::Secrets> secrets_;
    std::string check_url_;
    std::chrono::milliseconds check_timeout_{10000};
    hangar::egress::Policy fetch_policy_; // [server] fetch_allow*: what a custom proxy's check may dial
    std::map<std::string, std::vector<Upstream>> pools_;
    std::mutex rng_mutex_;
    std::mt19937_64 rng_{std::random_device{}()};
    std::unique_ptr<proxies::Forwarder> forwarder_;
    std::unique_ptr<proxies::Signer> signer_;
    bool sign_requests_ = false;
    // Signing browsers get the signer extension (WebSockets' upgrade requests); an operator may
    // turn it off to keep signing browsers on warm spares (README, "WebSockets").
    bool sign_websockets() { return config_bool("sign_websockets", true); }
    int signature_ttl_ = 3600;
    std::string signature_agent_form_ = "string";
    std::string signature_agent_;
    std::mutex agent_mutex_;
    std::string last_base_url_;
};

} // namespace

HANGAR_PLUGIN(ProxiesPlugin, "proxies", "0.1.0", nullptr, migrations, sizeof(migrations) / sizeof(migrations[0]))
