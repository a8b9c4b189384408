// Unit tests of the background teardowns a DELETE leaves running.
#include "teardowns.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <atomic>
#include <future>
#include <stdexcept>

using namespace hangar::browsers;
using namespace std::chrono_literals;

class TeardownsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TeardownsTest);
    CPPUNIT_TEST(wait_returns_once_that_session_ended);
    CPPUNIT_TEST(a_session_is_ended_once);
    CPPUNIT_TEST(the_teardown_does_not_wait_for_itself);
    CPPUNIT_TEST(wait_all_sees_every_end);
    CPPUNIT_TEST(a_throwing_end_still_finishes);
    CPPUNIT_TEST_SUITE_END();

public:
    void wait_returns_once_that_session_ended() {
        Teardowns t;
        std::promise<void> release;
        auto gate = release.get_future().share();
        t.start("a", [gate] { gate.wait(); });
        t.start("b", [] {});
        CPPUNIT_ASSERT(t.wait("b", 5s));
        CPPUNIT_ASSERT(!t.wait("a", 50ms)); // still held
        CPPUNIT_ASSERT(t.wait("nobody", 0ms));
        release.set_value();
        CPPUNIT_ASSERT(t.wait("a", 5s));
        CPPUNIT_ASSERT_EQUAL(std::size_t{0}, t.running());
    }

    void a_session_is_ended_once() {
        Teardowns t;
        std::promise<void> release;
        auto gate = release.get_future().share();
        t.start("a", [gate] { gate.wait(); });
        CPPUNIT_ASSERT_THROW(t.start("a", [] {}), std::logic_error);
        release.set_value();
        t.wait_all();
        t.start("a", [] {}); // ended, so it may be started again (a pooled session's next lease)
        t.wait_all();
    }

    void the_teardown_does_not_wait_for_itself() {
        Teardowns t;
        std::atomic<bool> waited_for_self{false};
        std::atomic<bool> other_was_waited{true};
        t.start("a", [&] {
            waited_for_self = t.wait("a", 10s) && Teardowns::on_teardown_of("a");
            other_was_waited = Teardowns::on_teardown_of("b");
        });
        t.wait_all();
        CPPUNIT_ASSERT(waited_for_self.load());
        CPPUNIT_ASSERT(!other_was_waited.load());
        CPPUNIT_ASSERT(!Teardowns::on_teardown_of("a"));
    }

    void wait_all_sees_every_end() {
        std::atomic<int> ended{0};
        {
            Teardowns t;
            for (int i = 0; i < 8; ++i)
                t.start("s" + std::to_string(i), [&] {
                    std::this_thread::sleep_for(5ms);
                    ++ended;
                });
            t.wait_all();
            CPPUNIT_ASSERT_EQUAL(8, ended.load());
            t.start("late", [&] { ++ended; });
        } // the destructor waits too
        CPPUNIT_ASSERT_EQUAL(9, ended.load());
    }

    void a_throwing_end_still_finishes() {
        Teardowns t;
        t.start("a", [] { throw std::runtime_error("the instance could not be stopped"); });
        CPPUNIT_ASSERT(t.wait("a", 5s));
        CPPUNIT_ASSERT_EQUAL(std::size_t{0}, t.running());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TeardownsTest);
