// What a statement-scoped API key (hangar/key_policy.hpp) must hold for each route, and the
// check the HTTP layer makes before a handler runs. A route no entry names is refused to such a
// key: a new route is closed to scoped keys until someone decides which action it is.
#pragma once

#include <hangar/key_policy.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace hangar::host {

struct ScopeNeed {
    enum class Kind {
        refuse,  // not open to scoped keys at all
        always,  // open to any key (who am I)
        project, // `action` on the acting project (creates)
        list,    // `action` on anything of the project; the answer is cut to what it covers
        object,  // `action` on the object the route's first parameter names
    };
    Kind kind = Kind::refuse;
    std::string action;
    std::string param; // object: the route parameter holding the object's id
    // list: the field of each listed item that holds its id
    std::string item_id;
};

// `pattern` is the matched route pattern ("/browsers/{id_or_name}/fs/read_file").
ScopeNeed scope_need(const std::string &method, const std::string &pattern);

// Whether the check reads the request's body: a browser's create or update, whose attachments
// need their own grants.
bool scope_reads_body(const std::string &method, const std::string &pattern);

struct ScopeRefusal {
    std::string message;
};

// Whether `statements` allow the request: the route's need, and for a browser create or update
// what its body attaches (a profile, a proxy, vaults need their `use`; saved extensions and
// telemetry export are not open to scoped keys). `body` is the parsed request body (null if
// none). Nullopt = allowed.
std::optional<ScopeRefusal> scope_check(const std::vector<key_policy::Statement> &statements, const ScopeNeed &need,
                                        const std::string &method, const std::string &pattern,
                                        const std::map<std::string, std::string> &params, const nlohmann::json &body,
                                        const std::string &org, const std::string &project);

// A list's JSON array answer with only the items `statements` allow `need.action` on.
std::string scope_filter_list(const std::vector<key_policy::Statement> &statements, const ScopeNeed &need,
                              const std::string &body, const std::string &org, const std::string &project);

} // namespace hangar::host
