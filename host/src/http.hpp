// The HTTP front: one Poco request handler that is the middleware chain for every route —
// request id, route match, auth, body limit, activity, the plugin's handler, error mapping,
// access log — plus the server set-up on TCP (serve) or a unix socket (agent).
#pragma once

#include "core.hpp"

#include <Poco/Net/HTTPRequestHandlerFactory.h>
#include <Poco/Net/HTTPServer.h>

#include <memory>

namespace hangar::host {

class HandlerFactory : public Poco::Net::HTTPRequestHandlerFactory {
public:
    explicit HandlerFactory(HostCore &core) : core_(core) {}
    Poco::Net::HTTPRequestHandler *createRequestHandler(const Poco::Net::HTTPServerRequest &) override;

private:
    HostCore &core_;
};

// Writes the wire error body {code, message, details?} on `res`.
void set_error(hangar_response &res, int status, const std::string &code, const std::string &message,
               const std::string &details_json = {});

// The request's body, read once up to its limit (later reads get the same string); nullptr when it
// could not be read or was over the limit (body_too_large says which).
const std::string *request_body(hangar_request &r);

// Relays (see hangar_host_v1::relay_unix / relay_tcp). Returns 0 or -1 (upstream unreachable).
struct Upstream {
    bool unix_socket;
    std::string address; // socket path, or host
    std::uint16_t port;
    // Another Hangar node (relay_to_owner_node): it authenticates the caller itself, so the
    // credentials go along, and whatever the route is, it is spliced whole when it streams.
    bool hangar_node = false;
};
int relay(hangar_request &req, hangar_response &res, const Upstream &up, const std::string &path,
          const std::string &activity_key);
// A plugin answered 421 wrong_node (plugin.h, res_error): the request goes, as received, to the
// public URL the store's node table lists for the node named in the answer (never a URL from the
// answer itself), which answers the client; 502 when that node is not live. Marked with
// X-Hangar-Relayed-By and its proof, so that a node which does not own the browser either answers
// 502 instead of relaying a second time.
void relay_to_owner_node(hangar_request &req, hangar_response &res);

// Node-to-node relays: who relayed, and proof that it was a node of this store (relay_proof.hpp).
inline constexpr const char *kRelayedByHeader = "X-Hangar-Relayed-By";
inline constexpr const char *kRelayProofHeader = "X-Hangar-Relay-Proof";
// Whether the request's X-Hangar-Relayed-By comes with a valid, fresh proof for this request.
bool genuine_node_relay(const hangar_request &req);

// Takes the request's place among its project's long requests (LongRequests, core.hpp); when the
// project holds them all, answers 429 rate_limited with Retry-After and returns false. No-op
// without a caller, on the agent, or when the request holds a place already.
bool take_long_slot(hangar_request &req, hangar_response &res);
// Completes a WebSocket upgrade and closes it with a code and reason.
void ws_reject(hangar_request &req, hangar_response &res, std::uint16_t code, const std::string &reason);
// Completes a WebSocket upgrade and bridges its messages to a byte stream on a unix socket, on
// a thread of core.bridges (see hangar_host_v1::ws_bridge_unix). Returns -1 when unreachable.
int ws_bridge(hangar_request &req, hangar_response &res, const std::string &socket_path,
              const std::string &activity_key);
// Detaches the client socket from Poco for the event loop; returns it and any bytes Poco had
// already read past the request head.
UniqueFd take_over(hangar_request &req, hangar_response &res, std::string &buffered);

std::unique_ptr<Poco::Net::HTTPServer> make_tcp_server(HostCore &core, const std::string &listen, std::uint16_t &port);
// The agent's HTTP server on the listening socket the server handed it (runtime.cpp).
std::unique_ptr<Poco::Net::HTTPServer> make_unix_server(HostCore &core, int listening_fd);

} // namespace hangar::host
