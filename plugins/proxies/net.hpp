// Connections through an upstream proxy, shared by the server half (POST /proxies/{id}/check) and
// the per-instance forwarder: TCP with a deadline, TLS (OpenSSL) to an https proxy with the
// proxy's own CA bundle, HTTP CONNECT with Basic auth, SOCKS5 with username/password. The
// target's host name always goes to the upstream unresolved, so no DNS query leaves locally.
#pragma once

#include "proxies_model.hpp"

#include <hangar/egress.hpp>

#include <openssl/ssl.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace proxies {

using Clock = std::chrono::steady_clock;

// Why a request could not be carried, as the typed code of Kernel's X-Kernel-Proxy-Error header
// (the same words its proxy_error telemetry event carries).
enum class ProxyFailure {
    provider_unreachable,    // the proxy itself could not be reached (refused, TLS, timed out)
    provider_rejected,       // the proxy refused us (authentication, not a SOCKS5 proxy, an odd answer)
    destination_blocked,     // the proxy's rules forbid the target (HTTP 403, SOCKS5 "not allowed")
    upstream_dns_failure,    // the target's name did not resolve
    upstream_connect_failed, // the target refused or was unreachable
    upstream_timeout,        // the target did not answer in time
    proxy_unavailable,       // the browser's proxy was not configured in time
    network_policy_denied,   // the browser's network.allowed_hosts does not name the target
};
const char *code_of(ProxyFailure f);

// A failure to reach the target; the message names the hop and never carries a secret.
class DialError : public std::runtime_error {
public:
    explicit DialError(const std::string &what, ProxyFailure failure = ProxyFailure::upstream_connect_failed)
        : std::runtime_error(what), failure_(failure) {}
    ProxyFailure failure() const { return failure_; }

private:
    ProxyFailure failure_;
};

// A byte stream over TCP, optionally inside TLS. Move-only; closes on destruction.
class Conn {
public:
    Conn() = default;
    explicit Conn(int fd) : fd_(fd) {}
    Conn(Conn &&o) noexcept;
    Conn &operator=(Conn &&o) noexcept;
    Conn(const Conn &) = delete;
    Conn &operator=(const Conn &) = delete;
    ~Conn();

    int fd() const { return fd_; }
    bool tls() const { return ssl_ != nullptr; }
    // Bytes TLS has decrypted but not handed out yet (poll() cannot see them).
    bool pending() const;
    // Like read(2): >0 bytes, 0 at end of stream, <0 on error. Blocks until `deadline`.
    long read(char *buf, std::size_t n, Clock::time_point deadline);
    void write_all(std::string_view data, Clock::time_point deadline); // throws DialError
    // Wraps the connection in TLS to `sni` (verified against `ca_pem`, or the system roots).
    void start_tls(const std::string &sni, const std::string &ca_pem, Clock::time_point deadline);
    void shutdown_both();

private:
    bool wait(short events, Clock::time_point deadline) const;
    void reset();
    int fd_ = -1;
    SSL_CTX *ctx_ = nullptr;
    SSL *ssl_ = nullptr;
};

// `policy`: the server dialling a host a tenant named (hangar/egress.hpp); the addresses it
// checked are the ones connected to, and a refused one throws hangar::egress::Refused. nullptr
// inside an instance, whose network namespace keeps the host out of reach anyway.
Conn tcp_connect(const std::string &host, std::uint16_t port, Clock::time_point deadline,
                 const hangar::egress::Policy *policy = nullptr);

// A stream to host:port through `upstream` (nullptr: directly); `policy` as for tcp_connect,
// applied to the first hop (the proxy, or host:port without one).
Conn dial(const Upstream *upstream, const std::string &host, std::uint16_t port, Clock::time_point deadline,
          const hangar::egress::Policy *policy = nullptr);
// Connected (and TLS-wrapped for https) to the upstream proxy itself, for plain-HTTP forwarding.
Conn dial_proxy(const Upstream &upstream, Clock::time_point deadline, const hangar::egress::Policy *policy = nullptr);

// "Basic <base64(user:pass)>", or empty without a username.
std::string basic_auth(const Upstream &upstream);

// Reads up to and including "\r\n\r\n" (at most `max` bytes); what came after stays in `extra`.
std::string read_head(Conn &c, Clock::time_point deadline, std::string &extra,
                      std::size_t max = std::size_t{64} * 1024);

struct CheckResult {
    bool ok = false;
    std::string reason; // when not ok
    int status = 0;     // the target's HTTP status
    std::string body;   // at most 64 KiB of it
};
// One GET of `url` through `upstream`, bounded by `timeout`; `policy` as for dial. A refused
// destination throws hangar::egress::Refused rather than reading as an unavailable proxy.
CheckResult http_get(const Upstream *upstream, const Url &url, std::chrono::milliseconds timeout,
                     const hangar::egress::Policy *policy = nullptr);

} // namespace proxies
