// The screen of an X display as raw I420 frames at a constant rate, written to ffmpeg's input.
// Only a screen that changed (XDamage) or a pointer that moved is read and converted; every
// other frame repeats the last one, which mpdecimate drops before the encoder. See README.md.
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
    // own, frame n at start + n / fps, until stop(), until the reader goes (ffmpeg ended), or
    // until the display does. Throws std::runtime_error when the display cannot be read.
    ScreenFeed(const std::string &display, int width, int height, int fps, proc::Fd out,
               std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());
    ScreenFeed(const ScreenFeed &) = delete;
    ScreenFeed &operator=(const ScreenFeed &) = delete;
    ~ScreenFeed();

    // Ends the feed: ffmpeg reads the end of its input and finishes the file.
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
    std::chrono::steady_clock::time_point start_;
    std::int64_t pipe_bytes_ = 0;
    std::atomic<std::int64_t> written_{0}; // bytes
    std::atomic<bool> ended_{false};
    std::jthread thread_;
};

} // namespace hangar::replays
