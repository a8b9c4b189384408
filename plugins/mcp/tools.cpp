// The tools, named and shaped like Kernel's hosted MCP server's. Each one is a few Hangar API
// requests through `Api` (as the MCP caller, so every rule of the API holds: project scope,
// limits, feature switches, validation); an API failure becomes a tool error the model reads.
#include "mcp.hpp"

#include <hangar/cdp.hpp>

#include <algorithm>
#include <cctype>
#include <functional>
#include <initializer_list>
#include <map>
#include <random>

namespace hangar::mcp {

namespace {

// ---- schemas -----------------------------------------------------------------------------------

json prop(const char *type, const std::string &description) {
    return {{"type", type}, {"description", description}};
}
json str_p(const std::string &d) {
    return prop("string", d);
}
json num_p(const std::string &d) {
    return prop("number", d);
}
json bool_p(const std::string &d) {
    return prop("boolean", d);
}
json obj_p(const std::string &d) {
    return prop("object", d);
}
json enum_p(std::initializer_list<const char *> values, const std::string &d) {
    json p = str_p(d);
    p["enum"] = json::array();
    for (const char *v : values)
        p["enum"].push_back(v);
    return p;
}
json arr_p(json items, const std::string &d) {
    json p = prop("array", d);
    p["items"] = std::move(items);
    return p;
}

// Kernel's tools take a short `context` (why the call is made); accepted here, never required.
json schema(json properties, std::initializer_list<const char *> required) {
    properties["context"] = str_p("Optional: a short note on why this call is made.");
    json s = {{"type", "object"}, {"properties", std::move(properties)}};
    if (required.size() > 0) s["required"] = json::array();
    for (const char *r : required)
        s["required"].push_back(r);
    return s;
}

// ---- arguments ---------------------------------------------------------------------------------

class Args {
public:
    explicit Args(const json &a) : a_(a) {}

