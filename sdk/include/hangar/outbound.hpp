// HTTP(S) requests the server sends to a URL a tenant or an operator named (an OTLP collector, a
// 1Password Connect server, an S3 endpoint): the host is resolved once and every address checked
// against the operator's egress policy (hangar/egress.hpp), and the connection goes to exactly
// those addresses, so a name that answers differently a moment later (DNS rebinding) reaches
// nothing new. The host name still goes into the Host header, SNI and the certificate check.
//
// Header-only like the rest of the SDK; a plugin that includes it links Poco::Net and
// Poco::NetSSL, and calls Poco::Net::initializeSSL() once before its first HTTPS request.
#pragma once

#include <hangar/egress.hpp>

#include <Poco/Exception.h>
#include <Poco/Net/Context.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/HTTPSClientSession.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/StreamCopier.h>
#include <Poco/URI.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace hangar::outbound {

// A session that connects to the addresses hangar::egress checked, never to a new lookup of its
// host name.
template <typename Session> class Pinned : public Session {
public:
    template <typename... Args>
    explicit Pinned(std::vector<hangar::egress::Address> addresses, Args &&...args)
        : Session(std::forward<Args>(args)...), addresses_(std::move(addresses)) {}

protected:
    void connect(const Poco::Net::SocketAddress &) override {
        std::string last = "no address";
        for (const auto &a : addresses_) {
            try {
                Session::connect(Poco::Net::SocketAddress(a.get(), a.length));
                return;
            } catch (const Poco::TimeoutException &) {
                throw;
            } catch (const Poco::Net::NetException &e) {
                last = e.displayText();
            }
        }
        throw Poco::Net::NetException("cannot connect: " + last);
    }

private:
    std::vector<hangar::egress::Address> addresses_;
};

// Why a request got no HTTP answer. `what()` names the host and the cause, never a header or the
// body (which may carry credentials).
class Failure : public std::runtime_error {
public:
    enum class Kind { refused, unresolved, unreachable, timeout };
    Failure(Kind kind, const std::string &message) : std::runtime_error(message), kind_(kind) {}
    Kind kind() const { return kind_; }

private:
    Kind kind_;
};

// A connected session to `uri`'s host after the egress check (Failure refused/unresolved).
inline std::unique_ptr<Poco::Net::HTTPClientSession> open(const Poco::URI &uri, const hangar::egress::Policy &policy,
                                                          std::chrono::milliseconds timeout) {
    std::vector<hangar::egress::Address> addresses;
    try {
        addresses = hangar::egress::resolve(uri.getHost(), uri.getPort(), policy);
    } catch (const hangar::egress::Refused &e) {
        throw Failure(Failure::Kind::refused, e.what());
    } catch (const hangar::egress::ResolveError &e) {
        throw Failure(Failure::Kind::unresolved, e.what());
    }
    std::unique_ptr<Poco::Net::HTTPClientSession> session;
    if (uri.getScheme() == "https") {
        // The system's CA store; the host name is checked against the certificate.
        Poco::Net::Context::Ptr context(new Poco::Net::Context(Poco::Net::Context::TLS_CLIENT_USE, "",
                                                               Poco::Net::Context::VERIFY_RELAXED, 9, true));
        session = std::make_unique<Pinned<Poco::Net::HTTPSClientSession>>(std::move(addresses), uri.getHost(),
                                                                          uri.getPort(), context);
    } else {
        session =
            std::make_unique<Pinned<Poco::Net::HTTPClientSession>>(std::move(addresses), uri.getHost(), uri.getPort());
    }
    session->setTimeout(Poco::Timespan(std::chrono::duration_cast<std::chrono::microseconds>(timeout).count()));
    return session;
}

struct Request {
    std::string method = "GET";
    std::string url; // absolute http(s) URL
    std::vector<std::pair<std::string, std::string>> headers;
    std::string content_type; // empty: no body
    std::string body;
    std::chrono::milliseconds timeout{10000}; // connect, send and receive each
};

struct Response {
    int status = 0;
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;
};

// Sends one request and reads the whole answer (at most `max_body` bytes of it are kept). Throws
// Failure when there is no HTTP answer; any HTTP status is an answer.
inline Response send(const Request &r, const hangar::egress::Policy &policy, std::size_t max_body = 1 << 20) {
    Response out;
    try {
        Poco::URI uri(r.url);
        auto session = open(uri, policy, r.timeout);
        std::string target = uri.getPathEtc();
        if (target.empty()) target = "/";
        Poco::Net::HTTPRequest request(r.method, target, Poco::Net::HTTPMessage::HTTP_1_1);
        for (const auto &[k, v] : r.headers)
            request.set(k, v);
        if (!r.content_type.empty() || !r.body.empty()) {
            if (!r.content_type.empty()) request.setContentType(r.content_type);
            request.setContentLength(static_cast<std::streamsize>(r.body.size()));
        }
        std::ostream &os = session->sendRequest(request);
        os.write(r.body.data(), static_cast<std::streamsize>(r.body.size()));
        Poco::Net::HTTPResponse response;
        std::istream &in = session->receiveResponse(response);
        char buf[8192];
        while (in.read(buf, sizeof buf) || in.gcount() > 0) {
            if (out.body.size() < max_body)
                out.body.append(
                    buf, std::min<std::size_t>(static_cast<std::size_t>(in.gcount()), max_body - out.body.size()));
        }
        out.status = static_cast<int>(response.getStatus());
        for (const auto &[k, v] : response)
            out.headers.emplace_back(k, v);
    } catch (const Failure &) {
        throw;
    } catch (const Poco::TimeoutException &) {
        throw Failure(Failure::Kind::timeout, "no answer within " + std::to_string(r.timeout.count()) + " ms");
    } catch (const Poco::Exception &e) {
        throw Failure(Failure::Kind::unreachable, "cannot be reached: " + e.displayText());
    } catch (const std::ios_base::failure &e) {
        throw Failure(Failure::Kind::unreachable, std::string("cannot be reached: ") + e.what());
    }
    return out;
}

} // namespace hangar::outbound
