// Unit tests of replay options and the ffmpeg command line.
#include "recording.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <string>

using namespace hangar::replays;
using hangar::json;

class RecordingTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RecordingTest);
    CPPUNIT_TEST(defaults);
    CPPUNIT_TEST(values);
    CPPUNIT_TEST(bad_values);
    CPPUNIT_TEST(command_line);
    CPPUNIT_TEST(command_line_with_audio);
    CPPUNIT_TEST(constant_quantizer);
    CPPUNIT_TEST(glibc_takes_the_malloc_settings);
    CPPUNIT_TEST_SUITE_END();

public:
    void defaults() {
        auto o = parse_start_options(json::object());
        CPPUNIT_ASSERT_EQUAL(kDefaultFramerate, o.framerate);
        CPPUNIT_ASSERT_EQUAL(kDefaultMaxDurationSeconds, o.max_duration_seconds);
        o = parse_start_options({{"framerate", nullptr}, {"record_audio", false}});
        CPPUNIT_ASSERT_EQUAL(kDefaultFramerate, o.framerate);
        CPPUNIT_ASSERT(!o.record_audio);
        CPPUNIT_ASSERT(parse_start_options({{"record_audio", true}}).record_audio);
    }

    void values() {
        auto o = parse_start_options({{"framerate", 10.0}, {"max_duration_in_seconds", 5}});
        CPPUNIT_ASSERT_EQUAL(10, o.framerate);
        CPPUNIT_ASSERT_EQUAL(5, o.max_duration_seconds);
    }

    static std::string rejection(const json &body) {
        try {
            parse_start_options(body);
        } catch (const hangar::Error &e) {
            CPPUNIT_ASSERT_EQUAL(400, e.status());
            return e.details().front().message;
        }
        return "";
    }

    void bad_values() {
        CPPUNIT_ASSERT(rejection({{"framerate", 0}}).rfind("framerate:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"framerate", 61}}).rfind("framerate:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"framerate", 2.5}}).rfind("framerate:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"framerate", "25"}}).rfind("framerate:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"max_duration_in_seconds", -1}}).rfind("max_duration_in_seconds:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"max_duration_in_seconds", 86401}}).rfind("max_duration_in_seconds:", 0) == 0);
        CPPUNIT_ASSERT(rejection({{"record_audio", "yes"}}).rfind("record_audio:", 0) == 0);
    }

    void command_line() {
        auto args = ffmpeg_args({":7", 1280, 720, "", "", 0}, {20, 90}, "/run/hangar/recordings/r.part.mp4", 3);
        auto after = [&](const std::string &flag) {
            auto it = std::find(args.begin(), args.end(), flag);
            CPPUNIT_ASSERT(it != args.end() && it + 1 != args.end());
            return *(it + 1);
        };
        CPPUNIT_ASSERT_EQUAL(std::string("rawvideo"), after("-f"));
        CPPUNIT_ASSERT_EQUAL(std::string("yuv420p"), after("-pix_fmt"));
        CPPUNIT_ASSERT_EQUAL(std::string("pipe:3"), after("-i"));
        CPPUNIT_ASSERT_EQUAL(std::string("1280x720"), after("-video_size"));
        CPPUNIT_ASSERT_EQUAL(std::string("20"), after("-framerate"));
        CPPUNIT_ASSERT_EQUAL(std::string("90"), after("-t"));
        CPPUNIT_ASSERT_EQUAL(std::string("+faststart"), after("-movflags"));
        CPPUNIT_ASSERT_EQUAL(std::string("mpdecimate=hi=0:max=5"), after("-vf"));
        CPPUNIT_ASSERT_EQUAL(std::string("/run/hangar/recordings/r.part.mp4"), args.back());
        CPPUNIT_ASSERT(std::find(args.begin(), args.end(), "pulse") == args.end());
    }

    void command_line_with_audio() {
        Capture c{":7", 1280, 720, "unix:/run/hangar/pulse/native", "hangar.monitor", 1'800'000'000'000'042};
        auto args = ffmpeg_args(c, {20, 90, true}, "/run/hangar/recordings/r.part.mp4", 3);
        auto after = [&](const std::string &flag, std::size_t nth = 0) {
            auto it = args.begin();
            for (std::size_t i = 0; i <= nth; ++i, ++it) {
                it = std::find(it, args.end(), flag);
                CPPUNIT_ASSERT(it != args.end() && it + 1 != args.end());
            }
            return *it;
        };
        CPPUNIT_ASSERT_EQUAL(std::string("pipe:3"), after("-i"));
        CPPUNIT_ASSERT_EQUAL(std::string("pulse"), after("-f", 1));
        CPPUNIT_ASSERT_EQUAL(std::string("unix:/run/hangar/pulse/native"), after("-server"));
        CPPUNIT_ASSERT_EQUAL(std::string("hangar.monitor"), after("-i", 1));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), after("-wallclock"));
        CPPUNIT_ASSERT_EQUAL(std::string("-1800000000.000042"), after("-itsoffset"));
        CPPUNIT_ASSERT(std::find(args.begin(), args.end(), "-copyts") != args.end());
        CPPUNIT_ASSERT_EQUAL(std::string("aac"), after("-c:a"));
        CPPUNIT_ASSERT(std::find(args.begin(), args.end(), "-shortest") != args.end());
        CPPUNIT_ASSERT_EQUAL(std::string("90"), after("-t"));
        CPPUNIT_ASSERT_EQUAL(std::string("/run/hangar/recordings/r.part.mp4"), args.back());
    }

    // CRF would have x264 analyse a quarter-size copy of every frame (see ffmpeg_args).
    void constant_quantizer() {
        auto args = ffmpeg_args({":7", 1920, 1080, "", "", 0}, {25, 90}, "/tmp/r.part.mp4", 3);
        CPPUNIT_ASSERT(std::find(args.begin(), args.end(), "-crf") == args.end());
        auto qp = std::find(args.begin(), args.end(), "-qp");
        CPPUNIT_ASSERT(qp != args.end() && qp + 1 != args.end());
        CPPUNIT_ASSERT_EQUAL(std::string("26"), *(qp + 1));
    }

    // The dynamic loader reads GLIBC_TUNABLES as ffmpeg's would: a malformed or out-of-range
    // value is ignored silently there, so ask it what it took.
    void glibc_takes_the_malloc_settings() {
        auto overrides = ffmpeg_environment_overrides();
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, overrides.size());
        std::string command = "env '" + overrides[0] + "' /lib64/ld-linux-x86-64.so.2 --list-tunables";
        std::unique_ptr<FILE, int (*)(FILE *)> pipe(::popen(command.c_str(), "r"), ::pclose);
        CPPUNIT_ASSERT(pipe);
        std::string listing;
        std::array<char, 4096> buffer{};
        while (auto n = std::fread(buffer.data(), 1, buffer.size(), pipe.get()))
            listing.append(buffer.data(), n);
        CPPUNIT_ASSERT_MESSAGE(listing, listing.find("glibc.malloc.mmap_threshold: 0x2000000 ") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(listing, listing.find("glibc.malloc.trim_threshold: 0x4000000 ") != std::string::npos);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RecordingTest);
