#include "auth.hpp"

#include "util.hpp"

#include <filesystem>

namespace hangar::host {

namespace {
const std::vector<Store::Migration> kAuthMigrations = {
    {1, "CREATE TABLE orgs (id TEXT PRIMARY KEY, name TEXT NOT NULL, created_at TEXT NOT NULL,"
        " entitlements TEXT NOT NULL DEFAULT '{}');"
        "CREATE TABLE projects (id TEXT PRIMARY KEY, org_id TEXT NOT NULL REFERENCES orgs(id), name TEXT NOT NULL,"
        " is_default INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, entitlements TEXT NOT NULL DEFAULT '{}');"
        "CREATE TABLE api_keys (id TEXT PRIMARY KEY, org_id TEXT NOT NULL REFERENCES orgs(id), project_id TEXT"
        " REFERENCES projects(id), name TEXT NOT NULL DEFAULT '', key_hash TEXT NOT NULL UNIQUE,"
        " created_at TEXT NOT NULL, revoked_at TEXT);"},
    // The org plugin's API keys, projects and limits. Times stay RFC 3339 text in one fixed
    // width, so they compare as strings. `revoked_at` is the key's deleted_at.
    {2, "ALTER TABLE api_keys ADD COLUMN expires_at TEXT;"
        "ALTER TABLE api_keys ADD COLUMN masked_key TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE api_keys ADD COLUMN created_by TEXT;"
        "ALTER TABLE api_keys ADD COLUMN lifetime_days INTEGER;"
        "ALTER TABLE projects ADD COLUMN status TEXT NOT NULL DEFAULT 'active';"
        "ALTER TABLE projects ADD COLUMN updated_at TEXT;"
        "ALTER TABLE projects ADD COLUMN deleted_at TEXT;"
        "ALTER TABLE projects ADD COLUMN max_concurrent_sessions INTEGER;"
        "ALTER TABLE projects ADD COLUMN max_concurrent_invocations INTEGER;"
        "ALTER TABLE orgs ADD COLUMN default_project_max_concurrent_sessions INTEGER;"
        "UPDATE projects SET updated_at = created_at;"},
    // A statement-scoped key's policy as {"statements": [...]}; NULL for an ordinary key.
    {3, "ALTER TABLE api_keys ADD COLUMN policy TEXT;"},
};
constexpr const char *kKeyPrefix = "hgr_";
} // namespace

std::string mask_key(const std::string &plaintext) {
    if (plaintext.size() < 12) return "****";
    auto prefix = plaintext.starts_with(kKeyPrefix) ? std::string(kKeyPrefix) : std::string();
    return prefix + "****" + plaintext.substr(plaintext.size() - 4);
}

std::string new_key_plaintext() {
    return kKeyPrefix + random_token(40);
}

nlohmann::json Caller::to_json() const {
    return {{"org_id", org_id},
            {"project_id", project_id},
            {"key_id", key_id},
            {"project_name", project_name},
            {"project_scoped", project_scoped},
            {"auth_strategy", "api_key"},
            {"max_concurrent_sessions", max_concurrent_sessions},
            {"entitlements", entitlements},
            {"policy", policy ? key_policy::to_json(*policy) : nlohmann::json(nullptr)}};
}

Auth::Auth(Store &store) : store_(store) {
    store_.migrate("host.auth", kAuthMigrations);
}

std::string Auth::default_org() const {
    auto rows = store_.exec("SELECT id FROM orgs ORDER BY created_at LIMIT 1");
    return rows.empty() ? std::string() : rows[0]["id"].get<std::string>();
}

std::string Auth::insert_key(const std::string &id, const std::string &org, const std::string &project,
                             const std::string &name, const std::string &plaintext) {
    store_.exec("INSERT INTO api_keys (id, org_id, project_id, name, key_hash, created_at, masked_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                {id, org, project.empty() ? nlohmann::json(nullptr) : nlohmann::json(project), name,
                 sha256_hex(plaintext), rfc3339(now_ms()), mask_key(plaintext)});
    return plaintext;
}

