// Relay observers: the "method" read out of WebSocket frames on the fly (masked, split anywhere,
// fragmented, with control frames between), message counts and close reasons, and a real splice
// reporting open, methods and close to an observer.
#include "event_loop.hpp"
#include "relay_watch.hpp"
#include "test_support.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

using hangar::host::EventLoop;
using hangar::host::MethodScanner;
using hangar::host::RelayObservers;
using hangar::host::UniqueFd;
using hangar::host::WsFrameReader;
using hangar::test::eventually;

namespace {

std::string frame(int opcode, const std::string &payload, bool fin = true, bool masked = true) {
    std::string f;
    f += static_cast<char>((fin ? 0x80 : 0) | opcode);
    const std::uint8_t mbit = masked ? 0x80 : 0;
    if (payload.size() < 126) {
        f += static_cast<char>(mbit | payload.size());
    } else if (payload.size() < 65536) {
        f += static_cast<char>(mbit | 126);
        f += static_cast<char>(payload.size() >> 8);
        f += static_cast<char>(payload.size() & 0xff);
    } else {
        f += static_cast<char>(mbit | 127);
        for (int i = 7; i >= 0; --i)
            f += static_cast<char>((payload.size() >> (8 * i)) & 0xff);
    }
    const std::uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    if (masked)
        for (auto m : mask)
            f += static_cast<char>(m);
    for (std::size_t i = 0; i < payload.size(); ++i)
        f += masked ? static_cast<char>(payload[i] ^ mask[i & 3]) : payload[i];
    return f;
}

std::string scan(const std::string &json) {
    MethodScanner s;
    for (char c : json)
        if (s.feed(c) != MethodScanner::State::scanning) break;
    return s.state() == MethodScanner::State::found ? s.method() : "<none>";
}

struct Seen {
    std::mutex m;
    std::vector<std::string> events;
    void add(std::string e) {
        std::lock_guard lock(m);
        events.push_back(std::move(e));
    }
    std::vector<std::string> get() {
        std::lock_guard lock(m);
        return events;
    }
};

std::uint32_t observe(void *user, const hangar_relay_event *e) {
    auto &seen = *static_cast<Seen *>(user);
    std::string key(e->activity_key.ptr, e->activity_key.len);
    if (e->kind == HANGAR_RELAY_OPENED) {
        seen.add("open " + key + " " + std::string(e->path.ptr, e->path.len));
        return HANGAR_RELAY_WATCH_CLOSE | HANGAR_RELAY_WATCH_MESSAGES;
    }
    if (e->kind == HANGAR_RELAY_MESSAGE) seen.add("method " + std::string(e->method.ptr, e->method.len));
    if (e->kind == HANGAR_RELAY_CLOSED)
        seen.add("close " + std::string(e->reason.ptr, e->reason.len) + " " + std::to_string(e->message_count));
    return 0;
}

} // namespace

class RelayWatchTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RelayWatchTest);
    CPPUNIT_TEST(testTopLevelMethodOnly);
    CPPUNIT_TEST(testFramesSplitAnywhere);
    CPPUNIT_TEST(testFragmentedAndControlFrames);
    CPPUNIT_TEST(testUpgradeAnswerAndClose);
    CPPUNIT_TEST(testSpliceReportsToObserver);
    CPPUNIT_TEST(testNobodyWatchingMeansNoWatcher);
    CPPUNIT_TEST_SUITE_END();