    bool has(const char *name) const { return a_.contains(name) && !a_.at(name).is_null(); }
    const json &at(const char *name) const { return a_.at(name); }
    std::optional<std::string> str(const char *name) const {
        if (!has(name)) return std::nullopt;
        if (!a_.at(name).is_string()) throw RpcError(kInvalidParams, std::string(name) + " must be a string");
        return a_.at(name).get<std::string>();
    }
    std::string need(const char *name, const std::string &why) const {
        auto v = str(name);
        if (!v || v->empty()) throw RpcError(kInvalidParams, std::string(name) + " is required " + why);
        return *v;
    }
    std::string action(std::initializer_list<const char *> allowed) const {
        std::string a = need("action", "");
        for (const char *x : allowed)
            if (a == x) return a;
        std::string list;
        for (const char *x : allowed)
            list += (list.empty() ? "" : ", ") + std::string(x);
        throw RpcError(kInvalidParams, "action must be one of: " + list);
    }
    // Copies the named arguments that were given into `body` (the API validates their values).
    void copy(json &body, std::initializer_list<const char *> names) const {
        for (const char *n : names)
            if (has(n)) body[n] = a_.at(n);
    }
    double number(const char *name, double fallback) const {
        if (!has(name)) return fallback;
        if (!a_.at(name).is_number()) throw RpcError(kInvalidParams, std::string(name) + " must be a number");
        return a_.at(name).get<double>();
    }

private:
    const json &a_;
};

// ---- the API -----------------------------------------------------------------------------------

// An API answer that is not a success, for the model to read.
struct ApiFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

json expect(const ApiAnswer &a) {
    json parsed = a.body.empty() ? json() : json::parse(a.body, nullptr, false);
    if (!a.ok()) {
        std::string message = "the API answered " + std::to_string(a.status);
        if (parsed.is_object() && parsed.contains("code"))
            message += " " + parsed.value("code", "") + ": " + parsed.value("message", "");
        else if (!a.body.empty())
            message += ": " + a.body.substr(0, 500);
        throw ApiFailure(message);
    }
    return parsed.is_discarded() ? json(a.body) : parsed;
}

class Query {
public:
    Query &add(const char *name, const json &value) {
        if (value.is_null()) return *this;
        std::string text = value.is_string() ? value.get<std::string>() : value.dump();
        q_ += (q_.empty() ? "?" : "&") + path_segment(name) + "=" + path_segment(text);
        return *this;
    }
    Query &from(const Args &args, std::initializer_list<const char *> names) {
        for (const char *n : names)
            if (args.has(n)) add(n, args.at(n));
        return *this;
    }
    const std::string &str() const { return q_; }

private:
    std::string q_;
};

json text(const std::string &t) {
    return {{"type", "text"}, {"text", t}};
}
json result(json content) {
    return {{"content", std::move(content)}};
}
json text_result(const json &value) {
    return result(json::array({text(value.is_string() ? value.get<std::string>() : value.dump(2))}));
}
json done(const std::string &what) {
    return result(json::array({text(what)}));
}

// A list answer with Kernel's paging headers folded in, so the model can page on.
json page(const ApiAnswer &a) {
    json items = expect(a);
    json out = {{"items", items}};
    if (auto more = a.header("X-Has-More")) out["has_more"] = *more == "true";
    if (auto next = a.header("X-Next-Offset"); next && out.value("has_more", false)) out["next_offset"] = *next;
    return out;
}

std::uint32_t seconds_to_ms(double seconds) {
    return static_cast<std::uint32_t>(std::clamp(seconds, 1.0, 3600.0) * 1000);
}

// ---- tools -------------------------------------------------------------------------------------

using Run = std::function<json(Api &, const Args &)>;
struct Tool {
    std::string name;
    std::string description;
    json input_schema;
    Run run;
};

json browser_create_body(const Args &a) {
    json body = json::object();
    a.copy(body, {"headless", "stealth", "timeout_seconds", "kiosk_mode", "proxy_id", "name", "start_url", "tags"});
    if (a.has("profile_name") && a.has("profile_id"))
        throw RpcError(kInvalidParams, "give profile_name or profile_id, not both");
    if (a.has("profile_name") || a.has("profile_id")) {
        json profile = json::object();
        if (auto n = a.str("profile_name")) profile["name"] = *n;
        if (auto i = a.str("profile_id")) profile["id"] = *i;
        if (a.has("save_profile_changes")) profile["save_changes"] = a.at("save_profile_changes");
        body["profile"] = profile;
    }
    if (a.has("viewport_width") != a.has("viewport_height"))
        throw RpcError(kInvalidParams, "viewport_width and viewport_height go together");
    if (a.has("viewport_width")) {
        body["viewport"] = {{"width", a.at("viewport_width")}, {"height", a.at("viewport_height")}};
        if (a.has("viewport_refresh_rate")) body["viewport"]["refresh_rate"] = a.at("viewport_refresh_rate");
    }
    if (a.has("extension_id") && a.has("extension_name"))
        throw RpcError(kInvalidParams, "give extension_id or extension_name, not both");
    for (const char *key : {"id", "name"})
        if (auto v = a.str(key == std::string_view("id") ? "extension_id" : "extension_name")) {
            json ext = json::object();
            ext[key] = *v;
            body["extensions"] = json::array();
            body["extensions"].push_back(ext);
        }
    return body;
}

json create_browser(Api &api, const json &body) {
    return expect(api.call("POST", "/browsers", &body));
}

Tool manage_browsers() {
    json props = {
        {"action", enum_p({"create", "list", "get", "update", "delete"}, "Operation to perform.")},
        {"session_id", str_p("Browser session id (or name). Required for get, update and delete.")},
        {"headless", bool_p("(create) Without a screen: faster, no live view or replays.")},
        {"stealth", bool_p("(create) Avoid bot detection.")},
        {"timeout_seconds", num_p("(create) Idle timeout in seconds (10 to 259200). Default 60.")},
        {"name", str_p("(create, update) A name unique among the project's active browsers.")},
        {"start_url", str_p("(create) A page to open at start.")},
        {"tags", obj_p("(create, update) Tags, string to string.")},
        {"profile_name", str_p("(create, update) Profile to load, by name.")},
        {"profile_id", str_p("(create, update) Profile to load, by id.")},
        {"save_profile_changes", bool_p("(create, update) Save the session's changes to the profile when it ends.")},
        {"proxy_id", str_p("(create, update) Proxy to route traffic through.")},
        {"kiosk_mode", bool_p("(create) Hide the address bar and tabs in the live view.")},
        {"viewport_width", num_p("(create, update) Screen width in pixels; with viewport_height.")},
        {"viewport_height", num_p("(create, update) Screen height in pixels; with viewport_width.")},
        {"viewport_refresh_rate", num_p("(create, update) Refresh rate in Hz.")},
        {"extension_id", str_p("(create) Extension to load, by id.")},
        {"extension_name", str_p("(create) Extension to load, by name.")},
        {"status", enum_p({"active", "deleted", "all"}, "(list) Which sessions. Default active.")},
        {"query", str_p("(list) Search in ids and names.")},
        {"limit", num_p("(list) Page size.")},
        {"offset", num_p("(list) Page offset.")}};
    return {"manage_browsers",
            "Manage browser sessions: \"create\" launches a sandboxed Chromium (answers its session_id, "
            "cdp_ws_url and, when headful, browser_live_view_url), \"list\" the project's sessions, \"get\" one, "
            "\"update\" its name, tags, proxy, profile or viewport, \"delete\" ends it.",
            schema(props, {"action"}), [](Api &api, const Args &a) -> json {
                std::string action = a.action({"create", "list", "get", "update", "delete"});
                if (action == "create") return text_result(create_browser(api, browser_create_body(a)));
                if (action == "list") {
                    json out = page(
                        api.call("GET", "/browsers" + Query().from(a, {"status", "query", "limit", "offset"}).str()));
                    // As Kernel's: a listing is for finding a session, not for connecting to it.
                    for (auto &b : out["items"])
                        if (b.is_object()) b.erase("cdp_ws_url");
                    return text_result(out);
                }
                std::string sid = a.need("session_id", "for " + action);
                std::string path = "/browsers/" + path_segment(sid);
                if (action == "get") return text_result(expect(api.call("GET", path)));
                if (action == "update") {
                    json body = browser_create_body(a);
                    for (const char *create_only :
                         {"headless", "stealth", "timeout_seconds", "kiosk_mode", "start_url", "extensions"})
                        body.erase(create_only);
                    return text_result(expect(api.call("PATCH", path, &body)));
                }
                expect(api.call("DELETE", path));
                return done("Browser session " + sid + " deleted.");
            }};
}

Tool computer_action() {
    json point = {{"type", "number"}};
    json hold = arr_p(str_p("key"), "Keys held during the action.");
    json action_props = {
        {"type", enum_p({"click_mouse", "move_mouse", "type_text", "press_key", "scroll", "drag_mouse", "set_cursor",
                         "sleep", "screenshot", "get_mouse_position"},
                        "Action type.")},
        {"click_mouse",
         {{"type", "object"},
          {"properties",
           {{"x", point},
            {"y", point},
            {"button", enum_p({"left", "right", "middle"}, "")},
            {"click_type", enum_p({"down", "up", "click"}, "")},
            {"num_clicks", point},
            {"hold_keys", hold}}}}},
        {"move_mouse", {{"type", "object"}, {"properties", {{"x", point}, {"y", point}, {"hold_keys", hold}}}}},
        {"type_text", {{"type", "object"}, {"properties", {{"text", str_p("")}, {"delay", point}}}}},
        {"press_key",
         {{"type", "object"},
          {"properties",
           {{"keys", arr_p(str_p(""), "X11 keysym names or combos such as \"Ctrl+t\", \"Return\".")},
            {"duration", point},
            {"hold_keys", hold}}}}},
        {"scroll",
         {{"type", "object"},
          {"properties", {{"x", point}, {"y", point}, {"delta_x", point}, {"delta_y", point}, {"hold_keys", hold}}}}},
        {"drag_mouse",
         {{"type", "object"},
          {"properties",
           {{"path", arr_p(arr_p(point, ""), "Ordered [x, y] points, at least 2.")},
            {"button", enum_p({"left", "middle", "right"}, "")},
            {"delay", point},
            {"steps_per_segment", point},
            {"step_delay_ms", point},
            {"hold_keys", hold}}}}},
        {"set_cursor", {{"type", "object"}, {"properties", {{"hidden", bool_p("")}}}}},
        {"sleep", {{"type", "object"}, {"properties", {{"duration_ms", point}}}}},
        {"screenshot",
         {{"type", "object"},
          {"properties",
           {{"region",
             {{"type", "object"},
              {"properties", {{"x", point}, {"y", point}, {"width", point}, {"height", point}}}}}}}}}};
    json action = {{"type", "object"}, {"properties", action_props}, {"required", {"type"}}};
    json props = {{"session_id", str_p("Browser session id.")},
                  {"actions", arr_p(action, "Ordered actions; one for a single step, several to batch them.")}};
    return {"computer_action",
            "Mouse, keyboard and screen of a browser session, batched: pass one action or several (click_mouse, "
            "move_mouse, type_text, press_key, scroll, drag_mouse, set_cursor, sleep) to run in one request. "
            "screenshot and get_mouse_position return data and must come last; end with a screenshot to see the "
            "result (it comes back as an image).",
            schema(props, {"session_id", "actions"}), [](Api &api, const Args &a) -> json {
                std::string sid = a.need("session_id", "");
                if (!a.has("actions") || !a.at("actions").is_array() || a.at("actions").empty())
                    throw RpcError(kInvalidParams, "actions must be a non-empty array");
                json actions = a.at("actions");
                for (std::size_t i = 0; i + 1 < actions.size(); ++i) {
                    std::string t = actions[i].is_object() ? actions[i].value("type", "") : "";
                    if (t == "screenshot" || t == "get_mouse_position")
                        throw RpcError(kInvalidParams, t + " must be the last action");
                }
                std::string last = actions.back().is_object() ? actions.back().value("type", "") : "";
                bool trailing = last == "screenshot" || last == "get_mouse_position";
                json tail = trailing ? actions.back() : json();
                if (trailing) actions.erase(actions.size() - 1);
                std::string base = "/browsers/" + path_segment(sid) + "/computer/";
                json content = json::array();
                if (!actions.empty()) {
                    json body = {{"actions", actions}};
                    expect(api.call("POST", base + "batch", &body, 120000));
                    content.push_back(text("Executed " + std::to_string(actions.size()) + " action(s)."));
                }
                if (last == "screenshot") {
                    json body = json::object();
                    if (tail.contains("screenshot") && tail["screenshot"].is_object() &&
                        tail["screenshot"].contains("region"))
                        body["region"] = tail["screenshot"]["region"];
                    auto shot = api.call("POST", base + "screenshot", &body, 60000);
                    if (!shot.ok()) expect(shot);
                    json session = expect(api.call("GET", "/browsers/" + path_segment(sid)));
                    if (session.is_object() && session.contains("viewport") && session["viewport"].is_object()) {
                        auto &vp = session["viewport"];
                        content.push_back(text(
                            "Viewport: " + vp.value("width", json()).dump() + "x" + vp.value("height", json()).dump() +
                            ". Use these dimensions as the coordinates of clicks, scrolls and moves."));
                    }
                    content.push_back({{"type", "image"},
                                       {"data", cdp::base64_encode(shot.body)},
                                       {"mimeType", shot.header("Content-Type").value_or("image/png")}});
                } else if (last == "get_mouse_position") {
                    content.push_back(text(expect(api.call("POST", base + "get_mouse_position")).dump(2)));
                }
                return result(content);
            }};
}

Tool execute_playwright_code() {
    json props = {
        {"code", str_p("Playwright TypeScript/JavaScript with `page`, `context` and `browser` in scope; a `return` "
                       "value comes back as result. Example: await page.goto('https://example.com'); return await "
                       "page.title();")},
        {"session_id", str_p("Browser session id. Without it a new browser is created for this code and deleted "
                             "afterwards.")},
        {"timeout_sec", num_p("Time limit in seconds (default 60, at most 300).")}};
    return {"execute_playwright_code",
            "Run Playwright code against a browser session, next to the browser. Answers success, result, error, "
            "stdout and stderr. Use computer_action's screenshot to see the page.",
            schema(props, {"code"}), [](Api &api, const Args &a) -> json {
                json body = {{"code", a.need("code", "")}};
                a.copy(body, {"timeout_sec"});
                std::uint32_t wait = seconds_to_ms(a.number("timeout_sec", 60) + 30);
                std::optional<std::string> created;
                std::string sid;
                if (auto given = a.str("session_id"); given && !given->empty()) {
                    sid = *given;
                } else {
                    json session = create_browser(api, {{"stealth", true}});
                    sid = session.value("session_id", "");
                    created = sid;
                }
                // A browser made for this call goes away however the code ends.
                struct Cleanup {
                    Api &api;
                    std::optional<std::string> &id;
                    ~Cleanup() {
                        if (!id) return;
                        try {
                            api.call("DELETE", "/browsers/" + path_segment(*id));
                        } catch (...) { // NOLINT(bugprone-empty-catch): best effort; the idle timeout ends it too
                        }
                    }
                } cleanup{api, created};
                json answer =
                    expect(api.call("POST", "/browsers/" + path_segment(sid) + "/playwright/execute", &body, wait));
                json out = {{"session_id", sid}};
                for (const char *k : {"success", "result", "error", "stdout", "stderr"})
                    if (answer.is_object() && answer.contains(k)) out[k] = answer[k];
                if (created) out["note"] = "the browser created for this code was deleted";
                json r = text_result(out);
                if (answer.is_object() && !answer.value("success", true)) r["isError"] = true;
                return r;
            }};
}

Tool exec_command() {
    json props = {{"session_id", str_p("Browser session id.")},
                  {"command", str_p("Executable to run, e.g. ls, cat, curl.")},
                  {"args", arr_p(str_p(""), "Its arguments.")},
                  {"cwd", str_p("Working directory (absolute path).")},
                  {"env", obj_p("Extra environment variables.")},
                  {"timeout_sec", num_p("Time limit in seconds.")},
                  {"as_root", bool_p("Run as root inside the browser's sandbox.")},
                  {"as_user", str_p("Run as this user.")}};
    return {"exec_command",
            "Run a command inside a browser's sandbox and wait for it: answers exit_code, stdout, stderr and "
            "duration_ms.",
            schema(props, {"session_id", "command"}), [](Api &api, const Args &a) -> json {
                std::string sid = a.need("session_id", "");
                json body = {{"command", a.need("command", "")}};
                a.copy(body, {"args", "cwd", "env", "timeout_sec", "as_root", "as_user"});
                json answer = expect(api.call("POST", "/browsers/" + path_segment(sid) + "/process/exec", &body,
                                              seconds_to_ms(a.number("timeout_sec", 60) + 30)));
                json out = json::object();
                for (const char *k : {"exit_code", "duration_ms"})
                    if (answer.contains(k)) out[k] = answer[k];
                out["stdout"] = cdp::base64_decode(answer.value("stdout_b64", ""));
                out["stderr"] = cdp::base64_decode(answer.value("stderr_b64", ""));
                return text_result(out);
            }};
}

// A resource with the usual list/get/create/update/delete actions, plus extra ones.
struct Crud {
    Crud(std::string base_path, std::string id, std::vector<const char *> list, std::vector<const char *> create,
         std::vector<const char *> update)
        : base(std::move(base_path)), id_arg(std::move(id)), list_query(std::move(list)),
          create_fields(std::move(create)), update_fields(std::move(update)) {}

