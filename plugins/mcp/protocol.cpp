// JSON-RPC 2.0 as MCP uses it: initialize (version negotiation), ping, tools/list, tools/call;
// notifications and responses from the client are accepted and need no answer.
#include "mcp.hpp"

#include <array>
#include <exception>

namespace hangar::mcp {

namespace {

constexpr std::array<std::string_view, 3> kSupported{"2025-06-18", "2025-03-26", "2024-11-05"};

json rpc_result(const json &id, json result) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json rpc_error(const json &id, int code, const std::string &message) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

json initialize_result(const std::string &version) {
    return {{"protocolVersion", version},
            {"capabilities", {{"tools", {{"listChanged", false}}}}},
            {"serverInfo", {{"name", "hangar"}, {"title", "Hangar browsers"}, {"version", "1.0.0"}}},
            {"instructions",
             "Hangar runs sandboxed Chromium browsers. Create one with manage_browsers, drive it with "
             "computer_action (end a batch with a screenshot to see the result), execute_playwright_code, "
             "browser_repl or exec_command, check webmcp for tools the site offers, and delete the browser when "
             "done. Every tool acts in the project of the API key."}};
}

} // namespace

bool supported_version(std::string_view version) {
    for (auto v : kSupported)
        if (v == version) return true;
    return false;
}

Handled handle_message(Api &api, const json &message) {
    Handled out;
    // Compared as JSON: a "jsonrpc" of another type is not "2.0" (value() would throw on it).
    if (!message.is_object() || message.value("jsonrpc", json()) != json("2.0")) {
        out.reply = rpc_error(nullptr, kInvalidRequest, "not a JSON-RPC 2.0 message");
        return out;
    }
    auto method = message.find("method");
    auto id = message.find("id");
    if (method == message.end()) {
        // A response to a request of ours: we send none, so there is nothing to match it with.
        if (id != message.end() && (message.contains("result") || message.contains("error"))) return out;
        out.reply = rpc_error(id != message.end() ? *id : json(nullptr), kInvalidRequest, "no method");
        return out;
    }
    if (!method->is_string()) {
        out.reply = rpc_error(id != message.end() ? *id : json(nullptr), kInvalidRequest, "method must be a string");
        return out;
    }
    const std::string &name = method->get_ref<const std::string &>();
    if (id == message.end()) return out; // a notification (initialized, cancelled, ...): nothing to answer
    if (!id->is_string() && !id->is_number_integer()) {
        out.reply = rpc_error(nullptr, kInvalidRequest, "id must be a string or an integer");
        return out;
    }
    json params = message.value("params", json::object());
    if (!params.is_object()) {
        out.reply = rpc_error(*id, kInvalidParams, "params must be an object");
        return out;
    }
    try {
        if (name == "initialize") {
            std::string asked = params.value("protocolVersion", "");
            // The client's revision when we speak it, else ours (the client decides whether to go on).
            std::string version = supported_version(asked) ? asked : std::string(kProtocolVersion);
            out.open = version;
            out.reply = rpc_result(*id, initialize_result(version));
        } else if (name == "ping") {
            out.reply = rpc_result(*id, json::object());
        } else if (name == "tools/list") {
            out.reply = rpc_result(*id, {{"tools", tool_definitions()}});
        } else if (name == "tools/call") {
            auto tool = params.find("name");
            if (tool == params.end() || !tool->is_string()) throw RpcError(kInvalidParams, "params.name is required");
            json arguments = params.value("arguments", json::object());
            if (!arguments.is_object()) throw RpcError(kInvalidParams, "params.arguments must be an object");
            out.reply = rpc_result(*id, call_tool(api, tool->get<std::string>(), arguments));
        } else {
            out.reply = rpc_error(*id, kMethodNotFound, "method not found: " + name);
        }
    } catch (const RpcError &e) {
        out.reply = rpc_error(*id, e.code, e.what());
    } catch (const json::exception &e) {
        out.reply = rpc_error(*id, kInvalidParams, e.what());
    } catch (const std::exception &e) {
        out.reply = rpc_error(*id, kInternalError, e.what());
    }
    return out;
}

} // namespace hangar::mcp
