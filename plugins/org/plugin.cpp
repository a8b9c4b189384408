// org: Kernel API §3.19–3.22 — projects [104]–[110], org limits [111]–[112], audit logs
// [113]–[114], API keys [115]–[120] — and the dashboard at /dashboard.
//
// Keys, projects and limits live in the host's own tables (api_keys, projects, orgs; host
// migration "host.auth"), because the host checks every request against them; this plugin is
// their API. Nothing is cached here or in the host: a deleted or expired key fails on its next
// request. The audit log is written by the host's middleware (table audit_logs); this plugin
// only reads it.
#include "dashboard.hpp"
#include "org_model.hpp"

#include <hangar/gzip.hpp>
#include <hangar/key_policy.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/web.hpp>

#include <sodium.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

constexpr std::int64_t kDayMs = 86400LL * 1000;
constexpr std::int64_t kDefaultGraceDays = 7;

using hangar::secrets::sha256_hex;

json null_if_empty(const json &v) {
    return v.is_null() || (v.is_string() && v.get_ref<const std::string &>().empty()) ? json(nullptr) : v;
}

// A 400 naming one field, from the model's "field: problem" messages.
[[noreturn]] void invalid(const std::invalid_argument &e) {
    std::string what = e.what();
    auto colon = what.find(": ");
    if (colon == std::string::npos) throw Error::bad_request(what);
    throw Error::invalid(what.substr(0, colon), what.substr(colon + 2));
}

// Who is calling, as the host resolved it.
struct Caller {
    std::string org_id;
    std::string project_id;
    std::string key_id;
    bool project_scoped = false;

    explicit Caller(const Request &req) {
        json c = req.caller();
        org_id = c.value("org_id", "");
        project_id = c.value("project_id", "");
        key_id = c.value("key_id", "");
        project_scoped = c.value("project_scoped", false);
        if (org_id.empty()) throw Error::unauthorized("no organisation for this caller");
    }
    // Org endpoints (limits, audit logs, other projects) are not for a project-scoped key.
    void require_org_wide(const std::string &what) const {
        if (project_scoped)
            throw Error::forbidden(what + " belong to the organisation: a project-scoped API key cannot use them");
    }
};

class OrgPlugin : public hangar::Plugin {
public:
    void start_server() override {
        if (sodium_init() < 0) throw std::runtime_error("libsodium could not be initialised");
        org_session_limit_ = std::max<std::int64_t>(0, config_int("browsers.max_browsers_per_project", 50));

        route("POST", "/org/api_keys", [this](Request &q, Response &r) { create_key(q, r); });
        route("GET", "/org/api_keys", [this](Request &q, Response &r) { list_keys(q, r); });
        route("GET", "/org/api_keys/{id}", [this](Request &q, Response &r) {
            Caller c(q);
            r.json(render_key(require_key(c, q.param("id"), truthy(q.query("include_deleted")))));
        });
        route("PATCH", "/org/api_keys/{id}", [this](Request &q, Response &r) { rename_key(q, r); });
        route("DELETE", "/org/api_keys/{id}", [this](Request &q, Response &r) { delete_key(q, r); });
        route("POST", "/org/api_keys/{id}/rotate", [this](Request &q, Response &r) { rotate_key(q, r); });

        route("POST", "/org/projects", [this](Request &q, Response &r) { create_project(q, r); });
        route("GET", "/org/projects", [this](Request &q, Response &r) { list_projects(q, r); });
        route("GET", "/org/projects/{id}", [this](Request &q, Response &r) {
            Caller c(q);
            r.json(render_project(require_project(c, q.param("id"))));
        });
        route("PATCH", "/org/projects/{id}", [this](Request &q, Response &r) { update_project(q, r); });
        route("DELETE", "/org/projects/{id}", [this](Request &q, Response &r) { delete_project(q, r); });
        route("GET", "/org/projects/{id}/limits", [this](Request &q, Response &r) {
            Caller c(q);
            c.require_org_wide("project limits");
            r.json(render_limits(require_project(c, q.param("id"))));
        });
        route("PATCH", "/org/projects/{id}/limits", [this](Request &q, Response &r) { update_project_limits(q, r); });

        route("GET", "/org/limits", [this](Request &q, Response &r) {
            Caller c(q);
            c.require_org_wide("organisation limits");
            r.json(org_limits(c.org_id));
        });
        route("PATCH", "/org/limits", [this](Request &q, Response &r) { update_org_limits(q, r); });

        route("GET", "/auth/context", [](Request &q, Response &r) { r.json(auth_context(q)); });
        route("GET", "/org/entitlements", [this](Request &q, Response &r) { r.json(entitlements(q)); });

        route("GET", "/audit-logs", [this](Request &q, Response &r) { list_audit(q, r); });
        route("GET", "/audit-logs/export/chunk", [this](Request &q, Response &r) { export_chunk(q, r); });
        // For continuous export (plugins/audit_export): an org's entries after a sequence number,
        // oldest first, rendered as every other audit answer renders them; {} → the newest seq.
        service("org.audit_entries", [this](const json &in) { return audit_entries(in); });

        for (const char *path : {"/dashboard", "/dashboard/{file}"})
            route(
                "GET", path, [](Request &q, Response &r) { dashboard_file(q, r); }, HANGAR_ROUTE_PUBLIC);
    }

private:
    static bool truthy(const std::optional<std::string> &v) { return v && (*v == "true" || *v == "1"); }

    std::string now() const { return hangar::rfc3339(hangar::now_ms()); }