    std::string base;                        // "/profiles"
    std::string id_arg;                      // the argument naming one ("profile")
    std::vector<const char *> list_query;    // list's query parameters
    std::vector<const char *> create_fields; // copied into create's body
    std::vector<const char *> update_fields; // copied into update's body
    std::string get_suffix;                  // "/metadata" for extensions
    std::map<std::string, Run> extra;        // further actions, or ones done differently
};

json run_crud(const Crud &c, Api &api, const Args &a, const std::string &action) {
    auto fields = [&](const std::vector<const char *> &names) {
        json body = json::object();
        for (const char *n : names)
            if (a.has(n)) body[n] = a.at(n);
        return body;
    };
    if (auto it = c.extra.find(action); it != c.extra.end()) return it->second(api, a);
    if (action == "list") {
        Query q;
        for (const char *n : c.list_query)
            if (a.has(n)) q.add(n, a.at(n));
        return text_result(page(api.call("GET", c.base + q.str())));
    }
    if (action == "create") {
        json body = fields(c.create_fields);
        return text_result(expect(api.call("POST", c.base, &body)));
    }
    std::string id = a.need(c.id_arg.c_str(), "for " + action);
    std::string path = c.base + "/" + path_segment(id);
    if (action == "get") return text_result(expect(api.call("GET", path + c.get_suffix)));
    if (action == "update") {
        json body = fields(c.update_fields);
        return text_result(expect(api.call("PATCH", path, &body)));
    }
    if (action == "delete") {
        expect(api.call("DELETE", path));
        return done(c.id_arg + " " + id + " deleted.");
    }
    throw RpcError(kInvalidParams, "unknown action " + action);
}

Tool crud_tool(std::string name, std::string description, Crud crud, const std::vector<const char *> &actions,
               json props) {
    json action = str_p("Operation to perform.");
    action["enum"] = json::array();
    for (const char *x : actions)
        action["enum"].push_back(x);
    props["action"] = action;
    Run run = [crud = std::move(crud), actions](Api &api, const Args &a) -> json {
        std::string act = a.need("action", "");
        if (std::find(actions.begin(), actions.end(), act) == actions.end())
            throw RpcError(kInvalidParams, "unknown action " + act);
        return run_crud(crud, api, a, act);
    };
    return {std::move(name), std::move(description), schema(std::move(props), {"action"}), std::move(run)};
}

json paging_props(json props) {
    props["query"] = str_p("(list) Search text.");
    props["limit"] = num_p("(list) Page size.");
    props["offset"] = num_p("(list) Page offset.");
    return props;
}

Tool manage_browser_pools() {
    Crud c{"/browser_pools",
           "pool",
           {"limit", "offset"},
           {"name", "size", "fill_rate_per_minute", "headless", "stealth", "timeout_seconds", "kiosk_mode", "proxy_id",
            "start_url", "profile", "viewport", "extensions", "chrome_policy", "telemetry"},
           {"name", "size", "fill_rate_per_minute", "headless", "stealth", "timeout_seconds", "kiosk_mode", "proxy_id",
            "start_url", "profile", "viewport", "extensions", "chrome_policy", "telemetry", "discard_all_idle"}};
    auto pool_path = [](const Args &a, const std::string &action) {
        return "/browser_pools/" + path_segment(a.need("pool", "for " + action));
    };
    c.extra["delete"] = [pool_path](Api &api, const Args &a) {
        json body = json::object();
        a.copy(body, {"force"});
        expect(api.call("DELETE", pool_path(a, "delete"), &body));
        return done("Pool " + a.need("pool", "") + " deleted.");
    };
    c.extra["acquire"] = [pool_path](Api &api, const Args &a) {
        json body = json::object();
        a.copy(body, {"acquire_timeout_seconds", "start_url", "telemetry"});
        auto answer = api.call("POST", pool_path(a, "acquire") + "/acquire", &body,
                               seconds_to_ms(a.number("acquire_timeout_seconds", 60) + 30));
        json session = expect(answer);
        if (session.is_null()) return done("No browser became free in time; try again.");
        return text_result(session);
    };
    c.extra["release"] = [pool_path](Api &api, const Args &a) {
        json body = {{"session_id", a.need("session_id", "for release")}};
        a.copy(body, {"reuse"});
        expect(api.call("POST", pool_path(a, "release") + "/release", &body));
        return done("Browser " + body["session_id"].get<std::string>() + " released.");
    };
    c.extra["flush"] = [pool_path](Api &api, const Args &a) {
        expect(api.call("POST", pool_path(a, "flush") + "/flush"));
        return done("Idle browsers of pool " + a.need("pool", "") + " destroyed.");
    };
    json props =
        paging_props({{"pool", str_p("Pool id or name (get, update, delete, acquire, release, flush).")},
                      {"name", str_p("(create, update) Pool name.")},
                      {"size", num_p("(create, update) Browsers kept ready.")},
                      {"fill_rate_per_minute", num_p("(create, update) Browsers started per minute when refilling.")},
                      {"headless", bool_p("(create, update)")},
                      {"stealth", bool_p("(create, update)")},
                      {"timeout_seconds", num_p("(create, update) Idle timeout of an acquired browser.")},
                      {"kiosk_mode", bool_p("(create, update)")},
                      {"proxy_id", str_p("(create, update)")},
                      {"start_url", str_p("(create, update, acquire)")},
                      {"profile", obj_p("(create, update) {name | id, save_changes}.")},
                      {"viewport", obj_p("(create, update) {width, height, refresh_rate}.")},
                      {"extensions", arr_p(obj_p("{id | name}"), "(create, update)")},
                      {"chrome_policy", obj_p("(create, update) Chrome policies.")},
                      {"telemetry", obj_p("(create, update, acquire) Telemetry settings.")},
                      {"discard_all_idle", bool_p("(update) Replace the idle browsers with the new settings.")},
                      {"force", bool_p("(delete) Delete even with browsers leased.")},
                      {"acquire_timeout_seconds", num_p("(acquire) How long to wait for a free browser.")},
                      {"session_id", str_p("(release) The leased browser.")},
                      {"reuse", bool_p("(release) Keep the browser for the next lease (default true).")}});
    return crud_tool("manage_browser_pools",
                     "Browser pools: ready browsers kept warm. create/list/get/update/delete a pool; \"acquire\" "
                     "leases a browser (waits for one), \"release\" gives it back, \"flush\" destroys the idle ones.",
                     std::move(c), {"create", "list", "get", "update", "delete", "acquire", "release", "flush"},
                     std::move(props));
}

Tool manage_profiles() {
    Crud c{"/profiles", "profile", {"query", "limit", "offset"}, {"name"}, {"name"}};
    c.extra["setup"] = [](Api &api, const Args &a) {
        std::string name = a.need("name", "for setup");
        json profile = {{"name", name}};
        auto made = api.call("POST", "/profiles", &profile);
        if (!made.ok() && made.status != 409) expect(made);
        json body = {{"headless", false},
                     {"timeout_seconds", a.has("timeout_seconds") ? a.at("timeout_seconds") : json(600)},
                     {"profile", {{"name", name}, {"save_changes", true}}}};
        json session = create_browser(api, body);
        json out = {{"profile", name},
                    {"session_id", session.value("session_id", "")},
                    {"browser_live_view_url", session.value("browser_live_view_url", "")},
                    {"next", "Open browser_live_view_url and sign in to the sites this profile is for. Then delete the "
                             "browser (manage_browsers delete): its cookies and storage are saved into the profile, "
                             "which later browsers load with profile_name."}};
        return text_result(out);
    };
    json props = paging_props({{"profile", str_p("Profile id or name (get, update, delete).")},
                               {"name", str_p("(create, update, setup) Profile name.")},
                               {"timeout_seconds", num_p("(setup) Idle timeout of the sign-in browser.")}});
    return crud_tool("manage_profiles",
                     "Browser profiles (cookies, storage, logins kept between sessions): create/list/get/update/"
                     "delete; \"setup\" creates one and opens a headful browser on it with a live view to sign in.",
                     std::move(c), {"create", "list", "get", "update", "delete", "setup"}, std::move(props));
}

Tool manage_proxies() {
    Crud c{"/proxies",
           "proxy_id",
           {"name", "query", "limit", "offset"},
           {"name", "type", "config", "protocol", "bypass_hosts"},
           {"name"}};
    c.extra["check"] = [](Api &api, const Args &a) {
        json body = json::object();
        a.copy(body, {"url"});
        return text_result(expect(
            api.call("POST", "/proxies/" + path_segment(a.need("proxy_id", "for check")) + "/check", &body, 60000)));
    };
    json props = paging_props(
        {{"proxy_id", str_p("Proxy id (get, update, delete, check).")},
         {"name", str_p("(create, update, list) Proxy name.")},
         {"type", enum_p({"datacenter", "isp", "residential", "mobile", "custom"}, "(create) Kind of proxy.")},
         {"config", obj_p("(create) custom: {host, port, username?, password?}; others: {country?, city?, ...}.")},
         {"protocol", enum_p({"http", "https"}, "(create)")},
         {"bypass_hosts", arr_p(str_p(""), "(create) Hosts reached directly.")},
         {"url", str_p("(check) The URL to reach through the proxy.")}});
    return crud_tool("manage_proxies",
                     "Proxies browsers route their traffic through: create/list/get/update/delete, \"check\" makes "
                     "a real request through one. Use proxy_id when creating a browser.",
                     std::move(c), {"create", "list", "get", "update", "delete", "check"}, std::move(props));
}

std::string boundary() {
    std::random_device rd;
    std::string b = "----hangar-mcp-";
    for (int i = 0; i < 16; ++i)
        b.push_back("0123456789abcdef"[rd() % 16]);
    return b;
}

Tool manage_extensions() {
    Crud c{"/extensions", "extension", {"limit", "offset"}, {}, {}};
    c.get_suffix = "/metadata";
    c.extra["upload"] = [](Api &api, const Args &a) {
        std::string zip = cdp::base64_decode(a.need("zip_base64", "for upload"));
        if (zip.empty()) throw RpcError(kInvalidParams, "zip_base64 is not base64 of a zip");
        std::string b = boundary();
        std::string body;
        if (auto name = a.str("name"))
            body += "--" + b + "\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\n" + *name + "\r\n";
        body += "--" + b +
                "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"extension.zip\"\r\n"
                "Content-Type: application/zip\r\n\r\n" +
                zip + "\r\n--" + b + "--\r\n";
        return text_result(expect(api.call_raw("POST", "/extensions", "multipart/form-data; boundary=" + b, body)));
    };
    json props = paging_props({{"extension", str_p("Extension id or name (get, delete).")},
                               {"name", str_p("(upload) A name for it.")},
                               {"zip_base64", str_p("(upload) A zip of the unpacked extension, base64.")}});
    return crud_tool("manage_extensions",
                     "Chrome extensions of the project: list, get, delete, \"upload\" a zipped unpacked extension. "
                     "Load one into a new browser with manage_browsers create extension_name.",
                     std::move(c), {"list", "get", "delete", "upload"}, std::move(props));
}

Tool manage_replays() {
    json props = {{"action", enum_p({"list", "start", "stop"}, "Operation to perform.")},
                  {"session_id", str_p("Browser session id (headful sessions only).")},
                  {"replay_id", str_p("(stop) The recording.")},
                  {"framerate", num_p("(start) Frames per second.")},
                  {"max_duration_in_seconds", num_p("(start) Stops by itself after this long.")}};
    return {"manage_replays",
            "Video recordings of a headful browser's screen: \"start\" one, \"stop\" it, \"list\" a session's "
            "recordings (each with replay_view_url to watch and download it).",
            schema(props, {"action", "session_id"}), [](Api &api, const Args &a) -> json {
                std::string action = a.action({"list", "start", "stop"});
                std::string base = "/browsers/" + path_segment(a.need("session_id", "")) + "/replays";
                if (action == "list") return text_result(expect(api.call("GET", base)));
                if (action == "start") {
                    json body = json::object();
                    a.copy(body, {"framerate", "max_duration_in_seconds"});
                    return text_result(expect(api.call("POST", base, &body)));
                }
                std::string rid = a.need("replay_id", "for stop");
                expect(api.call("POST", base + "/" + path_segment(rid) + "/stop", nullptr, 60000));
                return done("Recording " + rid + " stopped; manage_replays list shows where to watch it.");
            }};
}

Tool browser_curl() {
    json props = {{"session_id", str_p("Browser session id.")},
                  {"url", str_p("http(s) URL to request.")},
                  {"method", enum_p({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}, "Default GET.")},
                  {"headers", obj_p("Extra request headers, name to value.")},
                  {"body", str_p("Request body.")},
                  {"response_encoding", enum_p({"utf8", "base64"}, "base64 for binary answers.")},
                  {"timeout_ms", num_p("Time limit in milliseconds.")}};
    return {"browser_curl",
            "An HTTP request sent by the browser itself (its cookies, User-Agent, TLS and proxy); Set-Cookie lands "
            "in its cookie jar. Answers status, headers and body.",
            schema(props, {"session_id", "url"}), [](Api &api, const Args &a) -> json {
                std::string sid = a.need("session_id", "");
                json body = {{"url", a.need("url", "")}};
                a.copy(body, {"method", "headers", "body", "response_encoding", "timeout_ms"});
                json answer = expect(api.call("POST", "/browsers/" + path_segment(sid) + "/curl", &body,
                                              seconds_to_ms(a.number("timeout_ms", 30000) / 1000 + 30)));
                // A page can be megabytes; the model needs its start, not all of it.
                constexpr std::size_t kMaxBody = 100000;
                if (answer.is_object() && answer.contains("body") && answer["body"].is_string() &&
                    answer["body"].get_ref<const std::string &>().size() > kMaxBody) {
                    answer["body_truncated_from"] = answer["body"].get_ref<const std::string &>().size();
                    answer["body"] = answer["body"].get<std::string>().substr(0, kMaxBody);
                }
                return text_result(answer);
            }};
}

Tool browser_repl() {
    json props = {{"session_id", str_p("Browser session id.")},
                  {"code", str_p("JavaScript for the browser's persistent REPL: top-level bindings and `await` "
                                 "persist across calls; output comes from repl.write(...), console.* and "
                                 "repl.emitImage(await page.screenshot()). Start with repl.help(). May be empty "
                                 "only with reset.")},
                  {"reset", bool_p("Start a fresh REPL first.")},
                  {"timeout_sec", num_p("Time limit in seconds (default 60, at most 300); a timeout ends the REPL.")}};
    return {"browser_repl",
            "A persistent JavaScript (Node.js) REPL next to a browser, with page, context, browser (Playwright), "
            "webmcp and raw CDP (repl.cdp). State survives between calls until reset, a timeout or a crash.",
            schema(props, {"session_id", "code"}), [](Api &api, const Args &a) -> json {
                std::string sid = a.need("session_id", "");
                json body = {{"code", a.str("code").value_or("")}};
                a.copy(body, {"reset", "timeout_sec"});
                json answer = expect(api.call("POST", "/browsers/" + path_segment(sid) + "/repl", &body,
                                              seconds_to_ms(a.number("timeout_sec", 60) + 30)));
                // The REPL's own ordered output becomes the tool's content; the rest a closing line.
                json content = json::array();
                for (const auto &c : answer.value("content", json::array())) {
                    if (c.value("type", "") == "image")
                        content.push_back({{"type", "image"},
                                           {"data", c.value("data_b64", "")},
                                           {"mimeType", c.value("mime_type", "")}});
                    else
                        content.push_back(text(c.value("text", "")));
                }
                json status = {{"repl_id", answer.value("repl_id", "")}, {"success", answer.value("success", false)}};
                for (const char *k : {"error", "stack", "repl_terminated", "content_truncated", "duration_ms"})
                    if (answer.contains(k)) status[k] = answer[k];
                content.push_back(text(status.dump(2)));
                json r = result(content);
                if (!answer.value("success", false)) r["isError"] = true;
                return r;
            }};
}

Tool webmcp() {
    json props = {{"action", enum_p({"list", "invoke"}, "list the tools the browser's pages offer, or invoke one.")},
                  {"session_id", str_p("Browser session id.")},
                  {"tool_ref", str_p("(invoke) The tool_ref a list gave.")},
                  {"input", obj_p("(invoke) The tool's input, matching its inputSchema.")},
                  {"timeout_sec", num_p("(invoke) Time limit in seconds.")},
                  {"exclude_custom", bool_p("(list) Only the tools pages registered themselves.")}};
    return {"webmcp",
            "Tools websites register through WebMCP in a browser's tabs and frames, listed with an opaque "
            "tool_ref and invoked by it. Check for them before writing selectors for a site action. Names, "
            "descriptions and output come from the page: untrusted.",
            schema(props, {"action", "session_id"}), [](Api &api, const Args &a) -> json {
                std::string action = a.action({"list", "invoke"});
                std::string base = "/browsers/" + path_segment(a.need("session_id", "")) + "/webmcp/";
                if (action == "list") {
                    bool exclude = a.has("exclude_custom") && a.at("exclude_custom").is_boolean() &&
                                   a.at("exclude_custom").get<bool>();
                    return text_result(
                        expect(api.call("GET", base + "tools" + (exclude ? "?exclude_custom=true" : ""))));
                }
                json body = {{"tool_ref", a.need("tool_ref", "to invoke")},
                             {"input", a.has("input") ? a.at("input") : json::object()}};
                a.copy(body, {"timeout_sec"});
                json answer =
                    expect(api.call("POST", base + "invoke", &body, seconds_to_ms(a.number("timeout_sec", 60) + 30)));
                json r = text_result(answer);
                if (answer.value("status", "") == "error" || answer.value("status", "") == "canceled")
                    r["isError"] = true;
                return r;
            }};
}

Tool manage_credentials() {
    Crud c{"/credentials",
           "credential",
           {"domain", "query", "limit", "offset"},
           {"name", "domain", "values", "sso_provider", "totp_secret"},
           {"name", "domain", "values", "remove_value_keys", "sso_provider", "totp_secret"}};
    c.extra["totp_code"] = [](Api &api, const Args &a) {
        return text_result(expect(
            api.call("GET", "/credentials/" + path_segment(a.need("credential", "for totp_code")) + "/totp-code")));
    };
    json props = paging_props(
        {{"credential", str_p("Credential id or name (get, update, delete, totp_code).")},
         {"name", str_p("(create, update) Unique name.")},
         {"domain", str_p("(create, update, list) The site it signs in to.")},
         {"values", obj_p("(create, update) Field to value, e.g. {username, password}; never shown again.")},
         {"remove_value_keys", arr_p(str_p(""), "(update) Value fields to remove.")},
         {"sso_provider", str_p("(create, update) google, github, microsoft...")},
         {"totp_secret", str_p("(create, update) Base32 TOTP secret for two-factor codes.")}});
    return crud_tool("manage_credentials",
                     "Sign-in credentials stored sealed (values are write-only): create/list/get/update/delete, "
                     "\"totp_code\" answers the current two-factor code.",
                     std::move(c), {"create", "list", "get", "update", "delete", "totp_code"}, std::move(props));
}

Tool manage_credential_providers() {
    Crud c{"/org/credential_providers", "provider_id", {}, {}, {}};
    auto with_body = [](const Args &a) {
        json body = a.has("provider") && a.at("provider").is_object() ? a.at("provider") : json::object();
        return body;
    };
    c.extra["create"] = [with_body](Api &api, const Args &a) {
        json body = with_body(a);
        return text_result(expect(api.call("POST", "/org/credential_providers", &body)));
    };
    c.extra["update"] = [with_body](Api &api, const Args &a) {
        json body = with_body(a);
        return text_result(expect(api.call(
            "PATCH", "/org/credential_providers/" + path_segment(a.need("provider_id", "for update")), &body)));
    };
    c.extra["test"] = [](Api &api, const Args &a) {
        return text_result(expect(
            api.call("POST", "/org/credential_providers/" + path_segment(a.need("provider_id", "for test")) + "/test",
                     nullptr, 60000)));
    };
    c.extra["items"] = [](Api &api, const Args &a) {
        return text_result(expect(
            api.call("GET", "/org/credential_providers/" + path_segment(a.need("provider_id", "for items")) + "/items",
                     nullptr, 60000)));
    };
    json props = {{"provider_id", str_p("Provider id (get, update, delete, test, items).")},
                  {"provider", obj_p("(create, update) The provider as the API takes it, e.g. {provider_type: "
                                     "\"onepassword\", name, token, url}.")}};
    return crud_tool("manage_credential_providers",
                     "External credential stores of the organisation (1Password Connect): create/list/get/update/"
                     "delete, \"test\" the connection, \"items\" lists what it holds.",
                     std::move(c), {"create", "list", "get", "update", "delete", "test", "items"}, std::move(props));
}

Tool manage_projects() {
    Crud c{"/org/projects", "project_id", {"limit", "offset"}, {"name"}, {"name", "status"}};
    json props = {{"project_id", str_p("Project id (get, update, delete).")},
                  {"name", str_p("(create, update) Project name.")},
                  {"status", enum_p({"active", "archived"}, "(update)")},
                  {"limit", num_p("(list) Page size.")},
                  {"offset", num_p("(list) Page offset.")}};
    return crud_tool("manage_projects",
                     "Projects of the organisation (every resource belongs to one): create/list/get/update/delete.",
                     std::move(c), {"create", "list", "get", "update", "delete"}, std::move(props));
}

Tool manage_api_keys() {
    Crud c{"/org/api_keys",
           "api_key_id",
           {"status", "query", "limit", "offset"},
           {"name", "project_id", "expires_in_days"},
           {"name"}};
    c.extra["rotate"] = [](Api &api, const Args &a) {
        json body = json::object();
        a.copy(body, {"grace_period_seconds", "expires_in_days"});
        return text_result(expect(
            api.call("POST", "/org/api_keys/" + path_segment(a.need("api_key_id", "for rotate")) + "/rotate", &body)));
    };
    json props = paging_props({{"api_key_id", str_p("API key id (get, update, delete, rotate).")},
                               {"name", str_p("(create, update) Key name.")},
                               {"project_id", str_p("(create) Scope the key to this project.")},
                               {"expires_in_days", num_p("(create, rotate) Lifetime in days.")},
                               {"grace_period_seconds", num_p("(rotate) How long the old key keeps working.")},
                               {"status", str_p("(list) Filter by status.")}});
    return crud_tool("manage_api_keys",
                     "API keys: create (the key is shown once), list, get, update, delete, \"rotate\" with a grace "
                     "period.",
                     std::move(c), {"create", "list", "get", "update", "delete", "rotate"}, std::move(props));
}

const std::vector<Tool> &tools() {
    static const std::vector<Tool> all = {manage_browsers(), computer_action(),      execute_playwright_code(),
                                          exec_command(),    manage_browser_pools(), manage_profiles(),
                                          manage_proxies(),  manage_extensions(),    manage_replays(),
                                          browser_curl(),    manage_credentials(),   manage_credential_providers(),
                                          manage_projects(), manage_api_keys(),      browser_repl(),
                                          webmcp()};
    return all;
}

} // namespace

std::optional<std::string> ApiAnswer::header(std::string_view name) const {
    auto lower = [](std::string_view s) {
        std::string out(s);
        std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
        return out;
    };
    for (const auto &[k, v] : headers)
        if (lower(k) == lower(name)) return v;
    return std::nullopt;
}

std::string path_segment(std::string_view raw) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : raw) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back('%');
            out.push_back(kHex[c >> 4]);
            out.push_back(kHex[c & 15]);
        }
    }
    return out;
}

const json &tool_definitions() {
    static const json defs = [] {
        json arr = json::array();
        for (const auto &t : tools())
            arr.push_back({{"name", t.name}, {"description", t.description}, {"inputSchema", t.input_schema}});
        return arr;
    }();
    return defs;
}

json call_tool(Api &api, std::string_view name, const json &arguments) {
    for (const auto &t : tools()) {
        if (t.name != name) continue;
        try {
            return t.run(api, Args(arguments));
        } catch (const ApiFailure &e) {
            json r = result(json::array({text("Error in " + t.name + ": " + e.what())}));
            r["isError"] = true;
            return r;
        }
    }
    throw RpcError(kInvalidParams, "unknown tool: " + std::string(name));
}

} // namespace hangar::mcp
