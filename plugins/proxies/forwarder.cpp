#include "forwarder.hpp"

#include "net.hpp"

#include <hangar/resource.hpp>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace proxies {

namespace {

constexpr auto kHeadTimeout = std::chrono::seconds(30);
constexpr auto kDialTimeout = std::chrono::seconds(20);

// "host:port" or "[v6]:port" → parts.
bool split_authority(const std::string &a, std::string &host, std::uint16_t &port, std::uint16_t fallback) {
    port = fallback;
    std::string p;
    if (!a.empty() && a.front() == '[') {
        auto close = a.find(']');
        if (close == std::string::npos) return false;
        host = a.substr(1, close - 1);
        if (close + 1 < a.size()) {
            if (a[close + 1] != ':') return false;
            p = a.substr(close + 2);
        }
    } else if (auto colon = a.rfind(':'); colon != std::string::npos) {
        host = a.substr(0, colon);
        p = a.substr(colon + 1);
    } else {
        host = a;
    }
    if (!p.empty()) {
        int n = std::atoi(p.c_str());
        if (n < 1 || n > 65535 || p.find_first_not_of("0123456789") != std::string::npos) return false;
        port = static_cast<std::uint16_t>(n);
    }
    return !host.empty();
}

// The header block without hop-by-hop proxy headers; `extra` lines are appended.
std::string rewrite_headers(const std::string &head_lines, const std::vector<std::string> &drop,
                            const std::string &extra) {
    std::string out;
    std::size_t pos = 0;
    while (pos < head_lines.size()) {
        auto eol = head_lines.find("\r\n", pos);
        if (eol == std::string::npos) eol = head_lines.size();
        std::string line = head_lines.substr(pos, eol - pos);
        pos = eol + 2;
        if (line.empty()) continue;
        std::string name = lower(line.substr(0, line.find(':')));
        if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
        out += line + "\r\n";
    }
    return out + extra + "\r\n";
}

// Copies both ways until one side ends or the socket is cut by a route change. Answers whether
// `b` sent anything.
bool splice(Conn &a, Conn &b) {
    bool b_spoke = false;
    char buf[32 * 1024];
    auto deadline = [] { return Clock::now() + std::chrono::seconds(60); };
    for (;;) {
        if (!a.pending() && !b.pending()) {
            pollfd p[2] = {{a.fd(), POLLIN, 0}, {b.fd(), POLLIN, 0}};
            int r = ::poll(p, 2, -1);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 || ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL))) return b_spoke;
            bool moved = false;
            for (int i = 0; i < 2; ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
                Conn &from = i == 0 ? a : b;
                long n = from.read(buf, sizeof buf, deadline());
                if (n <= 0) return b_spoke;
                b_spoke = b_spoke || i == 1;
                (i == 0 ? b : a).write_all({buf, static_cast<std::size_t>(n)}, deadline());
                moved = true;
            }
            if (!moved) return b_spoke;
            continue;
        }
        for (Conn *from : {&a, &b}) {
            if (!from->pending()) continue;
            long n = from->read(buf, sizeof buf, deadline());
            if (n <= 0) return b_spoke;
            b_spoke = b_spoke || from == &b;
            (from == &a ? b : a).write_all({buf, static_cast<std::size_t>(n)}, deadline());
        }
    }
}

// The page a request the proxy layer could not carry gets instead of the site's answer: 502 with
// the failure's code in X-Kernel-Proxy-Error, as Kernel's egress proxy answers, so a client (and
// the telemetry collector) can tell a proxy failure from the site's own 502. A destination the
// allowlist refuses is a 403, as there.
void answer_proxy_error(Conn &client, ProxyFailure failure, const std::string &reason) {
    const char *code = code_of(failure);
    bool policy = failure == ProxyFailure::network_policy_denied;
    std::string page = std::string("<!doctype html><html><head><title>Proxy error: ") + code +
                       "</title></head><body><h1>" +
                       (policy ? "This browser's network policy does not allow this destination"
                               : "The proxy could not carry this request") +
                       "</h1><p><code>" + code + "</code>: " + hangar::html_escape(reason) + "</p></body></html>\n";
    std::string res = std::string(policy ? "HTTP/1.1 403 Forbidden" : "HTTP/1.1 502 Bad Gateway") +
                      "\r\nX-Kernel-Proxy-Error: " + code +
                      "\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n"
                      // It shows under the site's origin: nothing in it may run or load.
                      "Content-Security-Policy: default-src 'none'; base-uri 'none'; form-action 'none'\r\n"
                      "X-Content-Type-Options: nosniff\r\nContent-Length: " +
                      std::to_string(page.size()) + "\r\nConnection: close\r\n\r\n" + page;
    try {
        client.write_all(res, Clock::now() + std::chrono::seconds(5));
    } catch (const DialError &) {
    }
}

