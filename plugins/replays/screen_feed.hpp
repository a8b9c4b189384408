// The screen of an X display as raw I420 frames, each stamped with its time, written to ffmpeg's
// input in IVF (recording.hpp). A frame is read and converted only when the screen changed
// (XDamage) or the pointer moved, and goes down the pipe only when it differs from the last one
// sent; a still screen is sent again four times a second only. See README.md.
#pragma once

#include <hangar/process.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stop_token>
#include <string>
#include <thread>

namespace hangar::replays {

class ScreenFeed {
public:
    // Writes frames of the area (0, 0, width, height) of `display` to `out` from a thread of its
    // own, on a timeline of `fps` slots a second from `start`, until stop(), until `max_duration`
    // passed, until the reader goes (ffmpeg ended), or until the display does. Throws
    // std::runtime_error when the display cannot be read.
    ScreenFeed(const std::string &display, int width, int height, int fps, std::chrono::seconds max_duration,
               proc::Fd out, std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());
    ScreenFeed(const ScreenFeed &) = delete;
    ScreenFeed &operator=(const ScreenFeed &) = delete;
    ~ScreenFeed();

    // Ends the feed: the last frame once more at the time of the stop (the video lasts until
    // then), then the end of the input, so ffmpeg finishes the file.
    void stop();

    // Whether ffmpeg takes frames (it read past the first) within `timeout`. Until then the feed
    // is blocked and cannot read the screen: what changes meanwhile would land on slots that
    // passed, earlier in the video than it happened.
    bool wait_flowing(std::chrono::milliseconds timeout) const;

private:
    struct Display;
    void run(const std::stop_token &stop);

    std::unique_ptr<Display> x_;
    proc::Fd out_;
    int width_;
    int height_;
    int fps_;
    std::int64_t last_slot_; // the last frame's slot at the maximum duration: the feed ends there
    std::chrono::steady_clock::time_point start_;
    std::int64_t pipe_bytes_ = 0;
    std::atomic<std::int64_t> written_{0}; // bytes
    std::atomic<bool> ended_{false};
    std::jthread thread_;
};

} // namespace hangar::replays
