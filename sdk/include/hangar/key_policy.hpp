// Statement-scoped API keys (Kernel API 0.131 §2.8): the grammar of a key's `policy` and the one
// question asked of it, "may this key do action A on this object". The org plugin checks a policy
// with it when a key is made; the host asks it on every request such a key makes. Both must read a
// statement the same way, so the reading lives here once.
//
// A statement is {action, resource}. Actions are `<kind>:<verb>` for the four kinds a key can be
// limited to (browsers, profiles, vaults, proxies). Resources are
//   organizations/{org_id}/*          everything in the organisation
//   projects/{project_id}/*           everything in the project
//   projects/{project_id}/{kind}/*    every object of one kind in the project
//   projects/{project_id}/{kind}/{id} one object
// with `*` also accepted for the project id. Everything a key's statements do not name is denied.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hangar::key_policy {

struct Statement {
    std::string action;
    std::string resource;
};

struct Resource {
    enum class Scope { organization, project, kind, object };
    Scope scope = Scope::project;
    std::string owner;  // the org id (organization scope) or the project id ("*": any project)
    std::string kind;   // kind and object scopes
    std::string object; // object scope
};

inline constexpr std::array<std::string_view, 4> kKinds = {"browsers", "profiles", "vaults", "proxies"};
inline constexpr std::array<std::string_view, 5> kVerbs = {"create", "read", "use", "write", "delete"};
inline constexpr std::size_t kMaxStatements = 100;

// "browsers:use" → {"browsers", "use"}; nullopt for an action no kind has (browsers have no
// `read`: reading a browser is using it, as Kernel's list of actions has it).
inline std::optional<std::pair<std::string, std::string>> split_action(std::string_view action) {
    auto colon = action.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    std::string_view kind = action.substr(0, colon), verb = action.substr(colon + 1);
    if (std::find(kKinds.begin(), kKinds.end(), kind) == kKinds.end()) return std::nullopt;
    if (std::find(kVerbs.begin(), kVerbs.end(), verb) == kVerbs.end()) return std::nullopt;
    if (kind == "browsers" && verb == "read") return std::nullopt;
    return std::pair{std::string(kind), std::string(verb)};
}

namespace detail {
inline bool id_segment(std::string_view s) {
    return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    });
}
inline std::vector<std::string_view> segments(std::string_view text) {
    std::vector<std::string_view> out;
    std::size_t start = 0;
    while (true) {
        auto slash = text.find('/', start);
        out.push_back(text.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
        if (slash == std::string_view::npos) return out;
        start = slash + 1;
    }
}
} // namespace detail

inline std::optional<Resource> parse_resource(std::string_view text) {
    auto seg = detail::segments(text);
    Resource r;
    if (seg.size() == 3 && seg[0] == "organizations" && detail::id_segment(seg[1]) && seg[2] == "*") {
        r.scope = Resource::Scope::organization;
        r.owner = seg[1];
        return r;
    }
    if (seg.size() < 3 || seg[0] != "projects" || !(seg[1] == "*" || detail::id_segment(seg[1]))) return std::nullopt;
    r.owner = seg[1];
    if (seg.size() == 3 && seg[2] == "*") return r;
    if (seg.size() != 4 || std::find(kKinds.begin(), kKinds.end(), seg[2]) == kKinds.end()) return std::nullopt;
    r.kind = seg[2];
    if (seg[3] == "*") {
        r.scope = Resource::Scope::kind;
        return r;
    }
    if (!detail::id_segment(seg[3])) return std::nullopt;
    r.scope = Resource::Scope::object;
    r.object = seg[3];
    return r;
}

struct Parsed {
    std::vector<Statement> statements;
    std::vector<std::pair<std::string, std::string>> problems; // field → what is wrong; empty: valid
};

