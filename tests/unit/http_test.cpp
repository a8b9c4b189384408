// The HTTP front end to end inside the test process: a real Poco server from make_tcp_server,
// test plugins' routes, and Poco's HTTP client. Covers the middleware chain: request id, auth,
// route miss handling (404 / 405 / 501 / disabled), body limit, plugin errors, SSE hand-off.
#include "host_fixture.hpp"
#include "http.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/StreamCopier.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

using namespace hangar::host;
using hangar::test::kBootstrapKey;
using hangar::test::TestHost;
using nlohmann::json;

namespace {

struct Reply {
    int status = 0;
    std::map<std::string, std::string> headers; // lower-cased names
    std::string body;

    json body_json() const {
        auto j = json::parse(body, nullptr, false);
        CPPUNIT_ASSERT_MESSAGE("not JSON: " + body, !j.is_discarded());
        return j;
    }
    std::string header(const std::string &lower_name) const {
        auto it = headers.find(lower_name);
        return it == headers.end() ? std::string() : it->second;
    }
};

std::string lower(std::string s) {
    for (auto &c : s)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// Asserts the wire error shape {code, message[, details]} with the given status and code.
void assert_wire_error(const Reply &r, int status, const std::string &code) {
    CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, status, r.status);
    CPPUNIT_ASSERT_EQUAL(std::string("application/json"), r.header("content-type"));
    auto j = r.body_json();
    CPPUNIT_ASSERT(j.is_object());
    CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, code, j.value("code", std::string()));
    CPPUNIT_ASSERT(j["message"].is_string());
    CPPUNIT_ASSERT(!j["message"].get<std::string>().empty());
    for (auto &[k, _] : j.items())
        CPPUNIT_ASSERT_MESSAGE("unexpected key " + k, k == "code" || k == "message" || k == "details");
}

// A loopback upstream speaking just enough HTTP/1.1 by hand to see exactly what a relay sends:
//   /sse   an event stream of two frames, then close
//   /hold  an event stream of one frame, held open until release()
//   other  200 JSON {"ok":true} with X-Up and its own X-Request-Id (which must not leak through)
class RawUpstream {
public:
    RawUpstream() : socket_(Poco::Net::SocketAddress("127.0.0.1", 0)) {
        port_ = socket_.address().port();
        thread_ = std::thread([this] { run(); });
    }
    ~RawUpstream() {
        release();
        stop_ = true;
        thread_.join();
    }
    std::uint16_t port() const { return port_; }
    std::vector<std::string> requests() {
        std::lock_guard lock(mutex_);
        return requests_;
    }
    void release() {
        std::lock_guard lock(mutex_);
        released_ = true;
        cv_.notify_all();
    }

private:
    void run() {
        while (!stop_) {
            if (!socket_.poll(Poco::Timespan(0, 20000), Poco::Net::Socket::SELECT_READ)) continue;
            try {
                auto s = socket_.acceptConnection();
                serve(s);
            } catch (const std::exception &) {
            }
        }
    }
    void serve(Poco::Net::StreamSocket &s) {
        s.setReceiveTimeout(Poco::Timespan(5, 0));
        std::string in;
        char buf[4096];
        std::size_t head_end;
        while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
            int n = s.receiveBytes(buf, sizeof buf);
            if (n <= 0) return;
            in.append(buf, static_cast<std::size_t>(n));
        }
        std::size_t length = 0;
        auto l = lower(in.substr(0, head_end));
        if (auto p = l.find("\r\ncontent-length:"); p != std::string::npos) length = std::stoul(l.substr(p + 17));
        while (in.size() < head_end + 4 + length) {
            int n = s.receiveBytes(buf, sizeof buf);
            if (n <= 0) break;
            in.append(buf, static_cast<std::size_t>(n));
        }
        {
            std::lock_guard lock(mutex_);
            requests_.push_back(in);
        }
        auto line = in.substr(0, in.find("\r\n"));
        const std::string sse_head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
        std::string out;
        if (line.find(" /misdirected/") != std::string::npos) {
            // A hostile instance: "the browser lives at <the port after /misdirected/>".
            auto at = line.substr(line.find("/misdirected/") + 13);
            std::string body =
                R"({"code":"wrong_node","message":"moved","details":[{"code":"owner_node","message":"x"},)"
                R"({"code":"owner_url","message":"http://127.0.0.1:)" +
                at.substr(0, at.find(' ')) + R"("}]})";
            out = "HTTP/1.1 421 Misdirected Request\r\nContent-Type: application/json\r\nContent-Length: " +
                  std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        } else if (line.find(" /sse") != std::string::npos) {
            out = sse_head + "data: {\"up\":1}\n\ndata: {\"up\":2}\n\n";
        } else if (line.find(" /hold") != std::string::npos) {
            out = sse_head + "data: {\"up\":1}\n\n";
        } else {
            std::string body = "{\"ok\":true}";
            out =
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\nX-Up: yes\r\nX-Request-Id: upstream-id\r\nConnection: close\r\n\r\n" + body;
        }
        s.sendBytes(out.data(), static_cast<int>(out.size()));
        if (line.find(" /hold") != std::string::npos) {
            std::unique_lock lock(mutex_);
            cv_.wait_for(lock, std::chrono::seconds(10), [this] { return released_; });
        }
        s.shutdown();
        s.close();
    }

    Poco::Net::ServerSocket socket_;
    std::uint16_t port_ = 0;
    std::atomic<bool> stop_{false};
    std::mutex mutex_;
    std::condition_variable cv_;
    bool released_ = false;
    std::vector<std::string> requests_;
    std::thread thread_;
};

} // namespace

class HttpTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(HttpTest);
    CPPUNIT_TEST(testNoKeyIs401);
    CPPUNIT_TEST(testBadKeyIs401);
    CPPUNIT_TEST(testBootstrapKeyIs200);
    CPPUNIT_TEST(testRequestIdOnEveryAnswer);
    CPPUNIT_TEST(testUnknownPathIs404WireError);
    CPPUNIT_TEST(testKnownAreaWithoutPluginIs501);
    CPPUNIT_TEST(testDisabledPluginIs404NamingIt);
    CPPUNIT_TEST(testWrongMethodIs405);
    CPPUNIT_TEST(testHeadServedByGet);
    CPPUNIT_TEST(testOversizeContentLengthIs413);
    CPPUNIT_TEST(testHugeContentLengthRefusedWithoutReading);
    CPPUNIT_TEST(testBodyWithinLimitReachesPlugin);
    CPPUNIT_TEST(testPluginErrorsUseWireShape);
    CPPUNIT_TEST(testProjectHeaderRules);
    CPPUNIT_TEST(testPublicRouteNeedsNoKey);
    CPPUNIT_TEST(testSseStream);
    CPPUNIT_TEST(testKeepAliveServesSeveralRequests);
    CPPUNIT_TEST(testPerBrowserCallCountsAsActivity);
    CPPUNIT_TEST(testPlainRelay);
    CPPUNIT_TEST(testUpstream421IsNeverFollowed);
    CPPUNIT_TEST(testRelayedByFromAClientIs400);
    CPPUNIT_TEST(testStreamRelayIsSpliced);
    CPPUNIT_TEST(testOpenRelayKeepsSessionActive);
    CPPUNIT_TEST(testRelayToDeadUpstreamIs502);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TestHost> host_;
    std::unique_ptr<Poco::Net::HTTPServer> server_;
    std::uint16_t port_ = 0;

    Reply send(const std::string &method, const std::string &uri,
               const std::map<std::string, std::string> &headers = {},
               const std::optional<std::string> &body = std::nullopt, bool auth = true) {
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        return send_on(session, method, uri, headers, body, auth);
    }

    Reply send_on(Poco::Net::HTTPClientSession &session, const std::string &method, const std::string &uri,
                  const std::map<std::string, std::string> &headers = {},
                  const std::optional<std::string> &body = std::nullopt, bool auth = true) {
        Poco::Net::HTTPRequest req(method, uri, Poco::Net::HTTPMessage::HTTP_1_1);
        if (auth) req.set("Authorization", "Bearer " + kBootstrapKey);
        for (const auto &[k, v] : headers)
            req.set(k, v);
        if (body) req.setContentLength64(static_cast<Poco::Int64>(body->size()));
        auto &out = session.sendRequest(req);
        if (body) out << *body;
        Poco::Net::HTTPResponse res;
        auto &in = session.receiveResponse(res);
        Reply r;
        r.status = static_cast<int>(res.getStatus());
        for (const auto &[k, v] : res)
            r.headers[lower(k)] = v;
        if (method != "HEAD") Poco::StreamCopier::copyToString(in, r.body);
        return r;
    }

