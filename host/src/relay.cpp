// Relays a request to an agent's unix socket or a loopback TCP port. Upgrades and SSE requests
// are spliced byte for byte in the event loop (frames are never parsed, so CDP pays only the
// copy); plain requests are forwarded on the request thread, the body and the answer streamed
// through a bounded buffer.
#include "http.hpp"
#include "metrics.hpp"
#include "nodes.hpp"
#include "relay_proof.hpp"
#include "store.hpp"

#include "util.hpp"
#include <hangar/text.hpp>

#include <Poco/Buffer.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/HTTPServerRequestImpl.h>
#include <Poco/Net/HTTPServerSession.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/Net/WebSocket.h>
#include <Poco/URI.h>
#include <hangar/fd_passing.hpp>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <sstream>
#include <system_error>
#include <thread>

namespace hangar::host {

using json = nlohmann::json;

namespace {

const std::set<std::string> kHopByHop = {"connection",        "keep-alive", "proxy-connection",
                                         "transfer-encoding", "te",         "trailer",
                                         "upgrade",           "host",       "content-length"};
// The caller's API key stays with the server: an instance (and whatever runs in it) never sees it.
// Another node checks it itself. Nor does an instance see how nodes prove their relays.
bool never_forward(const Upstream &up, const std::string &name) {
    return !up.hangar_node &&
           (iequals(name, "Authorization") || iequals(name, kRelayedByHeader) || iequals(name, kRelayProofHeader));
}

Poco::Net::StreamSocket connect_upstream(const Upstream &up) {
    Poco::Net::StreamSocket sock;
    if (up.unix_socket) {
        sock.connect(Poco::Net::SocketAddress(Poco::Net::SocketAddress::UNIX_LOCAL, up.address), Poco::Timespan(5, 0));
    } else {
        sock.connect(Poco::Net::SocketAddress(up.address, up.port), Poco::Timespan(5, 0));
        sock.setNoDelay(true);
    }
    return sock;
}

std::string host_header(const Upstream &up) {
    return up.unix_socket ? std::string("localhost") : up.address + ":" + std::to_string(up.port);
}

std::string target_uri(const hangar_request &req, const std::string &path) {
    if (path.find('?') != std::string::npos || req.query_string.empty()) return path;
    return path + "?" + req.query_string;
}

// Upgrades relayed server → agent → loopback port or unix socket in the instance ask the agent to
// hand back the connected upstream socket instead of splicing it, so CDP frames cross one relay,
// not two; an agent route may instead take the client's own connection (BiDi: none at all). The
// wire: hangar/fd_passing.hpp.
namespace fdp = hangar::fd_passing;

// Counts a long-lived connection as its session's activity and in the metrics, until the
// returned function runs, and keeps it
// counted in its project's long requests when the request holds a place there.
std::function<void()> hold_connection(HostCore &core, const hangar_request &req, const std::string &activity_key) {
    if (!activity_key.empty()) core.activity.begin(activity_key);
    std::string kind = core.role == HANGAR_ROLE_SERVER ? connection_kind(req) : std::string();
    if (!kind.empty()) core.metrics.connection_opened(kind);
    return [&core, activity_key, kind, slot = req.long_slot] {
        if (!activity_key.empty()) core.activity.end(activity_key);
        if (!kind.empty()) core.metrics.connection_closed(kind);
    };
}

// What a relay copies at a time, either way: what one request thread holds of a body.
constexpr std::size_t kRelayChunk = std::size_t{128} << 10;

bool wants_stream(const hangar_request &req) {
    auto &h = req.http;
    if (h.has("Upgrade")) return true;
    return h.has("Accept") && h.get("Accept").find("text/event-stream") != std::string::npos;
}

// The request's body goes on as it is read, never more than its limit: a relay holds a bounded
// buffer whatever the size. Returns false with the answer set when the body is too large.
bool send_body(hangar_request &req, hangar_response &res, Poco::Net::HTTPClientSession &session,
               Poco::Net::HTTPRequest &out) {
    const bool has_body = req.http.hasContentLength() || req.http.getChunkedTransferEncoding();
    if (req.body || !has_body) {
        const std::string none;
        const std::string &body = req.body ? *req.body : none;
        if (!body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
            out.setContentLength64(static_cast<Poco::Int64>(body.size()));
        session.sendRequest(out) << body;
        return true;
    }
    const std::size_t limit = req.body_limit ? req.body_limit : req.core->max_body_bytes;
    if (req.http.hasContentLength())
        out.setContentLength64(req.http.getContentLength64());
    else
        out.setChunkedTransferEncoding(true);
    std::ostream &to = session.sendRequest(out);
    std::istream &from = req.http.stream();
    std::vector<char> buf(kRelayChunk);
    std::size_t total = 0;
    while (from.read(buf.data(), static_cast<std::streamsize>(buf.size())) || from.gcount() > 0) {
        total += static_cast<std::size_t>(from.gcount());
        if (total > limit) {
            req.body_failed = req.body_too_large = true;
            set_error(res, 413, "payload_too_large",
                      "the request body is larger than the " + std::to_string(limit) + "-byte limit");
            return false;
        }
        to.write(buf.data(), from.gcount());
    }
    req.body_failed = true; // read away: a plugin that asks for it now gets none
    return true;
}

// Ends the client's connection without the rest of an answer whose head went out, so the client
// sees it cut short instead of a shorter answer that looks whole.
void abort_response(hangar_request &req) {
    try {
        static_cast<Poco::Net::HTTPServerRequestImpl &>(req.http).session().socket().shutdown();
    } catch (const Poco::Exception &) {
    }
}

// Writes the upstream's answer to the client as it arrives, a bounded chunk at a time: what an
// instance sends (a 1 GiB file read) never sits in this process's memory whole.
void stream_answer(hangar_request &req, hangar_response &res, Poco::Net::HTTPClientSession &session,
                   const Poco::Net::HTTPResponse &answer, std::istream &in) {
    auto &http = res.http;
    const int status = answer.getStatus();
    res.status = status;
    for (const auto &[name, value] : res.headers)
        http.add(name, value);
    for (const auto &[name, value] : answer) {
        auto l = lower(name);
        if (kHopByHop.count(l) || l == "x-request-id") continue;
        http.add(name, value);
    }
    http.setStatusAndReason(static_cast<Poco::Net::HTTPResponse::HTTPStatus>(status), answer.getReason());
    const bool bodiless = req.method == "HEAD" || status == 204 || status == 304 || (status >= 100 && status < 200);
    std::optional<std::uint64_t> length;
    if (answer.hasContentLength()) {
        length = static_cast<std::uint64_t>(answer.getContentLength64());
        http.setContentLength64(answer.getContentLength64());
    } else if (!bodiless && req.http.getVersion() == Poco::Net::HTTPMessage::HTTP_1_1) {
        http.setChunkedTransferEncoding(true);
    } else if (!bodiless) {
        http.setKeepAlive(false); // an HTTP/1.0 client learns the end when the connection closes
    }
    if (length && !bodiless) {
        // Poco's HTTP streams move 4 KiB per system call; a body of known length goes from socket
        // to socket a chunk at a time instead (the head written as Poco would).
        std::ostringstream head;
        http.write(head);
        auto &client = static_cast<Poco::Net::HTTPServerRequestImpl &>(req.http).session().socket();
        res.sent = true;
        const std::string h = head.str();
        client.sendBytes(h.data(), static_cast<int>(h.size()));
        Poco::Buffer<char> early(0); // what the session read along with the answer's head
        session.drainBuffer(early);
        std::uint64_t left = *length;
        const auto first = static_cast<int>(std::min<std::uint64_t>(early.size(), left));
        if (first > 0 && client.sendBytes(early.begin(), first) != first) return abort_response(req);
        left -= static_cast<std::uint64_t>(first);
        std::vector<char> buf(kRelayChunk);
        auto &upstream = session.socket();
        upstream.setReceiveTimeout(session.getTimeout());
        while (left > 0) {
            const int n =
                upstream.receiveBytes(buf.data(), static_cast<int>(std::min<std::uint64_t>(buf.size(), left)));
            if (n <= 0 || client.sendBytes(buf.data(), n) != n) return abort_response(req); // cut short, or gone
            left -= static_cast<std::uint64_t>(n);
        }
        return;
    }
    std::ostream &to = http.send();
    res.sent = true;
    if (bodiless) return;
    std::vector<char> buf(kRelayChunk);
    std::uint64_t copied = 0;
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
        to.write(buf.data(), in.gcount());
        if (!to) return abort_response(req); // the client went away
        copied += static_cast<std::uint64_t>(in.gcount());
    }
    if (length && copied != *length) abort_response(req); // the upstream sent less than it said
}

} // namespace

int relay(hangar_request &req, hangar_response &res, const Upstream &up, const std::string &path,
          const std::string &activity_key) {
    auto &core = *req.core;
    const bool stream = wants_stream(req);
    if (stream && !up.hangar_node && !(req.route_flags & HANGAR_ROUTE_STREAMING)) {
        set_error(res, 500, "internal", "route is not registered as streaming");
        return 0;
    }
    // How long an instance takes to answer is the instance's to decide, and it may be hostile: an
    // answer relayed from one holds a place among its project's long requests. (Another node
    // counts what it relays to its own instances; a WebSocket leaves the request thread at once.)
    if (!up.hangar_node && !req.http.has("Upgrade") && !take_long_slot(req, res)) return 0;
    Poco::Net::StreamSocket upstream;
    try {
        upstream = connect_upstream(up);
    } catch (const std::exception &e) {
        core.log.warning("relay to %s failed: %s", up.address, std::string(e.what()));
        return -1;
    }

    if (stream) {
        // Forward the request head as received, with Host rewritten (Chromium only accepts
        // loopback Host headers) and the path replaced.
        const bool upgrade = req.http.has("Upgrade");
        const bool pass_back = core.role == HANGAR_ROLE_INSTANCE && upgrade && req.http.has(fdp::kPassFdHeader);
        const bool ask_for_fd = core.role == HANGAR_ROLE_SERVER && up.unix_socket && upgrade;
        std::string buffered;
        UniqueFd client = take_over(req, res, buffered);
        // The client's connection can leave this process only when nobody here reads its bytes
        // (relay observers) and nothing of it was read beyond the request head.
        const bool offer_client =
            ask_for_fd && buffered.empty() && !core.relay_observers.watches(target_uri(req, path));
        std::ostringstream head;
        head << req.method << ' ' << target_uri(req, path) << " HTTP/1.1\r\n";
        head << "Host: " << host_header(up) << "\r\n";
        for (const auto &[name, value] : req.http) {
            if (iequals(name, "Host") || iequals(name, fdp::kPassFdHeader) || iequals(name, fdp::kPassClientHeader) ||
                never_forward(up, name))
                continue;
            // A spliced connection carries this one exchange: the upstream must close after it,
            // or the client's next keep-alive request would be piped to the upstream too.
            if (!upgrade && iequals(name, "Connection")) continue;
            head << name << ": " << value << "\r\n";
        }
        if (!upgrade) head << "Connection: close\r\n";
        if (ask_for_fd) head << fdp::kPassFdHeader << ": 1\r\n";
        if (offer_client) head << fdp::kPassClientHeader << ": 1\r\n";
        head << "\r\n";

        if (pass_back) {
            // Agent side: open the upgrade with the upstream, then give the socket to the server.
            std::string h = head.str() + buffered;
            upstream.sendBytes(h.data(), static_cast<int>(h.size()));
            int flags = ::fcntl(client.get(), F_GETFL);
            ::fcntl(client.get(), F_SETFL, flags & ~O_NONBLOCK);
            fdp::send(client.get(), std::string_view(&fdp::kUpstreamMarker, 1), upstream.impl()->sockfd());
            return 0; // both of our copies close here; the server holds the connection now
        }

        UniqueFd ufd = loop_fd(upstream.impl()->sockfd());
        if (!ufd) return -1;
        std::string to_client;
        std::string to_upstream = head.str() + buffered;
        if (ask_for_fd) {
            std::string h = head.str();
            upstream.sendBytes(h.data(), static_cast<int>(h.size()));
            std::string first;
            upstream.setBlocking(true);
            UniqueFd received(fdp::receive(upstream.impl()->sockfd(), first));
            if (received && first == std::string_view(&fdp::kUpstreamMarker, 1)) {
                ufd = loop_fd(received.get());
            } else if (!received && offer_client && first == std::string_view(&fdp::kClientWantedMarker, 1)) {
                // The agent serves the client's connection itself. The one to the agent stays open for
                // as long as that connection lasts: the session's activity, as a splice would be.
                if (!fdp::send(upstream.impl()->sockfd(), std::string_view(&fdp::kClientMarker, 1), client.get()))
                    return 0;
                client.reset();
                core.loop.watch(std::move(ufd), hold_connection(core, req, activity_key));
                return 0;
            } else {
                to_client = std::move(first); // the agent answered itself; keep splicing with it
            }
            to_upstream = buffered;
        }
        auto on_close = hold_connection(core, req, activity_key);
        // Observers (relay_watch.hpp) see the bytes as the loop copies them; what was read or
        // answered before the splice (never the request head) is shown to them first.
        auto watcher = core.relay_observers.open(activity_key, target_uri(req, path), req.path, upgrade);
        if (watcher) {
            watcher->bytes(true, buffered.data(), buffered.size());
            watcher->bytes(false, to_client.data(), to_client.size());
        }
        core.loop.splice(std::move(client), std::move(ufd), std::move(to_upstream), std::move(to_client),
                         std::move(on_close), std::move(watcher));
        return 0;
    }

    if (!activity_key.empty()) core.activity.begin(activity_key);
    struct End {
        HostCore &core;
        const std::string &key;
        ~End() {
            if (!key.empty()) core.activity.end(key);
        }
    } end{core, activity_key};

    try {
        Poco::Net::HTTPClientSession session(upstream);
        session.setTimeout(
            Poco::Timespan(static_cast<long>(core.config.get_int("server.relay_timeout_seconds", 330)), 0));
        Poco::Net::HTTPRequest out(req.method, target_uri(req, path), Poco::Net::HTTPMessage::HTTP_1_1);
        for (const auto &[name, value] : req.http)
            if (!kHopByHop.count(lower(name)) && !never_forward(up, name)) out.add(name, value);
        out.setHost(host_header(up));
        out.setKeepAlive(false);
        if (!send_body(req, res, session, out)) return 0;
        Poco::Net::HTTPResponse answer;
        std::istream &in = session.receiveResponse(answer);
        if (answer.getStatus() == Poco::Net::HTTPResponse::HTTP_MISDIRECTED_REQUEST) {
            // 421 is how a plugin asks for a relay to another node: never an upstream's to say.
            set_error(res, 502, "upstream_unavailable", "the upstream answered 421, which it may not");
            return 0;
        }
        stream_answer(req, res, session, answer, in);
    } catch (const std::exception &e) {
        core.log.warning("relay to %s failed: %s", up.address, std::string(e.what()));
        if (res.sent) abort_response(req); // the head went out: the client must see the answer cut
        return res.sent ? 0 : -1;
    }
    return 0;
}

bool genuine_node_relay(const hangar_request &req) {
    auto &core = *req.core;
    if (!core.tokens || !req.http.has(kRelayProofHeader)) return false;
    return relay_proof_valid(relay_proof_key(core.tokens->secret()), req.http.get(kRelayProofHeader),
                             req.http.get(kRelayedByHeader), req.method, req.http.getURI(),
                             req.http.get("Authorization", ""), now_ms());
}

void relay_to_owner_node(hangar_request &req, hangar_response &res) {
    auto &core = *req.core;
    auto answer = json::parse(res.body, nullptr, false);
    const std::string message = answer.is_object() ? answer.value("message", "") : std::string();
    const std::string node = res.owner_node;
    auto unreachable = [&](const std::string &why) {
        set_error(res, 502, "upstream_unavailable", message + ": " + why);
    };
    if (req.http.has(kRelayedByHeader))
        return unreachable("node " + req.http.get(kRelayedByHeader) + " relayed this request here, and this node (" +
                           core.node_name + ") does not run it either");
    // Where the owner is comes from the store, never from an answer: the caller's credentials go
    // along, so they may only go to a node the store lists as serving.
    std::optional<std::string> url;
    try {
        if (core.store && core.tokens && node != core.node_name) url = serving_node_url(*core.store, node, now_ms());
    } catch (const StoreUnavailable &) {
        return set_error(res, 503, "store_unavailable", kStoreUnavailableMessage);
    }
    if (!url) return unreachable("node " + node + " is not a serving node of this store");
    Poco::URI target;
    try {
        target = Poco::URI(*url);
    } catch (const Poco::Exception &) {
        return unreachable("node " + node + "'s public URL is not a URL");
    }
    // Nodes speak plain HTTP to each other inside the cluster network; an https public URL sits
    // behind a terminating proxy whose certificate this node has no reason to hold.
    if (target.getScheme() != "http" || target.getHost().empty())
        return unreachable("node " + node + "'s public URL is not plain http://, which node-to-node relays need");

    res.status = 0;
    res.body.clear();
    res.content_type.clear();
    res.owner_node.clear();
    std::erase_if(res.headers, [](const auto &h) { return !iequals(h.first, "X-Request-Id"); });
    req.http.set(kRelayedByHeader, core.node_name);
    req.http.set(kRelayProofHeader,
                 relay_proof(relay_proof_key(core.tokens->secret()), core.node_name, req.method,
                             target_uri(req, req.raw_path), req.http.get("Authorization", ""), now_ms()));
    res.relayed_to_node = true;
    Upstream up{false, target.getHost(), target.getPort(), true};
    // The request keeps its own path: both nodes serve the same routes.
    if (relay(req, res, up, req.raw_path, {}) != 0 && !res.taken_over && !res.sent) {
        res.relayed_to_node = false; // nobody else answered it
        unreachable("node " + node + " at " + *url + " did not answer");
    }
}

void ws_reject(hangar_request &req, hangar_response &res, std::uint16_t code, const std::string &reason) {
    try {
        Poco::Net::WebSocket ws(req.http, res.http);
        res.taken_over = true;
        ws.shutdown(code, reason);
        ws.close();
    } catch (const Poco::Net::WebSocketException &e) {
        set_error(res, 400, "bad_request", std::string("a WebSocket upgrade is required: ") + e.what());
    }
}

} // namespace hangar::host