// A request's `policy` object read and checked on its own terms. Whether the resources lie in the
// new key's organisation or project is the caller's to check (it knows them).
inline Parsed parse(const nlohmann::json &policy) {
    Parsed out;
    auto fail = [&](std::string field, std::string message) {
        out.problems.emplace_back(std::move(field), std::move(message));
    };
    if (!policy.is_object() || !policy.contains("statements") || !policy["statements"].is_array()) {
        fail("policy.statements", "is required: a list of {action, resource} allow statements");
        return out;
    }
    for (const auto &[key, _] : policy.items())
        if (key != "statements") fail("policy." + key, "is not a field of a policy");
    const auto &list = policy["statements"];
    if (list.empty()) fail("policy.statements", "must name at least one statement (a key that may do nothing)");
    if (list.size() > kMaxStatements)
        fail("policy.statements", "may hold at most " + std::to_string(kMaxStatements) + " statements");
    for (std::size_t i = 0; i < list.size() && i < kMaxStatements; ++i) {
        const std::string at = "policy.statements[" + std::to_string(i) + "]";
        const auto &s = list[i];
        if (!s.is_object() || !s.contains("action") || !s["action"].is_string() || !s.contains("resource") ||
            !s["resource"].is_string()) {
            fail(at, "must be an object with string fields action and resource");
            continue;
        }
        for (const auto &[key, _] : s.items())
            if (key != "action" && key != "resource") {
                std::string field = at;
                field.append(".").append(key);
                fail(std::move(field), "is not a field of a statement");
            }
        const std::string action = s["action"], resource = s["resource"];
        auto parts = split_action(action);
        if (!parts)
            fail(at + ".action", "unknown action \"" + action +
                                     "\": <kind>:<verb> with kind browsers, profiles, vaults or proxies and verb "
                                     "create, read (not for browsers), use, write or delete");
        auto r = parse_resource(resource);
        if (!r)
            fail(at + ".resource", "\"" + resource +
                                       "\" is not organizations/{org_id}/*, projects/{project_id}/*, "
                                       "projects/{project_id}/{kind}/* or projects/{project_id}/{kind}/{id}");
        if (!parts || !r) continue;
        if (!r->kind.empty() && r->kind != parts->first) fail(at + ".resource", action + " cannot apply to " + r->kind);
        if (parts->second == "create" && (r->scope == Resource::Scope::kind || r->scope == Resource::Scope::object))
            fail(at + ".resource", action + " is granted on a project or an organisation, not on objects");
        out.statements.push_back({action, resource});
    }
    return out;
}

inline nlohmann::json to_json(const std::vector<Statement> &statements) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto &s : statements)
        list.push_back({{"action", s.action}, {"resource", s.resource}});
    return {{"statements", list}};
}

// Read back from the store (what `parse` accepted and `to_json` wrote); nullopt when not a policy.
inline std::optional<std::vector<Statement>> from_json(const nlohmann::json &j) {
    auto parsed = parse(j);
    if (!parsed.problems.empty()) return std::nullopt;
    return parsed.statements;
}

namespace detail {
inline bool covers(const Resource &r, std::string_view kind, std::string_view org, std::string_view project,
                   std::string_view object) {
    if (r.scope == Resource::Scope::organization) return r.owner == org;
    if (r.owner != "*" && r.owner != project) return false;
    switch (r.scope) {
    case Resource::Scope::project:
        return true;
    case Resource::Scope::kind:
        return r.kind == kind;
    case Resource::Scope::object:
        return r.kind == kind && !object.empty() && r.object == object;
    case Resource::Scope::organization:
        break;
    }
    return false;
}
} // namespace detail

// Whether `statements` allow `action` on `object` (an id; empty for the project itself, as a create
// asks) of project `project` in organisation `org`.
inline bool allows(const std::vector<Statement> &statements, std::string_view action, std::string_view org,
                   std::string_view project, std::string_view object) {
    auto parts = split_action(action);
    if (!parts) return false;
    return std::any_of(statements.begin(), statements.end(), [&](const Statement &s) {
        if (s.action != action) return false;
        auto r = parse_resource(s.resource);
        return r && detail::covers(*r, parts->first, org, project, object);
    });
}

// Whether `action` is granted on anything of the project (a list answers with what it may see).
inline bool grants_any(const std::vector<Statement> &statements, std::string_view action, std::string_view org,
                       std::string_view project) {
    return std::any_of(statements.begin(), statements.end(), [&](const Statement &s) {
        if (s.action != action) return false;
        auto r = parse_resource(s.resource);
        if (!r) return false;
        if (r->scope == Resource::Scope::organization) return r->owner == org;
        return r->owner == "*" || r->owner == project;
    });
}

} // namespace hangar::key_policy
