#include "recording.hpp"

#include <array>
#include <cmath>
#include <cstdio>

namespace hangar::replays {

namespace {

// A whole number in [lo, hi] (JSON numbers such as 25.0 count; 25.5 does not).
int whole_number(Validation &v, const json &body, const char *field, int lo, int hi, int fallback) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) return fallback;
    if (!it->is_number()) {
        v.fail(field, "must be a number");
        return fallback;
    }
    double d = it->get<double>();
    if (std::floor(d) != d || d < lo || d > hi) {
        v.fail(field, "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
        return fallback;
    }
    return static_cast<int>(d);
}

// `value` little-endian into `bytes` from `at`.
template <std::size_t N>
void put_le(std::array<std::uint8_t, N> &bytes, std::size_t at, std::uint64_t value, int size) {
    for (int i = 0; i < size; ++i)
        bytes[at + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(value >> (8 * i));
}

} // namespace

std::array<std::uint8_t, 32> ivf_file_header(int width, int height, int fps) {
    std::array<std::uint8_t, 32> h{'D', 'K', 'I', 'F'};
    put_le(h, 4, 0, 2);  // version
    put_le(h, 6, 32, 2); // header size
    h[8] = 'I';          // fourcc: planar 4:2:0, raw
    h[9] = '4';
    h[10] = '2';
    h[11] = '0';
    put_le(h, 12, static_cast<std::uint64_t>(width), 2);
    put_le(h, 14, static_cast<std::uint64_t>(height), 2);
    put_le(h, 16, static_cast<std::uint64_t>(fps), 4); // time base: 1/fps
    put_le(h, 20, 1, 4);
    put_le(h, 24, 0, 4); // frame count: not known ahead
    return h;
}

std::array<std::uint8_t, 12> ivf_frame_header(std::uint32_t size, std::int64_t slot) {
    std::array<std::uint8_t, 12> h{};
    put_le(h, 0, size, 4);
    put_le(h, 4, static_cast<std::uint64_t>(slot), 8);
    return h;
}

StartOptions parse_start_options(const json &body) {
    Validation v;
    StartOptions o;
    o.framerate = whole_number(v, body, "framerate", 1, kMaxFramerate, kDefaultFramerate);
    o.max_duration_seconds =
        whole_number(v, body, "max_duration_in_seconds", 1, kMaxDurationSeconds, kDefaultMaxDurationSeconds);
    if (auto it = body.find("record_audio"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean())
            v.fail("record_audio", "must be a boolean");
        else
            o.record_audio = it->get<bool>();
    }
    v.throw_if_failed("invalid replay options");
    return o;
}

std::vector<std::string> ffmpeg_args(const Capture &capture, const StartOptions &options, const std::string &output,
                                     int input_fd) {
    const std::string fps = std::to_string(options.framerate);
    std::vector<std::string> a = {"-hide_banner", "-loglevel", "warning", "-nostdin",
                                  // The ScreenFeed's I420 frames in IVF, each with its time, the
                                  // pointer drawn in. The header says all there is to know: no
                                  // probing, which could wait for frames that a still screen does
                                  // not send (and hold up the sound's input behind it).
                                  "-f", "ivf", "-probesize", "32", "-fpsprobesize", "0", "-i",
                                  "pipe:" + std::to_string(input_fd)};
    if (!capture.audio_source.empty()) {
        // What Chromium plays. ffmpeg opens the sink a while after the feed began (a second
        // under load), so both cannot just start at zero: the samples carry the wall-clock time
        // they were captured at (-wallclock 1), shifted so that the feed's frame 0 is zero, and
        // -copyts keeps those times. -shortest ends the sound when the feed ends, which a sink
        // that never stops would not do by itself. AAC's fast coder: a third less CPU than the
        // default (twoloop) for the same tone, loud enough for a screen recording.
        const auto us = capture.start_wallclock_us;
        std::array<char, 32> offset{};
        std::snprintf(offset.data(), offset.size(), "-%lld.%06lld", static_cast<long long>(us / 1'000'000),
                      static_cast<long long>(us % 1'000'000));
        a.insert(a.end(), {"-thread_queue_size",
                           "1024",
                           "-f",
                           "pulse",
                           "-server",
                           capture.audio_server,
                           "-name",
                           "hangar-replay",
                           "-wallclock",
                           "1",
                           "-itsoffset",
                           offset.data(),
                           "-sample_rate",
                           "48000",
                           "-channels",
                           "2",
                           "-i",
                           capture.audio_source,
                           "-copyts",
                           "-map",
                           "0:v",
                           "-map",
                           "1:a",
                           "-c:a",
                           "aac",
                           "-aac_coder",
                           "fast",
                           "-b:a",
                           "128k",
                           "-shortest"});
    }
    a.insert(a.end(),
             {// Only frames that changed come in, at their own times (variable frame rate); -r sets
              // the encoder's clock. The feed ends at the maximum duration by itself, with the last
              // frame at its end.
              "-fps_mode", "vfr", "-r", fps,
              // ultrafast + zerolatency: no B-frames or look-ahead, so little CPU and memory; a
              // keyframe every 2 s of changes keeps seeking quick. A constant quantizer rather
              // than -crf: CRF's rate control has x264 build and score a quarter-size copy of
              // every frame, a fifth of its CPU at full motion; qp 26 gives files of crf 28's size.
              "-c:v", "libx264", "-preset", "ultrafast", "-tune", "zerolatency", "-qp", "26", "-g",
              std::to_string(options.framerate * 2), "-threads", "1", "-movflags", "+faststart", "-f", "mp4", "-y",
              output});
    return a;
}

std::vector<std::string> ffmpeg_environment_overrides() {
    // glibc serves each 3 MB frame buffer ffmpeg allocates with a fresh mmap and unmaps it when
    // freed, so every frame cost the kernel page faults and zeroed pages (55,000 faults for 100
    // 1080p frames). Frame buffers below the fixed threshold come from the heap instead, and the
    // trim threshold keeps freed ones there for the next frame: 8,500 faults. 32 MiB is glibc's
    // largest threshold, a 4K I420 frame is 12 MB.
    return {"GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864"};
}

} // namespace hangar::replays
