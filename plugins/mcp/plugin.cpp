// The mcp plugin: an MCP server at /mcp (Streamable HTTP transport, revision 2025-06-18).
// The host has authenticated the caller before any of this runs (a bad key never reaches it);
// each tool then runs Hangar API requests through req_dispatch as that same caller, so the MCP
// server has no powers of its own and no copy of another area's rules.
#include "mcp.hpp"

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <chrono>
#include <map>
#include <mutex>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace mcp = hangar::mcp;

// The API as the caller of one /mcp request.
class CallerApi : public mcp::Api {
public:
    explicit CallerApi(const Request &req) : req_(req) {}

    mcp::ApiAnswer call(std::string_view method, const std::string &path, const json *body,
                        std::uint32_t timeout_ms) override {
        std::string text = body ? body->dump() : std::string();
        return call_raw(method, path, body ? "application/json" : "", text, timeout_ms);
    }

    mcp::ApiAnswer call_raw(std::string_view method, const std::string &path, std::string_view content_type,
                            std::string_view body, std::uint32_t timeout_ms) override {
        try {
            auto d = req_.dispatch(method, path, body, content_type, timeout_ms);
            return {d.status, std::move(d.headers), std::move(d.body)};
        } catch (const Error &e) {
            // The server could not be reached: a tool error like any other failed API call.
            return {e.status(), {}, json{{"code", e.code()}, {"message", e.what()}}.dump()};
        }
    }

private:
    const Request &req_;
};

struct Session {
    std::string key_id;
    std::string project_id;
    std::string protocol_version;
    std::chrono::steady_clock::time_point last_used;
};

class McpPlugin : public hangar::Plugin {
public:
    void start() override {
        if (role() != HANGAR_ROLE_SERVER) return;
        idle_ = std::chrono::seconds(config_int("session_idle_seconds", 3600));
        max_sessions_ = static_cast<std::size_t>(config_int("max_sessions", 10000));
        route("POST", "/mcp", [this](Request &q, Response &r) { post(q, r); });
        // No server-initiated messages (no sampling, no list changes) to stream: the spec's answer
        // for a server without that stream is 405.
        route("GET", "/mcp", [](Request &, Response &r) {
            r.header("Allow", "POST, DELETE");
            r.error(Error(405, "method_not_allowed", "this MCP server sends no server-initiated messages"));
        });
        route("DELETE", "/mcp", [this](Request &q, Response &r) { end_session(q, r); });
        every(60000, [this] { expire(); });
    }

private:
    static void rpc_error(Response &res, int status, int code, const std::string &message) {
        res.json({{"jsonrpc", "2.0"}, {"id", nullptr}, {"error", {{"code", code}, {"message", message}}}}, status);
    }

    // A web page may reach a server on localhost through DNS rebinding: a request whose Origin is
    // not this server's is refused, as the transport asks.
    static bool origin_ok(const Request &req) {
        auto origin = req.header("Origin");
        return !origin || origin->empty() || *origin == req.base_url();
    }

    static std::pair<std::string, std::string> identity(const Request &req) {
        json c = req.caller();
        return {c.value("key_id", ""), req.project()};
    }

    // The session named by Mcp-Session-Id, if it is this caller's; answers the error otherwise.
    bool find_session(const Request &req, Response &res) {
        auto id = req.header("Mcp-Session-Id");
        if (!id || id->empty()) {
            rpc_error(res, 400, mcp::kInvalidRequest, "Mcp-Session-Id is required (send initialize first)");
            return false;
        }
        auto who = identity(req);
        std::lock_guard lock(m_);
        auto it = sessions_.find(*id);
        // Another key's session is not found: ids are not passed between callers.
        if (it == sessions_.end() || it->second.key_id != who.first || it->second.project_id != who.second) {
            rpc_error(res, 404, mcp::kInvalidRequest, "no such MCP session (expired or ended); initialize again");
            return false;
        }
        // After initialize the client names the revision it negotiated; another one is invalid.
        if (auto v = req.header("MCP-Protocol-Version"); v && *v != it->second.protocol_version) {
            rpc_error(res, 400, mcp::kInvalidRequest,
                      "MCP-Protocol-Version " + *v + " is not the session's " + it->second.protocol_version);
            return false;
        }
        it->second.last_used = std::chrono::steady_clock::now();
        return true;
    }

    void post(Request &req, Response &res) {
        if (!origin_ok(req)) throw Error::forbidden("the Origin of this request is not this server's");
        if (auto accept = req.header("Accept"); accept && !accept->empty() &&
                                                accept->find("application/json") == std::string::npos &&
                                                accept->find("*/*") == std::string::npos)
            return rpc_error(res, 406, mcp::kInvalidRequest, "this server answers application/json; accept it");
        if (auto v = req.header("MCP-Protocol-Version"); v && !mcp::supported_version(*v))
            return rpc_error(res, 400, mcp::kInvalidRequest, "unsupported MCP-Protocol-Version " + *v);
        json message = json::parse(req.body(), nullptr, false);
        if (message.is_discarded()) return rpc_error(res, 400, mcp::kParseError, "the body is not JSON");
        if (message.is_array())
            return rpc_error(res, 400, mcp::kInvalidRequest, "JSON-RPC batches are not part of MCP 2025-06-18");
        bool initialize = message.is_object() && message.value("method", json()) == "initialize";
        if (!initialize && !find_session(req, res)) return;

        CallerApi api(req);
        mcp::Handled handled = mcp::handle_message(api, message);
        if (handled.open) {
            auto who = identity(req);
            std::string id = hangar::new_id(32);
            {
                std::lock_guard lock(m_);
                if (sessions_.size() >= max_sessions_)
                    throw Error(503, "unavailable", "too many MCP sessions; end some (DELETE /mcp) or wait");
                sessions_[id] = Session{who.first, who.second, *handled.open, std::chrono::steady_clock::now()};
            }
            res.header("Mcp-Session-Id", id);
        }
        if (!handled.reply) return res.status(202); // a notification or a response: accepted
        res.json(*handled.reply);
    }

    void end_session(Request &req, Response &res) {
        if (!find_session(req, res)) return;
        std::lock_guard lock(m_);
        sessions_.erase(*req.header("Mcp-Session-Id"));
        res.no_content();
    }

    void expire() {
        auto now = std::chrono::steady_clock::now();
        std::lock_guard lock(m_);
        std::erase_if(sessions_, [&](const auto &kv) { return now - kv.second.last_used > idle_; });
    }

    std::mutex m_;
    std::map<std::string, Session> sessions_;
    std::chrono::seconds idle_{3600};
    std::size_t max_sessions_ = 10000;
};

} // namespace

HANGAR_PLUGIN(McpPlugin, "mcp", "1.0.0", nullptr, nullptr, 0)