// ---- WebSocket ↔ byte stream ---------------------------------------------------------------------

namespace hangar::host {

WsBridges::~WsBridges() {
    stop();
}

void WsBridges::start(const Poco::Net::WebSocket &ws, const Poco::Net::StreamSocket &upstream,
                      std::function<void()> on_end) {
    std::lock_guard lock(mutex_);
    // Finished bridges are joined here, so the list only holds live ones and a few just ended.
    for (auto it = bridges_.begin(); it != bridges_.end();) {
        if ((*it)->done.load()) {
            (*it)->thread.join();
            it = bridges_.erase(it);
        } else {
            ++it;
        }
    }
    if (stopping_) {
        Poco::Net::WebSocket(ws).close();
        Poco::Net::StreamSocket(upstream).close();
        if (on_end) on_end();
        return;
    }
    auto b = std::make_unique<Bridge>();
    b->ws.emplace(ws); // Poco sockets are shared handles: copies, not moves
    b->upstream = upstream;
    b->on_end = std::move(on_end);
    Bridge &ref = *b;
    try {
        ref.thread = std::thread([&ref] { run(ref); });
    } catch (const std::system_error &) {
        // No thread to be had (the instance at its task limit): this connection ends now, the
        // way a stopping server ends it, instead of a bridge that can never be joined.
        Poco::Net::WebSocket(ws).close();
        Poco::Net::StreamSocket(upstream).close();
        if (ref.on_end) ref.on_end();
        return;
    }
    bridges_.push_back(std::move(b));
}

std::size_t WsBridges::active() {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(
        std::count_if(bridges_.begin(), bridges_.end(), [](const auto &b) { return !b->done.load(); }));
}

void WsBridges::stop() {
    std::list<std::unique_ptr<Bridge>> all;
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        all.swap(bridges_);
    }
    for (auto &b : all) {
        ::shutdown(b->ws->impl()->sockfd(), SHUT_RDWR);
        ::shutdown(b->upstream.impl()->sockfd(), SHUT_RDWR);
    }
    for (auto &b : all)
        if (b->thread.joinable()) b->thread.join();
}

