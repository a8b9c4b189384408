// Unit tests of replay options and the ffmpeg command line.
#include "recording.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

using namespace hangar::replays;
using hangar::json;

namespace {

// What `command` (through the shell) writes to its standard output.
std::string output_of(const std::string &command) {
    std::unique_ptr<FILE, int (*)(FILE *)> pipe(::popen(command.c_str(), "r"), ::pclose);
    CPPUNIT_ASSERT(pipe);
    std::string output;
    std::array<char, 4096> buffer{};
    while (auto n = std::fread(buffer.data(), 1, buffer.size(), pipe.get()))
        output.append(buffer.data(), n);
    return output;
}

} // namespace

class RecordingTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RecordingTest);
    CPPUNIT_TEST(defaults);
    CPPUNIT_TEST(values);
    CPPUNIT_TEST(bad_values);
    CPPUNIT_TEST(command_line);
    CPPUNIT_TEST(command_line_with_audio);
    CPPUNIT_TEST(constant_quantizer);
    CPPUNIT_TEST(glibc_takes_the_malloc_settings);
    CPPUNIT_TEST(ffprobe_reads_ivf_frames_at_their_times);
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
        CPPUNIT_ASSERT_EQUAL(std::string("ivf"), after("-f"));
        CPPUNIT_ASSERT_EQUAL(std::string("pipe:3"), after("-i"));
        // No probing: it could wait for frames that a still screen does not send.
        CPPUNIT_ASSERT_EQUAL(std::string("0"), after("-fpsprobesize"));
        CPPUNIT_ASSERT_EQUAL(std::string("vfr"), after("-fps_mode"));
        CPPUNIT_ASSERT_EQUAL(std::string("20"), after("-r"));
        CPPUNIT_ASSERT_EQUAL(std::string("+faststart"), after("-movflags"));
        // The feed ends at the maximum duration, with a frame at its end: ffmpeg's -t would cut it.
        CPPUNIT_ASSERT(std::find(args.begin(), args.end(), "-t") == args.end());
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
        const std::string listing = output_of(command);
        CPPUNIT_ASSERT_MESSAGE(listing, listing.find("glibc.malloc.mmap_threshold: 0x2000000 ") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(listing, listing.find("glibc.malloc.trim_threshold: 0x4000000 ") != std::string::npos);
    }

    // What the feed writes, read by Debian's own ffprobe: raw I420 at 64x48, each frame at its
    // slot, the gaps of a still screen kept.
    void ffprobe_reads_ivf_frames_at_their_times() {
        std::string dir = "/tmp/hangar-ivf-XXXXXX";
        CPPUNIT_ASSERT(::mkdtemp(dir.data()));
        const std::string file = dir + "/frames.ivf";
        {
            std::ofstream out(file, std::ios::binary);
            const auto head = ivf_file_header(64, 48, 10);
            out.write(reinterpret_cast<const char *>(head.data()), head.size());
            const std::string frame(64 * 48 * 3 / 2, '\x80');
            for (std::int64_t slot : {0, 25, 26}) {
                const auto frame_head = ivf_frame_header(static_cast<std::uint32_t>(frame.size()), slot);
                out.write(reinterpret_cast<const char *>(frame_head.data()), frame_head.size());
                out.write(frame.data(), static_cast<std::streamsize>(frame.size()));
            }
        }
        const std::string stream =
            output_of("ffprobe -v error -show_entries stream=codec_name,pix_fmt,width,height -of "
                      "csv=p=0 " +
                      file);
        const std::string times = output_of("ffprobe -v error -show_entries packet=pts_time -of csv=p=0 " + file);
        std::filesystem::remove_all(dir);
        CPPUNIT_ASSERT_EQUAL(std::string("rawvideo,64,48,yuv420p\n"), stream);
        CPPUNIT_ASSERT_EQUAL(std::string("0.000000\n2.500000\n2.600000\n"), times);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RecordingTest);