public:
    void testTopLevelMethodOnly() {
        CPPUNIT_ASSERT_EQUAL(std::string("Page.navigate"),
                             scan(R"({"id":1,"method":"Page.navigate","params":{"url":"x"}})"));
        // A nested "method" (Fetch.continueRequest's) and one inside a string are not the command.
        CPPUNIT_ASSERT_EQUAL(std::string("Fetch.continueRequest"),
                             scan(R"({"params":{"method":"POST","x":"\"method\":\"no\""},"id":2,)"
                                  R"( "method" : "Fetch.continueRequest"})"));
        CPPUNIT_ASSERT_EQUAL(std::string("<none>"), scan(R"({"id":3,"result":{"method":"x"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("<none>"), scan(R"([{"method":"x"}])"));
        CPPUNIT_ASSERT_EQUAL(std::string("<none>"), scan(R"({"method":42})"));
        CPPUNIT_ASSERT_EQUAL(std::string("<none>"), scan("{\"method\":\"" + std::string(300, 'a') + "\"}"));
    }

    void testFramesSplitAnywhere() {
        std::string bytes = frame(1, R"({"id":1,"method":"Runtime.evaluate","params":{"expression":")" +
                                         std::string(70000, 'x') + "\"}}") +
                            frame(1, R"({"id":2,"method":"Page.enable"})");
        for (std::size_t step : {std::size_t{1}, std::size_t{3}, std::size_t{7}, std::size_t{4096}}) {
            std::vector<std::string> got;
            WsFrameReader r(false, [&](const std::string &m) { got.push_back(m); });
            for (std::size_t i = 0; i < bytes.size(); i += step)
                r.feed(bytes.data() + i, std::min(step, bytes.size() - i));
            CPPUNIT_ASSERT_EQUAL(std::size_t{2}, got.size());
            CPPUNIT_ASSERT_EQUAL(std::string("Runtime.evaluate"), got[0]);
            CPPUNIT_ASSERT_EQUAL(std::string("Page.enable"), got[1]);
            CPPUNIT_ASSERT_EQUAL(std::uint64_t{2}, r.messages());
        }
    }

    void testFragmentedAndControlFrames() {
        std::vector<std::string> got;
        WsFrameReader r(false, [&](const std::string &m) { got.push_back(m); });
        std::string bytes = frame(1, R"({"id":7,"met)", false) + frame(9, "ping") +
                            frame(0, R"(hod":"Target.a)", false) + frame(0, R"(ttach"})", true) +
                            frame(2, "binary {\"method\":\"no\"}");
        r.feed(bytes.data(), bytes.size());
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, got.size());
        CPPUNIT_ASSERT_EQUAL(std::string("Target.attach"), got[0]);
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{2}, r.messages());
        CPPUNIT_ASSERT(!r.sent_close());
    }

    void testUpgradeAnswerAndClose() {
        WsFrameReader up(true, nullptr);
        std::string bytes = "HTTP/1.1 101 WebSocket Protocol Handshake\r\nUpgrade: websocket\r\n\r\n" +
                            frame(1, R"({"id":1,"result":{}})", true, false) + frame(8, "", true, false);
        up.feed(bytes.data(), bytes.size());
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{1}, up.messages());
        CPPUNIT_ASSERT(up.sent_close());
        // An error answer is not followed by frames: nothing is read out of its body.
        WsFrameReader refused(true, nullptr);
        std::string err = "HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\n\x81\x01xhello";
        refused.feed(err.data(), err.size());
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{0}, refused.messages());
    }

    void testSpliceReportsToObserver() {
        EventLoop loop;
        RelayObservers observers;
        Seen seen;
        observers.add("test", "/cdp", &observe, &seen);
        int c[2], u[2];
        CPPUNIT_ASSERT_EQUAL(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, c));
        CPPUNIT_ASSERT_EQUAL(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u));
        UniqueFd client(c[0]), client_far(c[1]), upstream(u[0]), upstream_far(u[1]);
        auto watcher = observers.open("s1", "/cdp/devtools/browser/x", "/browser/cdp", true);
        CPPUNIT_ASSERT(watcher != nullptr);
        loop.splice(hangar::host::loop_fd(client_far.get()), hangar::host::loop_fd(upstream.get()), {}, {}, nullptr,
                    std::move(watcher));
        client_far.reset();
        upstream.reset();
        std::string answer = "HTTP/1.1 101 Switching Protocols\r\n\r\n";
        CPPUNIT_ASSERT(::write(upstream_far.get(), answer.data(), answer.size()) > 0);
        std::string cmd = frame(1, R"({"id":1,"method":"Browser.getVersion","params":{"secret":"p4ss"}})");
        CPPUNIT_ASSERT(::write(client.get(), cmd.data(), cmd.size()) > 0);
        CPPUNIT_ASSERT_MESSAGE("the method is reported", eventually([&] { return seen.get().size() >= 2; }));
        std::string bye = frame(8, "");
        CPPUNIT_ASSERT(::write(client.get(), bye.data(), bye.size()) > 0);
        upstream_far.reset(); // Chromium answers the close by closing first; the client still sent it
        CPPUNIT_ASSERT_MESSAGE("the close is reported", eventually([&] { return seen.get().size() >= 3; }));
        auto ev = seen.get();
        CPPUNIT_ASSERT_EQUAL(std::string("open s1 /cdp/devtools/browser/x"), ev[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("method Browser.getVersion"), ev[1]);
        CPPUNIT_ASSERT_EQUAL(std::string("close client_close 1"), ev[2]);
        for (const auto &e : ev)
            CPPUNIT_ASSERT(e.find("p4ss") == std::string::npos);
    }

    void testNobodyWatchingMeansNoWatcher() {
        RelayObservers observers;
        CPPUNIT_ASSERT(observers.open("s1", "/cdp", "/x", true) == nullptr);
        Seen seen;
        observers.add("test", "/liveview/ws", &observe, &seen);
        CPPUNIT_ASSERT(observers.open("s1", "/cdp", "/x", true) == nullptr);
        observers.remove_owned_by("test");
        CPPUNIT_ASSERT(observers.open("s1", "/liveview/ws", "/x", true) == nullptr);
        CPPUNIT_ASSERT(seen.get().empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RelayWatchTest);
