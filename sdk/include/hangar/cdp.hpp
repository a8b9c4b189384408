// A small synchronous Chrome DevTools Protocol client for plugins that talk to the Chromium of
// their own instance (loopback only): plain HTTP for /json/*, and one WebSocket connection with
// commands, replies and events, flat sessions included. Header-only, no Poco (plugins must not
// link it), blocking with deadlines: each caller owns its connection.
#pragma once

#include <hangar/plugin.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace hangar::cdp {

using Clock = std::chrono::steady_clock;

// Thrown for a broken connection, a refused command or a deadline that passed.
class Failure : public std::runtime_error {
public:
    explicit Failure(const std::string &what, bool timed_out = false)
        : std::runtime_error("CDP: " + what), timed_out_(timed_out) {}
    bool timed_out() const { return timed_out_; }

private:
    bool timed_out_;
};

// Where the instance's Chromium answers, from the browsers plugin's `browsers.chromium` service
// answer; nullopt while none runs (between restarts).
struct Endpoint {
    int port = 0;
    std::string ws_path; // /devtools/browser/...
};
inline std::optional<Endpoint> endpoint_of(const json &chromium) {
    if (!chromium.is_object() || !chromium.value("port", json()).is_number() ||
        !chromium.value("ws_path", json()).is_string())
        return std::nullopt;
    return Endpoint{chromium["port"].get<int>(), chromium["ws_path"].get<std::string>()};
}

inline std::string base64_decode(std::string_view in) {
    static constexpr std::string_view chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve(in.size() * 3 / 4);
    unsigned val = 0;
    int bits = -8;
    for (char c : in) {
        auto pos = chars.find(c);
        if (pos == std::string_view::npos) continue; // '=' and anything else
        val = (val << 6) | static_cast<unsigned>(pos);
        bits += 6;
        if (bits >= 0) {
            out.push_back(static_cast<char>((val >> bits) & 0xFF));
            bits -= 8;
        }
    }
    return out;
}

inline std::string base64_encode(std::string_view in) {
    static constexpr std::string_view chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                     static_cast<unsigned char>(in[i + 2]);
        out += chars[(v >> 18) & 63];
        out += chars[(v >> 12) & 63];
        out += chars[(v >> 6) & 63];
        out += chars[v & 63];
    }
    if (i < in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
        out += chars[(v >> 18) & 63];
        out += chars[(v >> 12) & 63];
        out += i + 1 < in.size() ? chars[(v >> 6) & 63] : '=';
        out += '=';
    }
    return out;
}

namespace detail {

class Socket {
public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Socket &operator=(Socket &&o) noexcept {
        if (this != &o) {
            if (fd_ >= 0) ::close(fd_);
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    Socket(const Socket &) = delete;
    Socket &operator=(const Socket &) = delete;
    ~Socket() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }

private:
    int fd_ = -1;
};

inline Socket connect_loopback(int port) {
    Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (sock.get() < 0 || ::connect(sock.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0)
        throw Failure("cannot connect to Chromium on port " + std::to_string(port));
    int one = 1;
    ::setsockopt(sock.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return sock;
}

inline void send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Failure("the connection to Chromium broke");
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

// Reads what is there, waiting until `deadline`.
inline std::string read_some(int fd, Clock::time_point deadline) {
    char buf[65536];
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) throw Failure("Chromium did not answer in time", true);
        pollfd p{fd, POLLIN, 0};
        int r = ::poll(&p, 1, static_cast<int>(left));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue;
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Failure("the connection to Chromium closed");
        return {buf, static_cast<std::size_t>(n)};
    }
}

} // namespace detail

// GET (or another method) on Chromium's DevTools HTTP port, e.g. /json/list. Chromium keeps the
// connection open whatever the request says, so the body ends at its Content-Length.
inline std::string http_get(int port, const std::string &path, std::chrono::milliseconds timeout,
                            const char *method = "GET") {
    auto deadline = Clock::now() + timeout;
    auto sock = detail::connect_loopback(port);
    detail::send_all(sock.get(), std::string(method) + " " + path +
                                     " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n\r\n");
    std::string data;
    std::size_t body = std::string::npos, length = 0;
    while (body == std::string::npos || data.size() < body + length) {
        data += detail::read_some(sock.get(), deadline);
        if (body == std::string::npos && (body = data.find("\r\n\r\n")) != std::string::npos) {
            body += 4;
            std::string head = data.substr(0, body);
            for (auto &c : head)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            auto at = head.find("content-length:");
            length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
        }
    }
    return data.substr(body, length);
}

// One WebSocket to a DevTools target (the browser, or a page with a /devtools/page/... path).
// send() queues a command and returns its id; next() returns the next message, reply or event;
// call() waits for one reply and keeps the events it passes for later next() calls.
class Connection {
public:
    Connection(int port, const std::string &path, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
        sock_ = detail::connect_loopback(port);
        auto deadline = Clock::now() + timeout;
        detail::send_all(sock_.get(), "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                                          "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: "
                                          "13\r\nSec-WebSocket-Key: aGFuZ2FyLWNkcC1jbGllbnQ=\r\n\r\n");
        std::string head;
        while (head.find("\r\n\r\n") == std::string::npos)
            head += detail::read_some(sock_.get(), deadline);
        if (!head.starts_with("HTTP/1.1 101")) throw Failure("Chromium refused the WebSocket: " + head.substr(0, 40));
        buffer_ = head.substr(head.find("\r\n\r\n") + 4);
    }

