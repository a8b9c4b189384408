// EventLoop: byte splicing with half-close, and server-sent-event connections.
#include "event_loop.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

using hangar::host::EventLoop;
using hangar::host::UniqueFd;
using hangar::test::eventually;

namespace {

struct Pair {
    UniqueFd x, y;
};

Pair socket_pair() {
    int fds[2];
    CPPUNIT_ASSERT_EQUAL(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

void write_all(int fd, const std::string &data) {
    std::size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        CPPUNIT_ASSERT_MESSAGE("send failed", n > 0);
        off += static_cast<std::size_t>(n);
    }
}

// Reads until `want` bytes arrived, EOF, or the timeout; returns what came.
std::string read_n(int fd, std::size_t want, int timeout_ms = 3000) {
    std::string out;
    auto deadline = hangar::host::steady_ms() + timeout_ms;
    char buf[65536];
    while (out.size() < want) {
        int left = static_cast<int>(deadline - hangar::host::steady_ms());
        if (left <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, left) <= 0) continue;
        ssize_t n = ::recv(fd, buf, std::min(sizeof buf, want - out.size()), 0);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

// Reads until EOF (true) or the timeout (false).
bool read_to_eof(int fd, std::string &out, int timeout_ms = 3000) {
    auto deadline = hangar::host::steady_ms() + timeout_ms;
    char buf[65536];
    while (true) {
        int left = static_cast<int>(deadline - hangar::host::steady_ms());
        if (left <= 0) return false;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, left) <= 0) continue;
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n == 0) return true;
        if (n < 0) return errno == ECONNRESET;
        out.append(buf, static_cast<std::size_t>(n));
    }
}

// True once the peer of `fd` has ended its writing (a read returns 0 right away).
bool sees_eof(int fd, int timeout_ms = 3000) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char c;
    return ::recv(fd, &c, 1, MSG_DONTWAIT) == 0;
}

std::string pattern(std::size_t n, unsigned seed) {
    std::string s(n, '\0');
    unsigned v = seed;
    for (auto &c : s) {
        v = v * 1103515245u + 12345u;
        c = static_cast<char>(v >> 16);
    }
    return s;
}

} // namespace

class EventLoopTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(EventLoopTest);
    CPPUNIT_TEST(testSpliceBothWays);
    CPPUNIT_TEST(testSplicePrefixesAreSentFirst);
    CPPUNIT_TEST(testSpliceLargeTransferWithBackPressure);
    CPPUNIT_TEST(testHalfClosePropagatesAndOnCloseRunsOnce);
    CPPUNIT_TEST(testSpliceEndsWhenOneSideVanishes);
    CPPUNIT_TEST(testWatchHoldsUntilThePeerCloses);
    CPPUNIT_TEST(testWatchOfNothingEndsAtOnce);
    CPPUNIT_TEST(testSseFramesInOrder);
    CPPUNIT_TEST(testSseSendRightAfterAdd);
    CPPUNIT_TEST(testSseCloseFlushesQueuedFrames);
    CPPUNIT_TEST(testSseClientGoneMakesSendFail);
    CPPUNIT_TEST(testStopClosesEverything);
    CPPUNIT_TEST_SUITE_END();

