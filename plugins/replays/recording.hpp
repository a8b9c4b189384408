// What a recording is asked for and how ffmpeg records it: pure logic, unit-tested
// (tests/recording_test.cpp) without the host.
#pragma once

#include <hangar/plugin.hpp>

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

// ffmpeg's arguments (without argv[0]): raw I420 frames of the screen at `framerate` read from
// `input_fd` (a ScreenFeed), H.264 with the fastest x264 preset, fast-start MP4 (the index first,
// so players can seek while downloading), ending by itself after the maximum duration. With an
// `audio_source`, the sink's monitor is recorded beside it as AAC.
std::vector<std::string> ffmpeg_args(const Capture &capture, const StartOptions &options, const std::string &output,
                                     int input_fd);

// What ffmpeg's environment changes ("K=V"): malloc settings that let it reuse frame buffers.
std::vector<std::string> ffmpeg_environment_overrides();

} // namespace hangar::replays