    // ---- API keys ----

    static constexpr const char *kKeySelect =
        "SELECT k.id, k.name, k.created_at, k.revoked_at, k.expires_at, k.masked_key, k.project_id, k.created_by,"
        " k.lifetime_days, k.policy, p.name AS project_name, c.name AS creator_name FROM api_keys k"
        " LEFT JOIN projects p ON p.id = k.project_id LEFT JOIN api_keys c ON c.id = k.created_by"
        " WHERE k.org_id = ?";

    static json render_key(const json &row) {
        json creator = {{"id", "hangar"}, {"email", ""}, {"name", "hangar operator"}};
        if (row.value("created_by", json()).is_string())
            creator = {
                {"id", row["created_by"]}, {"email", ""}, {"name", null_if_empty(row.value("creator_name", json()))}};
        json out = {{"id", row["id"]},
                    {"created_at", row["created_at"]},
                    {"created_by", creator},
                    {"deleted_at", null_if_empty(row.value("revoked_at", json()))},
                    {"expires_at", null_if_empty(row.value("expires_at", json()))},
                    {"masked_key", row.value("masked_key", "").empty() ? json("****") : row["masked_key"]},
                    {"name", row["name"]},
                    {"project_id", null_if_empty(row.value("project_id", json()))},
                    {"project_name", null_if_empty(row.value("project_name", json()))}};
        // Absent for an ordinary key, as 0.131's APIKey has it.
        if (const json &policy = row.value("policy", json()); policy.is_string())
            if (json parsed = json::parse(policy.get<std::string>(), nullptr, false); parsed.is_object())
                out["policy"] = parsed;
        return out;
    }

    // A key the caller may manage: its org's, and for a project-scoped caller its project's only.
    // Anything else is 404, so a scoped key learns nothing about other projects' keys.
    json require_key(const Caller &c, const std::string &id, bool include_deleted) const {
        std::string q = std::string(kKeySelect) + " AND k.id = ?";
        json params = json::array({c.org_id, id});
        if (c.project_scoped) {
            q += " AND k.project_id = ?";
            params.push_back(c.project_id);
        }
        if (!include_deleted) q += " AND k.revoked_at IS NULL";
        json rows = sql(q, params);
        if (rows.empty()) throw Error::not_found("API key " + id + " not found");
        return rows[0];
    }

    // The project a new key is scoped to: the body's project_id (null/absent = org-wide; a
    // project-scoped caller's keys are always its own project's).
    json key_project(const Caller &c, const json &body) const {
        auto it = body.find("project_id");
        if (it == body.end() || it->is_null()) return c.project_scoped ? json(c.project_id) : json(nullptr);
        if (!it->is_string() || it->get_ref<const std::string &>().empty())
            throw Error::invalid("project_id", "must be a project id or null");
        std::string wanted = *it;
        json rows = sql("SELECT id FROM projects WHERE org_id = ? AND deleted_at IS NULL AND (id = ? OR name = ?)",
                        json::array({c.org_id, wanted, wanted}));
        if (rows.empty()) throw Error::invalid("project_id", "no project " + wanted + " in this organisation");
        std::string id = rows[0]["id"];
        if (c.project_scoped && id != c.project_id)
            throw Error::forbidden("a project-scoped API key may only create keys for its own project");
        return id;
    }