std::string failure_key(const std::string &host, std::uint16_t port) {
    return lower(host) + ":" + std::to_string(port);
}

void answer_error(Conn &client, int status, const std::string &reason) {
    std::string text = reason + "\n";
    std::string res = "HTTP/1.1 " + std::to_string(status) + (status == 504 ? " Gateway Timeout" : " Bad Gateway") +
                      "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(text.size()) +
                      "\r\nConnection: close\r\n\r\n" + text;
    try {
        client.write_all(res, Clock::now() + std::chrono::seconds(5));
    } catch (const DialError &) {
    }
}

} // namespace

Forwarder::Forwarder(bool hold, int hold_ms) : hold_ms_(hold_ms) {
    if (!hold) route_ = std::make_shared<const Route>();
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) throw std::runtime_error("forwarder: socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 128) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr *>(&addr), &len) != 0) {
        ::close(listen_fd_);
        throw std::runtime_error("forwarder: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
}

Forwarder::~Forwarder() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    ::close(listen_fd_);
    std::unique_lock lock(mutex_);
    for (int fd : clients_)
        ::shutdown(fd, SHUT_RDWR);
    changed_.notify_all();
    changed_.wait_for(lock, std::chrono::seconds(5), [this] { return active_ == 0; });
}

void Forwarder::set_route(Route route, bool with_host_routes) {
    std::lock_guard lock(mutex_);
    if (!with_host_routes && route_) route.host_routes = route_->host_routes;
    route_ = std::make_shared<const Route>(std::move(route));
    // Kept-alive connections would carry the next request the old way: cut them.
    for (int fd : clients_)
        ::shutdown(fd, SHUT_RDWR);
    changed_.notify_all();
}

void Forwarder::set_private_hosts(PrivateHosts hosts) {
    std::lock_guard lock(mutex_);
    private_hosts_ = std::make_shared<const PrivateHosts>(std::move(hosts));
}

bool Forwarder::goes_direct(const std::string &host, std::uint16_t port) {
    std::shared_ptr<const PrivateHosts> direct;
    {
        std::lock_guard lock(mutex_);
        direct = private_hosts_;
    }
    return direct->matches(host, port);
}

void Forwarder::set_allowlist(std::shared_ptr<const Allowlist> allowlist) {
    std::lock_guard lock(mutex_);
    allowlist_ = std::move(allowlist);
    for (int fd : clients_)
        ::shutdown(fd, SHUT_RDWR);
}

bool Forwarder::admitted(Conn &client, const std::string &host, std::uint16_t port) {
    std::shared_ptr<const Allowlist> list;
    {
        std::lock_guard lock(mutex_);
        list = allowlist_;
    }
    if (!list || list->allows(host)) return true;
    remember_failure(host, port, ProxyFailure::network_policy_denied);
    answer_proxy_error(client, ProxyFailure::network_policy_denied,
                       host + " is not in this browser's network.allowed_hosts");
    return false;
}

void Forwarder::remember_failure(const std::string &host, std::uint16_t port, ProxyFailure failure) {
    constexpr std::size_t kKept = 64;
    std::lock_guard lock(mutex_);
    failures_.push_back({failure_key(host, port), failure, Clock::now()});
    if (failures_.size() > kKept) failures_.pop_front();
}

std::optional<ProxyFailure> Forwarder::recent_failure(const std::string &host, std::uint16_t port) {
    constexpr auto kWindow = std::chrono::seconds(30);
    std::string key = failure_key(host, port);
    std::lock_guard lock(mutex_);
    for (auto it = failures_.rbegin(); it != failures_.rend(); ++it)
        if (it->authority == key && Clock::now() - it->at <= kWindow) return it->failure;
    return std::nullopt;
}

std::shared_ptr<const Route> Forwarder::current_route() {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, std::chrono::milliseconds(hold_ms_), [this] { return route_ || stopping_; });
    return route_;
}

