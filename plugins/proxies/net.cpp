#include "net.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace proxies {

namespace {

constexpr std::size_t kMaxBody = std::size_t{64} * 1024;

// Rounded up, so a poll that times out returns at or after the deadline and is told as a timeout.
int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1'000'000));
}

std::string b64(std::string_view raw) {
    static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < raw.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(raw[i]) << 16) | (static_cast<unsigned char>(raw[i + 1]) << 8) |
                     static_cast<unsigned char>(raw[i + 2]);
        out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], tbl[v & 63]};
    }
    if (i + 1 == raw.size()) {
        unsigned v = static_cast<unsigned char>(raw[i]) << 16;
        out += {tbl[v >> 18], tbl[(v >> 12) & 63], '=', '='};
    } else if (i + 2 == raw.size()) {
        unsigned v = (static_cast<unsigned char>(raw[i]) << 16) | (static_cast<unsigned char>(raw[i + 1]) << 8);
        out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], '='};
    }
    return out;
}

int status_of(const std::string &head) {
    // "HTTP/1.1 200 Connection established"
    auto sp = head.find(' ');
    if (sp == std::string::npos || head.compare(0, 5, "HTTP/") != 0) return 0;
    return std::atoi(head.c_str() + sp + 1);
}

// An HTTP proxy's refusal of a CONNECT: 403 is its rules, 504 its own timeout, another 5xx its
// failure to reach the target (tinyproxy answers 500, squid 503), the rest a refusal of us.
ProxyFailure failure_of_status(int status) {
    if (status == 403) return ProxyFailure::destination_blocked;
    if (status == 504) return ProxyFailure::upstream_timeout;
    if (status >= 500 && status <= 599) return ProxyFailure::upstream_connect_failed;
    return ProxyFailure::provider_rejected;
}

std::string authority(const std::string &host, std::uint16_t port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// `closed`: what a proxy that hangs up at this step means (after a CONNECT request: that it could
// not reach the target; dante closes without a reply when the target refuses).
void read_exact(Conn &c, char *buf, std::size_t n, Clock::time_point deadline, const char *what, ProxyFailure closed) {
    std::size_t got = 0;
    while (got < n) {
        long r = c.read(buf + got, n - got, deadline);
        if (r < 0 && Clock::now() >= deadline)
            throw DialError(std::string(what) + ": the SOCKS5 proxy did not answer in time",
                            ProxyFailure::upstream_timeout);
        if (r <= 0) throw DialError(std::string(what) + ": the SOCKS5 proxy closed the connection", closed);
        got += static_cast<std::size_t>(r);
    }
}

void socks5_connect(Conn &c, const Upstream &u, const std::string &host, std::uint16_t port,
                    Clock::time_point deadline) {
    bool creds = !u.username.empty();
    std::string hello = creds ? std::string("\x05\x02\x00\x02", 4) : std::string("\x05\x01\x00", 3);
    c.write_all(hello, deadline);
    char reply[2];
    read_exact(c, reply, 2, deadline, "greeting", ProxyFailure::provider_unreachable);
    if (reply[0] != 5)
        throw DialError("the upstream at " + u.display() + " is not a SOCKS5 proxy", ProxyFailure::provider_rejected);
    if (static_cast<unsigned char>(reply[1]) == 0x02) {
        if (!creds) throw DialError("the SOCKS5 proxy wants a username and password", ProxyFailure::provider_rejected);
        if (u.username.size() > 255 || u.password.size() > 255)
            throw DialError("SOCKS5 usernames and passwords are at most 255 bytes", ProxyFailure::provider_rejected);
        std::string auth = "\x01";
        auth += static_cast<char>(u.username.size());
        auth += u.username;
        auth += static_cast<char>(u.password.size());
        auth += u.password;
        c.write_all(auth, deadline);
        read_exact(c, reply, 2, deadline, "authentication", ProxyFailure::provider_rejected);
        if (reply[1] != 0)
            throw DialError("proxy authentication failed (SOCKS5 rejected the username or password)",
                            ProxyFailure::provider_rejected);
    } else if (reply[1] != 0) {
        throw DialError("the SOCKS5 proxy accepts none of our authentication methods", ProxyFailure::provider_rejected);
    }
    std::string req("\x05\x01\x00", 3);
    unsigned char addr[16];
    if (inet_pton(AF_INET, host.c_str(), addr) == 1) {
        req += '\x01';
        req.append(reinterpret_cast<char *>(addr), 4);
    } else if (inet_pton(AF_INET6, host.c_str(), addr) == 1) {
        req += '\x04';
        req.append(reinterpret_cast<char *>(addr), 16);
    } else {
        if (host.size() > 255) throw DialError("host name too long for SOCKS5", ProxyFailure::upstream_dns_failure);
        req += '\x03';
        req += static_cast<char>(host.size());
        req += host;
    }
    req += static_cast<char>(port >> 8);
    req += static_cast<char>(port & 0xff);
    c.write_all(req, deadline);
    char head[4];
    read_exact(c, head, 4, deadline, "connect", ProxyFailure::upstream_connect_failed);
    if (head[1] != 0) {
        static const char *reasons[] = {"succeeded",           "general failure",       "not allowed by its rules",
                                        "network unreachable", "host unreachable",      "connection refused",
                                        "TTL expired",         "command not supported", "address type not supported"};
        auto code = static_cast<unsigned char>(head[1]);
        // RFC 1928 replies: 2 is the proxy's ruleset, 6 a timeout; the rest fail to connect.
        ProxyFailure failure = code == 2   ? ProxyFailure::destination_blocked
                               : code == 6 ? ProxyFailure::upstream_timeout
                                           : ProxyFailure::upstream_connect_failed;
        throw DialError("the SOCKS5 proxy could not reach " + authority(host, port) + ": " +
                            (code < 9 ? reasons[code] : "error " + std::to_string(code)),
                        failure);
    }
    std::size_t skip = head[3] == 1 ? 4 : head[3] == 4 ? 16 : 0;
    if (head[3] == 3) {
        char len = 0;
        read_exact(c, &len, 1, deadline, "connect", ProxyFailure::upstream_connect_failed);
        skip = static_cast<unsigned char>(len);
    }
    char rest[258];
    read_exact(c, rest, skip + 2, deadline, "connect", ProxyFailure::upstream_connect_failed);
}

} // namespace

