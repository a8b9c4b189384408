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
};
constexpr const char *kKeyPrefix = "hgr_";
} // namespace

nlohmann::json Caller::to_json() const {
    return {{"org_id", org_id},
            {"project_id", project_id},
            {"key_id", key_id},
            {"project_scoped", project_scoped},
            {"entitlements", entitlements}};
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
    store_.exec("INSERT INTO api_keys (id, org_id, project_id, name, key_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                {id, org, project.empty() ? nlohmann::json(nullptr) : nlohmann::json(project), name,
                 sha256_hex(plaintext), rfc3339(now_ms())});
    return plaintext;
}

std::string Auth::bootstrap(const std::string &bootstrap_key, const std::string &key_file) {
    std::string org = default_org();
    if (org.empty()) {
        org = "org_" + random_token(20);
        auto now = rfc3339(now_ms());
        store_.exec("INSERT INTO orgs (id, name, created_at) VALUES (?, 'default', ?)", {org, now});
        store_.exec("INSERT INTO projects (id, org_id, name, is_default, created_at) VALUES (?, ?, 'default', 1, ?)",
                    {"proj_" + random_token(20), org, now});
    }
    if (!bootstrap_key.empty()) {
        auto hash = sha256_hex(bootstrap_key);
        if (store_.exec("SELECT id FROM api_keys WHERE key_hash = ?", {hash}).empty())
            insert_key("key_" + random_token(20), org, "", "bootstrap (HANGAR_API_KEY)", bootstrap_key);
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
    std::string key = kKeyPrefix + random_token(40);
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
    auto rows = store_.exec("SELECT id, org_id, project_id FROM api_keys WHERE key_hash = ? AND revoked_at IS NULL",
                            {sha256_hex(trim(value.substr(7)))});
    if (rows.empty()) return AuthFailure{401, "unauthorized", "invalid API key"};
    Caller caller;
    caller.key_id = rows[0]["id"];
    caller.org_id = rows[0]["org_id"];
    caller.project_scoped = !rows[0]["project_id"].is_null();
    std::string key_project = caller.project_scoped ? rows[0]["project_id"].get<std::string>() : "";

    std::string wanted = project_header ? trim(*project_header) : "";
    if (!wanted.empty()) {
        auto p = store_.exec("SELECT id FROM projects WHERE id = ? AND org_id = ?", {wanted, caller.org_id});
        if (p.empty()) return AuthFailure{404, "not_found", "project " + wanted + " not found"};
        if (caller.project_scoped && wanted != key_project)
            return AuthFailure{403, "forbidden",
                               "this API key is scoped to project " + key_project + " and cannot act on project " +
                                   wanted};
        caller.project_id = wanted;
    } else if (caller.project_scoped) {
        caller.project_id = key_project;
    } else {
        auto p = store_.exec("SELECT id FROM projects WHERE org_id = ? AND is_default = 1", {caller.org_id});
        if (p.empty()) return AuthFailure{500, "internal", "the organisation has no default project"};
        caller.project_id = p[0]["id"];
    }
    for (const auto &[table, id] : {std::pair{"orgs", caller.org_id}, std::pair{"projects", caller.project_id}}) {
        auto e = store_.exec(std::string("SELECT entitlements FROM ") + table + " WHERE id = ?", {id});
        if (e.empty()) continue;
        auto parsed = nlohmann::json::parse(e[0].value("entitlements", "{}"), nullptr, false);
        if (parsed.is_object()) caller.entitlements.update(parsed);
    }
    return caller;
}

std::string Auth::create_project(const std::string &name, const std::string &org_id) {
    std::string org = org_id.empty() ? default_org() : org_id;
    std::string id = "proj_" + random_token(20);
    store_.exec("INSERT INTO projects (id, org_id, name, is_default, created_at) VALUES (?, ?, ?, 0, ?)",
                {id, org, name, rfc3339(now_ms())});
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
    return insert_key("key_" + random_token(20), org, project_id, name, kKeyPrefix + random_token(40));
}

} // namespace hangar::host
