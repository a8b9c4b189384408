// vaults: kernel-api-0131 §1A (vaults, items, item operations, item events) and §1B (vault
// provider configs).
//
// Server half: vaults and items in the store, item values sealed with hangar::Secrets (one sealed
// JSON object per item), the per-vault P-256 key for encrypted_value, events with long-poll, the
// `vaults.resolve` service the browsers plugin calls for `vaults` on POST /browsers, and the
// operations: the item is resolved and its values opened here, then handed to the browser's
// instance over instance_call (fill) or to the playwright plugin's WebMCP route in that instance
// (webmcp_invoke). Values never go into a response, a log line, an event or an error message.
//
// Instance half (inside the browser's sandbox): POST /vaults/fill types values into the page over
// CDP on the instance's own Chromium (hangar/cdp.hpp), never submitting anything.
#include "vaults_model.hpp"

#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/service.hpp>
#include <hangar/web.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using namespace std::chrono_literals;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE vaults_vaults (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kid TEXT,
    key_x TEXT,
    key_y TEXT,
    key_sealed TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX vaults_vaults_name ON vaults_vaults (project_id, LOWER(name));
CREATE UNIQUE INDEX vaults_vaults_kid ON vaults_vaults (kid);
CREATE TABLE vaults_items (
    id TEXT PRIMARY KEY,
    vault_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    item_key TEXT NOT NULL,
    type TEXT NOT NULL,
    provider TEXT NOT NULL,
    spec TEXT NOT NULL,
    fields TEXT NOT NULL DEFAULT '[]',
    values_sealed TEXT,
    secrets_sealed TEXT,
    status TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 1,
    write_token TEXT,
    provider_config_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX vaults_items_key ON vaults_items (vault_id, item_key);
CREATE INDEX vaults_items_provider_config ON vaults_items (provider_config_id);
CREATE TABLE vaults_events (
    id TEXT PRIMARY KEY,
    item_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    name TEXT NOT NULL,
    browser_id TEXT,
    data TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX vaults_events_seq ON vaults_events (item_id, seq);
CREATE TABLE vaults_provider_configs (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    name TEXT NOT NULL,
    client_id TEXT NOT NULL,
    secret_sealed TEXT NOT NULL,
    publishable_key TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX vaults_provider_configs_name ON vaults_provider_configs (org_id, LOWER(name));
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES
    ('vaults', 'vaults_vaults', 'id', 'key_sealed'),
    ('vaults', 'vaults_items', 'id', 'values_sealed'),
    ('vaults', 'vaults_items', 'id', 'secrets_sealed'),
    ('vaults', 'vaults_provider_configs', 'id', 'secret_sealed');
)sql"},
    // The active hosted collection session of a kernel credential (the `collect` action): its URL
    // (a bearer secret, sealed) and when it expires; cleared when it is used or the item changes.
    {2, R"sql(
ALTER TABLE vaults_items ADD COLUMN collect_sealed TEXT;
ALTER TABLE vaults_items ADD COLUMN collect_expires BIGINT;
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES
    ('vaults', 'vaults_items', 'id', 'collect_sealed');
)sql"},
};

constexpr std::int64_t kCollectMs = std::int64_t{30} * 60 * 1000; // a hosted collection link's life (§1A)

constexpr int kMaxWaitSeconds = 60;

// A member of what a browser's agent answered, as text ("" or `fallback` when it is missing or
// not a string): nothing an instance says is trusted to have the expected type.
std::string text_of(const json &answer, const char *name, const std::string &fallback = {}) {
    if (!answer.is_object()) return fallback;
    auto it = answer.find(name);
    return it != answer.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool valid_item_key(const std::string &key) {
    return hangar::valid_resource_name(key);
}

json parse_json(const json &row, const char *column, json fallback) {
    auto it = row.find(column);
    if (it == row.end() || !it->is_string()) return fallback;
    json parsed = json::parse(it->get<std::string>(), nullptr, false);
    return parsed.is_discarded() ? fallback : parsed;
}

std::string org_of(const Request &req) {
    std::string org = req.caller().value("org_id", "");
    if (org.empty()) throw Error::unauthorized("no organisation for this caller");
    return org;
}

// Provider configs are the organisation's: a project-scoped key may not change them (§1B).
std::string org_admin(const Request &req) {
    if (req.caller().value("project_scoped", false))
        throw Error::forbidden("vault provider configs belong to the organisation: a project-scoped API key cannot "
                               "change them");
    return org_of(req);
}

int wait_seconds(const Request &q) {
    auto w = q.query("wait");
    if (!w || w->empty()) return 0;
    try {
        std::size_t used = 0;
        int n = std::stoi(*w, &used);
        if (used != w->size() || n < 0) throw std::invalid_argument("negative");
        return std::min(n, kMaxWaitSeconds);
    } catch (const std::exception &) {
        throw Error::invalid("wait", "must be a whole number of seconds");
    }
}

class VaultsPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        secrets_ = std::make_unique<hangar::Secrets>(
            hangar::secrets::key_file(config("secrets.key_file"), config("server.data_dir")));

        route("GET", "/vaults", [this](Request &q, Response &r) { list_vaults(q, r); });
        route("POST", "/vaults", [this](Request &q, Response &r) { create_vault(q, r); });
        route("GET", "/vaults/{id_or_name}", [this](Request &q, Response &r) {
            r.json(render_vault(require_vault(q.project(), q.param("id_or_name"))));
        });
        route("DELETE", "/vaults/{id_or_name}", [this](Request &q, Response &r) { delete_vault(q, r); });
        route("GET", "/vaults/{id_or_name}/encryption_key", [this](Request &q, Response &r) { encryption_key(q, r); });
        route("GET", "/vaults/{id_or_name}/items", [this](Request &q, Response &r) { list_items(q, r); });
        route("GET", "/vaults/{id_or_name}/items/{key}", [this](Request &q, Response &r) { get_item(q, r); });
        route("PUT", "/vaults/{id_or_name}/items/{key}", [this](Request &q, Response &r) { put_item(q, r); });
        route("PATCH", "/vaults/{id_or_name}/items/{key}", [this](Request &q, Response &r) { patch_item(q, r); });
        route("DELETE", "/vaults/{id_or_name}/items/{key}", [this](Request &q, Response &r) { delete_item(q, r); });
        route("GET", "/vaults/{id_or_name}/items/{key}/events", [this](Request &q, Response &r) { events(q, r); });
        route("POST", "/vaults/{id_or_name}/items/{key}/operations",
              [this](Request &q, Response &r) { operation(q, r); });

        // The hosted collection form: the token in the path is the credential (no API key).
        route(
            "GET", "/vaults/collect/{token}", [this](Request &q, Response &r) { collection_form(q, r); },
            HANGAR_ROUTE_PUBLIC);
        route(
            "POST", "/vaults/collect/{token}", [this](Request &q, Response &r) { collection_submit(q, r); },
            HANGAR_ROUTE_PUBLIC);

        route("GET", "/vault-provider-configs", [this](Request &q, Response &r) { list_configs(q, r); });
        route("POST", "/vault-provider-configs", [this](Request &q, Response &r) { create_config(q, r); });
        route("GET", "/vault-provider-configs/{id_or_name}", [this](Request &q, Response &r) {
            r.json(render_config(require_config(org_of(q), q.param("id_or_name"))));
        });
        route("PATCH", "/vault-provider-configs/{id_or_name}",
              [this](Request &q, Response &r) { update_config(q, r); });
        route("DELETE", "/vault-provider-configs/{id_or_name}",
              [this](Request &q, Response &r) { delete_config(q, r); });

        // For the browsers plugin: `vaults: [{id}|{name}]` of POST /browsers, resolved in the
        // caller's project → {vaults: [{id, name}]} (404 naming one that is not the project's).
        service("vaults.resolve", [this](const json &in) { return resolve_refs(in); });
        // For the browsers plugin, before a pool browser leased with vaults goes back idle:
        // {session_id} → {}: its pending registrations end and its authenticators go, so the next
        // lessee meets nothing this lease armed (502 when the browser's agent cannot say so).
        service("vaults.release", [this](const json &in) {
            const std::string session = in.value("session_id", "");
            {
                std::lock_guard lock(watch_m_);
                std::erase_if(watches_, [&](const auto &w) { return w.first.starts_with(session + "/"); });
            }
            auto answer = instance_call(session, "POST", "/vaults/passkey", json{{"op", "disarm"}}.dump(), 20000);
            if (answer.status != 200)
                throw Error(502, "upstream_unavailable", "the browser's authenticator could not be disarmed");
            return json::object();
        });
        // For the org plugin's /org/limits (kernel-api-0131 §2.10): {org_id} → {vaults}.
        service("vaults.usage", [this](const json &in) {
            auto rows =
                sql("SELECT COUNT(*) AS n FROM vaults_vaults WHERE org_id = ?", json::array({in.value("org_id", "")}));
            return json{{"vaults", rows.empty() ? json(0) : rows[0].at("n")}};
        });
    }

    void stop_server() override {
        {
            std::lock_guard lock(notify_m_);
            stopping_ = true;
            notify_cv_.notify_all();
        }
        std::map<std::string, std::jthread> watches;
        {
            std::lock_guard lock(watch_m_);
            watches.swap(watches_);
        }
        watches.clear(); // each stops and is joined
    }

    void start_instance() override {
        route("POST", "/vaults/fill", [this](Request &q, Response &r) { r.json(instance_fill(q.json_body())); });
        route("POST", "/vaults/passkey", [this](Request &q, Response &r) { r.json(instance_passkey(q.json_body())); });
    }

    void stop_instance() override {
        std::jthread pump;
        {
            std::lock_guard lock(authn_.m);
            drop_authenticators_locked();
            pump = std::move(authn_.pump);
        }
    }

private:
    // ---- vaults ---------------------------------------------------------------------------------

    std::optional<json> find_vault(const std::string &project, const std::string &id_or_name) const {
        return hangar::find_by_id_or_name([this](const std::string &s, const json &p) { return sql(s, p); },
                                          "vaults_vaults", project, id_or_name);
    }
    json require_vault(const std::string &project, const std::string &id_or_name) const {
        if (auto row = find_vault(project, id_or_name)) return *row;
        throw Error::not_found("vault \"" + id_or_name + "\" not found");
    }
    static json render_vault(const json &row) {
        return {{"id", row.at("id")},
                {"name", row.at("name")},
                {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                {"updated_at", hangar::rfc3339(row.at("updated_at").get<std::int64_t>())}};
    }

    void list_vaults(Request &q, Response &r) {
        hangar::Validation v;
        auto paging = hangar::parse_paging(q, v);
        v.throw_if_failed("invalid query");
        std::string project = q.project();
        std::string select = "SELECT * FROM vaults_vaults WHERE project_id = ?";
        json params = json::array({project});
        if (auto query = q.query("query"); query && !query->empty()) {
            select += " AND (id = ? OR LOWER(name) LIKE ?)";
            std::string like = "%";
            for (char c : *query)
                like += (c == '%' || c == '_')
                            ? std::string(1, '_')
                            : std::string(1, static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
            like += "%";
            params.push_back(*query);
            params.push_back(like);
        }
        hangar::answer_page(
            r, [this](const std::string &s, const json &p) { return sql(s, p); }, select + " ORDER BY created_at, id",
            params, paging, [](const json &row) { return render_vault(row); });
    }

    // Create-or-get by name (the free-plan cap of 3 vaults does not apply to a self-hosted install).
    void create_vault(Request &q, Response &r) {
        std::string name = vaults::parse_vault_name(q.json_body());
        std::string project = q.project();
        auto now = hangar::now_ms();
        sql("INSERT INTO vaults_vaults (id, org_id, project_id, name, created_at, updated_at) VALUES (?, ?, ?, ?, ?, "
            "?) "
            "ON CONFLICT DO NOTHING",
            {hangar::new_id(), org_of(q), project, name, now, now});
        auto rows = sql("SELECT * FROM vaults_vaults WHERE project_id = ? AND LOWER(name) = LOWER(?)", {project, name});
        if (rows.empty()) throw Error::internal("the vault could not be stored");
        r.json(render_vault(rows.front()));
    }

    void delete_vault(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        std::vector<std::pair<std::string, json>> batch = {
            {"DELETE FROM vaults_events WHERE item_id IN (SELECT id FROM vaults_items WHERE vault_id = ?)",
             json::array({vault.at("id")})},
            {"DELETE FROM vaults_items WHERE vault_id = ?", json::array({vault.at("id")})},
            {"DELETE FROM vaults_vaults WHERE id = ?", json::array({vault.at("id")})}};
        auto items = sql("SELECT id FROM vaults_items WHERE vault_id = ?", json::array({vault.at("id")}));
        sql_batch(batch);
        for (const auto &i : items)
            bump(i.at("id").get<std::string>());
        r.no_content();
    }

    // The vault's P-256 key: made on first request, kept for the vault's lifetime.
    json ensure_key(const json &vault) {
        if (vault.value("kid", json()).is_string()) return vault;
        auto key = vaults::generate_key();
        std::string kid = "vk_" + hangar::new_id();
        sql("UPDATE vaults_vaults SET kid = ?, key_x = ?, key_y = ?, key_sealed = ? WHERE id = ? AND kid IS NULL",
            {kid, key.x, key.y, secrets_->seal(vaults::base64url_encode(key.private_pkcs8)), vault.at("id")});
        auto rows = sql("SELECT * FROM vaults_vaults WHERE id = ?", json::array({vault.at("id")}));
        if (rows.empty()) throw Error::not_found("vault not found");
        return rows.front();
    }

    void encryption_key(Request &q, Response &r) {
        json vault = ensure_key(require_vault(q.project(), q.param("id_or_name")));
        r.json({{"alg", "ECDH-ES"},
                {"enc", "A256GCM"},
                {"kid", vault.at("kid")},
                {"jwk", {{"kty", "EC"}, {"crv", "P-256"}, {"x", vault.at("key_x")}, {"y", vault.at("key_y")}}}});
    }

    // encrypted_value → plain text, for this vault only (400 encryption_key_mismatch otherwise).
    std::string decrypt(const json &vault, const std::string &compact) {
        auto kid = vaults::jwe_kid(compact);
        if (!kid) throw Error(400, "invalid_request", "encrypted_value is not a compact JWE with a kid in its header");
        if (!vault.value("kid", json()).is_string() || *kid != vault.at("kid").get<std::string>())
            throw Error(400, "encryption_key_mismatch",
                        "encrypted_value was encrypted for another key than this vault's (GET "
                        "/vaults/{id_or_name}/encryption_key)");
        auto pkcs8 = vaults::base64url_decode(secrets_->open(vault.at("key_sealed").get<std::string>()));
        if (!pkcs8) throw Error::internal("the vault's key could not be read");
        return vaults::jwe_decrypt(compact, *pkcs8);
    }

    json resolve_refs(const json &in) {
        std::string project = in.value("project_id", "");
        json refs = in.value("vaults", json::array());
        json out = json::array();
        std::set<std::string> seen;
        if (!refs.is_array()) throw Error::invalid("vaults", "must be an array of {id} or {name}");
        for (std::size_t i = 0; i < refs.size(); ++i) {
            const json &ref = refs[i];
            std::string field = "vaults[" + std::to_string(i) + "]";
            bool by_id = ref.is_object() && ref.value("id", json()).is_string();
            bool by_name = ref.is_object() && ref.value("name", json()).is_string();
            if (by_id == by_name) throw Error::invalid(field, "must be {id} or {name}");
            std::string wanted = by_id ? ref.at("id").get<std::string>() : ref.at("name").get<std::string>();
            auto rows =
                by_id ? sql("SELECT id, name FROM vaults_vaults WHERE project_id = ? AND id = ?", {project, wanted})
                      : sql("SELECT id, name FROM vaults_vaults WHERE project_id = ? AND LOWER(name) = LOWER(?)",
                            {project, wanted});
            if (rows.empty()) throw Error::not_found("vault \"" + wanted + "\" not found in this project");
            if (!seen.insert(rows[0].at("id").get<std::string>()).second)
                throw Error::invalid(field, "names a vault given twice");
            out.push_back({{"id", rows[0].at("id")}, {"name", rows[0].at("name")}});
        }
        return {{"vaults", out}};
    }

    // ---- items: storage ---------------------------------------------------------------------------

    std::optional<json> find_item(const json &vault, const std::string &key) const {
        auto rows = sql("SELECT * FROM vaults_items WHERE vault_id = ? AND item_key = ?", {vault.at("id"), key});
        if (rows.empty()) return std::nullopt;
        return rows.front();
    }
    json require_item(const json &vault, const std::string &key) const {
        if (auto row = find_item(vault, key)) return *row;
        throw Error::not_found("item \"" + key + "\" not found in vault \"" + vault.at("name").get<std::string>() +
                               "\"");
    }

    json open_values(const json &row) const {
        if (!row.value("values_sealed", json()).is_string()) return json::object();
        json v = json::parse(secrets_->open(row.at("values_sealed").get<std::string>()), nullptr, false);
        return v.is_object() ? v : json::object();
    }
    json open_secrets(const json &row) const {
        if (!row.value("secrets_sealed", json()).is_string()) return json::object();
        json v = json::parse(secrets_->open(row.at("secrets_sealed").get<std::string>()), nullptr, false);
        return v.is_object() ? v : json::object();
    }
    json seal_json(const json &values) const {
        if (values.empty()) return nullptr;
        return secrets_->seal(values.dump());
    }

    static std::set<std::string> names_of(const json &values) {
        std::set<std::string> out;
        for (const auto &[k, v] : values.items())
            out.insert(k);
        return out;
    }

    // The managed-auth connection a managed_auth item names, as the managed_auth plugin keeps it:
    // {state: ready|unavailable, reason?, credential?}. Its login is a saved credential ({name}) or
    // an item of the organisation's 1Password Connect server ({provider, path} or {provider, auto}),
    // resolved the way managed auth resolves it: for the connection's domain.
    struct Connection {
        std::string status = "unavailable";
        std::string reason;
        std::string credential; // the /credentials name its login comes from; empty for a provider's
        json reference;         // what credentials.resolve takes
        std::string domain;
    };
    Connection connection_of(const std::string &project, const std::string &id) const {
        Connection c;
        json conn;
        try {
            conn = call("managed_auth.connection", {{"id", id}});
        } catch (const Error &) {
            c.reason = "connection_not_found";
            return c;
        }
        if (conn.value("project_id", "") != project) {
            c.reason = "connection_not_found";
            return c;
        }
        json cred = conn.value("credential", json());
        if (!cred.is_object() || cred.empty()) {
            c.reason = "no_credential";
            return c;
        }
        c.status = "ready";
        c.reference = cred;
        c.domain = conn.value("domain", "");
        if (cred.value("name", json()).is_string()) c.credential = cred.at("name").get<std::string>();
        return c;
    }

    json item_state(const json &row, const std::vector<vaults::FieldDef> &defs, const json &values, std::string &status,
                    bool single) const {
        const std::string type = row.at("type"), provider = row.at("provider");
        status = row.at("status").get<std::string>();
        if (type == "credential" && provider == "kernel") {
            json fields = json::object();
            for (const auto &d : defs) {
                json f = {{"has_value", values.contains(d.name)}};
                if (!d.sensitive && values.contains(d.name)) f["value"] = values.at(d.name);
                fields[d.name] = f;
            }
            return {{"provider", "kernel"}, {"status", status}, {"fields", fields}};
        }
        if (type == "credential" && provider == "managed_auth") {
            json spec = parse_json(row, "spec", json::object());
            auto c = connection_of(row.at("project_id"), spec.value("connection_id", ""));
            status = c.status;
            json s = {{"provider", provider}, {"status", c.status}};
            if (!c.reason.empty()) s["status_reason"] = c.reason;
            // The saved credential's field names and types, never its values (and never in a list,
            // which would read every item's credential).
            if (single && c.status != "ready") s["fields"] = json::object();
            // (A provider's item is not read for its names: that would fetch its secrets.)
            if (single && c.status == "ready" && !c.credential.empty()) try {
                    json cred =
                        call("credentials.describe", {{"project_id", row.at("project_id")}, {"name", c.credential}});
                    s["fields"] = vaults::managed_auth_fields(cred.value("value_keys", json::array()),
                                                              cred.value("has_totp_secret", false));
                } catch (const Error &) {
                    // deleted since, or no credentials plugin: the item is answered without fields
                }
            return s;
        }
        json s = {{"status", status}};
        if (type == "credential" || type == "credential_account") s["provider"] = provider;
        s["status_reason"] = unsupported_reason(type, provider);
        return s;
    }

    static std::string unsupported_reason(const std::string &type, const std::string &provider) {
        if (type == "credential" || type == "credential_account")
            return "stored only: 1Password's agent autofill (access requests, OAuth account links) is a 1Password "
                   "cloud service this Hangar server does not have";
        return "stored only: this Hangar server has no " + provider +
               " payment integration, so nothing is authorized or charged";
    }

    // `single`: one item is answered (not a list), which may carry what costs a look-up per item.
    json render_item(const json &row, bool single = true) const {
        auto defs = vaults::field_defs_from_json(parse_json(row, "fields", json::array()));
        json values =
            row.at("provider") == "kernel" && row.at("type") == "credential" ? open_values(row) : json::object();
        std::string status;
        json state = item_state(row, defs, values, status, single);
        json spec = parse_json(row, "spec", json::object());
        if (row.at("type") == "credential" && row.at("provider") == "kernel")
            spec["fields"] = vaults::field_defs_json(defs);
        auto ops = vaults::available_operations(row.at("type"), row.at("provider"), status, defs, names_of(values));
        json out = {{"id", row.at("id")},
                    {"key", row.at("item_key")},
                    {"type", row.at("type")},
                    {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                    {"updated_at", hangar::rfc3339(row.at("updated_at").get<std::int64_t>())},
                    {"spec", spec},
                    {"state", state},
                    {"available_operations", vaults::operations_json(ops)},
                    {"available_expansions", json::array()}};
        if (row.at("type") == "credential") out["version"] = row.at("version");
        if (auto url = active_collection(row))
            out["action"] = {{"name", "collect"},
                             {"url", *url},
                             {"expires_at", hangar::rfc3339(row.at("collect_expires").get<std::int64_t>())}};
        if (row.at("type") == "wallet")
            out["description"] = "Hangar stores this " + row.at("provider").get<std::string>() +
                                 " wallet but has no integration with that provider: it offers no operations.";
        return out;
    }

    // ---- the hosted collection form ---------------------------------------------------------------

    // The item's unexpired collection URL, if it has one.
    std::optional<std::string> active_collection(const json &row) const {
        if (!row.value("collect_sealed", json()).is_string() || !row.value("collect_expires", json()).is_number())
            return std::nullopt;
        if (row.at("collect_expires").get<std::int64_t>() <= hangar::now_ms()) return std::nullopt;
        return secrets_->open(row.at("collect_sealed").get<std::string>());
    }

    // The row with an active collection session: the current one, or a new one (30 min, bound to
    // the item's version) when there is none or it expired. Concurrent renewals get the same link.
    json ensure_collection(const json &row, const std::string &base_url) {
        if (active_collection(row)) return row;
        auto now = hangar::now_ms();
        std::string token = token_sign({{"typ", "vault_collect"},
                                        {"item", row.at("id")},
                                        {"version", row.at("version")},
                                        {"nonce", hangar::new_id()}},
                                       static_cast<std::uint32_t>(kCollectMs / 1000));
        std::string url = base_url + "/vaults/collect/" + token;
        sql("UPDATE vaults_items SET collect_sealed = ?, collect_expires = ? WHERE id = ? AND version = ? AND "
            "(collect_expires IS NULL OR collect_expires <= ?)",
            {secrets_->seal(url), now + kCollectMs, row.at("id"), row.at("version"), now});
        auto rows = sql("SELECT * FROM vaults_items WHERE id = ?", json::array({row.at("id")}));
        if (rows.empty()) throw Error::not_found("the item was deleted");
        if (active_collection(rows.front()) == url) // this request's link, not a concurrent one's
            record(row.at("id"), "collection_started", nullptr, json::object());
        return rows.front();
    }

    // The item a collection URL's token is for, while that URL is the item's active session.
    std::optional<json> collection_item(const std::string &token) const {
        auto claims = token_verify(token);
        if (!claims || !claims->is_object() || text_of(*claims, "typ") != "vault_collect") return std::nullopt;
        auto rows = sql("SELECT * FROM vaults_items WHERE id = ?", json::array({text_of(*claims, "item")}));
        if (rows.empty() || rows[0].value("version", json()) != claims->value("version", json())) return std::nullopt;
        auto url = active_collection(rows[0]);
        if (!url || url->size() < token.size() || url->compare(url->size() - token.size(), token.size(), token) != 0)
            return std::nullopt;
        return rows[0];
    }

    static std::string collection_page(const std::string &title, const std::string &body) {
        return "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" "
               "content=\"width=device-width,initial-scale=1\"><title>" +
               hangar::html_escape(title) +
               "</title><style nonce=\"{{nonce}}\">body{font:15px/1.5 system-ui,sans-serif;max-width:520px;margin:40px "
               "auto;padding:0 16px;color:#222}label{display:block;margin-top:12px}input{width:100%;padding:8px;"
               "box-sizing:border-box;font:inherit}button{margin-top:16px;padding:8px 14px;font:inherit}.error{color:"
               "#b00020}.muted{color:#666}</style></head><body><h1>" +
               hangar::html_escape(title) + "</h1>" + body + "</body></html>";
    }

    void collection_form(Request &q, Response &r, const std::string &error = {}, int status = 200) {
        auto row = collection_item(q.param("token"));
        hangar::web::PagePolicy policy;
        policy.connect_src.clear();
        if (!row) {
            hangar::web::html(r,
                              collection_page("This link has expired",
                                              "<p class=\"muted\">It was used, replaced or is older than 30 "
                                              "minutes. Ask for a new one.</p>"),
                              policy, 410);
            return;
        }
        auto defs = vaults::field_defs_from_json(parse_json(*row, "fields", json::array()));
        json values = open_values(*row);
        json spec = parse_json(*row, "spec", json::object());
        std::string body;
        if (spec.value("description", json()).is_string())
            body += "<p>" + hangar::html_escape(spec.at("description").get<std::string>()) + "</p>";
        if (!error.empty()) body += "<p class=\"error\" role=\"alert\">" + hangar::html_escape(error) + "</p>";
        body += "<form method=\"post\" autocomplete=\"off\">";
        for (const auto &d : defs) {
            if (!vaults::form_field(d)) continue;
            std::string name = hangar::html_escape("f." + d.name);
            bool stored = values.contains(d.name);
            body += "<label>" + hangar::html_escape(d.label.value_or(d.name)) + (d.required ? " *" : "") +
                    "<input name=\"" + name + "\" type=\"" + (d.type == "text" ? "text" : d.type) + "\"";
            if (!d.sensitive && stored)
                body += " value=\"" + hangar::html_escape(values.at(d.name).get<std::string>()) + "\"";
            if (d.sensitive && stored) body += " placeholder=\"(saved; leave empty to keep)\"";
            body += "></label>";
        }
        body += "<button type=\"submit\">Save</button></form>";
        hangar::web::html(r, collection_page("Enter your details", body), policy, status);
    }

    void collection_submit(Request &q, Response &r) {
        auto row = collection_item(q.param("token"));
        if (!row) return collection_form(q, r);
        auto defs = vaults::field_defs_from_json(parse_json(*row, "fields", json::array()));
        json values = open_values(*row);
        std::map<std::string, std::string> changes;
        try {
            changes = vaults::form_changes(defs, values, hangar::query_pairs(q.body()));
        } catch (const Error &e) { // names a field, never a value
            return collection_form(q, r, e.what(), 400);
        }
        json changed = json::array();
        for (const auto &[name, value] : changes) {
            values[name] = value;
            changed.push_back(name);
        }
        // One submission: the version moves on, which ends this session and every other link.
        std::string token = hangar::new_id();
        sql("UPDATE vaults_items SET values_sealed = ?, status = ?, version = version + 1, write_token = ?, "
            "collect_sealed = NULL, collect_expires = NULL, updated_at = ? WHERE id = ? AND version = ?",
            {seal_json(values), vaults::credential_status(defs, names_of(values)), token, hangar::now_ms(),
             row->at("id"), row->at("version")});
        auto after = sql("SELECT version, write_token FROM vaults_items WHERE id = ?", json::array({row->at("id")}));
        if (after.empty() || after[0].value("write_token", json()) != token) return collection_form(q, r);
        record(row->at("id"), "item_updated", nullptr,
               {{"version", after[0].at("version")}, {"changed_fields", changed}, {"source", "collection"}});
        hangar::web::PagePolicy policy;
        policy.connect_src.clear();
        hangar::web::html(r, collection_page("Saved", "<p>Thank you. You can close this page.</p>"), policy);
    }

    // ---- items: routes ----------------------------------------------------------------------------

    void list_items(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        json out = json::array();
        for (const auto &row : sql("SELECT * FROM vaults_items WHERE vault_id = ? ORDER BY created_at, id",
                                   json::array({vault.at("id")})))
            out.push_back(render_item(row, false));
        r.json(out);
    }

    void get_item(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        std::string key = q.param("key");
        int wait = wait_seconds(q);
        for (const auto &pair : hangar::query_pairs(q.query_string())) {
            if (pair.first != "expand" && pair.first != "expand[]") continue;
            std::string list = pair.second;
            for (std::size_t at = 0; at <= list.size();) {
                auto comma = list.find(',', at);
                std::string one = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
                at = comma == std::string::npos ? list.size() + 1 : comma + 1;
                if (one.empty()) continue;
                if (one != "payment_methods" && one != "link_user_info" && one != "link_shipping_addresses")
                    throw Error::invalid("expand",
                                         "must be payment_methods, link_user_info or link_shipping_addresses");
                require_item(vault, key);
                throw Error::conflict("the " + one +
                                      " expansion is not available for this item: Hangar has no "
                                      "payment provider integration to fetch it from");
            }
        }
        json row = require_item(vault, key);
        // A pending credential always carries a collection action: renewed here when it expired.
        if (row.at("status") == "pending_collection") row = ensure_collection(row, q.base_url());
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
        while (row.at("status") == "pending_collection" && std::chrono::steady_clock::now() < deadline) {
            std::uint64_t seen = generation(row.at("id"));
            wait_change(row.at("id"), seen, deadline);
            auto again = find_item(vault, key);
            if (!again) throw Error::not_found("item \"" + key + "\" was deleted");
            row = *again;
        }
        r.json(render_item(row));
    }

    // A kernel credential as sent, with its values in plain text (encrypted ones decrypted, TOTP
    // seeds checked by the credentials plugin).
    struct KernelItem {
        std::vector<vaults::FieldDef> defs;
        std::optional<std::string> description;
        json values = json::object();
    };
    KernelItem kernel_item(const json &vault, const json &spec) {
        auto parsed = vaults::parse_kernel_credential(spec);
        KernelItem out;
        out.defs = parsed.fields;
        out.description = parsed.description;
        for (const auto &d : parsed.fields) {
            auto it = parsed.values.find(d.name);
            if (it == parsed.values.end()) continue;
            std::string value =
                it->second.encrypted_value ? decrypt(vault, *it->second.encrypted_value) : *it->second.value;
            vaults::check_value(d, value);
            if (d.type == "totp") check_totp(d.name, value);
            out.values[d.name] = value;
        }
        return out;
    }

    void check_totp(const std::string &field, const std::string &seed) const {
        try {
            call("credentials.totp", {{"secret", seed}, {"field", "fields." + field}, {"validate_only", true}});
        } catch (const Error &e) {
            if (service_missing(e))
                throw Error::not_implemented("totp fields need the credentials plugin (its TOTP service), which is "
                                             "not enabled on this server");
            throw Error::invalid("fields." + field, "must be an RFC 4648 base32 seed");
        }
    }

    std::string totp_code(const std::string &seed) const {
        try {
            return call("credentials.totp", {{"secret", seed}}).at("code").get<std::string>();
        } catch (const Error &e) {
            if (service_missing(e))
                throw Error::not_implemented("totp fields need the credentials plugin (its TOTP service), which is "
                                             "not enabled on this server");
            throw Error::internal("a TOTP code could not be made from the stored seed");
        }
    }

    void put_item(Request &q, Response &r) {
        std::string project = q.project();
        json vault = require_vault(project, q.param("id_or_name"));
        std::string key = q.param("key");
        if (!valid_item_key(key)) throw Error::invalid("key", "must be 1 to 255 of letters, digits, '.', '_' and '-'");
        json body = q.json_body();
        for (const auto &[k, v] : body.items())
            if (k != "type" && k != "spec") throw Error::invalid(k, "is not a field of an item (type, spec)");
        std::string type = body.value("type", json()).is_string() ? body.at("type").get<std::string>() : "";
        if (type != "wallet" && type != "card" && type != "credential_account" && type != "credential")
            throw Error::invalid("type", "must be wallet, card, credential_account or credential");
        json spec = body.value("spec", json());
        if (!spec.is_object()) throw Error::invalid("spec", "must be an object");

        std::string provider;
        json shown, values = json::object(), secrets = json::object(), fields = json::array();
        json provider_config_id = nullptr;
        std::string status;
        if (type == "credential" && spec.value("provider", json()) == "kernel") {
            auto k = kernel_item(vault, spec);
            provider = "kernel";
            shown = {{"provider", "kernel"}};
            if (k.description) shown["description"] = *k.description;
            fields = vaults::field_defs_json(k.defs);
            values = k.values;
            status = vaults::credential_status(k.defs, names_of(values));
        } else {
            auto o = vaults::parse_other_spec(type, spec);
            provider = o.provider;
            shown = o.shown;
            secrets = o.secrets;
            if (o.provider_config) {
                auto row = hangar::find_by_id_or_name(
                    [this](const std::string &s, const json &p) { return sql(s, p); }, "vaults_provider_configs",
                    org_of(q), o.provider_config->value("id", o.provider_config->value("name", "")), "org_id");
                if (!row) throw Error::not_found("vault provider config not found");
                if (row->at("provider") != provider)
                    throw Error::invalid("spec.provider_config",
                                         "is a " + row->at("provider").get<std::string>() + " configuration");
                provider_config_id = row->at("id");
            }
            if (type == "credential" && provider == "managed_auth") {
                std::string id = shown.value("connection_id", "");
                json conn;
                try {
                    conn = call("managed_auth.connection", {{"id", id}});
                } catch (const Error &e) {
                    if (service_missing(e))
                        throw Error::not_implemented("managed_auth items need the managed_auth plugin, which is not "
                                                     "enabled on this server");
                    throw Error::not_found("auth connection \"" + id + "\" not found");
                }
                auto c = connection_of(project, id);
                if (conn.value("project_id", "") != project)
                    throw Error::conflict("auth connection \"" + id + "\" belongs to another project");
                if (c.reason == "no_credential")
                    throw Error::conflict("auth connection \"" + id + "\" has no saved credential");
                status = "ready";
            } else if (type == "credential") {
                status = "failed";
            } else if (type == "wallet") {
                status = "degraded";
            } else if (type == "card") {
                status = "requested";
            } else {
                status = "pending_authorization";
            }
        }

        auto now = hangar::now_ms();
        std::string id = hangar::new_id();
        if (!find_item(vault, key)) {
            sql("INSERT INTO vaults_items (id, vault_id, project_id, item_key, type, provider, spec, fields, "
                "values_sealed, secrets_sealed, status, version, provider_config_id, created_at, updated_at) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT DO NOTHING",
                {id, vault.at("id"), project, key, type, provider, shown.dump(), fields.dump(), seal_json(values),
                 seal_json(secrets), status, provider_config_id, now, now});
        }
        json row = require_item(vault, key);
        if (row.at("id") == id) {
            record(row.at("id"), "item_created", nullptr, {{"type", type}, {"provider", provider}});
            if (status == "pending_collection") row = ensure_collection(row, q.base_url());
            r.json(render_item(row));
            return;
        }
        // Create-or-get: the same spec gives the item as it is; another one is a conflict.
        bool same = row.at("type") == type && row.at("provider") == provider &&
                    parse_json(row, "spec", json::object()) == shown &&
                    parse_json(row, "fields", json::array()) == fields && open_values(row) == values &&
                    open_secrets(row) == secrets && row.value("provider_config_id", json()) == provider_config_id;
        if (!same)
            throw Error::conflict("an item with key \"" + key +
                                  "\" exists in this vault with another spec (PATCH it, or delete it first)");
        r.json(render_item(row));
    }

    void patch_item(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        std::string key = q.param("key");
        json body = q.json_body();
        json row = require_item(vault, key);
        const std::string type = row.at("type"), provider = row.at("provider");
        for (const auto &[k, v] : body.items())
            if (k != "type" && k != "spec" && k != "version" && k != "expected_item_id")
                throw Error::invalid(k, "is not a field of an item update");
        if (auto e = body.find("expected_item_id"); e != body.end() && !e->is_null()) {
            if (!e->is_string()) throw Error::invalid("expected_item_id", "must be a string");
            if (*e != row.at("id"))
                throw Error::conflict("the key \"" + key + "\" now names another item than expected_item_id");
        }
        json spec = body.value("spec", json());
        if (!spec.is_object()) throw Error::invalid("spec", "must be an object");
        auto now = hangar::now_ms();
        if (type == "credential") {
            if (body.value("type", json()) != "credential")
                throw Error::invalid("type", "must be credential for a credential item");
            auto version = body.find("version");
            if (version == body.end() || !version->is_number_integer())
                throw Error::invalid("version", "is required: the item's current version");
            if (provider != "kernel")
                throw Error::conflict(provider + " credentials cannot be updated; create another item");
            if (version->get<std::int64_t>() != row.at("version").get<std::int64_t>())
                throw Error::conflict("stale version " + std::to_string(version->get<std::int64_t>()) +
                                      ": the item is at version " +
                                      std::to_string(row.at("version").get<std::int64_t>()));
            auto update = vaults::parse_credential_update(spec);
            for (auto &[name, in] : update.fields)
                if (in.encrypted_value) {
                    in.value = decrypt(vault, *in.encrypted_value);
                    in.encrypted_value.reset();
                }
            auto defs = vaults::field_defs_from_json(parse_json(row, "fields", json::array()));
            json values = open_values(row);
            auto applied = vaults::apply_update(defs, names_of(values), update);
            for (const auto &[set_name, v] : applied.set) {
                const std::string &name = set_name; // a lambda may not capture a structured binding (C++17)
                if (v) {
                    auto d = std::find_if(applied.defs.begin(), applied.defs.end(),
                                          [&](const vaults::FieldDef &f) { return f.name == name; });
                    if (d->type == "totp") check_totp(name, *v);
                }
            }
            for (const auto &name : applied.dropped)
                values.erase(name);
            json changed = json::array();
            for (const auto &[name, v] : applied.set) {
                if (v)
                    values[name] = *v;
                else
                    values.erase(name);
                changed.push_back(name);
            }
            json shown = parse_json(row, "spec", json::object());
            if (update.description) {
                if (update.description->empty())
                    shown.erase("description");
                else
                    shown["description"] = *update.description;
            }
            std::string status = vaults::credential_status(applied.defs, names_of(values));
            std::string token = hangar::new_id();
            sql("UPDATE vaults_items SET fields = ?, values_sealed = ?, spec = ?, status = ?, version = version + 1, "
                "write_token = ?, collect_sealed = NULL, collect_expires = NULL, updated_at = ? WHERE id = ? AND "
                "version = ?",
                {vaults::field_defs_json(applied.defs).dump(), seal_json(values), shown.dump(), status, token, now,
                 row.at("id"), row.at("version")});
            json after = require_item(vault, key);
            if (after.value("write_token", json()) != token)
                throw Error::conflict("the item changed meanwhile: read it again and send its new version");
            json added = json::array();
            for (const auto &d : update.add)
                added.push_back(d.name);
            record(row.at("id"), "item_updated", nullptr,
                   {{"version", after.at("version")},
                    {"added_fields", added},
                    {"removed_fields", applied.dropped},
                    {"changed_fields", changed},
                    {"status", status}});
            r.json(render_item(after));
            return;
        }
        if (type == "card") {
            if (body.contains("type") && !body.at("type").is_null() && body.at("type") != "card")
                throw Error::invalid("type", "must be card for a card item");
            if (provider == "kernel") throw Error::conflict("Kernel cards cannot be updated; create another card");
            auto o = vaults::parse_other_spec("card", spec);
            if (o.provider != provider) throw Error::invalid("spec.provider", "cannot change: the card is " + provider);
            sql("UPDATE vaults_items SET spec = ?, updated_at = ? WHERE id = ?", {o.shown.dump(), now, row.at("id")});
            record(row.at("id"), "item_updated", nullptr, json::object());
            r.json(render_item(require_item(vault, key)));
            return;
        }
        throw Error::conflict(type + " items cannot be updated; create another item under a new key");
    }

    void delete_item(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        json row = require_item(vault, q.param("key"));
        sql_batch({{"DELETE FROM vaults_events WHERE item_id = ?", json::array({row.at("id")})},
                   {"DELETE FROM vaults_items WHERE id = ?", json::array({row.at("id")})}});
        bump(row.at("id"));
        r.no_content();
    }

    // ---- events -----------------------------------------------------------------------------------

    // One event of an item: names and counts only, never a value.
    void record(const std::string &item_id, const std::string &name, const json &browser_id, const json &data) {
        auto now = hangar::now_ms();
        for (int attempt = 0; attempt < 5; ++attempt) {
            try {
                sql("INSERT INTO vaults_events (id, item_id, seq, name, browser_id, data, created_at) SELECT ?, ?, "
                    "COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ? FROM vaults_events WHERE item_id = ?",
                    {hangar::new_id(), item_id, name, browser_id, data.dump(), now, item_id});
                break;
            } catch (const Error &) {
                if (attempt == 4) throw; // two writers took the same seq: the unique index refused one
            }
        }
        bump(item_id);
    }

    static json render_event(const json &row) {
        json e = {{"id", row.at("id")},
                  {"name", row.at("name")},
                  {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())}};
        if (row.value("browser_id", json()).is_string()) e["browser_id"] = row.at("browser_id");
        json data = parse_json(row, "data", json::object());
        if (!data.empty()) e["data"] = data;
        return e;
    }

    void events(Request &q, Response &r) {
        json vault = require_vault(q.project(), q.param("id_or_name"));
        std::string key = q.param("key");
        json row = require_item(vault, key);
        int wait = wait_seconds(q);
        std::int64_t after = 0;
        if (auto a = q.query("after"); a && !a->empty()) {
            auto found = sql("SELECT seq FROM vaults_events WHERE item_id = ? AND id = ?", {row.at("id"), *a});
            if (found.empty()) throw Error::invalid("after", "is not an event of this item");
            after = found[0].at("seq").get<std::int64_t>();
        }
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait);
        for (;;) {
            std::uint64_t seen = generation(row.at("id"));
            auto rows = sql("SELECT * FROM vaults_events WHERE item_id = ? AND seq > ? ORDER BY seq LIMIT 100",
                            {row.at("id"), after});
            if (!rows.empty() || std::chrono::steady_clock::now() >= deadline) {
                json out = json::array();
                for (const auto &e : rows)
                    out.push_back(render_event(e));
                r.json(out);
                return;
            }
            wait_change(row.at("id"), seen, deadline);
            if (!find_item(vault, key)) throw Error::not_found("item \"" + key + "\" was deleted");
        }
    }

    // Change notification inside this process: every write of an item bumps its generation and
    // wakes the long-polls on it. Another node's writes are seen by the re-read every 2 s.
    std::uint64_t generation(const std::string &item) {
        std::lock_guard lock(notify_m_);
        return generations_[item];
    }
    void bump(const std::string &item) {
        std::lock_guard lock(notify_m_);
        ++generations_[item];
        notify_cv_.notify_all();
    }
    void wait_change(const std::string &item, std::uint64_t seen, std::chrono::steady_clock::time_point deadline) {
        std::unique_lock lock(notify_m_);
        auto until = std::min(deadline, std::chrono::steady_clock::now() + 2s);
        notify_cv_.wait_until(lock, until, [&] { return stopping_ || generations_[item] != seen; });
    }

    // ---- operations -------------------------------------------------------------------------------

    void operation(Request &q, Response &r) {
        std::string project = q.project();
        json vault = require_vault(project, q.param("id_or_name"));
        json row = require_item(vault, q.param("key"));
        json body = q.json_body();
        std::string op = body.value("type", json()).is_string() ? body.at("type").get<std::string>() : "";
        if (auto why = vaults::unsupported_operation(op, row.at("type"), row.at("provider")))
            throw Error::not_implemented(*why);
        json item = render_item(row);
        bool offered = false;
        for (const auto &o : item.at("available_operations"))
            offered = offered || o.at("type") == op;
        const bool passkey = op == "arm_passkey" || op == "register_passkey" || op == "disarm_passkey";
        if (op != "fill" && op != "webmcp_invoke" && op != "collect" && !passkey)
            throw Error::invalid("type", "is not a vault item operation");
        if (!offered)
            throw Error::conflict(op +
                                  " is not available for this item in its current state (see available_operations)");
        if (op == "collect") {
            for (const auto &[k, v] : body.items())
                if (k != "type") throw Error::invalid(k, "is not a field of the collect operation");
            r.json(render_item(ensure_collection(row, q.base_url())));
        } else if (passkey)
            r.json(passkey_op(project, vault, row, op, vaults::parse_passkey(body)));
        else if (op == "fill")
            r.json(fill(project, vault, row, vaults::parse_fill(body)));
        else
            r.json(webmcp_invoke(project, vault, row, vaults::parse_webmcp(body)));
    }

    // The browser an operation acts on: the caller's, active, with this vault attached.
    std::string attached_browser(const std::string &project, const json &vault, const std::string &browser_id) const {
        json s = call("browsers.session", {{"project_id", project}, {"id", browser_id}});
        bool attached = false;
        for (const auto &v : s.value("vaults", json::array()))
            attached = attached || v.value("id", "") == vault.at("id");
        if (!attached)
            throw Error::forbidden("vault \"" + vault.at("name").get<std::string>() + "\" is not attached to browser " +
                                   browser_id + " (attach it with vaults on POST /browsers)");
        return s.at("session_id").get<std::string>();
    }

    // The item's usable values: field name → {type, value}; TOTP seeds become their current code,
    // passkeys are never among them.
    struct Usable {
        std::string type;
        std::string value;
    };
    std::map<std::string, Usable> usable_values(const std::string &project, const std::string &org,
                                                const json &row) const {
        std::map<std::string, Usable> out;
        if (row.at("provider") == "managed_auth") {
            json spec = parse_json(row, "spec", json::object());
            auto c = connection_of(project, spec.value("connection_id", ""));
            if (c.status != "ready") throw Error::conflict("the item's auth connection is unavailable: " + c.reason);
            json resolved =
                call("credentials.resolve",
                     {{"project_id", project}, {"org_id", org}, {"credential", c.reference}, {"domain", c.domain}});
            const json login = resolved.value("values", json::object()); // items() of a temporary would dangle
            for (const auto &[name, value] : login.items())
                if (value.is_string() && vaults::managed_auth_usable(name))
                    out[name] = {vaults::managed_auth_field_type(name), value.get<std::string>()};
            if (resolved.value("totp_code", json()).is_string()) out["totp"] = {"totp", resolved.at("totp_code")};
            return out;
        }
        json values = open_values(row);
        for (const auto &d : vaults::field_defs_from_json(parse_json(row, "fields", json::array()))) {
            if (!values.contains(d.name) || d.type == "passkey") continue;
            std::string v = values.at(d.name).get<std::string>();
            out[d.name] = {d.type, d.type == "totp" ? totp_code(v) : v};
        }
        return out;
    }

    json fill(const std::string &project, const json &vault, const json &row, const vaults::FillRequest &req) {
        std::string session = attached_browser(project, vault, req.browser_id);
        // One fill at a time per browser; a retry waits up to 15 s for the one before (§1A).
        std::shared_ptr<std::timed_mutex> lock_of;
        {
            std::lock_guard lock(fill_locks_m_);
            auto &slot = fill_locks_[session];
            if (!slot) slot = std::make_shared<std::timed_mutex>();
            lock_of = slot;
        }
        std::unique_lock running(*lock_of, std::defer_lock);
        if (!running.try_lock_for(15s))
            throw Error::conflict("another fill is still running in browser " + req.browser_id + "; retry");
        auto values = usable_values(project, vault.at("org_id").get<std::string>(), row);
        json entries = json::array();
        if (req.fields) {
            for (std::size_t i = 0; i < req.fields->size(); ++i) {
                const auto &b = (*req.fields)[i];
                auto it = values.find(b.field);
                if (it == values.end())
                    throw Error::invalid("fields[" + std::to_string(i) + "].field",
                                         "names no field of this item with a value to fill");
                entries.push_back({{"selector", b.selector}, {"type", it->second.type}, {"value", it->second.value}});
            }
        } else {
            for (const auto &[name, v] : values)
                entries.push_back({{"name", name}, {"type", v.type}, {"value", v.value}});
        }
        json in = {{"entries", entries}};
        if (req.page_url) in["page_url"] = *req.page_url;
        auto answer = instance_call(session, "POST", "/vaults/fill", in.dump(), 30000);
        json reply = json::parse(answer.body, nullptr, false);
        json result;
        if (answer.status == 200 && reply.is_object()) {
            std::vector<std::string> outcomes;
            for (const auto &o : reply.value("outcomes", json::array()))
                outcomes.push_back(o.is_string() ? o.get<std::string>() : "unknown");
            if (req.fields) {
                result = vaults::fill_result(req.fields->size(), outcomes);
            } else {
                bool any = std::find(outcomes.begin(), outcomes.end(), "filled") != outcomes.end();
                result = {{"type", "fill"}, {"status", any ? "completed" : "failed"}, {"fields", json::array()}};
            }
        } else if (answer.status >= 400 && answer.status < 500 && reply.is_object()) {
            // Before anything was written: the page (none, or several, match page_url).
            throw Error(answer.status, text_of(reply, "code", "bad_request"),
                        text_of(reply, "message", "the page could not be filled"));
        } else {
            result = vaults::fill_result(req.fields ? req.fields->size() : 0, {});
            result["status"] = "unknown";
        }
        std::size_t filled = 0;
        for (const auto &o : reply.is_object() ? reply.value("outcomes", json::array()) : json::array())
            filled += o == "filled" ? 1 : 0;
        record(row.at("id"), "fill", req.browser_id, {{"status", result.at("status")}, {"filled_fields", filled}});
        return result;
    }

    json webmcp_invoke(const std::string &project, const json &vault, const json &row, vaults::WebmcpRequest req) {
        std::string session = attached_browser(project, vault, req.browser_id);
        // The tool must come from that page (its URL without the fragment, as WebMCP lists it).
        auto listed = instance_call(session, "GET", "/webmcp/tools", {}, 30000);
        json tools = json::parse(listed.body, nullptr, false);
        if (listed.status == 501 || listed.status == 503)
            throw Error::not_implemented("webmcp_invoke needs WebMCP in the browser (the playwright plugin's WebMCP "
                                         "service), which this browser does not offer");
        if (listed.status != 200 || !tools.is_object())
            throw Error(502, "upstream_unavailable", "the browser's WebMCP tools could not be listed");
        bool found = false, same_page = false;
        for (const auto &t : tools.value("tools", json::array())) {
            if (text_of(t, "tool_ref") != req.tool_ref) continue;
            found = true;
            same_page = t.is_object() && text_of(t.value("source", json()), "page_url") == req.page_url;
        }
        if (!found) throw Error::not_found("no WebMCP tool " + req.tool_ref + " in browser " + req.browser_id);
        if (!same_page) throw Error::conflict("the WebMCP tool is not on page_url (target_changed)");
        auto values = usable_values(project, vault.at("org_id").get<std::string>(), row);
        json input = req.input;
        for (std::size_t i = 0; i < req.bindings.size(); ++i) {
            const auto &b = req.bindings[i];
            auto it = values.find(b.field);
            if (it == values.end())
                throw Error::invalid("bindings[" + std::to_string(i) + "].field",
                                     "names no field of this item with a value");
            vaults::bind_pointer(input, b.input_path, it->second.value,
                                 "bindings[" + std::to_string(i) + "].input_path");
        }
        json call_body = {{"tool_ref", req.tool_ref}, {"input", input}};
        if (req.timeout_sec) call_body["timeout_sec"] = *req.timeout_sec;
        auto answer = instance_call(session, "POST", "/webmcp/invoke", call_body.dump(),
                                    static_cast<std::uint32_t>((req.timeout_sec.value_or(30) + 15) * 1000));
        json reply = json::parse(answer.body, nullptr, false);
        json result = {{"type", "webmcp_invoke"}};
        if (answer.status == 200 && reply.is_object()) {
            static const std::set<std::string> statuses = {"completed", "canceled", "error", "awaiting_submission"};
            std::string status = text_of(reply, "status");
            result["status"] = statuses.count(status) ? status : "unknown";
            for (const char *k : {"invocation_id", "output", "error_text"})
                if (reply.contains(k) && !reply.at(k).is_null()) result[k] = reply.at(k);
        } else {
            // Indeterminate: it may have run; never retried. The page's message may quote values.
            result["status"] = "unknown";
        }
        record(row.at("id"), "webmcp_invoke", req.browser_id,
               {{"status", result.at("status")}, {"bound_fields", req.bindings.size()}});
        return result;
    }

    // ---- passkeys ---------------------------------------------------------------------------------

    json passkey_op(const std::string &project, const json &vault, const json &row, const std::string &op,
                    const vaults::PasskeyRequest &req) {
        std::string session = attached_browser(project, vault, req.browser_id);
        auto defs = vaults::field_defs_from_json(parse_json(row, "fields", json::array()));
        json values = open_values(row);
        // The passkey field the operation is about: the one named, else the first that fits.
        auto pick = [&](bool with_value) {
            for (const auto &d : defs) {
                if (d.type != "passkey" || (req.field && d.name != *req.field)) continue;
                if (values.contains(d.name) == with_value) return d.name;
                if (req.field)
                    throw Error::conflict("passkey field \"" + d.name + "\" " +
                                          (with_value ? "holds no passkey to arm"
                                                      : "holds a passkey already (clear it with PATCH first)"));
            }
            if (req.field) throw Error::invalid("field", "names no passkey field of this item");
            throw Error::conflict(std::string("the item has no ") + (with_value ? "stored" : "empty") +
                                  " passkey field");
        };
        auto agent = [&](const json &body) {
            auto answer = instance_call(session, "POST", "/vaults/passkey", body.dump(), 20000);
            json reply = json::parse(answer.body, nullptr, false);
            if (answer.status != 200) // the agent's message names the step, never a key
                throw Error(answer.status == 409 ? 409 : 502,
                            answer.status == 409 ? "conflict" : "upstream_unavailable",
                            "the browser's authenticator: " + text_of(reply, "message", "no answer"));
            return reply;
        };
        if (op == "arm_passkey") {
            std::string field = pick(true);
            json credential = vaults::passkey_to_cdp(values.at(field).get<std::string>());
            std::string rp = credential.at("rpId");
            agent({{"op", "arm"}, {"credential", credential}});
            record(row.at("id"), "passkey_armed", req.browser_id, {{"field", field}, {"rp_id", rp}});
            return {{"type", op}, {"status", "armed"}, {"rp_id", rp}};
        }
        if (op == "register_passkey") {
            std::string field = pick(false);
            agent({{"op", "register"}});
            watch_registration(session, row.at("id"), field, req.browser_id);
            record(row.at("id"), "passkey_registration_armed", req.browser_id, {{"field", field}});
            return {{"type", op}, {"status", "armed"}};
        }
        agent({{"op", "disarm"}});
        {
            std::lock_guard lock(watch_m_);
            watches_.erase(session + "/" + row.at("id").get<std::string>());
        }
        record(row.at("id"), "passkey_disarmed", req.browser_id, json::object());
        return {{"type", op}, {"status", "disarmed"}};
    }

    // A pending registration: the browser's agent is asked every second for credentials its
    // authenticator made, for up to an hour, until one is stored, the browser ends or it is
    // disarmed.
    void watch_registration(const std::string &session, const std::string &item_id, const std::string &field,
                            const std::string &browser_id) {
        std::jthread watcher([this, session, item_id, field, browser_id](const std::stop_token &stop) {
            auto end = std::chrono::steady_clock::now() + 1h;
            int failures = 0;
            while (!stop.stop_requested() && std::chrono::steady_clock::now() < end && failures < 5) {
                auto answer = instance_call(session, "POST", "/vaults/passkey",
                                            json{{"op", "events"}, {"wait_ms", 1000}}.dump(), 10000);
                json reply = json::parse(answer.body, nullptr, false);
                if (answer.status != 200 || !reply.is_object()) {
                    ++failures;
                    std::this_thread::sleep_for(1s);
                    continue;
                }
                failures = 0;
                if (reply.value("armed", json(true)) == json(false)) return;
                for (const auto &credential : reply.value("credentials", json::array()))
                    if (store_registration(item_id, field, browser_id, credential)) return;
            }
        });
        std::lock_guard lock(watch_m_);
        auto key = session + "/" + item_id;
        watches_.erase(key);
        watches_.emplace(key, std::move(watcher));
    }

    // The credential the page registered, into the empty passkey field (sealed); true when done.
    bool store_registration(const std::string &item_id, const std::string &field, const std::string &browser_id,
                            const json &credential) {
        for (int attempt = 0; attempt < 3; ++attempt) {
            auto rows = sql("SELECT * FROM vaults_items WHERE id = ?", json::array({item_id}));
            if (rows.empty()) return true;
            const json &row = rows.front();
            auto defs = vaults::field_defs_from_json(parse_json(row, "fields", json::array()));
            auto def =
                std::find_if(defs.begin(), defs.end(), [&](const vaults::FieldDef &d) { return d.name == field; });
            json values = open_values(row);
            if (def == defs.end() || def->type != "passkey" || values.contains(field)) return true;
            std::string cxf = vaults::passkey_from_cdp(credential);
            try {
                vaults::check_value(*def, cxf);
            } catch (const Error &) {
                warn("a passkey the browser registered is not ES256 with a usable key; not stored");
                return false;
            }
            values[field] = cxf;
            std::string token = hangar::new_id();
            sql("UPDATE vaults_items SET values_sealed = ?, status = ?, write_token = ?, updated_at = ? WHERE id = ? "
                "AND version = ?",
                {seal_json(values), vaults::credential_status(defs, names_of(values)), token, hangar::now_ms(), item_id,
                 row.at("version")});
            auto after = sql("SELECT write_token FROM vaults_items WHERE id = ?", json::array({item_id}));
            if (after.empty() || after[0].value("write_token", json()) != token) continue;
            record(item_id, "credential_passkey_registered", browser_id,
                   {{"field", field}, {"rp_id", credential.value("rpId", "")}});
            return true;
        }
        return true;
    }

    // ---- instance half: the virtual authenticators --------------------------------------------------

    // A CTAP2 virtual authenticator on every page of the browser, held on the agent's own DevTools
    // connection (they go when it does). CDP's WebAuthn domain works per page session, so the
    // connection auto-attaches browser-wide: the pages open at arming and each page opened later,
    // which waits (waitForDebuggerOnStart) until its authenticator holds the armed credentials, so
    // a new tab's first credentials.get is answered too. A pump thread reads the connection while
    // it is open; `m` guards everything but the pump's wait on the socket.
    struct Authenticator {
        std::mutex m;
        std::condition_variable cv; // a page registered a credential, or the connection went
        std::shared_ptr<hangar::cdp::Connection> conn;
        int port = 0;
        std::uint64_t generation = 0;             // bumped when the connection is dropped
        std::map<std::string, std::string> pages; // CDP session → its authenticator id
        std::set<std::string> targets;            // the page targets attached (by target id)
        std::vector<json> credentials;            // armed (CDP form): added to every page, new ones too
        bool registering = false;
        std::vector<json> registered; // made by a page since the last `events`
        std::jthread pump;
    };
    Authenticator authn_;

    static json authenticator_options() {
        return {{"options",
                 {{"protocol", "ctap2"},
                  {"ctap2Version", "ctap2_1"},
                  {"transport", "internal"},
                  {"hasResidentKey", true},
                  {"hasUserVerification", true},
                  {"isUserVerified", true},
                  {"automaticPresenceSimulation", true}}}};
    }

    // A page attached: its authenticator with every armed credential, then the page runs on
    // (whatever failed: a page must never stay paused on this agent).
    void arm_page_locked(const std::string &session) {
        auto &conn = *authn_.conn;
        try {
            conn.call("WebAuthn.enable", {{"enableUI", false}}, session, 10s);
            std::string id = conn.call("WebAuthn.addVirtualAuthenticator", authenticator_options(), session, 10s)
                                 .value("authenticatorId", "");
            for (const auto &c : authn_.credentials)
                conn.call("WebAuthn.addCredential", {{"authenticatorId", id}, {"credential", c}}, session, 10s);
            authn_.pages[session] = id;
        } catch (const hangar::cdp::Failure &) {
            // the page closed meanwhile (its session is gone); a broken connection is the pump's
        }
        try {
            conn.call("Runtime.runIfWaitingForDebugger", json::object(), session, 5s);
        } catch (const hangar::cdp::Failure &) {
            // a page that closed needs nothing
        }
    }

    void on_cdp_message_locked(const json &msg) {
        const std::string method = msg.value("method", "");
        const json params = msg.value("params", json::object());
        if (method == "Target.attachedToTarget") {
            std::string session = params.value("sessionId", "");
            const json info = params.value("targetInfo", json::object());
            if (info.value("type", "") == "page") {
                authn_.targets.insert(info.value("targetId", ""));
                arm_page_locked(session);
            } else {
                try {
                    authn_.conn->call("Runtime.runIfWaitingForDebugger", json::object(), session, 5s);
                } catch (const hangar::cdp::Failure &) {
                    // gone already
                }
            }
        } else if (method == "Target.detachedFromTarget") {
            authn_.pages.erase(params.value("sessionId", ""));
        } else if (method == "WebAuthn.credentialAdded" && authn_.registering) {
            // The page's registration: to the server, and armed on the other pages too.
            json credential = params.value("credential", json::object());
            const std::string from = msg.value("sessionId", "");
            authn_.registering = false;
            authn_.registered.push_back(credential);
            authn_.credentials.push_back(credential);
            for (const auto &[session, id] : authn_.pages)
                if (session != from) try {
                        authn_.conn->call("WebAuthn.addCredential",
                                          {{"authenticatorId", id}, {"credential", credential}}, session, 10s);
                    } catch (const hangar::cdp::Failure &) {
                        // that page closed meanwhile
                    }
            authn_.cv.notify_all();
        }
    }

    // Everything armed is gone with the connection; the pump of that connection ends by itself.
    void drop_authenticators_locked() {
        authn_.conn.reset();
        authn_.pages.clear();
        authn_.targets.clear();
        authn_.credentials.clear();
        authn_.registered.clear();
        authn_.registering = false;
        ++authn_.generation;
        authn_.cv.notify_all();
    }

    // The same from a request: `retired` takes the pump, stopped, for the caller to join once it
    // has let go of `m` (the pump needs `m` to end). The pump itself only drops.
    void retire_authenticators_locked(std::jthread &retired) {
        drop_authenticators_locked();
        retired = std::move(authn_.pump);
        retired.request_stop();
    }

    void pump_authenticators(const std::stop_token &stop, const std::shared_ptr<hangar::cdp::Connection> &conn,
                             std::uint64_t generation) {
        const int fd = conn->fd(); // read without `m`; messages a call() queued wait one round at most
        while (!stop.stop_requested()) {
            pollfd p{fd, POLLIN, 0};
            ::poll(&p, 1, 100);
            std::lock_guard lock(authn_.m);
            if (authn_.generation != generation) return;
            try {
                for (;;) // what is there now; a message read partly waits for the next round
                    on_cdp_message_locked(conn->next(hangar::cdp::Clock::now() + 20ms));
            } catch (const hangar::cdp::Failure &f) {
                if (!f.timed_out()) {
                    drop_authenticators_locked();
                    return;
                }
            }
        }
    }

    // The browser-wide connection, its pages armed; `retired` takes a pump to join once the
    // caller has let go of `m` (the pump needs it to end).
    void ensure_authenticators_locked(std::jthread &retired) {
        json s = call("browsers.chromium", json::object());
        auto endpoint = hangar::cdp::endpoint_of(s);
        if (!endpoint) throw Error(409, "conflict", "Chromium is not running");
        if (authn_.conn && authn_.port == endpoint->port) return;
        retire_authenticators_locked(retired);
        authn_.conn = std::make_shared<hangar::cdp::Connection>(endpoint->port, endpoint->ws_path, 5s);
        authn_.port = endpoint->port;
        // Pages open now attach during the call (their events are kept), later ones as they open.
        authn_.conn->call("Target.setAutoAttach",
                          {{"autoAttach", true},
                           {"waitForDebuggerOnStart", true},
                           {"flatten", true},
                           {"filter", json::array({{{"type", "page"}, {"exclude", false}}})}},
                          {}, 10s);
        json open = authn_.conn->call("Target.getTargets", json::object(), {}, 10s);
        auto drain = [&] {
            try {
                for (;;)
                    on_cdp_message_locked(authn_.conn->next(hangar::cdp::Clock::now() + 50ms));
            } catch (const hangar::cdp::Failure &f) {
                if (!f.timed_out()) throw;
            }
        };
        drain();
        // A page the auto-attach did not report (older Chromium reports new targets only) is
        // attached by hand, never twice (two authenticators on one page).
        for (const auto &t : open.value("targetInfos", json::array()))
            if (t.value("type", "") == "page" && !authn_.targets.count(t.value("targetId", ""))) {
                authn_.targets.insert(t.value("targetId", ""));
                arm_page_locked(authn_.conn
                                    ->call("Target.attachToTarget",
                                           {{"targetId", t.value("targetId", "")}, {"flatten", true}}, {}, 10s)
                                    .value("sessionId", ""));
            }
        authn_.pump = std::jthread([this, conn = authn_.conn, generation = authn_.generation](
                                       const std::stop_token &stop) { pump_authenticators(stop, conn, generation); });
    }

    json instance_passkey(const json &body) {
        std::string op = body.value("op", "");
        std::jthread retired; // joined after `lock` is released (declared first, destroyed last)
        std::unique_lock lock(authn_.m);
        try {
            if (op == "disarm") {
                if (authn_.conn) {
                    for (const auto &[session, id] : authn_.pages)
                        try {
                            authn_.conn->call("WebAuthn.removeVirtualAuthenticator", {{"authenticatorId", id}}, session,
                                              5s);
                        } catch (const hangar::cdp::Failure &) {
                            // that page or Chromium went: nothing is armed there any more
                        }
                }
                retire_authenticators_locked(retired);
                return json::object();
            }
            if (op == "events") {
                authn_.cv.wait_for(lock, std::chrono::milliseconds(std::clamp(body.value("wait_ms", 1000), 0, 5000)),
                                   [&] { return !authn_.registered.empty() || !authn_.conn; });
                json credentials(std::exchange(authn_.registered, {}));
                return {{"credentials", credentials}, {"armed", authn_.conn != nullptr}};
            }
            ensure_authenticators_locked(retired);
            if (op == "arm") {
                json credential = body.value("credential", json());
                std::optional<hangar::cdp::Failure> refused;
                std::size_t armed = 0;
                for (const auto &[session, id] : authn_.pages)
                    try {
                        authn_.conn->call("WebAuthn.addCredential",
                                          {{"authenticatorId", id}, {"credential", credential}}, session, 10s);
                        ++armed;
                    } catch (const hangar::cdp::Failure &f) {
                        refused = f; // a page that closed meanwhile; on every page, the credential
                    }
                if (armed == 0 && refused) throw *refused;
                authn_.credentials.push_back(std::move(credential));
                return {{"pages", authn_.pages.size()}};
            }
            if (op == "register") {
                authn_.registering = true;
                authn_.registered.clear();
                return {{"pages", authn_.pages.size()}};
            }
        } catch (const hangar::cdp::Failure &f) {
            retire_authenticators_locked(retired);
            // CDP's messages name the method, never a key.
            throw Error(502, "upstream_unavailable", std::string("the browser's authenticator failed: ") + f.what());
        }
        throw Error::invalid("op", "must be arm, register, disarm or events");
    }

    // ---- instance half: fill over CDP -------------------------------------------------------------

    // What finds one element for a fill: a string error code, or the element. Same-origin frames
    // are searched too; cross-origin frames are not reached from the main frame.
    static constexpr const char *kFrames = R"js(
const docs = [];
const visit = (d) => { docs.push(d); for (const f of d.querySelectorAll('iframe,frame')) { try { if (f.contentDocument) visit(f.contentDocument); } catch (e) {} } };
visit(document);
const editable = (e) => !e.disabled && !e.readOnly && (e.matches('textarea, select, [contenteditable=""], [contenteditable=true]') ||
  (e.matches('input') && !['hidden','checkbox','radio','submit','button','image','reset','file'].includes((e.type || '').toLowerCase())));
const pick = (found) => found.length === 0 ? 'element_not_found' : found.length > 1 ? 'ambiguous_selector' : (editable(found[0]) ? found[0] : 'element_not_editable');
)js";

    static std::string by_selector(const std::string &selector) {
        return std::string("(() => {") + kFrames +
               "let found = []; try { for (const d of docs) found.push(...d.querySelectorAll(" + json(selector).dump() +
               ")); } catch (e) { return 'element_not_found'; } return pick(found); })()";
    }

    // As managed auth finds login fields: by the field's name or id, else by what the input is for.
    static std::string by_field(const std::string &name, const std::string &type) {
        return std::string("(() => {") + kFrames + "const name = " + json(name).dump() +
               ".toLowerCase(), type = " + json(type).dump() + R"js(;
const vis = (e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
const all = docs.flatMap((d) => [...d.querySelectorAll('input, textarea')]).filter((e) => vis(e) && editable(e));
const about = (e) => [e.name, e.id, e.getAttribute('autocomplete'), e.getAttribute('aria-label'), e.placeholder].filter(Boolean).join(' ').toLowerCase();
let c = all.filter((e) => (e.name || '').toLowerCase() === name || (e.id || '').toLowerCase() === name);
if (!c.length) {
  if (type === 'password') c = all.filter((e) => e.type === 'password' && !/new|confirm|repeat/.test(about(e)));
  else if (type === 'totp') c = all.filter((e) => e.getAttribute('autocomplete') === 'one-time-code' || (e.type !== 'password' && /otp|totp|2fa|mfa|one.?time|verification|code/.test(about(e))));
  else if (type === 'email') c = all.filter((e) => e.type === 'email' || /email/.test(about(e)));
  else c = all.filter((e) => e.type !== 'password' && /user|login|identifier|account|email/.test(about(e)));
}
return c.length ? pick(c) : 'element_not_found'; })()
)js";
    }

    json instance_fill(const json &body) {
        json s = call("browsers.chromium", json::object());
        if (!s.contains("port") || !s.at("port").is_number()) throw Error(409, "conflict", "Chromium is not running");
        int port = s.at("port").get<int>();
        json list = json::parse(hangar::cdp::http_get(port, "/json/list", 10s), nullptr, false);
        std::vector<json> pages, matching;
        for (const auto &t : list.is_array() ? list : json::array())
            if (t.value("type", "") == "page") pages.push_back(t);
        std::string wanted = body.value("page_url", "");
        if (body.contains("page_url")) {
            for (const auto &p : pages)
                if (p.value("url", "") == wanted) matching.push_back(p);
            if (matching.empty()) throw Error::not_found("no open page has exactly that page_url");
            if (matching.size() > 1) throw Error::conflict("several open pages have that page_url");
        } else {
            if (pages.size() != 1)
                throw Error::invalid("page_url",
                                     "is required: the browser has " + std::to_string(pages.size()) + " pages open");
            matching = pages;
        }
        std::string ws = matching.front().value("webSocketDebuggerUrl", "");
        auto at = ws.find("/devtools/");
        if (at == std::string::npos) throw Error(409, "conflict", "the page cannot be reached");
        hangar::cdp::Connection c(port, ws.substr(at), 5s);
        json outcomes = json::array();
        for (const auto &e : body.value("entries", json::array())) {
            std::string outcome;
            try {
                outcome = fill_one(c, e);
            } catch (const std::exception &) {
                outcome = "unknown"; // it may have typed part of it; the rest is not attempted
            }
            outcomes.push_back(outcome);
            if (outcome != "filled" && e.contains("selector")) break;
        }
        return {{"outcomes", outcomes}};
    }

    static std::string fill_one(hangar::cdp::Connection &c, const json &e) {
        std::string expr = e.contains("selector") ? by_selector(e.value("selector", ""))
                                                  : by_field(e.value("name", ""), e.value("type", ""));
        json found = c.call("Runtime.evaluate", {{"expression", expr}, {"returnByValue", false}}, {}, 10s);
        const json &res = found.value("result", json::object());
        if (found.contains("exceptionDetails")) return "execution_failed";
        if (res.value("type", "") == "string") return res.value("value", "execution_failed");
        std::string object = res.value("objectId", "");
        if (object.empty()) return "element_not_found";
        const std::string value = e.value("value", "");
        // A select takes one of its options (by value, else by text); the value is an argument,
        // never part of a script's text.
        json tag = c.call("Runtime.callFunctionOn",
                          {{"objectId", object},
                           {"functionDeclaration", "function () { return this.tagName; }"},
                           {"returnByValue", true}},
                          {}, 10s);
        if (tag.value("result", json::object()).value("value", "") == "SELECT") {
            json r = c.call("Runtime.callFunctionOn",
                            {{"objectId", object},
                             {"functionDeclaration",
                              "function (v) { const o = [...this.options].find((o) => o.value === v) || "
                              "[...this.options].find((o) => o.text.trim() === v); if (!o) return 'option_not_found'; "
                              "this.value = o.value; this.dispatchEvent(new Event('input', {bubbles: true})); "
                              "this.dispatchEvent(new Event('change', {bubbles: true})); return 'filled'; }"},
                             {"arguments", json::array({{{"value", value}}})},
                             {"returnByValue", true}},
                            {}, 10s);
            return r.value("result", json::object()).value("value", "execution_failed");
        }
        json focused = c.call(
            "Runtime.callFunctionOn",
            {{"objectId", object},
             {"functionDeclaration", "function () { this.scrollIntoView({block: 'center'}); this.focus(); "
                                     "if ('value' in this) { this.value = ''; this.dispatchEvent(new Event('input', "
                                     "{bubbles: true})); } else { this.textContent = ''; } "
                                     "return this.ownerDocument.activeElement === this; }"},
             {"returnByValue", true}},
            {}, 10s);
        if (!focused.value("result", json::object()).value("value", false)) return "element_not_editable";
        c.call("Input.insertText", {{"text", value}}, {}, 10s);
        c.call("Runtime.callFunctionOn",
               {{"objectId", object},
                {"functionDeclaration", "function () { this.dispatchEvent(new Event('change', {bubbles: true})); }"}},
               {}, 10s);
        return "filled";
    }

    // ---- vault provider configs -------------------------------------------------------------------

    json require_config(const std::string &org, const std::string &id_or_name) const {
        auto row = hangar::find_by_id_or_name([this](const std::string &s, const json &p) { return sql(s, p); },
                                              "vaults_provider_configs", org, id_or_name, "org_id");
        if (!row) throw Error::not_found("vault provider config \"" + id_or_name + "\" not found");
        return *row;
    }
    static json render_config(const json &row) {
        json out = {{"id", row.at("id")},
                    {"provider", row.at("provider")},
                    {"name", row.at("name")},
                    {"client_id", row.at("client_id")},
                    {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                    {"updated_at", hangar::rfc3339(row.at("updated_at").get<std::int64_t>())}};
        if (row.at("provider") == "link" && row.value("publishable_key", json()).is_string())
            out["publishable_key"] = row.at("publishable_key");
        // AgentCard sandbox credentials cannot be introspected without AgentCard: Hangar says what
        // the client id shows (a test_ prefix) and nothing more.
        if (row.at("provider") == "agentcard")
            out["test_mode"] = row.at("client_id").get<std::string>().rfind("test_", 0) == 0;
        return out;
    }
    void list_configs(Request &q, Response &r) {
        hangar::Validation v;
        auto paging = hangar::parse_paging(q, v);
        v.throw_if_failed("invalid query");
        hangar::answer_page(
            r, [this](const std::string &s, const json &p) { return sql(s, p); },
            "SELECT * FROM vaults_provider_configs WHERE org_id = ? ORDER BY created_at, id", json::array({org_of(q)}),
            paging, [](const json &row) { return render_config(row); });
    }
    void create_config(Request &q, Response &r) {
        std::string org = org_admin(q);
        auto c = vaults::parse_provider_config_create(q.json_body());
        if (!sql("SELECT id FROM vaults_provider_configs WHERE org_id = ? AND LOWER(name) = LOWER(?)", {org, c.name})
                 .empty())
            throw Error::conflict("a vault provider config named \"" + c.name + "\" exists");
        auto now = hangar::now_ms();
        std::string id = hangar::new_id();
        sql("INSERT INTO vaults_provider_configs (id, org_id, provider, name, client_id, secret_sealed, "
            "publishable_key, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            {id, org, c.provider, c.name, c.client_id, secrets_->seal(c.client_secret),
             c.publishable_key ? json(*c.publishable_key) : json(nullptr), now, now});
        json row = require_config(org, c.name);
        if (row.at("id") != id) throw Error::conflict("a vault provider config named \"" + c.name + "\" exists");
        r.json(render_config(row));
    }
    void update_config(Request &q, Response &r) {
        std::string org = org_admin(q);
        json row = require_config(org, q.param("id_or_name"));
        auto u = vaults::parse_provider_config_update(q.json_body(), row.at("provider"));
        if (u.name &&
            !sql("SELECT id FROM vaults_provider_configs WHERE org_id = ? AND LOWER(name) = LOWER(?) AND id <> ?",
                 {org, *u.name, row.at("id")})
                 .empty())
            throw Error::conflict("a vault provider config named \"" + *u.name + "\" exists");
        sql("UPDATE vaults_provider_configs SET name = ?, secret_sealed = ?, publishable_key = ?, updated_at = ? WHERE "
            "id = ?",
            {u.name ? json(*u.name) : row.at("name"),
             u.client_secret ? json(secrets_->seal(*u.client_secret)) : row.at("secret_sealed"),
             u.publishable_key ? json(*u.publishable_key) : row.value("publishable_key", json()), hangar::now_ms(),
             row.at("id")});
        r.json(render_config(require_config(org, row.at("id"))));
    }
    void delete_config(Request &q, Response &r) {
        std::string org = org_admin(q);
        json row = require_config(org, q.param("id_or_name"));
        if (!sql("SELECT id FROM vaults_items WHERE provider_config_id = ? LIMIT 1", json::array({row.at("id")}))
                 .empty())
            throw Error::conflict("vault provider config \"" + row.at("name").get<std::string>() +
                                  "\" is referenced by a vault item");
        sql("DELETE FROM vaults_provider_configs WHERE id = ?", json::array({row.at("id")}));
        r.no_content();
    }

    std::unique_ptr<hangar::Secrets> secrets_;
    std::mutex notify_m_;
    std::condition_variable notify_cv_;
    std::map<std::string, std::uint64_t> generations_;
    bool stopping_ = false;
    std::mutex fill_locks_m_;
    std::map<std::string, std::shared_ptr<std::timed_mutex>> fill_locks_; // by session
    std::mutex watch_m_;
    std::map<std::string, std::jthread> watches_; // pending registrations, by "<session>/<item id>"
};

} // namespace

HANGAR_PLUGIN(VaultsPlugin, "vaults", "0.1.0", nullptr, migrations, sizeof(migrations) / sizeof(migrations[0]))