void WsBridges::run(Bridge &b) {
    constexpr int kMaxMessage = 4 << 20; // RFB client messages are small; clipboard text is the largest
    std::vector<char> buf(static_cast<std::size_t>(kMaxMessage));
    try {
        b.ws->setBlocking(true);
        b.upstream.setBlocking(true);
        b.ws->setMaxPayloadSize(kMaxMessage);
        b.ws->setReceiveTimeout(Poco::Timespan(30, 0)); // a frame that starts must finish
        try {
            b.ws->setNoDelay(true); // a TCP viewer; the agent's own connections are unix sockets
        } catch (const Poco::Exception &) {
        }
        pollfd fds[2] = {{b.ws->impl()->sockfd(), POLLIN, 0}, {b.upstream.impl()->sockfd(), POLLIN, 0}};
        bool open = true;
        while (open) {
            if (::poll(fds, 2, -1) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            if (fds[0].revents != 0) {
                int flags = 0;
                int n = b.ws->receiveFrame(buf.data(), kMaxMessage, flags);
                int op = flags & Poco::Net::WebSocket::FRAME_OP_BITMASK;
                if ((n == 0 && flags == 0) || op == Poco::Net::WebSocket::FRAME_OP_CLOSE) {
                    open = false;
                } else if (op == Poco::Net::WebSocket::FRAME_OP_PING) {
                    b.ws->sendFrame(buf.data(), n,
                                    static_cast<int>(Poco::Net::WebSocket::FRAME_FLAG_FIN) |
                                        static_cast<int>(Poco::Net::WebSocket::FRAME_OP_PONG));
                } else if (op != Poco::Net::WebSocket::FRAME_OP_PONG && n > 0) {
                    int sent = 0;
                    while (sent < n) {
                        int w = b.upstream.sendBytes(buf.data() + sent, n - sent);
                        if (w <= 0) throw std::runtime_error("upstream closed");
                        sent += w;
                    }
                }
            }
            if (open && fds[1].revents != 0) {
                int n = b.upstream.receiveBytes(buf.data(), 256 * 1024);
                if (n <= 0) {
                    open = false;
                } else {
                    b.ws->sendFrame(buf.data(), n, Poco::Net::WebSocket::FRAME_BINARY);
                }
            }
        }
        b.ws->shutdown(Poco::Net::WebSocket::WS_NORMAL_CLOSE, "");
    } catch (const std::exception &) {
        // either side went away; both are closed below
    }
    try {
        b.ws->close();
        b.upstream.close();
    } catch (const std::exception &) {
    }
    if (b.on_end) b.on_end();
    b.done = true;
}

int ws_bridge(hangar_request &req, hangar_response &res, const std::string &socket_path,
              const std::string &activity_key) {
    auto &core = *req.core;
    if (!(req.route_flags & HANGAR_ROUTE_STREAMING)) {
        set_error(res, 500, "internal", "route is not registered as streaming");
        return 0;
    }
    if (core.bridges.active() >= WsBridges::kMaxBridges) {
        set_error(res, 503, "unavailable", "too many open streams on this instance; close one and try again");
        return 0;
    }
    Poco::Net::StreamSocket upstream;
    try {
        upstream = connect_upstream({true, socket_path, 0});
    } catch (const std::exception &e) {
        core.log.warning("bridge to %s failed: %s", socket_path, std::string(e.what()));
        return -1;
    }
    // Browsers refuse a handshake that does not echo a subprotocol they offered.
    if (req.http.has("Sec-WebSocket-Protocol")) {
        std::string offered = req.http.get("Sec-WebSocket-Protocol");
        if (offered.find("binary") != std::string::npos) res.http.set("Sec-WebSocket-Protocol", "binary");
    }
    try {
        Poco::Net::WebSocket ws(req.http, res.http);
        res.taken_over = true;
        if (!activity_key.empty()) core.activity.begin(activity_key);
        std::string kind = core.role == HANGAR_ROLE_SERVER ? connection_kind(req) : std::string();
        if (!kind.empty()) core.metrics.connection_opened(kind);
        std::function<void()> on_end = [&core, activity_key, kind] {
            if (!activity_key.empty()) core.activity.end(activity_key);
            if (!kind.empty()) core.metrics.connection_closed(kind);
        };
        core.bridges.start(ws, upstream, std::move(on_end));
    } catch (const Poco::Net::WebSocketException &e) {
        set_error(res, 400, "bad_request", std::string("a WebSocket upgrade is required: ") + e.what());
    }
    return 0;
}

} // namespace hangar::host
