// What a recording is asked for and how ffmpeg records it: pure logic, unit-tested
// (tests/recording_test.cpp) without the host.
#pragma once

#include <hangar/plugin.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace hangar::replays {

inline constexpr int kDefaultFramerate = 25;
inline constexpr int kMaxFramerate = 60;
inline constexpr int kDefaultMaxDurationSeconds = 3600;
inline constexpr int kMaxDurationSeconds = 24 * 3600;

struct StartOptions {
    int framerate = kDefaultFramerate;
    int max_duration_seconds = kDefaultMaxDurationSeconds;
    bool record_audio = false;
};

// The body of POST /browsers/{id}/replays ({} when empty). Throws a 400 naming the field.
StartOptions parse_start_options(const json &body);

struct Capture {
    std::string display; // ":3"
    int width = 0;
    int height = 0;
    // The instance's PulseAudio sink monitor, when the recording takes audio.
    std::string audio_server; // "unix:/run/hangar/pulse/native"
    std::string audio_source; // "hangar.monitor"
    // The wall-clock time (µs since the epoch) the feed's frame 0 is due: the sound is placed on
    // the video's timeline by it.
    std::int64_t start_wallclock_us = 0;
};

// The ScreenFeed's frames reach ffmpeg in IVF: a 32-byte header, then each frame after 12 bytes
// of its own (its size and its slot, the frame's time in 1/fps units). ffmpeg reads it (`-f ivf`)
// with the fourcc I420 as raw video, each frame at its time; see README.md for why IVF.
std::array<std::uint8_t, 32> ivf_file_header(int width, int height, int fps);
std::array<std::uint8_t, 12> ivf_frame_header(std::uint32_t size, std::int64_t slot);

// ffmpeg's arguments (without argv[0]): the ScreenFeed's I420 frames with their times (IVF) read
// from `input_fd`, H.264 with the fastest x264 preset at a variable frame rate, fast-start MP4 (the
// index first, so players can seek while downloading). With an `audio_source`, the sink's monitor
// is recorded beside it as AAC.
std::vector<std::string> ffmpeg_args(const Capture &capture, const StartOptions &options, const std::string &output,
                                     int input_fd);

// What ffmpeg's environment changes ("K=V"): malloc settings that let it reuse frame buffers.
std::vector<std::string> ffmpeg_environment_overrides();

} // namespace hangar::replays