public:
    void testSpliceBothWays() {
        EventLoop loop;
        auto client = socket_pair(), upstream = socket_pair();
        std::atomic<int> closed{0};
        loop.splice(std::move(client.y), std::move(upstream.x), "", "", [&] { closed++; });
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        write_all(client.x.get(), "hello upstream");
        CPPUNIT_ASSERT_EQUAL(std::string("hello upstream"), read_n(upstream.y.get(), 14));
        write_all(upstream.y.get(), "hello client");
        CPPUNIT_ASSERT_EQUAL(std::string("hello client"), read_n(client.x.get(), 12));
        for (int i = 0; i < 20; ++i) {
            auto m = "ping " + std::to_string(i);
            write_all(client.x.get(), m);
            CPPUNIT_ASSERT_EQUAL(m, read_n(upstream.y.get(), m.size()));
            auto r = "pong " + std::to_string(i);
            write_all(upstream.y.get(), r);
            CPPUNIT_ASSERT_EQUAL(r, read_n(client.x.get(), r.size()));
        }
        CPPUNIT_ASSERT_EQUAL(0, closed.load());
    }

    void testSplicePrefixesAreSentFirst() {
        EventLoop loop;
        auto client = socket_pair(), upstream = socket_pair();
        loop.splice(std::move(client.y), std::move(upstream.x), "GET / HTTP/1.1\r\n\r\n", "already-read", nullptr);
        CPPUNIT_ASSERT_EQUAL(std::string("GET / HTTP/1.1\r\n\r\n"), read_n(upstream.y.get(), 18));
        CPPUNIT_ASSERT_EQUAL(std::string("already-read"), read_n(client.x.get(), 12));
        write_all(client.x.get(), "after");
        CPPUNIT_ASSERT_EQUAL(std::string("after"), read_n(upstream.y.get(), 5));
    }

    void testSpliceLargeTransferWithBackPressure() {
        EventLoop loop;
        auto client = socket_pair(), upstream = socket_pair();
        loop.splice(std::move(client.y), std::move(upstream.x), "", "", nullptr);
        // 4 MiB each way at once, far more than the socket buffers hold: the loop must stop
        // reading a side while the other is full, and lose nothing.
        const std::string up = pattern(4u << 20, 1), down = pattern(4u << 20, 2);
        std::string got_up, got_down;
        std::thread w1([&] { write_all(client.x.get(), up); });
        std::thread w2([&] { write_all(upstream.y.get(), down); });
        std::thread r1([&] { got_up = read_n(upstream.y.get(), up.size(), 10000); });
        got_down = read_n(client.x.get(), down.size(), 10000);
        r1.join();
        w1.join();
        w2.join();
        CPPUNIT_ASSERT_EQUAL(up.size(), got_up.size());
        CPPUNIT_ASSERT(up == got_up);
        CPPUNIT_ASSERT_EQUAL(down.size(), got_down.size());
        CPPUNIT_ASSERT(down == got_down);
    }

    void testHalfClosePropagatesAndOnCloseRunsOnce() {
        EventLoop loop;
        auto client = socket_pair(), upstream = socket_pair();
        std::atomic<int> closed{0};
        loop.splice(std::move(client.y), std::move(upstream.x), "", "", [&] { closed++; });
        write_all(client.x.get(), "last words");
        ::shutdown(client.x.get(), SHUT_WR);
        // The upstream gets the last bytes, then the end: a relay never stays half-open, so a
        // client that lingers cannot keep a session counted as active.
        CPPUNIT_ASSERT_EQUAL(std::string("last words"), read_n(upstream.y.get(), 10));
        CPPUNIT_ASSERT(sees_eof(upstream.y.get()));
        CPPUNIT_ASSERT(sees_eof(client.x.get()));
        CPPUNIT_ASSERT(eventually([&] { return closed.load() == 1; }));
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), loop.connection_count());
    }

    void testSpliceEndsWhenOneSideVanishes() {
        EventLoop loop;
        auto client = socket_pair(), upstream = socket_pair();
        std::atomic<int> closed{0};
        loop.splice(std::move(client.y), std::move(upstream.x), "", "", [&] { closed++; });
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        client.x.reset(); // the client is simply gone
        CPPUNIT_ASSERT(sees_eof(upstream.y.get()));
        upstream.y.reset();
        CPPUNIT_ASSERT(eventually([&] { return closed.load() == 1; }));
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), loop.connection_count());
        loop.stop();
        CPPUNIT_ASSERT_EQUAL(1, closed.load());
    }

    void testWatchHoldsUntilThePeerCloses() {
        EventLoop loop;
        auto p = socket_pair();
        std::atomic<int> closed{0};
        loop.watch(std::move(p.y), [&] { closed++; });
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        // What the other side sends is dropped, and does not end the watch.
        write_all(p.x.get(), pattern(200000, 7));
        ::usleep(100 * 1000);
        CPPUNIT_ASSERT_EQUAL(0, closed.load());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), loop.connection_count());
        p.x.reset();
        CPPUNIT_ASSERT(eventually([&] { return closed.load() == 1; }));
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), loop.connection_count());
    }

    void testWatchOfNothingEndsAtOnce() {
        EventLoop loop;
        int closed = 0;
        loop.watch(UniqueFd(), [&] { closed++; });
        CPPUNIT_ASSERT_EQUAL(1, closed);
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), loop.connection_count());
    }

    void testSseFramesInOrder() {
        EventLoop loop;
        auto p = socket_pair();
        const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";
        auto sse = loop.add_sse(std::move(p.y), head);
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        CPPUNIT_ASSERT_EQUAL(head, read_n(p.x.get(), head.size()));
        std::string expected;
        for (int i = 0; i < 100; ++i) {
            auto frame = "{\"n\":" + std::to_string(i) + "}";
            CPPUNIT_ASSERT(sse->send_frame(frame));
            expected += "data: " + frame + "\n\n";
        }
        CPPUNIT_ASSERT(sse->open());
        CPPUNIT_ASSERT_EQUAL(expected, read_n(p.x.get(), expected.size()));
        sse->close();
        CPPUNIT_ASSERT(!sse->send_frame("{\"late\":true}"));
        std::string rest;
        CPPUNIT_ASSERT(read_to_eof(p.x.get(), rest));
        CPPUNIT_ASSERT_EQUAL(std::string(), rest);
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 0; }));
        CPPUNIT_ASSERT(!sse->open());
    }

    void testSseSendRightAfterAdd() {
        // A handler typically opens the stream and sends at once, before the loop thread has
        // picked the socket up. Those frames must not be refused or lost.
        EventLoop loop;
        for (int round = 0; round < 20; ++round) {
            auto p = socket_pair();
            auto sse = loop.add_sse(std::move(p.y), "HEAD\n");
            bool sent = sse->send_frame("{\"first\":" + std::to_string(round) + "}");
            CPPUNIT_ASSERT_MESSAGE("send_frame right after add_sse was refused (round " + std::to_string(round) + ")",
                                   sent);
            sse->close();
            std::string all;
            CPPUNIT_ASSERT(read_to_eof(p.x.get(), all));
            CPPUNIT_ASSERT_EQUAL("HEAD\ndata: {\"first\":" + std::to_string(round) + "}\n\n", all);
        }
    }

    void testSseCloseFlushesQueuedFrames() {
        EventLoop loop;
        auto p = socket_pair();
        int small = 4096;
        ::setsockopt(p.y.get(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        ::setsockopt(p.x.get(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        auto sse = loop.add_sse(std::move(p.y), "H\n");
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        CPPUNIT_ASSERT(eventually([&] { return read_n(p.x.get(), 2, 50) == "H\n"; }));
        // ~1 MiB of frames while nobody reads: most of it has to wait in the connection's queue.
        std::string expected;
        const std::string filler(1000, 'x');
        for (int i = 0; i < 1000; ++i) {
            auto frame = "{\"i\":" + std::to_string(i) + ",\"pad\":\"" + filler + "\"}";
            CPPUNIT_ASSERT(sse->send_frame(frame));
            expected += "data: " + frame + "\n\n";
        }
        sse->close();
        CPPUNIT_ASSERT(!sse->send_frame("{}"));
        std::string got;
        CPPUNIT_ASSERT_MESSAGE("the stream did not end after close()", read_to_eof(p.x.get(), got, 10000));
        CPPUNIT_ASSERT_EQUAL(expected.size(), got.size());
        CPPUNIT_ASSERT(expected == got);
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 0; }));
    }

    void testSseClientGoneMakesSendFail() {
        EventLoop loop;
        auto p = socket_pair();
        auto sse = loop.add_sse(std::move(p.y), "H\n");
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 1; }));
        CPPUNIT_ASSERT(sse->send_frame("{\"ok\":1}"));
        p.x.reset(); // the client disconnects
        bool refused = eventually([&] { return !sse->send_frame("{\"n\":1}"); }, 3000);
        CPPUNIT_ASSERT_MESSAGE("send_frame kept succeeding after the client left", refused);
        CPPUNIT_ASSERT(!sse->open());
        CPPUNIT_ASSERT(eventually([&] { return loop.connection_count() == 0; }));
        sse->close(); // harmless after the fact
    }

    void testStopClosesEverything() {
        auto loop = std::make_unique<EventLoop>();
        auto a = socket_pair(), b = socket_pair(), s = socket_pair(), w = socket_pair();
        std::atomic<int> closed{0};
        loop->splice(std::move(a.y), std::move(b.x), "", "", [&] { closed++; });
        auto sse = loop->add_sse(std::move(s.y), "H\n");
        loop->watch(std::move(w.y), [&] { closed++; });
        CPPUNIT_ASSERT(eventually([&] { return loop->connection_count() == 3; }));
        loop->stop();
        loop->stop(); // idempotent
        CPPUNIT_ASSERT_EQUAL(2, closed.load());
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), loop->connection_count());
        CPPUNIT_ASSERT(sees_eof(a.x.get()));
        CPPUNIT_ASSERT(sees_eof(b.y.get()));
        CPPUNIT_ASSERT(sees_eof(w.x.get()));
        CPPUNIT_ASSERT(!sse->open());
        CPPUNIT_ASSERT(!sse->send_frame("{}"));
        loop.reset();
        CPPUNIT_ASSERT_EQUAL(2, closed.load());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(EventLoopTest);