std::string Auth::bootstrap(const std::string &bootstrap_key, const std::string &key_file) {
    std::string org = default_org();
    if (org.empty()) {
        org = "org_" + random_token(20);
        auto now = rfc3339(now_ms());
        store_.exec("INSERT INTO orgs (id, name, created_at) VALUES (?, 'default', ?)", {org, now});
        store_.exec("INSERT INTO projects (id, org_id, name, is_default, created_at, updated_at)"
                    " VALUES (?, ?, 'default', 1, ?, ?)",
                    {"proj_" + random_token(20), org, now, now});
    }
    if (!bootstrap_key.empty()) {
        auto hash = sha256_hex(bootstrap_key);
        if (store_.exec("SELECT id FROM api_keys WHERE key_hash = ?", {hash}).empty())
            insert_key("key_" + random_token(20), org, "", "bootstrap (HANGAR_API_KEY)", bootstrap_key);
        else // keys registered before masked_key existed
            store_.exec("UPDATE api_keys SET masked_key = ? WHERE key_hash = ? AND masked_key = ''",
                        {mask_key(bootstrap_key), hash});
        return {};
    }
    if (std::filesystem::exists(key_file)) {
        // A recreated database with the old key file: register that key again rather than
        // lock everyone out.
        std::string existing = trim(read_file(key_file));
        if (!existing.empty() &&
            store_.exec("SELECT id FROM api_keys WHERE key_hash = ?", {sha256_hex(existing)}).empty())
            insert_key("key_" + random_token(20), org, "", "bootstrap (generated)", existing);
        if (!existing.empty()) return {};
    }
    std::string key = new_key_plaintext();
    insert_key("key_" + random_token(20), org, "", "bootstrap (generated)", key);
    write_file_atomic(key_file, key + "\n", 0600);
    return key;
}

std::variant<Caller, AuthFailure> Auth::authenticate(const std::optional<std::string> &authorization,
                                                     const std::optional<std::string> &project_header) const {
    if (!authorization) return AuthFailure{401, "unauthorized", "missing Authorization: Bearer <api key> header"};
    std::string value = trim(*authorization);
    if (value.size() < 8 || !iequals(value.substr(0, 7), "bearer ") || trim(value.substr(7)).empty())
        return AuthFailure{401, "unauthorized", "the Authorization header must be 'Bearer <api key>'"};
    // Read on every request, never cached: a deleted or expired key is refused on its next call.
    // In the same statement, what the caller needs of the project it acts on without a project
    // header (the key's own, or the org's default) and of its org: every API call pays for these
    // reads, and on PostgreSQL each statement is a round trip and a server process's work.
    auto rows = store_.exec(
        "SELECT k.id, k.org_id, k.project_id, k.policy, c.id AS acting_project, c.name, c.max_concurrent_sessions AS "
        "own, "
        "o.default_project_max_concurrent_sessions AS fallback, o.entitlements AS org_entitlements, c.entitlements AS "
        "project_entitlements FROM api_keys k JOIN orgs o ON o.id = k.org_id LEFT JOIN projects p ON p.id = "
        "k.project_id LEFT JOIN projects c ON c.id = COALESCE(k.project_id, (SELECT d.id FROM projects d WHERE "
        "d.org_id = k.org_id AND d.is_default = 1 LIMIT 1)) WHERE k.key_hash = ? AND k.revoked_at IS NULL AND "
        "(k.expires_at IS NULL OR k.expires_at > ?) AND p.deleted_at IS NULL",
        {sha256_hex(trim(value.substr(7))), rfc3339(now_ms())});
    if (rows.empty()) return AuthFailure{401, "unauthorized", "invalid, expired or deleted API key"};
    Caller caller;
    caller.key_id = rows[0]["id"];
    caller.org_id = rows[0]["org_id"];
    caller.project_scoped = !rows[0]["project_id"].is_null();
    if (const auto &policy = rows[0]["policy"]; policy.is_string()) {
        // A policy the store cannot read allows nothing rather than everything.
        caller.policy = key_policy::from_json(nlohmann::json::parse(policy.get<std::string>(), nullptr, false))
                            .value_or(std::vector<key_policy::Statement>{});
    }
    std::string key_project = caller.project_scoped ? rows[0]["project_id"].get<std::string>() : "";

    std::string wanted = project_header ? trim(*project_header) : "";
    if (!wanted.empty()) {
        // By id, or by name (the Python SDK's `project` option sends X-Kernel-Project: <name>).
        auto p = store_.exec("SELECT id FROM projects WHERE (id = ? OR name = ?) AND org_id = ? AND deleted_at IS NULL "
                             "ORDER BY id = ? DESC LIMIT 1",
                             {wanted, wanted, caller.org_id, wanted});
        if (p.empty()) return AuthFailure{404, "not_found", "project " + wanted + " not found"};
        std::string resolved = p[0]["id"];
        if (caller.project_scoped && resolved != key_project)
            return AuthFailure{403, "forbidden",
                               "this API key is scoped to project " + key_project + " and cannot act on project " +
                                   wanted};
        caller.project_id = resolved;
        complete(caller);
        return caller;
    }
    if (!rows[0]["acting_project"].is_string())
        return AuthFailure{500, "internal", "the organisation has no default project"};
    caller.project_id = rows[0]["acting_project"];
    fill_project(caller, rows[0]);
    return caller;
}

