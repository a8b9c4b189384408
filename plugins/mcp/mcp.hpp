// The MCP server's logic without the host: JSON-RPC 2.0 messages of the Model Context Protocol
// (revision 2025-06-18) and the tools, each of which runs Hangar API requests through an `Api`
// (the plugin's is the host's req_dispatch, as the caller; the unit tests' is a fake).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hangar::mcp {

using json = nlohmann::json;

inline constexpr std::string_view kProtocolVersion = "2025-06-18";
// Revisions a client may negotiate (the Streamable HTTP transport exists since 2025-03-26).
bool supported_version(std::string_view version);

// JSON-RPC error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

// A request the protocol refuses (unknown tool, arguments that do not fit its schema).
struct RpcError : std::runtime_error {
    RpcError(int code, const std::string &message) : std::runtime_error(message), code(code) {}
    int code;
};

// One answer of the Hangar API.
struct ApiAnswer {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    bool ok() const { return status >= 200 && status < 300; }
    std::optional<std::string> header(std::string_view name) const; // compared without case
};

// The Hangar API as the MCP caller: one request through the server's router.
class Api {
public:
    virtual ~Api() = default;
    // `path` is absolute and encoded (query string included); `body` is sent as JSON when given.
    virtual ApiAnswer call(std::string_view method, const std::string &path, const json *body = nullptr,
                           std::uint32_t timeout_ms = 0) = 0;
    // A multipart/form-data body (uploads).
    virtual ApiAnswer call_raw(std::string_view method, const std::string &path, std::string_view content_type,
                               std::string_view body, std::uint32_t timeout_ms = 0) = 0;
};

// The tools/list result's `tools`.
const json &tool_definitions();
// Runs one tool: a CallToolResult ({content, isError?}). An API failure is a result with
// isError (the model sees it); an unknown tool or bad arguments throw RpcError.
json call_tool(Api &api, std::string_view name, const json &arguments);

// What the transport needs to know about one handled message.
struct Handled {
    std::optional<json> reply;       // the response to send; none for notifications and responses
    std::optional<std::string> open; // an initialize that succeeded: the negotiated revision
};
// Handles one JSON-RPC message (a request, notification or response) of an initialized
// session, or an initialize. Never throws: failures are JSON-RPC error responses.
Handled handle_message(Api &api, const json &message);

// Helpers the tools share, exposed for the tests.
std::string path_segment(std::string_view raw); // percent-encodes everything but unreserved characters

} // namespace hangar::mcp
