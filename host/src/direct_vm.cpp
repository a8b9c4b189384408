#include "direct_vm.hpp"

#include "http.hpp"
#include "util.hpp"

#include <array>
#include <string_view>

namespace hangar::host {

using json = nlohmann::json;

namespace {

// The subresources served this way besides those a plugin serves at base_url itself (curl,
// telemetry/stream): the Python SDK's default KERNEL_BROWSER_ROUTING_SUBRESOURCES.
constexpr std::array<std::string_view, 5> kSubresources = {"fs/", "process/", "computer/", "playwright/",
                                                           "logs/stream"};

constexpr std::string_view kPrefix = "/browser/vm/";

} // namespace

bool direct_vm_request(HostCore &core, hangar_request &req, hangar_response &res) {
    std::string_view path = req.raw_path;
    if (core.role != HANGAR_ROLE_SERVER || path.substr(0, kPrefix.size()) != kPrefix) return false;
    path.remove_prefix(kPrefix.size());
    auto slash = path.find('/');
    if (slash == std::string_view::npos || slash == 0) return false;
    std::string sid(path.substr(0, slash));
    std::string_view rest = path.substr(slash + 1);
    bool ours = false;
    for (auto sub : kSubresources)
        ours = ours || rest.substr(0, sub.size()) == sub;
    if (!ours) return false;

    std::string token;
    std::string query; // the query without the jwt: the sandbox never holds its own session's token
    for (const auto &part : split(req.query_string, '&')) {
        if (part.rfind("jwt=", 0) == 0)
            token = url_decode(part.substr(4));
        else if (!part.empty())
            query += (query.empty() ? "" : "&") + part;
    }
    auto claims = token.empty() || !core.tokens ? std::nullopt : core.tokens->verify(token);
    if (!claims || !claims->is_object() || claims->value("typ", "") != "cdp" || claims->value("sid", "") != sid) {
        set_error(res, 401, "unauthorized", "invalid or expired browser token");
        return true;
    }
    std::string owner;
    if (int status = core.services.call("browsers.session_owner", json{{"session_id", sid}}.dump(), owner);
        status != 200) {
        auto answer = json::parse(owner, nullptr, false);
        if (status == 421 && answer.is_object()) // another node runs it: relayed there, token and all
            set_error(res, status, answer.value("code", ""), answer.value("message", ""),
                      answer.value("details", json::array()).dump());
        else
            set_error(res, 404, "not_found", "browser session " + sid + " has ended");
        return true;
    }
    auto project = json::parse(owner, nullptr, false).value("project_id", "");
    auto caller = core.auth->caller_for_project(project);
    if (!caller) {
        set_error(res, 404, "not_found", "browser session " + sid + " has ended");
        return true;
    }
    req.raw_path = "/browsers/" + sid + "/" + std::string(rest);
    req.path = url_decode(req.raw_path);
    req.query_string = query;
    req.query = hangar::query_pairs(query);
    req.caller_json = caller->to_json().dump();
    req.caller = std::move(*caller);
    req.direct_vm = true;
    return true;
}

} // namespace hangar::host