std::optional<Caller> Auth::caller_for_project(const std::string &project_id) const {
    auto p = store_.exec("SELECT org_id FROM projects WHERE id = ? AND deleted_at IS NULL", {project_id});
    if (p.empty()) return std::nullopt;
    Caller caller;
    caller.org_id = p[0]["org_id"];
    caller.project_id = project_id;
    caller.project_scoped = true;
    complete(caller);
    return caller;
}

void Auth::complete(Caller &caller) const {
    // One statement: the project's name and limit, and the org's entitlements under the project's.
    auto rows = store_.exec("SELECT p.name, p.max_concurrent_sessions AS own, o.default_project_max_concurrent_sessions"
                            " AS fallback, o.entitlements AS org_entitlements, p.entitlements AS project_entitlements"
                            " FROM projects p JOIN orgs o ON o.id = p.org_id WHERE p.id = ? AND o.id = ?",
                            {caller.project_id, caller.org_id});
    if (!rows.empty()) fill_project(caller, rows[0]);
}

void Auth::fill_project(Caller &caller, const nlohmann::json &row) const {
    caller.project_name = row.value("name", "");
    caller.max_concurrent_sessions = effective_session_cap(row["own"], row["fallback"]);
    for (const char *column : {"org_entitlements", "project_entitlements"}) {
        const auto &text = row[column];
        auto parsed = nlohmann::json::parse(text.is_string() ? text.get<std::string>() : "{}", nullptr, false);
        if (parsed.is_object()) caller.entitlements.update(parsed);
    }
}

long long Auth::effective_session_cap(const nlohmann::json &project_cap, const nlohmann::json &org_default) const {
    long long cap = 0;
    if (project_cap.is_number_integer() && project_cap.get<long long>() > 0)
        cap = project_cap.get<long long>();
    else if (org_default.is_number_integer() && org_default.get<long long>() > 0)
        cap = org_default.get<long long>();
    if (org_session_limit_ > 0 && (cap == 0 || cap > org_session_limit_)) cap = org_session_limit_;
    return cap;
}

std::string Auth::create_project(const std::string &name, const std::string &org_id) {
    std::string org = org_id.empty() ? default_org() : org_id;
    std::string id = "proj_" + random_token(20);
    auto now = rfc3339(now_ms());
    store_.exec("INSERT INTO projects (id, org_id, name, is_default, created_at, updated_at) VALUES (?, ?, ?, 0, ?, ?)",
                {id, org, name, now, now});
    return id;
}

void Auth::set_entitlement(const std::string &org_or_project, const std::string &feature, bool enabled) {
    const char *table = org_or_project.starts_with("org_") ? "orgs" : "projects";
    auto rows = store_.exec(std::string("SELECT entitlements FROM ") + table + " WHERE id = ?", {org_or_project});
    if (rows.empty()) throw std::runtime_error("no org or project " + org_or_project);
    auto current = nlohmann::json::parse(rows[0].value("entitlements", "{}"), nullptr, false);
    if (!current.is_object()) current = nlohmann::json::object();
    current[feature] = enabled;
    store_.exec(std::string("UPDATE ") + table + " SET entitlements = ? WHERE id = ?",
                {current.dump(), org_or_project});
}

std::string Auth::create_key(const std::string &name, const std::string &project_id) {
    std::string org = default_org();
    if (!project_id.empty()) {
        auto p = store_.exec("SELECT org_id FROM projects WHERE id = ?", {project_id});
        if (p.empty()) throw std::runtime_error("project " + project_id + " not found");
        org = p[0]["org_id"];
    }
    return insert_key("key_" + random_token(20), org, project_id, name, new_key_plaintext());
}

} // namespace hangar::host
