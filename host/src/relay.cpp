// Relays a request to an agent's unix socket or a loopback TCP port. Upgrades and SSE requests
// are spliced byte for byte in the event loop (frames are never parsed, so CDP pays only the
// copy); plain requests are forwarded on the request thread and the answer copied back.
#include "http.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/Net/WebSocket.h>
#include <Poco/Net/NetException.h>
#include <Poco/StreamCopier.h>

#include <fcntl.h>
#include <unistd.h>

#include <sstream>

namespace hangar::host {

namespace {

const std::set<std::string> kHopByHop = {"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                                         "te", "trailer", "upgrade", "host", "content-length"};

std::string lower(std::string s) {
    for (auto &c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
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

bool wants_stream(const hangar_request &req) {
    auto &h = req.http;
    if (h.has("Upgrade")) return true;
    return h.has("Accept") && h.get("Accept").find("text/event-stream") != std::string::npos;
}

} // namespace

int relay(hangar_request &req, hangar_response &res, const Upstream &up, const std::string &path,
          const std::string &activity_key) {
    auto &core = *req.core;
    const bool stream = wants_stream(req);
    if (stream && !(req.route_flags & HANGAR_ROUTE_STREAMING)) {
        set_error(res, 500, "internal", "route is not registered as streaming");
        return 0;
    }
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
        std::ostringstream head;
        head << req.method << ' ' << target_uri(req, path) << " HTTP/1.1\r\n";
        head << "Host: " << host_header(up) << "\r\n";
        for (const auto &[name, value] : req.http)
            if (!iequals(name, "Host")) head << name << ": " << value << "\r\n";
        head << "\r\n";
        std::string buffered;
        UniqueFd client = take_over(req, res, buffered);
        int ufd = ::dup(upstream.impl()->sockfd());
        if (ufd < 0) return -1;
        ::fcntl(ufd, F_SETFD, FD_CLOEXEC);
        ::fcntl(ufd, F_SETFL, ::fcntl(ufd, F_GETFL) | O_NONBLOCK);
        std::function<void()> on_close;
        if (!activity_key.empty()) {
            core.activity.begin(activity_key);
            on_close = [&core, activity_key] { core.activity.end(activity_key); };
        }
        core.loop.splice(std::move(client), UniqueFd(ufd), head.str() + buffered, {}, std::move(on_close));
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
        session.setTimeout(Poco::Timespan(static_cast<long>(core.config.get_int("server.relay_timeout_seconds", 330)), 0));
        Poco::Net::HTTPRequest out(req.method, target_uri(req, path), Poco::Net::HTTPMessage::HTTP_1_1);
        for (const auto &[name, value] : req.http)
            if (!kHopByHop.count(lower(name))) out.add(name, value);
        out.setHost(host_header(up));
        out.setKeepAlive(false);
        std::string body;
        if (req.body) {
            body = *req.body;
        } else if (req.http.hasContentLength() || req.http.getChunkedTransferEncoding()) {
            Poco::StreamCopier::copyToString(req.http.stream(), body);
        }
        if (!body.empty() || req.method == "POST" || req.method == "PUT" || req.method == "PATCH")
            out.setContentLength64(static_cast<Poco::Int64>(body.size()));
        session.sendRequest(out) << body;
        Poco::Net::HTTPResponse answer;
        std::istream &in = session.receiveResponse(answer);
        res.status = answer.getStatus();
        for (const auto &[name, value] : answer) {
            auto l = lower(name);
            if (kHopByHop.count(l) || l == "content-type" || l == "x-request-id") continue;
            res.headers.emplace_back(name, value);
        }
        res.content_type = answer.getContentType();
        std::string payload;
        Poco::StreamCopier::copyToString(in, payload);
        res.body = std::move(payload);
    } catch (const std::exception &e) {
        core.log.warning("relay to %s failed: %s", up.address, std::string(e.what()));
        return -1;
    }
    return 0;
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