public:
    void setUp() override {
        host_ = std::make_unique<TestHost>();
        auto &core = host_->core;
        core.area_prefixes = {{"/browsers", "browsers"},
                              {"/browsers/{id}/fs", "fs"},
                              {"/profiles", "profiles"},
                              {"/extensions", "extensions"},
                              {"/proxies", "proxies"}};
        core.max_body_bytes = 1024;
        host_->load({"ut_alpha", "ut_beta"});
        core.disabled_plugins.insert("proxies");
        server_ = make_tcp_server(core, "127.0.0.1:0", port_);
        server_->start();
        CPPUNIT_ASSERT(port_ != 0);
    }

    void tearDown() override {
        if (server_) {
            // Poco's TCPServer notices a stop only between 250 ms polls of its listening socket;
            // connecting wakes the poll so each test does not wait that out.
            std::atomic<bool> stopping{true};
            std::thread poke([&] {
                while (stopping) {
                    try {
                        Poco::Net::StreamSocket s;
                        s.connect(Poco::Net::SocketAddress("127.0.0.1", port_), Poco::Timespan(0, 200000));
                    } catch (const std::exception &) {
                    }
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                }
            });
            server_->stopAll(true);
            stopping = false;
            poke.join();
            server_.reset();
        }
        host_.reset();
    }

    void testNoKeyIs401() {
        for (auto uri : {"/ut/alpha/hello/x", "/nope", "/profiles"}) {
            auto r = send("GET", uri, {}, std::nullopt, false);
            assert_wire_error(r, 401, "unauthorized");
        }
    }

    void testBadKeyIs401() {
        auto r = send("GET", "/ut/alpha/hello/x", {{"Authorization", "Bearer not-the-key"}}, std::nullopt, false);
        assert_wire_error(r, 401, "unauthorized");
        r = send("GET", "/ut/alpha/hello/x", {{"Authorization", "Basic abc"}}, std::nullopt, false);
        assert_wire_error(r, 401, "unauthorized");
    }

    void testBootstrapKeyIs200() {
        auto r = send("GET", "/ut/alpha/hello/a%2Fb?q=x+y%21");
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 200, r.status);
        CPPUNIT_ASSERT_EQUAL(std::string("application/json"), r.header("content-type"));
        CPPUNIT_ASSERT_EQUAL(std::string("yes"), r.header("x-alpha"));
        CPPUNIT_ASSERT_EQUAL(std::to_string(r.body.size()), r.header("content-length"));
        auto j = r.body_json();
        CPPUNIT_ASSERT_EQUAL(std::string("a/b"), j["name"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("x y!"), j["q"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(2, j["notes"].get<int>());
        CPPUNIT_ASSERT_EQUAL(host_->default_project(), j["caller"]["project_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(host_->core.auth->default_org(), j["caller"]["org_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(false, j["caller"]["project_scoped"].get<bool>());
    }

    void testRequestIdOnEveryAnswer() {
        auto a = send("GET", "/ut/alpha/hello/x");
        auto b = send("GET", "/nope", {}, std::nullopt, false);
        auto c = send("GET", "/nope");
        std::set<std::string> ids;
        for (const auto *r : {&a, &b, &c}) {
            auto id = r->header("x-request-id");
            CPPUNIT_ASSERT_MESSAGE("no X-Request-Id on a " + std::to_string(r->status), !id.empty());
            CPPUNIT_ASSERT(id.size() >= 8);
            ids.insert(id);
        }
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), ids.size());
    }

    void testUnknownPathIs404WireError() {
        auto r = send("GET", "/definitely/not/here");
        assert_wire_error(r, 404, "not_found");
        CPPUNIT_ASSERT(r.body_json()["message"].get<std::string>().find("/definitely/not/here") != std::string::npos);
        CPPUNIT_ASSERT(!r.body_json().contains("details"));
        // An event-stream request answered with an error ends its connection (it may be the
        // far end of a relay splice); an ordinary one keeps it.
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        session.setKeepAlive(true);
        auto plain = send_on(session, "GET", "/definitely/not/here");
        CPPUNIT_ASSERT(lower(plain.header("connection")) != "close");
        auto sse = send_on(session, "GET", "/definitely/not/here", {{"Accept", "text/event-stream"}});
        assert_wire_error(sse, 404, "not_found");
        CPPUNIT_ASSERT_EQUAL(std::string("close"), lower(sse.header("connection")));
    }

    void testKnownAreaWithoutPluginIs501() {
        auto r = send("GET", "/profiles");
        assert_wire_error(r, 501, "not_implemented");
        CPPUNIT_ASSERT_EQUAL(std::string("false"), r.header("x-should-retry"));
        auto deep = send("POST", "/profiles/p1/something", {}, std::string("{}"));
        assert_wire_error(deep, 501, "not_implemented");
        // The longest matching area names the plugin.
        auto fs = send("GET", "/browsers/abc/fs/home/kernel");
        assert_wire_error(fs, 501, "not_implemented");
        CPPUNIT_ASSERT_MESSAGE(fs.body, fs.body.find("fs") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(fs.body, fs.body.find("area: fs") != std::string::npos);
    }

    void testDisabledPluginIs404NamingIt() {
        auto r = send("GET", "/proxies");
        assert_wire_error(r, 404, "not_found");
        CPPUNIT_ASSERT_MESSAGE(r.body, r.body.find("proxies") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(r.body, r.body.find("disabled") != std::string::npos);
    }

    void testWrongMethodIs405() {
        auto r = send("DELETE", "/ut/alpha/hello/x");
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 405, r.status);
        CPPUNIT_ASSERT_EQUAL(std::string("GET"), r.header("allow"));
        CPPUNIT_ASSERT_EQUAL(std::string("method_not_allowed"), r.body_json()["code"].get<std::string>());
    }

    void testHeadServedByGet() {
        auto get = send("GET", "/ut/alpha/hello/x");
        auto head = send("HEAD", "/ut/alpha/hello/x");
        CPPUNIT_ASSERT_EQUAL(200, head.status);
        CPPUNIT_ASSERT_EQUAL(get.header("content-length"), head.header("content-length"));
        CPPUNIT_ASSERT_EQUAL(std::string(), head.body);
    }

    void testOversizeContentLengthIs413() {
        // Just over the limit, body sent: 413, and the keep-alive connection stays usable (the
        // refused body must not be parsed as the next request).
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        session.setKeepAlive(true);
        auto r = send_on(session, "POST", "/ut/alpha/echo", {}, std::string(1025, 'x'));
        assert_wire_error(r, 413, "payload_too_large");
        CPPUNIT_ASSERT(!r.header("x-request-id").empty());
        auto next = send_on(session, "GET", "/ut/alpha/hello/after");
        CPPUNIT_ASSERT_EQUAL_MESSAGE(next.body, 200, next.status);
        CPPUNIT_ASSERT_EQUAL(std::string("after"), next.body_json()["name"].get<std::string>());
    }

    void testHugeContentLengthRefusedWithoutReading() {
        // Only the head of a 1 GiB upload: the host must answer from Content-Length alone.
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        Poco::Net::HTTPRequest req("POST", "/ut/alpha/echo", Poco::Net::HTTPMessage::HTTP_1_1);
        req.set("Authorization", "Bearer " + kBootstrapKey);
        req.setContentLength64(1ll << 30);
        session.sendRequest(req);
        Poco::Net::HTTPResponse res;
        auto &in = session.receiveResponse(res);
        Reply r;
        r.status = static_cast<int>(res.getStatus());
        for (const auto &[k, v] : res)
            r.headers[lower(k)] = v;
        Poco::StreamCopier::copyToString(in, r.body);
        assert_wire_error(r, 413, "payload_too_large");
    }

    void testBodyWithinLimitReachesPlugin() {
        auto r = send("POST", "/ut/alpha/echo", {{"Content-Type", "application/octet-stream"}}, std::string(1024, 'b'));
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 201, r.status);
        CPPUNIT_ASSERT_EQUAL(1024, r.body_json()["size"].get<int>());
    }

    void testPluginErrorsUseWireShape() {
        auto conflict = send("GET", "/ut/alpha/conflict");
        assert_wire_error(conflict, 409, "conflict");
        CPPUNIT_ASSERT_EQUAL(std::string("alpha is busy"), conflict.body_json()["message"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("false"), conflict.header("x-should-retry"));

        auto invalid = send("POST", "/ut/alpha/validate", {}, std::string(R"({"name": 5})"));
        assert_wire_error(invalid, 400, "bad_request");
        auto details = invalid.body_json()["details"];
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), details.size());
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_input"), details[0]["code"].get<std::string>());
        CPPUNIT_ASSERT(details[0]["message"].get<std::string>().find("name") != std::string::npos);

        auto malformed = send("POST", "/ut/alpha/validate", {}, std::string("{not json"));
        assert_wire_error(malformed, 400, "bad_request");

        auto fine = send("POST", "/ut/alpha/validate", {}, std::string(R"({"name": "ok"})"));
        CPPUNIT_ASSERT_EQUAL(204, fine.status);
        CPPUNIT_ASSERT_EQUAL(std::string(), fine.body);

        auto boom = send("GET", "/ut/alpha/boom");
        assert_wire_error(boom, 500, "internal");
    }

    void testProjectHeaderRules() {
        auto &auth = *host_->core.auth;
        auto project = auth.create_project("ci");
        auto scoped = auth.create_key("ci", project);
        auto own = send("GET", "/ut/alpha/hello/x", {{"Authorization", "Bearer " + scoped}}, std::nullopt, false);
        CPPUNIT_ASSERT_EQUAL(200, own.status);
        CPPUNIT_ASSERT_EQUAL(project, own.body_json()["caller"]["project_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(true, own.body_json()["caller"]["project_scoped"].get<bool>());

        auto other = send("GET", "/ut/alpha/hello/x",
                          {{"Authorization", "Bearer " + scoped}, {"X-Kernel-Project-Id", host_->default_project()}},
                          std::nullopt, false);
        assert_wire_error(other, 403, "forbidden");

        auto chosen = send("GET", "/ut/alpha/hello/x", {{"X-Kernel-Project-Id", project}});
        CPPUNIT_ASSERT_EQUAL(200, chosen.status);
        CPPUNIT_ASSERT_EQUAL(project, chosen.body_json()["caller"]["project_id"].get<std::string>());

        auto unknown = send("GET", "/ut/alpha/hello/x", {{"X-Kernel-Project-Id", "proj_nope"}});
        assert_wire_error(unknown, 404, "not_found");
    }

    void testPublicRouteNeedsNoKey() {
        auto r = send("GET", "/ut/alpha/public", {}, std::nullopt, false);
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 200, r.status);
        CPPUNIT_ASSERT_EQUAL(json::object(), r.body_json()["caller"]);
    }

    void testSseStream() {
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        Poco::Net::HTTPRequest req("GET", "/ut/alpha/events", Poco::Net::HTTPMessage::HTTP_1_1);
        req.set("Authorization", "Bearer " + kBootstrapKey);
        req.set("Accept", "text/event-stream");
        session.sendRequest(req);
        Poco::Net::HTTPResponse res;
        auto &in = session.receiveResponse(res);
        CPPUNIT_ASSERT_EQUAL(200, static_cast<int>(res.getStatus()));
        CPPUNIT_ASSERT_EQUAL(std::string("text/event-stream"), res.getContentType());
        CPPUNIT_ASSERT(res.has("X-Request-Id"));
        std::string body;
        Poco::StreamCopier::copyToString(in, body); // the stream ends when the plugin closes it
        CPPUNIT_ASSERT_EQUAL(std::string("data: {\"n\":0}\n\ndata: {\"n\":1}\n\ndata: {\"n\":2}\n\n"), body);
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return host_->core.loop.connection_count() == 0; }));
    }

    void testKeepAliveServesSeveralRequests() {
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        session.setKeepAlive(true);
        for (int i = 0; i < 5; ++i) {
            auto r = send_on(session, "GET", "/ut/alpha/hello/k" + std::to_string(i));
            CPPUNIT_ASSERT_EQUAL(200, r.status);
            CPPUNIT_ASSERT_EQUAL("k" + std::to_string(i), r.body_json()["name"].get<std::string>());
            auto e = send_on(session, "GET", "/nope");
            CPPUNIT_ASSERT_EQUAL(404, e.status);
        }
    }
    void testPerBrowserCallCountsAsActivity() {
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-1), host_->core.activity.idle_ms("b_probe"));
        auto r = send("GET", "/browsers/b_probe/ut_probe");
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 200, r.status);
        CPPUNIT_ASSERT_EQUAL(0, r.body_json()["idle_ms_during_call"].get<int>());
        CPPUNIT_ASSERT(host_->core.activity.idle_ms("b_probe") >= 1);
    }

    void testPlainRelay() {
        RawUpstream up;
        auto p = std::to_string(up.port());
        auto r =
            send("POST", "/ut/alpha/relay/" + p + "/api/echo?x=1&y=%2F", {{"X-Custom", "v1"}}, std::string("hello"));
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 200, r.status);
        CPPUNIT_ASSERT_EQUAL(std::string("{\"ok\":true}"), r.body);
        CPPUNIT_ASSERT_EQUAL(std::string("application/json"), r.header("content-type"));
        CPPUNIT_ASSERT_EQUAL(std::string("yes"), r.header("x-up"));
        CPPUNIT_ASSERT(r.header("x-request-id") != "upstream-id"); // ours, not the upstream's
        CPPUNIT_ASSERT(!r.header("x-request-id").empty());
        auto reqs = up.requests();
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), reqs.size());
        const auto &seen = reqs[0];
        CPPUNIT_ASSERT_MESSAGE(seen, seen.rfind("POST /api/echo?x=1&y=%2F HTTP/1.1\r\n", 0) == 0);
        auto l = lower(seen);
        CPPUNIT_ASSERT_MESSAGE(seen, l.find("\r\nhost: 127.0.0.1:" + p + "\r\n") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(seen, l.find("\r\nx-custom: v1\r\n") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(seen, l.find("authorization") == std::string::npos); // the key stays here
        CPPUNIT_ASSERT_MESSAGE(seen, l.find("\r\ncontent-length: 5\r\n") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(seen, seen.size() >= 5 && seen.compare(seen.size() - 5, 5, "hello") == 0);
        // Counted, and over: the answer streams out before the relay returns, so the end may
        // follow the client's last byte by a moment.
        for (int i = 0; i < 100 && host_->core.activity.idle_ms("relay-" + p) < 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        CPPUNIT_ASSERT(host_->core.activity.idle_ms("relay-" + p) >= 1);
    }

    // Issue 40: an instance answering 421 with an owner_url does not move the caller's request.
    void testUpstream421IsNeverFollowed() {
        RawUpstream hostile;
        RawUpstream elsewhere;
        auto r = send("POST",
                      "/ut/alpha/relay/" + std::to_string(hostile.port()) + "/misdirected/" +
                          std::to_string(elsewhere.port()),
                      {}, std::string("{}"));
        CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 502, r.status);
        CPPUNIT_ASSERT_EQUAL(std::string("upstream_unavailable"), r.body_json()["code"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), hostile.requests().size());
        CPPUNIT_ASSERT(elsewhere.requests().empty());
    }

    void testRelayedByFromAClientIs400() {
        using Headers = std::map<std::string, std::string>;
        for (const Headers &h :
             {Headers{{"X-Hangar-Relayed-By", "node-b"}},
              Headers{{"X-Hangar-Relayed-By", "node-b"}, {"X-Hangar-Relay-Proof", "v1.1." + std::string(64, '0')}}}) {
            auto r = send("GET", "/ut/alpha/hello/x", h);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(r.body, 400, r.status);
            CPPUNIT_ASSERT(r.body.find("X-Hangar-Relayed-By") != std::string::npos);
        }
    }

    void testStreamRelayIsSpliced() {
        RawUpstream up;
        auto p = std::to_string(up.port());
        auto r = send("GET", "/ut/alpha/relay/" + p + "/sse?since=3", {{"Accept", "text/event-stream"}});
        CPPUNIT_ASSERT_EQUAL(200, r.status);
        CPPUNIT_ASSERT_EQUAL(std::string("text/event-stream"), r.header("content-type"));
        CPPUNIT_ASSERT_EQUAL(std::string("data: {\"up\":1}\n\ndata: {\"up\":2}\n\n"), r.body);
        auto reqs = up.requests();
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), reqs.size());
        CPPUNIT_ASSERT_MESSAGE(reqs[0], reqs[0].rfind("GET /sse?since=3 HTTP/1.1\r\n", 0) == 0);
        CPPUNIT_ASSERT_MESSAGE(reqs[0], lower(reqs[0]).find("\r\nhost: 127.0.0.1:" + p + "\r\n") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(reqs[0], lower(reqs[0]).find("authorization") == std::string::npos);
        // The splice carries this exchange only: the upstream is asked to close after it.
        CPPUNIT_ASSERT_MESSAGE(reqs[0], lower(reqs[0]).find("\r\nconnection: close\r\n") != std::string::npos);
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return host_->core.loop.connection_count() == 0; }));
    }

    void testOpenRelayKeepsSessionActive() {
        RawUpstream up;
        auto p = std::to_string(up.port());
        Poco::Net::HTTPClientSession session("127.0.0.1", port_);
        session.setTimeout(Poco::Timespan(5, 0));
        Poco::Net::HTTPRequest req("GET", "/ut/alpha/relay/" + p + "/hold", Poco::Net::HTTPMessage::HTTP_1_1);
        req.set("Authorization", "Bearer " + kBootstrapKey);
        req.set("Accept", "text/event-stream");
        session.sendRequest(req);
        Poco::Net::HTTPResponse res;
        auto &in = session.receiveResponse(res);
        CPPUNIT_ASSERT_EQUAL(200, static_cast<int>(res.getStatus()));
        std::string first(14, '\0');
        in.read(first.data(), static_cast<std::streamsize>(first.size()));
        CPPUNIT_ASSERT_EQUAL(std::string("data: {\"up\":1}"), first);
        // The relay is open: the session is active however long it lasts.
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), host_->core.activity.idle_ms("relay-" + p));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), host_->core.loop.connection_count());
        up.release();
        std::string rest;
        Poco::StreamCopier::copyToString(in, rest);
        CPPUNIT_ASSERT_EQUAL(std::string("\n\n"), rest);
        // The upstream is gone: the relay ends without waiting for the client to close.
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return host_->core.activity.idle_ms("relay-" + p) >= 1; }));
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return host_->core.loop.connection_count() == 0; }));
    }

    void testRelayToDeadUpstreamIs502() {
        std::uint16_t dead;
        {
            Poco::Net::ServerSocket s(Poco::Net::SocketAddress("127.0.0.1", 0));
            dead = s.address().port();
        }
        auto r = send("GET", "/ut/alpha/relay/" + std::to_string(dead) + "/x");
        assert_wire_error(r, 502, "upstream_unavailable");
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-1), host_->core.activity.idle_ms("relay-" + std::to_string(dead)));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(HttpTest);