const char *code_of(ProxyFailure f) {
    switch (f) {
    case ProxyFailure::provider_unreachable:
        return "provider_unreachable";
    case ProxyFailure::provider_rejected:
        return "provider_rejected";
    case ProxyFailure::destination_blocked:
        return "destination_blocked";
    case ProxyFailure::upstream_dns_failure:
        return "upstream_dns_failure";
    case ProxyFailure::upstream_connect_failed:
        return "upstream_connect_failed";
    case ProxyFailure::upstream_timeout:
        return "upstream_timeout";
    case ProxyFailure::proxy_unavailable:
        return "proxy_unavailable";
    case ProxyFailure::network_policy_denied:
        return "network_policy_denied";
    }
    return "upstream_connect_failed";
}

Conn::Conn(Conn &&o) noexcept : fd_(o.fd_), ctx_(o.ctx_), ssl_(o.ssl_) {
    o.fd_ = -1;
    o.ctx_ = nullptr;
    o.ssl_ = nullptr;
}

Conn &Conn::operator=(Conn &&o) noexcept {
    if (this != &o) {
        reset();
        std::swap(fd_, o.fd_);
        std::swap(ctx_, o.ctx_);
        std::swap(ssl_, o.ssl_);
    }
    return *this;
}

Conn::~Conn() {
    reset();
}

void Conn::reset() {
    if (ssl_) SSL_free(ssl_);
    if (ctx_) SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ssl_ = nullptr;
    ctx_ = nullptr;
}

void Conn::shutdown_both() {
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool Conn::pending() const {
    return ssl_ && SSL_pending(ssl_) > 0;
}

bool Conn::wait(short events, Clock::time_point deadline) const {
    pollfd p{fd_, events, 0};
    for (;;) {
        int r = ::poll(&p, 1, ms_left(deadline));
        if (r > 0) return true;
        if (r == 0) return false;
        if (errno != EINTR) return false;
    }
}

long Conn::read(char *buf, std::size_t n, Clock::time_point deadline) {
    for (;;) {
        if (ssl_) {
            int r = SSL_read(ssl_, buf, static_cast<int>(std::min<std::size_t>(n, 1 << 30)));
            if (r > 0) return r;
            int err = SSL_get_error(ssl_, r);
            if (err == SSL_ERROR_ZERO_RETURN) return 0;
            if (err == SSL_ERROR_WANT_READ) {
                if (!wait(POLLIN, deadline)) return -1;
                continue;
            }
            if (err == SSL_ERROR_WANT_WRITE) {
                if (!wait(POLLOUT, deadline)) return -1;
                continue;
            }
            return err == SSL_ERROR_SYSCALL && r == 0 ? 0 : -1;
        }
        ssize_t r = ::recv(fd_, buf, n, 0);
        if (r >= 0) return r;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait(POLLIN, deadline)) return -1;
            continue;
        }
        return -1;
    }
}