    int send(const std::string &method, const json &params = json::object(), const std::string &session = {}) {
        int id = ++next_id_;
        json msg = {{"id", id}, {"method", method}, {"params", params}};
        if (!session.empty()) msg["sessionId"] = session;
        send_frame(0x1, msg.dump());
        return id;
    }

    json next(Clock::time_point deadline) {
        if (!events_.empty()) {
            json e = std::move(events_.front());
            events_.pop_front();
            return e;
        }
        for (;;) {
            json msg = json::parse(read_message(deadline), nullptr, false);
            if (msg.is_object()) return msg;
        }
    }

    json call(const std::string &method, const json &params = json::object(), const std::string &session = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
        return call_until(method, params, session, Clock::now() + timeout);
    }

    json call_until(const std::string &method, const json &params, const std::string &session,
                    Clock::time_point deadline) {
        int id = send(method, params, session);
        for (;;) {
            json msg = json::parse(read_message(deadline), nullptr, false);
            if (!msg.is_object()) continue;
            if (!msg.contains("id")) {
                events_.push_back(std::move(msg));
                continue;
            }
            if (msg.value("id", 0) != id) continue; // a reply nobody waits for
            if (msg.contains("error")) throw Failure(method + ": " + msg["error"].value("message", "failed"));
            return msg.value("result", json::object());
        }
    }

    // For callers that wait on this connection beside other fds (poll): the socket, and whether
    // messages (or part of one) were already read into memory, which the socket no longer shows.
    int fd() const { return sock_.get(); }
    bool pending() const { return !events_.empty() || !buffer_.empty(); }

private:
    void need(std::size_t n, Clock::time_point deadline) {
        while (buffer_.size() < n)
            buffer_ += detail::read_some(sock_.get(), deadline);
    }

    std::string read_message(Clock::time_point deadline) {
        std::string message;
        for (;;) {
            need(2, deadline);
            auto b0 = static_cast<unsigned char>(buffer_[0]), b1 = static_cast<unsigned char>(buffer_[1]);
            std::size_t header = 2;
            std::uint64_t len = b1 & 0x7F;
            if (len == 126) {
                need(4, deadline);
                len = (static_cast<std::uint64_t>(static_cast<unsigned char>(buffer_[2])) << 8) |
                      static_cast<unsigned char>(buffer_[3]);
                header = 4;
            } else if (len == 127) {
                need(10, deadline);
                len = 0;
                for (std::size_t i = 0; i < 8; ++i)
                    len = (len << 8) | static_cast<unsigned char>(buffer_[2 + i]);
                header = 10;
            }
            need(header + len, deadline);
            int opcode = b0 & 0x0F;
            std::string payload = buffer_.substr(header, len);
            buffer_.erase(0, header + len);
            if (opcode == 0x8) throw Failure("Chromium closed the WebSocket");
            if (opcode == 0x9) { // ping: answer, keep reading
                send_frame(0xA, payload);
                continue;
            }
            if (opcode == 0x1 || opcode == 0x2 || opcode == 0x0) message += payload;
            if (b0 & 0x80) return message;
        }
    }

    // Clients must mask what they send.
    void send_frame(int opcode, std::string_view payload) {
        std::string frame;
        frame.push_back(static_cast<char>(0x80 | opcode));
        if (payload.size() < 126) {
            frame.push_back(static_cast<char>(0x80 | payload.size()));
        } else if (payload.size() < 65536) {
            frame.push_back(static_cast<char>(0x80 | 126));
            frame.push_back(static_cast<char>(payload.size() >> 8));
            frame.push_back(static_cast<char>(payload.size() & 0xFF));
        } else {
            frame.push_back(static_cast<char>(0x80 | 127));
            for (int i = 7; i >= 0; --i)
                frame.push_back(static_cast<char>((static_cast<std::uint64_t>(payload.size()) >> (8 * i)) & 0xFF));
        }
        unsigned char mask[4];
        for (auto &m : mask)
            m = static_cast<unsigned char>(rng_());
        frame.append(reinterpret_cast<const char *>(mask), 4);
        for (std::size_t i = 0; i < payload.size(); ++i)
            frame.push_back(static_cast<char>(payload[i] ^ static_cast<char>(mask[i % 4])));
        detail::send_all(sock_.get(), frame);
    }

    detail::Socket sock_;
    std::string buffer_;
    std::deque<json> events_;
    int next_id_ = 0;
    std::minstd_rand rng_{std::random_device{}()};
};

// The first page target's WebSocket path (/devtools/page/...), from /json/list.
inline std::string first_page_path(int port) {
    json list = json::parse(http_get(port, "/json/list", std::chrono::seconds(10)), nullptr, false);
    if (list.is_array())
        for (const auto &t : list)
            if (t.is_object() && t.value("type", "") == "page") {
                std::string url = t.value("webSocketDebuggerUrl", "");
                auto at = url.find("/devtools/");
                if (at != std::string::npos) return url.substr(at);
            }
    throw Failure("Chromium has no page to act on");
}

} // namespace hangar::cdp