    // `days` from now, or at `exact` (epoch ms; 0.131's expires_at), or never.
    json insert_key(const Caller &c, const std::string &name, const json &project, std::optional<std::int64_t> days,
                    std::optional<std::int64_t> exact, const json &policy) {
        std::string plaintext = "hgr_" + hangar::new_id(40);
        std::string id = "key_" + hangar::new_id(20);
        auto created = hangar::now_ms();
        json expires = exact  ? json(hangar::rfc3339(*exact))
                       : days ? json(hangar::rfc3339(created + *days * kDayMs))
                              : json(nullptr);
        sql("INSERT INTO api_keys (id, org_id, project_id, name, key_hash, created_at, masked_key, created_by,"
            " expires_at, lifetime_days, policy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            json::array({id, c.org_id, project, name, sha256_hex(plaintext), hangar::rfc3339(created),
                         org::mask_key(plaintext), c.key_id, expires, days ? json(*days) : json(nullptr),
                         policy.is_null() ? json(nullptr) : json(policy.dump())}));
        json out = render_key(require_key(c, id, false));
        out["key"] = plaintext;
        return out;
    }

    void create_key(Request &req, Response &res) {
        Caller c(req);
        json body = req.json_body(false);
        hangar::Validation v;
        if (auto p = org::name_problem(body.value("name", json()))) v.fail("name", *p);
        org::Days days;
        try {
            days = org::parse_days(body, "days_to_expire", 1);
        } catch (const std::invalid_argument &e) {
            v.fail("days_to_expire", std::string(e.what()).substr(std::string("days_to_expire: ").size()));
        }
        auto exact = exact_expiry(c, body, days, v);
        v.throw_if_failed("invalid API key");
        json project = key_project(c, body);
        json policy = policy_of(c, body, project);
        res.json(insert_key(c, body["name"], project, days.days, exact, policy));
    }

    // 0.131's `policy` (kernel-api-0131 §2.8): the statements, each resource inside the new key's
    // organisation (and its project, for a project-scoped key); null for an ordinary key.
    json policy_of(const Caller &c, const json &body, const json &project) const {
        auto it = body.find("policy");
        if (it == body.end() || it->is_null()) return nullptr;
        auto parsed = hangar::key_policy::parse(*it);
        hangar::Validation v;
        for (const auto &[field, message] : parsed.problems)
            v.fail(field, message);
        // Only a policy whose every statement parsed is checked against the org: its statements'
        // indexes are then the request's, so the fields named below are the right ones.
        v.throw_if_failed("invalid API key policy");
        for (std::size_t i = 0; i < parsed.statements.size(); ++i) {
            const auto r = hangar::key_policy::parse_resource(parsed.statements[i].resource);
            const std::string at = "policy.statements[" + std::to_string(i) + "].resource";
            if (r->scope == hangar::key_policy::Resource::Scope::organization) {
                if (r->owner != c.org_id)
                    v.fail(at, "must be inside this key's organisation (" + c.org_id + ")");
                else if (project.is_string())
                    v.fail(at, "a project-scoped key's statements name its project, not the organisation");
            } else if (r->owner == "*") {
                if (project.is_string()) v.fail(at, "a project-scoped key's statements name its project, not *");
            } else if (project.is_string() ? r->owner != project.get<std::string>()
                                           : sql("SELECT id FROM projects WHERE id = ? AND org_id = ? AND "
                                                 "deleted_at IS NULL",
                                                 json::array({r->owner, c.org_id}))
                                                 .empty()) {
                v.fail(at, "project " + r->owner + " is not " +
                               (project.is_string() ? "this key's project" : std::string("in this organisation")));
            }
        }
        v.throw_if_failed("invalid API key policy");
        return hangar::key_policy::to_json(parsed.statements);
    }

    // 0.131's `expires_at` (kernel-api-0131 §2.8): in the future, not with days_to_expire, and no
    // later than the key issuing it expires — a key cannot mint one that outlives itself.
    std::optional<std::int64_t> exact_expiry(const Caller &c, const json &body, const org::Days &days,
                                             hangar::Validation &v) const {
        auto it = body.find("expires_at");
        if (it == body.end() || it->is_null()) return std::nullopt;
        if (days.present && days.days) {
            v.fail("expires_at", "cannot be combined with days_to_expire");
            return std::nullopt;
        }
        auto at = it->is_string() ? org::parse_time(it->get_ref<const std::string &>()) : std::nullopt;
        if (!at) {
            v.fail("expires_at", "must be an RFC 3339 time");
            return std::nullopt;
        }
        if (*at <= hangar::now_ms()) v.fail("expires_at", "must be in the future");
        json issuer = sql("SELECT expires_at FROM api_keys WHERE id = ?", json::array({c.key_id}));
        if (!issuer.empty() && issuer[0].value("expires_at", json()).is_string()) {
            auto own = org::parse_time(issuer[0]["expires_at"].get<std::string>());
            if (own && *at > *own)
                v.fail("expires_at", "must be no later than the issuing key's own expiry (" +
                                         issuer[0]["expires_at"].get<std::string>() + ")");
        }
        return at;
    }

    void list_keys(Request &req, Response &res) {
        Caller c(req);
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        std::string status = req.query("status").value_or(truthy(req.query("include_deleted")) ? "all" : "active");
        if (!org::one_of(status, {"active", "deleted", "all"})) v.fail("status", "must be active, deleted or all");
        std::string sort = req.query("sort_by").value_or("created_at");
        if (!org::one_of(sort, {"created_at", "name", "expires_at"}))
            v.fail("sort_by", "must be created_at, name or expires_at");
        std::string dir = req.query("sort_direction").value_or("desc");
        if (!org::one_of(dir, {"asc", "desc"})) v.fail("sort_direction", "must be asc or desc");
        v.throw_if_failed("invalid query");

        std::string q = kKeySelect;
        json params = json::array({c.org_id});
        if (c.project_scoped) {
            q += " AND k.project_id = ?";
            params.push_back(c.project_id);
        }
        if (status == "active") q += " AND k.revoked_at IS NULL";
        if (status == "deleted") q += " AND k.revoked_at IS NOT NULL";
        if (auto name = req.query("name"); name && !name->empty()) {
            q += " AND LOWER(k.name) = LOWER(?)";
            params.push_back(*name);
        }
        if (auto text = req.query("query"); text && !text->empty()) {
            q += " AND (INSTR(LOWER(k.name), LOWER(?)) > 0 OR INSTR(LOWER(COALESCE(c.name, '')), LOWER(?)) > 0"
                 " OR INSTR(LOWER(COALESCE(p.name, '')), LOWER(?)) > 0 OR k.id LIKE ? || '%' OR k.masked_key = ?)";
            for (int i = 0; i < 5; ++i)
                params.push_back(*text);
        }
        // NULL expiry (never) sorts as the latest.
        std::string key = sort == "expires_at" ? "COALESCE(k.expires_at, '9999')" : "k." + sort;
        q += " ORDER BY " + key + (dir == "asc" ? " ASC" : " DESC") + ", k.id";
        hangar::answer_page(
            res, [this](const std::string &s, const json &p) { return sql(s, p); }, q, params, paging, render_key);
    }

    void rename_key(Request &req, Response &res) {
        Caller c(req);
        json row = require_key(c, req.param("id"), false);
        json body = req.json_body(false);
        if (auto p = org::name_problem(body.value("name", json()))) throw Error::invalid("name", *p);
        sql("UPDATE api_keys SET name = ? WHERE id = ?", json::array({body["name"], row["id"]}));
        res.json(render_key(require_key(c, row["id"], false)));
    }

    void delete_key(Request &req, Response &res) {
        Caller c(req);
        json row = require_key(c, req.param("id"), false);
        if (row["id"] == c.key_id)
            throw Error(400, "cannot_delete_current_key",
                        "an API key cannot delete itself: delete it with another key");
        sql("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", json::array({now(), row["id"]}));
        res.no_content();
    }

    void rotate_key(Request &req, Response &res) {
        Caller c(req);
        json old = require_key(c, req.param("id"), false);
        json body = req.json_body(true);
        org::Days lifetime, grace;
        try {
            lifetime = org::parse_days(body, "days_to_expire", 1);
            grace = org::parse_days(body, "expire_in_days", 0);
        } catch (const std::invalid_argument &e) {
            invalid(e);
        }
        auto t = hangar::now_ms();
        std::int64_t grace_days = grace.present && grace.days ? *grace.days : kDefaultGraceDays;
        std::optional<std::int64_t> days = lifetime.days;
        if (!lifetime.present && old.value("lifetime_days", json()).is_number_integer())
            days = old["lifetime_days"].get<std::int64_t>();
        if (days && *days < grace_days)
            throw Error::invalid("days_to_expire", "the new key would expire before the old key's grace period ends");
        // The old key lives until the grace period ends, or its own expiry if that is sooner.
        std::string grace_end = hangar::rfc3339(t + grace_days * kDayMs);
        json current = old.value("expires_at", json());
        std::string old_expiry =
            current.is_string() && current.get<std::string>() < grace_end ? current.get<std::string>() : grace_end;
        // The replacement may do what the old key could: its scope and its policy.
        json policy = old.value("policy", json()).is_string()
                          ? json::parse(old["policy"].get<std::string>(), nullptr, false)
                          : json(nullptr);
        json out = insert_key(c, old["name"], null_if_empty(old.value("project_id", json())), days, std::nullopt,
                              policy.is_discarded() ? json(nullptr) : policy);
        sql("UPDATE api_keys SET expires_at = ? WHERE id = ?", json::array({old_expiry, old["id"]}));
        res.json(out);
    }

    // ---- projects ----

    static json render_project(const json &row) {
        return {{"id", row["id"]},
                {"name", row["name"]},
                {"status", row.value("status", "active")},
                {"created_at", row["created_at"]},
                {"updated_at", row.value("updated_at", json()).is_string() ? row["updated_at"] : row["created_at"]}};
    }

    // By id, else by name (names are unique per org among live projects). A project-scoped key
    // sees only its own project; others are 404.
    json require_project(const Caller &c, const std::string &id_or_name) const {
        json rows = sql("SELECT * FROM projects WHERE org_id = ? AND deleted_at IS NULL AND id = ?",
                        json::array({c.org_id, id_or_name}));
        if (rows.empty())
            rows = sql("SELECT * FROM projects WHERE org_id = ? AND deleted_at IS NULL AND LOWER(name) = LOWER(?)",
                       json::array({c.org_id, id_or_name}));
        if (rows.empty() || (c.project_scoped && rows[0]["id"] != c.project_id))
            throw Error::not_found("project " + id_or_name + " not found");
        return rows[0];
    }

    void check_unique_name(const Caller &c, const std::string &name, const std::string &except_id) const {
        json rows = sql("SELECT id FROM projects WHERE org_id = ? AND deleted_at IS NULL AND LOWER(name) = LOWER(?)"
                        " AND id != ?",
                        json::array({c.org_id, name, except_id}));
        if (!rows.empty()) throw Error::conflict("a project named \"" + name + "\" already exists");
    }

    void create_project(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("projects");
        json body = req.json_body(false);
        if (auto p = org::name_problem(body.value("name", json()))) throw Error::invalid("name", *p);
        std::string name = body["name"];
        check_unique_name(c, name, "");
        std::string id = "proj_" + hangar::new_id(20);
        auto t = now();
        sql("INSERT INTO projects (id, org_id, name, is_default, created_at, updated_at, status)"
            " VALUES (?, ?, ?, 0, ?, ?, 'active')",
            json::array({id, c.org_id, name, t, t}));
        res.json(render_project(require_project(c, id)));
    }

    void list_projects(Request &req, Response &res) {
        Caller c(req);
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid query");
        std::string q = "SELECT * FROM projects WHERE org_id = ? AND deleted_at IS NULL";
        json params = json::array({c.org_id});
        if (c.project_scoped) {
            q += " AND id = ?";
            params.push_back(c.project_id);
        }
        if (auto name = req.query("name"); name && !name->empty()) {
            q += " AND LOWER(name) = LOWER(?)";
            params.push_back(*name);
        }
        if (auto text = req.query("query"); text && !text->empty()) {
            q += " AND INSTR(LOWER(name), LOWER(?)) > 0";
            params.push_back(*text);
        }
        q += " ORDER BY created_at, id";
        hangar::answer_page(
            res, [this](const std::string &s, const json &p) { return sql(s, p); }, q, params, paging, render_project);
    }

    std::int64_t other_active_projects(const Caller &c, const std::string &id) const {
        return sql("SELECT COUNT(*) AS n FROM projects WHERE org_id = ? AND deleted_at IS NULL AND status = 'active'"
                   " AND id != ?",
                   json::array({c.org_id, id}))[0]["n"]
            .get<std::int64_t>();
    }

    void update_project(Request &req, Response &res) {
        Caller c(req);
        json row = require_project(c, req.param("id"));
        json body = req.json_body(false);
        std::string id = row["id"];
        if (body.contains("status")) {
            if (c.project_scoped) throw Error::forbidden("a project-scoped API key may only rename its project");
            if (!body["status"].is_string() || !org::one_of(body["status"].get<std::string>(), {"active", "archived"}))
                throw Error::invalid("status", "must be active or archived");
            if (body["status"] == "archived" && row.value("status", "active") == "active" &&
                other_active_projects(c, id) == 0)
                throw Error(409, "last_active_project", "the organisation's last active project cannot be archived");
        }
        if (body.contains("name")) {
            if (auto p = org::name_problem(body["name"])) throw Error::invalid("name", *p);
            check_unique_name(c, body["name"], id);
        }
        if (body.contains("name"))
            sql("UPDATE projects SET name = ?, updated_at = ? WHERE id = ?", json::array({body["name"], now(), id}));
        if (body.contains("status"))
            sql("UPDATE projects SET status = ?, updated_at = ? WHERE id = ?",
                json::array({body["status"], now(), id}));
        res.json(render_project(require_project(c, id)));
    }

    // Live rows any plugin keeps for the project: every table with a project_id column, rows
    // without a deleted_at (or with it unset). Tables with a session_id column hold what a session
    // left behind (recordings): the session itself is the resource. Asked of the store itself, so
    // a plugin added later is counted without this plugin knowing it.
    std::vector<std::string> project_contents(const std::string &project_id) const {
        static const std::vector<std::string> kNotResources = {"api_keys", "audit_logs", "projects"};
        std::vector<std::string> found;
        for (const auto &t : sql("SELECT name FROM sqlite_master WHERE type = 'table'")) {
            std::string table = t["name"];
            if (std::find(kNotResources.begin(), kNotResources.end(), table) != kNotResources.end()) continue;
            bool has_project = false, has_deleted = false, has_session = false;
            for (const auto &col : sql("SELECT name FROM pragma_table_info(?)", json::array({table}))) {
                has_project = has_project || col["name"] == "project_id";
                has_deleted = has_deleted || col["name"] == "deleted_at";
                has_session = has_session || col["name"] == "session_id";
            }
            if (!has_project || has_session) continue;
            std::string q = "SELECT COUNT(*) AS n FROM \"" + table + "\" WHERE project_id = ?";
            if (has_deleted) q += " AND deleted_at IS NULL";
            if (sql(q, json::array({project_id}))[0]["n"].get<std::int64_t>() > 0) found.push_back(table);
        }
        return found;
    }

    void delete_project(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("projects");
        json row = require_project(c, req.param("id"));
        std::string id = row["id"];
        if (other_active_projects(c, id) == 0)
            throw Error(409, "last_active_project", "the organisation's last active project cannot be deleted");
        if (auto tables = project_contents(id); !tables.empty()) {
            std::string list;
            for (const auto &t : tables)
                list += (list.empty() ? "" : ", ") + t;
            throw Error(409, "project_not_empty", "project " + id + " still has resources (" + list + ")");
        }
        sql("UPDATE projects SET deleted_at = ?, updated_at = ?, is_default = 0 WHERE id = ?",
            json::array({now(), now(), id}));
        // Org-wide keys without X-Kernel-Project-Id act in the default project: keep one.
        if (row.value("is_default", 0) == 1)
            sql("UPDATE projects SET is_default = 1 WHERE id = (SELECT id FROM projects WHERE org_id = ? AND "
                "deleted_at IS NULL ORDER BY status = 'active' DESC, created_at LIMIT 1)",
                json::array({c.org_id}));
        res.no_content();
    }

    // ---- limits ----

    static json cap_or_null(const json &v) {
        return v.is_number_integer() && v.get<std::int64_t>() > 0 ? v : json(nullptr);
    }

    static json render_limits(const json &row) {
        return {{"max_concurrent_sessions", cap_or_null(row.value("max_concurrent_sessions", json()))},
                {"max_concurrent_invocations", cap_or_null(row.value("max_concurrent_invocations", json()))},
                {"max_pooled_sessions", nullptr}};
    }

    // A limit field of a PATCH: absent → nullopt; null or 0 → clears (json null); else 1..org limit.
    std::optional<json> limit_field(const json &body, const std::string &field, bool capped_by_org) const {
        auto it = body.find(field);
        if (it == body.end()) return std::nullopt;
        if (it->is_null()) return json(nullptr);
        if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
            throw Error::invalid(field, "must be a whole number >= 0 or null");
        auto n = it->get<std::int64_t>();
        if (n == 0) return json(nullptr);
        if (capped_by_org && org_session_limit_ > 0 && n > org_session_limit_)
            throw Error::invalid(field, "may not exceed the organisation's limit of " +
                                            std::to_string(org_session_limit_) + " concurrent sessions");
        return json(n);
    }

    void update_project_limits(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("project limits");
        json row = require_project(c, req.param("id"));
        json body = req.json_body(false);
        if (body.contains("max_pooled_sessions") && !body["max_pooled_sessions"].is_null())
            throw Error::invalid("max_pooled_sessions",
                                 "is deprecated: max_concurrent_sessions covers on-demand browsers and pools");
        auto sessions = limit_field(body, "max_concurrent_sessions", true);
        auto invocations = limit_field(body, "max_concurrent_invocations", false);
        if (sessions)
            sql("UPDATE projects SET max_concurrent_sessions = ? WHERE id = ?", json::array({*sessions, row["id"]}));
        if (invocations)
            sql("UPDATE projects SET max_concurrent_invocations = ? WHERE id = ?",
                json::array({*invocations, row["id"]}));
        res.json(render_limits(require_project(c, row["id"])));
    }

    // A usage figure another plugin keeps; what a disabled or absent plugin has is none.
    json usage_of(const char *service, const std::string &org_id) const {
        try {
            return call(service, {{"org_id", org_id}});
        } catch (const std::exception &) {
            return json::object();
        }
    }

    // 0.131 adds usage to the limits (kernel-api-0131 §2.10). Hangar's session limit is enforced per
    // project (each project's own, or the org default, or the operator's cap), so there is no
    // org-wide remainder to report: `concurrent_sessions_available` is null. There is no cap on
    // vaults (Kernel's free-plan 3) or on auth connections.
    json org_limits(const std::string &org_id) const {
        json rows =
            sql("SELECT default_project_max_concurrent_sessions AS d FROM orgs WHERE id = ?", json::array({org_id}));
        json browsers = usage_of("browsers.usage", org_id);
        json auth = usage_of("managed_auth.usage", org_id);
        json vaults = usage_of("vaults.usage", org_id);
        return {{"default_project_max_concurrent_sessions", rows.empty() ? json(nullptr) : cap_or_null(rows[0]["d"])},
                {"max_concurrent_sessions", org_session_limit_ > 0 ? json(org_session_limit_) : json(nullptr)},
                {"concurrent_sessions_used", browsers.value("sessions", json(nullptr))},
                {"concurrent_sessions_available", nullptr},
                {"auth_connections_used", auth.value("connections", 0)},
                {"max_auth_connections", nullptr},
                {"min_health_check_interval_seconds", auth.value("min_health_check_interval_seconds", 300)},
                {"vaults_used", vaults.value("vaults", 0)},
                {"max_vaults", nullptr}};
    }

    void update_org_limits(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("organisation limits");
        json body = req.json_body(false);
        if (body.contains("max_concurrent_sessions"))
            throw Error::invalid("max_concurrent_sessions",
                                 "is read-only: the operator sets it (browsers.max_browsers_per_project)");
        if (auto d = limit_field(body, "default_project_max_concurrent_sessions", true))
            sql("UPDATE orgs SET default_project_max_concurrent_sessions = ? WHERE id = ?",
                json::array({*d, c.org_id}));
        res.json(org_limits(c.org_id));
    }

    // ---- who is calling, and what this installation offers ----

    // GET /auth/context (kernel-api-0131 §1K). Hangar authenticates API keys only, so principal
    // and credential are the key. The credential's scope is the project a scoped key is bound
    // to; the effective scope is the project this request acts on when one was chosen (the
    // key's, or X-Kernel-Project-Id / X-Kernel-Project), else null: an org-wide key without a
    // project header may use the org endpoints, its project resources go to the default project.
    static json auth_context(const Request &req) {
        Caller c(req);
        json caller = req.caller();
        auto scope = [](const std::string &project) {
            return json{{"project_id", project.empty() ? json() : json(project)}};
        };
        bool chose_project = c.project_scoped || req.header("X-Kernel-Project-Id").has_value() ||
                             req.header("X-Kernel-Project").has_value();
        return {{"principal", {{"id", c.key_id}, {"type", "api_key"}}},
                {"organization", {{"id", c.org_id}}},
                {"authentication",
                 {{"method", "api_key"},
                  {"source", "api_key"},
                  {"credential_id", c.key_id.empty() ? json() : json(c.key_id)}}},
                {"authorization",
                 {{"credential_scope", scope(c.project_scoped ? c.project_id : "")},
                  {"effective_scope", scope(chose_project ? caller.value("project_id", "") : "")}}}};
    }

    // GET /org/entitlements (§1J). A self-hosted installation has no plan or billing: it answers
    // one ENTERPRISE plan, active, never trialing, and says what this installation really serves:
    // a feature is enabled when the plugin serving it started and the operator did not switch it
    // off for the caller ([features] / [project.X] / `hangar admin entitlement`); limits are the
    // configured ones, null where none is set (README: Entitlements).
    json entitlements(const Request &req) const {
        Caller c(req);
        const json switches = req.caller().value("entitlements", json::object());
        std::vector<std::string> started;
        for (std::string rest = config("host.plugins", ""); !rest.empty();) {
            auto comma = rest.find(',');
            started.push_back(rest.substr(0, comma));
            rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
        }
        auto on = [&](const std::string &plugin) {
            if (std::find(started.begin(), started.end(), plugin) == started.end()) return false;
            auto it = switches.find(plugin);
            return !(it != switches.end() && it->is_boolean() && !it->get<bool>());
        };
        auto feature = [](bool enabled) { return json{{"enabled", enabled}}; };
        auto limit = [](std::int64_t n) { return n > 0 ? json(n) : json(); };
        // Managed proxies are the operator's upstream pools of proxies.ini (datacenter, isp,
        // residential, mobile); without one, only custom proxies exist.
        bool managed_pool = false;
        for (const char *type : {"datacenter", "isp", "residential", "mobile"})
            managed_pool = managed_pool || !config("proxies." + std::string(type), "").empty();
        const bool apps = on("apps");
        return {{"plan",
                 {{"id", "ENTERPRISE"}, {"effective_id", "ENTERPRISE"}, {"is_trialing", false}, {"status", "ACTIVE"}}},
                {"limits",
                 {{"max_concurrent_browsers", limit(org_session_limit_)},
                  {"max_concurrent_invocations",
                   apps ? limit(config_int("apps.max_concurrent_invocations_per_project", 50)) : json(0)},
                  {"default_max_concurrent_invocations_per_app",
                   apps ? limit(config_int("apps.max_concurrent_invocations_per_app", 20)) : json(0)},
                  // No vault cap on a self-hosted server (Kernel's free plans: 3); 0 without vaults.
                  {"max_vaults", on("vaults") ? json() : json(0)}}},
                {"features",
                 {{"browser_extensions", {{"enabled", on("extensions")}, {"max_stored_per_org", nullptr}}},
                  // Pools are served by the browsers plugin itself.
                  {"browser_pools", feature(on("browsers"))},
                  // Replays stay until deleted: no retention period (null).
                  {"browser_replays", {{"enabled", on("replays")}, {"retention_days", nullptr}}},
                  {"credential_providers", feature(on("credentials"))},
                  {"credentials", feature(on("credentials"))},
                  {"custom_proxies", feature(on("proxies"))},
                  {"file_io", feature(on("fs"))},
                  {"gpu", feature(false)},
                  {"managed_auth",
                   {{"enabled", on("managed_auth")},
                    {"max_connections", nullptr},
                    {"health_check_interval_default_seconds", kHealthCheckDefaultSeconds},
                    {"health_check_interval_min_seconds", config_int("managed_auth.min_health_check_interval", 300)},
                    {"health_check_interval_max_seconds", kHealthCheckMaxSeconds}}},
                  {"managed_proxies", feature(on("proxies") && managed_pool)},
                  {"profiles", feature(on("profiles"))},
                  {"proxy_bypass_hosts", feature(on("proxies"))},
                  // Not served by Hangar yet (kernel-api-0131 §1C).
                  {"search", feature(false)},
                  {"vaults", feature(on("vaults"))}}}};
    }
    // The managed_auth plugin's fixed bounds (managed_auth_model.cpp): a connection checks every
    // hour unless told otherwise, and at most once a day.
    static constexpr int kHealthCheckDefaultSeconds = 3600;
    static constexpr int kHealthCheckMaxSeconds = 86400;

    // ---- audit logs ----

    struct AuditQuery {
        std::string where;
        json params = json::array();
    };

    AuditQuery audit_filter(const Request &req, const Caller &c) const {
        org::Window w{};
        try {
            w = org::parse_window(req.query("start"), req.query("end"));
        } catch (const std::invalid_argument &e) {
            invalid(e);
        }
        AuditQuery q;
        q.where = " WHERE org_id = ? AND ts_ms >= ? AND ts_ms < ?";
        q.params = json::array({c.org_id, w.start_ms, w.end_ms});
        if (auto m = req.query("method"); m && !m->empty()) {
            q.where += " AND method = UPPER(?)";
            q.params.push_back(*m);
        }
        for (const auto &m : req.query_list("exclude_method")) {
            q.where += " AND method != UPPER(?)";
            q.params.push_back(m);
        }
        if (auto s = req.query("auth_strategy"); s && !s->empty()) {
            q.where += " AND auth_strategy = ?";
            q.params.push_back(*s);
        }
        // Hangar's services are its API areas: the first segment of the matched route (`browsers`,
        // `profiles`, `org`, ...). Several may be given, comma-joined.
        if (auto services = req.query_list("service"); !services.empty()) {
            std::string any;
            for (const auto &s : services) {
                any += std::string(any.empty() ? "" : " OR ") + "route = '/' || ? OR route LIKE '/' || ? || '/%'";
                q.params.push_back(s);
                q.params.push_back(s);
            }
            if (!any.empty()) q.where += " AND (" + any + ")";
        }
        std::vector<std::string> users = req.query_list("search_user_id");
        auto search = req.query("search");
        if ((search && !search->empty()) || !users.empty()) {
            std::string any;
            if (search && !search->empty()) {
                any = "INSTR(LOWER(path), LOWER(?)) > 0 OR INSTR(LOWER(user_id), LOWER(?)) > 0 OR "
                      "INSTR(LOWER(email), LOWER(?)) > 0 OR INSTR(client_ip, ?) > 0 OR CAST(status AS TEXT) = ?";
                for (int i = 0; i < 5; ++i)
                    q.params.push_back(*search);
            }
            for (const auto &u : users) {
                any += std::string(any.empty() ? "" : " OR ") + "user_id = ?";
                q.params.push_back(u);
            }
            q.where += " AND (" + any + ")";
        }
        return q;
    }

    static json render_entry(const json &row) {
        return {{"auth_strategy", row["auth_strategy"]},
                {"client_ip", row["client_ip"]},
                {"domain", row["domain"]},
                {"duration_ms", row["duration_ms"]},
                {"email", row["email"]},
                {"method", row["method"]},
                {"path", row["path"]},
                {"route", row["route"]},
                {"status", row["status"]},
                {"timestamp", row["timestamp"]},
                {"user_agent", row["user_agent"]},
                {"user_id", row["user_id"]}};
    }

    json audit_entries(const json &in) const {
        const std::string org = in.value("org_id", "");
        if (in.value("op", "") == "max_seq") {
            json rows = sql("SELECT MAX(seq) AS m FROM audit_logs WHERE org_id = ?", {org});
            return {{"max_seq", rows.empty() || rows[0]["m"].is_null() ? 0 : rows[0]["m"].get<std::int64_t>()}};
        }
        std::string q = "SELECT * FROM audit_logs WHERE org_id = ? AND seq > ?";
        json params = json::array({org, in.value("after_seq", std::int64_t{0})});
        if (in.contains("upto_seq")) {
            q += " AND seq <= ?";
            params.push_back(in.value("upto_seq", std::int64_t{0}));
        }
        params.push_back(std::clamp<std::int64_t>(in.value("limit", std::int64_t{1000}), 1, 100000));
        json out = json::array();
        for (const auto &row : sql(q + " ORDER BY seq LIMIT ?", params))
            out.push_back({{"seq", row["seq"]}, {"ts_ms", row["ts_ms"]}, {"entry", render_entry(row)}});
        return {{"entries", std::move(out)}};
    }

    static std::int64_t limit_param(const Request &req, std::int64_t fallback, std::int64_t max) {
        auto l = req.query("limit");
        if (!l || l->empty()) return fallback;
        try {
            std::size_t used = 0;
            std::int64_t n = std::stoll(*l, &used);
            if (used != l->size() || n < 1) throw std::invalid_argument("limit");
            return std::min(n, max);
        } catch (const std::exception &) {
            throw Error::invalid("limit", "must be a whole number >= 1");
        }
    }

    // Newest first; the token is the last row's sequence number, so rows written meanwhile never
    // shift a page.
    json audit_rows(const Request &req, const Caller &c, const std::optional<std::string> &token, std::int64_t limit) {
        AuditQuery q = audit_filter(req, c);
        if (token && !token->empty()) {
            auto seq = org::decode_cursor(*token);
            if (!seq)
                throw Error::invalid(req.query("cursor") ? "cursor" : "page_token", "not a token this server gave");
            q.where += " AND seq < ?";
            q.params.push_back(*seq);
        }
        q.params.push_back(limit + 1);
        return sql("SELECT * FROM audit_logs" + q.where + " ORDER BY seq DESC LIMIT ?", q.params);
    }

    void list_audit(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("audit logs");
        auto limit = limit_param(req, 100, 100);
        json rows = audit_rows(req, c, req.query("page_token"), limit);
        bool more = static_cast<std::int64_t>(rows.size()) > limit;
        json items = json::array();
        for (std::size_t i = 0; i < rows.size() && static_cast<std::int64_t>(i) < limit; ++i)
            items.push_back(render_entry(rows[i]));
        res.header("X-Has-More", more ? "true" : "false");
        if (more)
            res.header("X-Next-Page-Token",
                       org::encode_cursor(items.empty() ? 0 : rows[items.size() - 1]["seq"].get<std::int64_t>()));
        res.json(items);
    }

    void export_chunk(Request &req, Response &res) {
        Caller c(req);
        c.require_org_wide("audit logs");
        std::string format = req.query("format").value_or("jsonl.gz");
        if (!org::one_of(format, {"jsonl", "jsonl.gz"})) throw Error::invalid("format", "must be jsonl or jsonl.gz");
        auto limit = limit_param(req, 10000, 50000);
        json rows = audit_rows(req, c, req.query("cursor"), limit);
        bool more = static_cast<std::int64_t>(rows.size()) > limit;
        std::size_t count = std::min<std::size_t>(rows.size(), static_cast<std::size_t>(limit));
        std::string lines;
        for (std::size_t i = 0; i < count; ++i)
            lines += render_entry(rows[i]).dump() + "\n";
        std::string body = format == "jsonl.gz" ? hangar::gzip(lines) : lines;
        res.header("X-Content-Sha256", sha256_hex(body));
        res.header("X-Row-Count", std::to_string(count));
        res.header("X-Has-More", more ? "true" : "false");
        if (more) res.header("X-Next-Cursor", org::encode_cursor(rows[count - 1]["seq"].get<std::int64_t>()));
        res.status(200);
        res.body(format == "jsonl.gz" ? "application/gzip" : "application/x-ndjson", body);
    }

    // ---- dashboard ----

    // The dashboard's files (dashboard/*, embedded at build time so the page can never drift
    // from the binary), public: the page signs in with an API key in the browser and then talks
    // to the public API like any client.
    static void dashboard_file(Request &req, Response &res) {
        std::string file = req.param("file");
        if (file.empty()) file = "index.html";
        auto found = org::dashboard_files().find(file);
        if (found == org::dashboard_files().end()) throw Error::not_found("no dashboard file " + file);
        static const std::map<std::string, std::string> kTypes = {{".html", "text/html; charset=utf-8"},
                                                                  {".js", "text/javascript; charset=utf-8"},
                                                                  {".css", "text/css; charset=utf-8"}};
        std::string type = "application/octet-stream";
        for (const auto &[ext, t] : kTypes)
            if (file.ends_with(ext)) type = t;
        // Scripts and styles are the dashboard's own files, never inline; live views and replays
        // (this node's or another's) show in its frames.
        hangar::web::PagePolicy policy;
        policy.script_src = "'self'";
        policy.style_src = "'self'";
        policy.img_src = "'self' data: blob:";
        policy.media_src = "'self' blob:";
        policy.frame_src = "'self' http: https:";
        hangar::web::security_headers(res, policy, hangar::web::nonce());
        res.status(200);
        res.body(type, found->second);
    }

    std::int64_t org_session_limit_ = 0;
};

} // namespace

HANGAR_PLUGIN(OrgPlugin, "org", "1.0.0", nullptr, nullptr, 0)