void Conn::write_all(std::string_view data, Clock::time_point deadline) {
    while (!data.empty()) {
        if (ssl_) {
            int r = SSL_write(ssl_, data.data(), static_cast<int>(std::min<std::size_t>(data.size(), 1 << 30)));
            if (r > 0) {
                data.remove_prefix(static_cast<std::size_t>(r));
                continue;
            }
            int err = SSL_get_error(ssl_, r);
            short ev = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
            if (!ev || !wait(ev, deadline)) throw DialError("the connection closed while sending");
            continue;
        }
        ssize_t r = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (r >= 0) {
            data.remove_prefix(static_cast<std::size_t>(r));
            continue;
        }
        if (errno == EINTR) continue;
        if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait(POLLOUT, deadline)) continue;
        throw DialError("the connection closed while sending");
    }
}

void Conn::start_tls(const std::string &sni, const std::string &ca_pem, Clock::time_point deadline) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    if (!ctx_) throw DialError("TLS is not available");
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (ca_pem.empty()) {
        SSL_CTX_set_default_verify_paths(ctx_);
    } else {
        X509_STORE *store = SSL_CTX_get_cert_store(ctx_);
        BIO *bio = BIO_new_mem_buf(ca_pem.data(), static_cast<int>(ca_pem.size()));
        int added = 0;
        while (X509 *cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
            added += X509_STORE_add_cert(store, cert) == 1;
            X509_free(cert);
        }
        BIO_free(bio);
        ERR_clear_error();
        if (!added) throw DialError("the proxy's CA bundle holds no certificate");
    }
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    unsigned char ip[16];
    bool literal = inet_pton(AF_INET, sni.c_str(), ip) == 1 || inet_pton(AF_INET6, sni.c_str(), ip) == 1;
    if (!literal) SSL_set_tlsext_host_name(ssl_, sni.c_str());
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl_);
    if (literal)
        X509_VERIFY_PARAM_set1_ip_asc(param, sni.c_str());
    else
        X509_VERIFY_PARAM_set1_host(param, sni.c_str(), 0);
    for (;;) {
        int r = SSL_connect(ssl_);
        if (r == 1) return;
        int err = SSL_get_error(ssl_, r);
        if (err == SSL_ERROR_WANT_READ && wait(POLLIN, deadline)) continue;
        if (err == SSL_ERROR_WANT_WRITE && wait(POLLOUT, deadline)) continue;
        long verify = SSL_get_verify_result(ssl_);
        ERR_clear_error();
        if (verify != X509_V_OK)
            throw DialError(std::string("TLS to the proxy failed: ") + X509_verify_cert_error_string(verify));
        throw DialError(Clock::now() >= deadline ? "TLS to the proxy timed out" : "TLS to the proxy failed");
    }
}

Conn tcp_connect(const std::string &host, std::uint16_t port, Clock::time_point deadline,
                 const hangar::egress::Policy *policy) {
    std::vector<hangar::egress::Address> addresses;
    try {
        addresses = policy ? hangar::egress::resolve(host, port, *policy) : hangar::egress::resolve_any(host, port);
    } catch (const hangar::egress::ResolveError &e) {
        throw DialError(e.what(), ProxyFailure::upstream_dns_failure);
    }
    std::string last = "no address";
    bool timed_out = false;
    for (const auto &a : addresses) {
        int fd = ::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        Conn c(fd);
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (::connect(fd, a.get(), a.length) == 0) return c;
        if (errno != EINPROGRESS) {
            last = std::strerror(errno);
            continue;
        }
        pollfd p{fd, POLLOUT, 0};
        int r = ::poll(&p, 1, ms_left(deadline));
        if (r <= 0) {
            last = "timed out";
            timed_out = true;
            continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0) return c;
        last = std::strerror(err);
    }
    throw DialError("cannot connect to " + authority(host, port) + ": " + last,
                    timed_out ? ProxyFailure::upstream_timeout : ProxyFailure::upstream_connect_failed);
}

std::string basic_auth(const Upstream &u) {
    if (u.username.empty()) return {};
    return "Basic " + b64(u.username + ":" + u.password);
}

