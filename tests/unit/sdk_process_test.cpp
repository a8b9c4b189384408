// sdk/include/hangar/process.hpp: descriptors and child processes with RAII, as plugins use them.
#include "test_support.hpp"

#include <hangar/fd_passing.hpp>
#include <hangar/process.hpp>

#include <cppunit/extensions/HelperMacros.h>

#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

using namespace std::chrono_literals;
namespace proc = hangar::proc;
using hangar::test::TempDir;

namespace {

// Everything readable from `fd` until EOF (or 5 s).
std::string read_all(int fd) {
    std::string out;
    char buf[512];
    while (proc::wait_readable(fd, 5000ms)) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

// Whether `pid` is gone (or a zombie waiting for init, which runs nothing any more).
bool gone(pid_t pid) {
    for (int i = 0; i < 200; ++i) {
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        if (!std::getline(stat, line)) return true;
        auto close = line.rfind(')');
        if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return true;
        std::this_thread::sleep_for(10ms);
    }
    return false;
}

} // namespace

class SdkProcessTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkProcessTest);
    CPPUNIT_TEST(testFdClosesOnDestructionAndMoves);
    CPPUNIT_TEST(testFdPassingCarriesTheDescriptorAndTheBytes);
    CPPUNIT_TEST(testSpawnPipesAndExitStatus);
    CPPUNIT_TEST(testExtraFdsReachTheChild);
    CPPUNIT_TEST(testStopReachesTheWholeGroup);
    CPPUNIT_TEST(testDestructorKillsAndReaps);
    CPPUNIT_TEST(testSpawnFailureThrows);
    CPPUNIT_TEST(testEnvironmentWith);
    CPPUNIT_TEST(testRunCapture);
    CPPUNIT_TEST(testWaitReadableTimesOut);
    CPPUNIT_TEST(testMakeDirs);
    CPPUNIT_TEST_SUITE_END();