void Forwarder::accept_loop() {
    while (!stopping_) {
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (stopping_) return;
            if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
        }
        {
            std::lock_guard lock(mutex_);
            clients_.insert(fd);
            ++active_;
        }
        auto release = [this, fd] {
            std::lock_guard lock(mutex_);
            clients_.erase(fd);
            ::close(fd);
            --active_;
            changed_.notify_all();
        };
        try {
            std::thread([this, fd, release] {
                try {
                    serve(fd);
                } catch (const std::exception &) {
                    // One connection's failure ends that connection only.
                }
                release();
            }).detach();
        } catch (const std::system_error &) {
            // No thread to be had: the instance is at its task limit (a fork bomb in it, say).
            // Refusing this one connection is the browser's network error; letting the exception
            // out of this thread would end the whole agent, and the session with it.
            release();
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
}

void Forwarder::serve(int client_fd) {
    // The socket is closed by accept_loop's thread under the lock, after it left the registry.
    Conn client(::dup(client_fd));
    if (client.fd() < 0) return;
    std::string extra;
    std::string head;
    try {
        head = read_head(client, Clock::now() + kHeadTimeout, extra);
    } catch (const DialError &) {
        return;
    }
    auto eol = head.find("\r\n");
    std::string line = head.substr(0, eol);
    std::string rest = head.substr(eol + 2);
    auto sp1 = line.find(' ');
    auto sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 == sp1) {
        answer_error(client, 502, "malformed request");
        return;
    }
    std::string method = line.substr(0, sp1);
    std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    std::string version = line.substr(sp2 + 1);
    constexpr const char *kNoRoute = "the browser's proxy was not configured in time";

    if (method == "CONNECT") {
        std::string host;
        std::uint16_t port = 443;
        if (!split_authority(target, host, port, 443)) {
            answer_error(client, 502, "malformed CONNECT target");
            return;
        }
        const bool direct = goes_direct(host, port);
        if (!direct && !admitted(client, host, port)) return;
        auto route = current_route();
        if (!route) {
            remember_failure(host, port, ProxyFailure::proxy_unavailable);
            answer_proxy_error(client, ProxyFailure::proxy_unavailable, kNoRoute);
            return;
        }
        const Upstream *up = direct ? nullptr : upstream_for(*route, host);
        Conn server;
        try {
            server = dial(up, host, port, Clock::now() + kDialTimeout);
        } catch (const DialError &e) {
            // Direct or through a proxy, the failure is named as Kernel's egress proxy names it
            // (a name that does not resolve, a refused port, a timeout).
            remember_failure(host, port, e.failure());
            answer_proxy_error(client, e.failure(), e.what());
            return;
        }
        client.write_all("HTTP/1.1 200 Connection Established\r\n\r\n", Clock::now() + kDialTimeout);
        if (!extra.empty()) server.write_all(extra, Clock::now() + kDialTimeout);
        splice(client, server);
        return;
    }

    // Plain HTTP: an absolute URI.
    auto scheme_end = target.find("://");
    if (scheme_end == std::string::npos || lower(target.substr(0, scheme_end)) != "http") {
        answer_error(client, 502, "only http:// URLs and CONNECT are proxied");
        return;
    }
    auto path_start = target.find('/', scheme_end + 3);
    std::string authority = target.substr(
        scheme_end + 3, path_start == std::string::npos ? std::string::npos : path_start - scheme_end - 3);
    std::string path = path_start == std::string::npos ? "/" : target.substr(path_start);
    std::string host;
    std::uint16_t port = 80;
    if (!split_authority(authority, host, port, 80)) {
        answer_error(client, 502, "malformed URL");
        return;
    }
    const bool direct = goes_direct(host, port);
    if (!direct && !admitted(client, host, port)) return;
    auto route = current_route();
    if (!route) {
        answer_proxy_error(client, ProxyFailure::proxy_unavailable, kNoRoute);
        return;
    }
    const Upstream *up = direct ? nullptr : upstream_for(*route, host);
    Conn server;
    std::string out;
    try {
        if (up && up->scheme != "socks5") {
            // An HTTP proxy takes the absolute URI as it is, with our credentials. One request
            // per connection: a next one on it would go out without them.
            server = dial_proxy(*up, Clock::now() + kDialTimeout);
            std::string auth = basic_auth(*up);
            out = line + "\r\n" +
                  rewrite_headers(rest, {"proxy-authorization", "proxy-connection", "connection", "keep-alive"},
                                  (auth.empty() ? "" : "Proxy-Authorization: " + auth + "\r\n") +
                                      "Connection: close\r\n");
        } else {
            // One request per connection: the next may name another host.
            server = dial(up, host, port, Clock::now() + kDialTimeout);
            out = method + " " + path + " " + version + "\r\n" +
                  rewrite_headers(rest, {"proxy-authorization", "proxy-connection", "connection", "keep-alive"},
                                  "Connection: close\r\n");
        }
    } catch (const DialError &e) {
        // Never an empty answer, going direct too: Chromium retries one, and the retry's late
        // error page would interrupt the next navigation. The page names what failed, as Kernel's
        // egress proxy does.
        answer_proxy_error(client, e.failure(), e.what());
        return;
    }
    server.write_all(out + extra, Clock::now() + kDialTimeout);
    // An HTTP proxy that hangs up without a byte of answer did not carry the request (a proxy
    // behind a port forwarder that cannot reach it looks like this): say so, not an empty reply.
    if (!splice(client, server) && up && up->scheme != "socks5")
        answer_proxy_error(client, ProxyFailure::provider_unreachable,
                           "the proxy closed the connection without an answer");
}

} // namespace proxies
