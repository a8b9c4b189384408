// sdk/include/hangar/beneath.hpp: what the server opens in a folder a sandbox writes is the
// plain file under that folder, whatever the sandbox put on the way.
#include "test_support.hpp"

#include <hangar/beneath.hpp>

#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using hangar::test::TempDir;
namespace beneath = hangar::beneath;

namespace {

void write(const std::string &path, const std::string &text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

std::string read_fd(const hangar::proc::Fd &fd) {
    std::string out;
    char buf[256];
    for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;)
        out.append(buf, static_cast<std::size_t>(n));
    return out;
}

} // namespace

class BeneathTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(BeneathTest);
    CPPUNIT_TEST(testPlainFileOpens);
    CPPUNIT_TEST(testSymlinkAtAnyDepthIsRefused);
    CPPUNIT_TEST(testDotDotAndAbsolutePathsAreRefused);
    CPPUNIT_TEST(testFifoDeviceAndHardLinkAreRefused);
    CPPUNIT_TEST(testReadTail);
    CPPUNIT_TEST(testMoveOutTakesOnlyThePlainFile);
    CPPUNIT_TEST(testRenameRaceNeverReachesOutside);
    CPPUNIT_TEST_SUITE_END();

public:
    void testPlainFileOpens() {
        TempDir root;
        write(root / "logs/app.log", "line\n");
        auto fd = beneath::open_plain_file(root.path(), "logs/app.log");
        CPPUNIT_ASSERT(fd);
        CPPUNIT_ASSERT_EQUAL(std::string("line\n"), read_fd(fd));
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "logs/missing.log"));
    }

    void testSymlinkAtAnyDepthIsRefused() {
        TempDir root, outside;
        write(outside / "secret", "host secret");
        write(outside / "logs/app.log", "host log");
        fs::create_directories(root / "logs");
        fs::create_symlink(outside / "secret", root / "logs/app.log"); // the last component
        fs::create_symlink(outside / "logs", root / "dirlink");        // a folder on the way
        fs::create_symlink("/proc/self/environ", root / "environ");    // a magic link's target
        fs::create_symlink("app.log", root / "logs/relative.log");     // even one staying inside
        for (const char *rel : {"logs/app.log", "dirlink/app.log", "environ", "logs/relative.log"}) {
            CPPUNIT_ASSERT_MESSAGE(rel, !beneath::open_plain_file(root.path(), rel));
            CPPUNIT_ASSERT_MESSAGE(rel, beneath::read_tail(root.path(), rel, 100).empty());
        }
    }

    void testDotDotAndAbsolutePathsAreRefused() {
        TempDir root, outside;
        write(outside.path() + "/x", "outside");
        write(root / "a/x", "inside");
        std::string up = "../" + fs::path(outside.path()).filename().string() + "/x";
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), up));
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), outside / "x"));
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "a/../../x"));
        CPPUNIT_ASSERT(beneath::open_plain_file(root.path(), "a/../a/x")); // ".." that stays inside is fine
    }

    void testFifoDeviceAndHardLinkAreRefused() {
        TempDir root;
        CPPUNIT_ASSERT_EQUAL(0, ::mkfifo((root / "fifo").c_str(), 0600));
        // Opening a FIFO with no writer would block the server: refused at once instead.
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "fifo"));
        write(root / "one", "x");
        fs::create_hard_link(root / "one", root / "two");
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "one"));
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "two"));
        fs::create_directories(root / "dir");
        CPPUNIT_ASSERT(!beneath::open_plain_file(root.path(), "dir"));
    }

    void testReadTail() {
        TempDir root;
        write(root / "logs/agent.log", "0123456789");
        CPPUNIT_ASSERT_EQUAL(std::string("789"), beneath::read_tail(root.path(), "logs/agent.log", 3));
        CPPUNIT_ASSERT_EQUAL(std::string("0123456789"), beneath::read_tail(root.path(), "logs/agent.log", 100));
    }

    void testMoveOutTakesOnlyThePlainFile() {
        TempDir root, store, outside;
        write(root / "recordings/r1.mp4", "video");
        CPPUNIT_ASSERT(beneath::move_out(root.path(), "recordings/r1.mp4", store / "r1"));
        CPPUNIT_ASSERT(!fs::exists(root / "recordings/r1.mp4"));
        std::ifstream in(store / "r1");
        std::string got((std::istreambuf_iterator<char>(in)), {});
        CPPUNIT_ASSERT_EQUAL(std::string("video"), got);

        // A recordings folder that is a link to somewhere else moves nothing from there.
        write(outside / "r2.mp4", "not the instance's");
        fs::remove_all(root / "recordings");
        fs::create_symlink(outside.path(), root / "recordings");
        CPPUNIT_ASSERT(!beneath::move_out(root.path(), "recordings/r2.mp4", store / "r2"));
        CPPUNIT_ASSERT(fs::exists(outside / "r2.mp4"));
        CPPUNIT_ASSERT(!fs::exists(store / "r2"));
    }

    // The sandbox swaps a folder for a symlink to the outside as fast as it can while the server
    // opens through it: every open either reads the inside file or fails, never the outside one.
    void testRenameRaceNeverReachesOutside() {
        TempDir root, outside;
        write(root / "logs/app.log", "inside");
        write(outside / "app.log", "OUTSIDE");
        fs::create_symlink(outside.path(), root / "link");
        std::atomic<bool> stop{false};
        std::thread swapper([&] {
            while (!stop) {
                ::rename((root / "logs").c_str(), (root / "real").c_str());
                ::rename((root / "link").c_str(), (root / "logs").c_str());
                ::rename((root / "logs").c_str(), (root / "link").c_str());
                ::rename((root / "real").c_str(), (root / "logs").c_str());
            }
        });
        int inside = 0;
        for (int i = 0; i < 20000; ++i) {
            auto fd = beneath::open_plain_file(root.path(), "logs/app.log");
            if (!fd) continue;
            std::string text = read_fd(fd);
            CPPUNIT_ASSERT_EQUAL(std::string("inside"), text);
            ++inside;
        }
        stop = true;
        swapper.join();
        CPPUNIT_ASSERT(inside > 0);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(BeneathTest);