public:
    void testFdPassingCarriesTheDescriptorAndTheBytes() {
        namespace fdp = hangar::fd_passing;
        int pair[2];
        CPPUNIT_ASSERT_EQUAL(0, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair));
        hangar::proc::Fd here(pair[0]), there(pair[1]);
        auto pipe = hangar::proc::make_pipe();
        const std::string message = "{\"head\":\"GET / HTTP/1.1\"}\n";
        CPPUNIT_ASSERT(fdp::send(here.get(), message, pipe.write.get()));
        pipe.write.reset(); // only the copy that was sent is left
        std::string got;
        hangar::proc::Fd received(fdp::receive(there.get(), got));
        CPPUNIT_ASSERT(received);
        CPPUNIT_ASSERT_EQUAL(message, got);
        CPPUNIT_ASSERT(::fcntl(received.get(), F_GETFD) & FD_CLOEXEC);
        CPPUNIT_ASSERT_EQUAL(ssize_t(2), ::write(received.get(), "ok", 2));
        char buf[2];
        CPPUNIT_ASSERT_EQUAL(ssize_t(2), ::read(pipe.read.get(), buf, 2));
        // Bytes without a descriptor, and the end.
        CPPUNIT_ASSERT_EQUAL(ssize_t(1), ::send(here.get(), "C", 1, 0));
        CPPUNIT_ASSERT_EQUAL(-1, fdp::receive(there.get(), got));
        CPPUNIT_ASSERT_EQUAL(std::string("C"), got);
        here.reset();
        CPPUNIT_ASSERT_EQUAL(-1, fdp::receive(there.get(), got));
        CPPUNIT_ASSERT(got.empty());
    }

    void testFdClosesOnDestructionAndMoves() {
        int raw = -1;
        {
            auto p = proc::make_pipe();
            raw = p.read.get();
            CPPUNIT_ASSERT(::fcntl(raw, F_GETFD) & FD_CLOEXEC);
            proc::Fd moved(std::move(p.read));
            CPPUNIT_ASSERT(!p.read);
            CPPUNIT_ASSERT_EQUAL(raw, moved.get());
            CPPUNIT_ASSERT(::fcntl(raw, F_GETFD) >= 0);
        }
        CPPUNIT_ASSERT_EQUAL(-1, ::fcntl(raw, F_GETFD));
        CPPUNIT_ASSERT_EQUAL(EBADF, errno);
    }

    void testSpawnPipesAndExitStatus() {
        auto out = proc::make_pipe();
        auto err = proc::make_pipe();
        auto child = proc::Child::spawn({"/bin/sh",
                                         {"-c", "echo to-out; echo to-err >&2; exit 3"},
                                         proc::environment_with({}),
                                         out.write.get(),
                                         err.write.get(),
                                         {}});
        out.write.reset();
        err.write.reset();
        CPPUNIT_ASSERT_EQUAL(std::string("to-out\n"), read_all(out.read.get()));
        CPPUNIT_ASSERT_EQUAL(std::string("to-err\n"), read_all(err.read.get()));
        CPPUNIT_ASSERT_EQUAL(std::string("still running"), child.exit_description());
        child.stop();
        CPPUNIT_ASSERT_EQUAL(std::string("exit code 3"), child.exit_description());
        CPPUNIT_ASSERT(!child.running());
    }

    void testExtraFdsReachTheChild() {
        auto three = proc::make_pipe();
        auto child = proc::Child::spawn(
            {"/bin/sh", {"-c", "echo on-three >&3"}, proc::environment_with({}), -1, -1, {{three.write.get(), 3}}});
        three.write.reset();
        CPPUNIT_ASSERT_EQUAL(std::string("on-three\n"), read_all(three.read.get()));
    }

    void testStopReachesTheWholeGroup() {
        auto out = proc::make_pipe();
        // The shell ignores SIGTERM, so the grace period runs out and SIGKILL goes to the group.
        auto child = proc::Child::spawn({"/bin/sh",
                                         {"-c", "trap '' TERM; sleep 30 & echo $!; wait"},
                                         proc::environment_with({}),
                                         out.write.get(),
                                         -1,
                                         {}});
        out.write.reset();
        std::string line;
        char c = 0;
        while (proc::wait_readable(out.read.get(), 5000ms) && ::read(out.read.get(), &c, 1) == 1 && c != '\n')
            line += c;
        pid_t grandchild = std::stoi(line);
        CPPUNIT_ASSERT(child.running());
        child.stop(100ms);
        CPPUNIT_ASSERT(!child.running());
        CPPUNIT_ASSERT_EQUAL(std::string("signal 9"), child.exit_description());
        CPPUNIT_ASSERT(gone(grandchild));
    }

    void testDestructorKillsAndReaps() {
        pid_t pid = -1;
        {
            auto child = proc::Child::spawn({"/bin/sleep", {"30"}, proc::environment_with({}), -1, -1, {}});
            pid = child.pid();
            CPPUNIT_ASSERT(child.running());
        }
        // Reaped by the destructor: not even a zombie is left.
        CPPUNIT_ASSERT_EQUAL(-1, ::kill(pid, 0));
        CPPUNIT_ASSERT_EQUAL(ESRCH, errno);
    }

    void testSpawnFailureThrows() {
        CPPUNIT_ASSERT_THROW(proc::Child::spawn({"/nonexistent/program", {}, {}, -1, -1, {}}), std::runtime_error);
        CPPUNIT_ASSERT(!proc::run_capture("/nonexistent/program", {}, 1000ms));
    }

    void testEnvironmentWith() {
        ::setenv("HANGAR_SDK_TEST_KEEP", "1", 1);
        ::setenv("HANGAR_SDK_TEST_DROP", "1", 1);
        ::setenv("HANGAR_SDK_TEST_OVER", "old", 1);
        auto env =
            proc::environment_with({"HANGAR_SDK_TEST_OVER=new", "HANGAR_SDK_TEST_ADD=x"}, {"HANGAR_SDK_TEST_DROP"});
        auto has = [&](const std::string &kv) { return std::count(env.begin(), env.end(), kv); };
        CPPUNIT_ASSERT_EQUAL(1l, has("HANGAR_SDK_TEST_KEEP=1"));
        CPPUNIT_ASSERT_EQUAL(0l, has("HANGAR_SDK_TEST_DROP=1"));
        CPPUNIT_ASSERT_EQUAL(0l, has("HANGAR_SDK_TEST_OVER=old"));
        CPPUNIT_ASSERT_EQUAL(1l, has("HANGAR_SDK_TEST_OVER=new"));
        CPPUNIT_ASSERT_EQUAL(1l, has("HANGAR_SDK_TEST_ADD=x"));
        for (const char *k : {"HANGAR_SDK_TEST_KEEP", "HANGAR_SDK_TEST_DROP", "HANGAR_SDK_TEST_OVER"})
            ::unsetenv(k);
    }

    void testRunCapture() {
        auto out = proc::run_capture("/bin/echo", {"a", "b"}, 5000ms);
        CPPUNIT_ASSERT(out);
        CPPUNIT_ASSERT_EQUAL(std::string("a b\n"), *out);
        auto started = std::chrono::steady_clock::now();
        CPPUNIT_ASSERT(!proc::run_capture("/bin/sleep", {"30"}, 200ms));
        CPPUNIT_ASSERT(std::chrono::steady_clock::now() - started < 10s);
    }

    void testWaitReadableTimesOut() {
        auto p = proc::make_pipe();
        CPPUNIT_ASSERT(!proc::wait_readable(p.read.get(), 50ms));
        CPPUNIT_ASSERT_EQUAL(ssize_t(1), ::write(p.write.get(), "x", 1));
        CPPUNIT_ASSERT(proc::wait_readable(p.read.get(), 50ms));
    }

    void testMakeDirs() {
        TempDir tmp;
        proc::make_dirs(tmp / "a/b/c");
        CPPUNIT_ASSERT(std::filesystem::is_directory(tmp / "a/b/c"));
        proc::make_dirs(tmp / "a/b/c"); // already there: fine
        hangar::test::write_text(tmp / "file", "x");
        CPPUNIT_ASSERT_THROW(proc::make_dirs(tmp / "file/sub"), std::runtime_error);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkProcessTest);
