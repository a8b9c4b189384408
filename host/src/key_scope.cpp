#include "key_scope.hpp"

#include <array>

namespace hangar::host {

namespace {

using Kind = ScopeNeed::Kind;
using json = nlohmann::json;

ScopeNeed need(Kind kind, std::string action = {}, std::string param = {}) {
    ScopeNeed n;
    n.kind = kind;
    n.action = std::move(action);
    n.param = std::move(param);
    return n;
}

// "/vaults/{id_or_name}/items/{key}" → {"vaults", "{id_or_name}", "items", "{key}"}.
std::vector<std::string> split(const std::string &pattern) {
    std::vector<std::string> out;
    std::size_t start = 1;
    while (start <= pattern.size()) {
        auto slash = pattern.find('/', start);
        out.push_back(pattern.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    return out;
}

bool is_param(const std::string &segment) {
    return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

std::string param_name(const std::string &segment) {
    return segment.substr(1, segment.size() - 2);
}

// The verb of a request on one object of `kind` with nothing after its id.
std::string object_verb(const std::string &kind, const std::string &method) {
    if (method == "GET") return kind == "browsers" ? "use" : "read";
    if (method == "PATCH" || method == "PUT") return "write";
    if (method == "DELETE") return "delete";
    return {};
}

} // namespace

ScopeNeed scope_need(const std::string &method, const std::string &pattern) {
    if (method == "GET" && pattern == "/auth/context") return need(Kind::always);
    auto seg = split(pattern);
    if (seg.empty()) return need(Kind::refuse);
    const std::string &kind = seg[0];
    if (!std::any_of(key_policy::kKinds.begin(), key_policy::kKinds.end(),
                     [&](std::string_view k) { return k == kind; }))
        return need(Kind::refuse);
    if (seg.size() == 1) {
        if (method == "POST") return need(Kind::project, kind + ":create");
        if (method == "GET") {
            auto n = need(Kind::list, kind + (kind == "browsers" ? ":use" : ":read"));
            n.item_id = kind == "browsers" ? "session_id" : "id";
            return n;
        }
        return need(Kind::refuse);
    }
    // Literal second segments (/vaults/fill, /proxies/route) are the server's own wiring.
    if (!is_param(seg[1])) return need(Kind::refuse);
    const std::string param = param_name(seg[1]);
    if (seg.size() == 2) {
        std::string verb = object_verb(kind, method);
        return verb.empty() ? need(Kind::refuse) : need(Kind::object, kind + ":" + verb, param);
    }
    const std::string &sub = seg[2];
    if (kind == "browsers") {
        // Saved extensions are not open to scoped keys (as Kernel's are not).
        if (sub == "extensions") return need(Kind::refuse);
        // Everything done in or with a running browser is using it.
        return need(Kind::object, "browsers:use", param);
    }
    if (kind == "profiles" && sub == "download" && seg.size() == 3 && method == "GET")
        return need(Kind::object, "profiles:use", param);
    if (kind == "proxies" && sub == "check" && seg.size() == 3 && method == "POST")
        return need(Kind::object, "proxies:use", param);
    if (kind == "vaults") {
        if (sub == "encryption_key" && seg.size() == 3 && method == "GET")
            return need(Kind::object, "vaults:read", param);
        if (sub == "items") {
            if (seg.size() == 5 && seg[4] == "operations" && method == "POST")
                return need(Kind::object, "vaults:use", param);
            if (seg.size() <= 5 && method == "GET") return need(Kind::object, "vaults:read", param);
            if (seg.size() == 4 && (method == "PUT" || method == "PATCH" || method == "DELETE"))
                return need(Kind::object, "vaults:write", param);
        }
    }
    return need(Kind::refuse);
}

namespace {

std::string where(const std::string &project, const std::string &kind, const std::string &object) {
    return "projects/" + project + "/" + kind + (object.empty() ? "" : "/" + object);
}

// {id} or {name} of an attached object: its id, or its name (which only a grant on every object of
// the kind covers: a grant naming one object names it by id).
std::string reference(const json &ref) {
    if (ref.is_string()) return ref.get<std::string>();
    if (!ref.is_object()) return {};
    for (const char *k : {"id", "name"})
        if (ref.contains(k) && ref[k].is_string()) return ref[k].get<std::string>();
    return {};
}

// What a browser's create or update body attaches, each with the action it needs.
std::optional<ScopeRefusal> attachments(const std::vector<key_policy::Statement> &statements, const json &body,
                                        const std::string &org, const std::string &project) {
    if (!body.is_object()) return std::nullopt;
    auto refuse = [](std::string what) { return ScopeRefusal{std::move(what)}; };
    if (body.contains("extensions") && body["extensions"].is_array() && !body["extensions"].empty())
        return refuse("saved extensions are not open to keys with a policy");
    if (body.contains("telemetry") && body["telemetry"].is_object() && body["telemetry"].contains("export") &&
        !body["telemetry"]["export"].is_null())
        return refuse("telemetry export is not open to keys with a policy");
    if (body.contains("invocation_id") && body["invocation_id"].is_string() &&
        !body["invocation_id"].get_ref<const std::string &>().empty())
        return refuse("app invocations are not open to keys with a policy");
    std::vector<std::pair<std::string, std::string>> uses; // action, object
    if (body.contains("profile") && body["profile"].is_object())
        if (auto r = reference(body["profile"]); !r.empty()) uses.emplace_back("profiles:use", r);
    if (body.contains("proxy_id") && body["proxy_id"].is_string())
        uses.emplace_back("proxies:use", body["proxy_id"].get<std::string>());
    if (body.contains("proxy") && body["proxy"].is_object())
        if (auto r = reference(body["proxy"]); !r.empty()) uses.emplace_back("proxies:use", r);
    if (body.contains("network") && body["network"].is_object() && body["network"].contains("proxy_routes") &&
        body["network"]["proxy_routes"].is_array())
        for (const auto &route : body["network"]["proxy_routes"])
            if (route.is_object() && route.contains("proxy"))
                if (auto r = reference(route["proxy"]); !r.empty()) uses.emplace_back("proxies:use", r);
    if (body.contains("vaults") && body["vaults"].is_array())
        for (const auto &v : body["vaults"])
            if (auto r = reference(v); !r.empty()) uses.emplace_back("vaults:use", r);
    for (const auto &[action, object] : uses)
        if (!key_policy::allows(statements, action, org, project, object))
            return refuse("this API key's policy does not allow " + action + " on " +
                          where(project, action.substr(0, action.find(':')), object) +
                          " (a statement naming one object covers it by id only)");
    return std::nullopt;
}

} // namespace

std::optional<ScopeRefusal> scope_check(const std::vector<key_policy::Statement> &statements, const ScopeNeed &need,
                                        const std::string &method, const std::string &pattern,
                                        const std::map<std::string, std::string> &params, const json &body,
                                        const std::string &org, const std::string &project) {
    const std::string kind = need.action.substr(0, need.action.find(':'));
    switch (need.kind) {
    case Kind::refuse:
        return ScopeRefusal{method + " " + pattern +
                            " is not open to API keys with a policy (they reach browsers, profiles, vaults "
                            "and proxies only)"};
    case Kind::always:
        return std::nullopt;
    case Kind::project:
        if (!key_policy::allows(statements, need.action, org, project, ""))
            return ScopeRefusal{"this API key's policy does not allow " + need.action + " on projects/" + project};
        break;
    case Kind::list:
        if (!key_policy::grants_any(statements, need.action, org, project))
            return ScopeRefusal{"this API key's policy does not allow " + need.action + " on anything in projects/" +
                                project};
        return std::nullopt;
    case Kind::object: {
        auto it = params.find(need.param);
        const std::string object = it == params.end() ? std::string() : it->second;
        if (!key_policy::allows(statements, need.action, org, project, object))
            return ScopeRefusal{"this API key's policy does not allow " + need.action + " on " +
                                where(project, kind, object) + " (a statement naming one object covers it by id only)"};
        break;
    }
    }
    // What a browser create or update attaches needs its own grant.
    if (scope_reads_body(method, pattern)) return attachments(statements, body, org, project);
    return std::nullopt;
}

bool scope_reads_body(const std::string &method, const std::string &pattern) {
    auto seg = split(pattern);
    return (method == "POST" || method == "PATCH") && !seg.empty() && seg[0] == "browsers" && seg.size() <= 2;
}

std::string scope_filter_list(const std::vector<key_policy::Statement> &statements, const ScopeNeed &need,
                              const std::string &body, const std::string &org, const std::string &project) {
    json list = json::parse(body, nullptr, false);
    if (!list.is_array()) return body;
    json kept = json::array();
    for (auto &item : list) {
        const json id = item.is_object() ? item.value(need.item_id, json()) : json();
        if (id.is_string() && key_policy::allows(statements, need.action, org, project, id.get<std::string>()))
            kept.push_back(std::move(item));
    }
    return kept.dump();
}

} // namespace hangar::host