std::string read_head(Conn &c, Clock::time_point deadline, std::string &extra, std::size_t max) {
    std::string head = std::move(extra);
    extra.clear();
    char buf[4096];
    for (;;) {
        if (auto end = head.find("\r\n\r\n"); end != std::string::npos) {
            extra = head.substr(end + 4);
            head.resize(end + 4);
            return head;
        }
        if (head.size() > max) throw DialError("a header larger than " + std::to_string(max) + " bytes");
        long r = c.read(buf, sizeof buf, deadline);
        if (r <= 0)
            throw DialError(
                r == 0 ? "the connection closed before a complete header"
                       : (Clock::now() >= deadline ? "timed out waiting for an answer" : "the connection failed"));
        head.append(buf, static_cast<std::size_t>(r));
    }
}

Conn dial_proxy(const Upstream &u, Clock::time_point deadline, const hangar::egress::Policy *policy) {
    try {
        Conn c = tcp_connect(u.host, u.port, deadline, policy);
        if (u.scheme == "https") c.start_tls(u.host, u.ca_bundle, deadline);
        return c;
    } catch (const DialError &e) {
        // Whatever stopped us on the way to the proxy, it is the proxy that is out of reach.
        throw DialError(e.what(), ProxyFailure::provider_unreachable);
    }
}

Conn dial(const Upstream *u, const std::string &host, std::uint16_t port, Clock::time_point deadline,
          const hangar::egress::Policy *policy) {
    if (!u) return tcp_connect(host, port, deadline, policy);
    Conn c = dial_proxy(*u, deadline, policy);
    if (u->scheme == "socks5") {
        socks5_connect(c, *u, host, port, deadline);
        return c;
    }
    std::string target = authority(host, port);
    std::string req = "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n";
    if (auto auth = basic_auth(*u); !auth.empty()) req += "Proxy-Authorization: " + auth + "\r\n";
    req += "\r\n";
    std::string extra;
    std::string head;
    try {
        c.write_all(req, deadline);
        head = read_head(c, deadline, extra);
    } catch (const DialError &e) {
        // The proxy took the connection but did not answer the CONNECT: it is still dialling.
        throw DialError(e.what(),
                        Clock::now() >= deadline ? ProxyFailure::upstream_timeout : ProxyFailure::provider_unreachable);
    }
    int status = status_of(head);
    // tinyproxy answers a bad password with 401 where RFC 9110 says 407.
    if (status == 407 || status == 401)
        throw DialError("proxy authentication failed (" + std::to_string(status) + " from " + u->display() + ")",
                        ProxyFailure::provider_rejected);
    if (status < 200 || status > 299)
        throw DialError("the proxy " + u->display() + " refused to connect to " + target + " (HTTP " +
                            std::to_string(status) + ")",
                        failure_of_status(status));
    if (!extra.empty())
        throw DialError("the proxy sent data before the tunnel opened", ProxyFailure::provider_rejected);
    return c;
}

CheckResult http_get(const Upstream *upstream, const Url &url, std::chrono::milliseconds timeout,
                     const hangar::egress::Policy *policy) {
    CheckResult out;
    auto deadline = Clock::now() + timeout;
    try {
        Conn c = dial(upstream, url.host, url.port, deadline, policy);
        if (url.scheme == "https") c.start_tls(url.host, "", deadline);
        bool default_port = url.port == (url.scheme == "https" ? 443 : 80);
        std::string req = "GET " + url.target +
                          " HTTP/1.0\r\nHost: " + (default_port ? url.host : authority(url.host, url.port)) +
                          "\r\nUser-Agent: hangar-proxy-check\r\nAccept: */*\r\nConnection: close\r\n\r\n";
        c.write_all(req, deadline);
        std::string body;
        std::string head = read_head(c, deadline, body);
        out.status = status_of(head);
        char buf[4096];
        while (body.size() < kMaxBody) {
            long r = c.read(buf, sizeof buf, deadline);
            if (r <= 0) break;
            body.append(buf, static_cast<std::size_t>(r));
        }
        out.body = body.substr(0, kMaxBody);
        if (out.status == 0) {
            out.reason = "the check target did not answer HTTP";
            return out;
        }
        out.ok = true;
    } catch (const DialError &e) {
        out.reason = Clock::now() >= deadline
                         ? std::string(e.what()) + " (timed out after " + std::to_string(timeout.count()) + " ms)"
                         : e.what();
    }
    return out;
}

} // namespace proxies
