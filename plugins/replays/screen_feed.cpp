// See screen_feed.hpp. libyuv converts (its AVX2 rows take ≈ 1 ms a 1080p frame, where swscale
// took ≈ 3 ms even on its best path); the pointer is drawn in from XFixes, as x11grab did.
#include "screen_feed.hpp"

#include "recording.hpp"

#include <hangar/xcb_shm.hpp>

#include <fcntl.h>
#include <libyuv/convert.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xcb/damage.h>
#include <xcb/xcb.h>
#include <xcb/xfixes.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hangar::replays {

namespace {

using Clock = std::chrono::steady_clock;

template <class T> using Reply = std::unique_ptr<T, decltype(&std::free)>;
template <class T> Reply<T> reply(T *r) {
    return Reply<T>(r, &std::free);
}

// The pointer (premultiplied ARGB) over the screen (B, G, R, X).
void draw_pointer(std::uint8_t *screen, int width, int height, const xcb_xfixes_get_cursor_image_reply_t &cursor) {
    const std::uint32_t *image = xcb_xfixes_get_cursor_image_cursor_image(&cursor);
    const int left = cursor.x - cursor.xhot, top = cursor.y - cursor.yhot;
    for (int cy = 0; cy < cursor.height; ++cy) {
        const int y = top + cy;
        if (y < 0 || y >= height) continue;
        for (int cx = 0; cx < cursor.width; ++cx) {
            const int x = left + cx;
            if (x < 0 || x >= width) continue;
            const std::uint32_t p = image[static_cast<std::size_t>(cy) * cursor.width + static_cast<std::size_t>(cx)];
            const std::uint32_t alpha = p >> 24;
            if (alpha == 0) continue;
            std::uint8_t *dst =
                screen +
                (static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)) * 4;
            for (int c = 0; c < 3; ++c) {
                const std::uint32_t src = (p >> (8 * c)) & 0xFF;
                dst[c] = static_cast<std::uint8_t>(src + dst[c] * (255 - alpha) / 255);
            }
        }
    }
}

// A reader that took nothing for this long after the stop was asked is given up on: it would
// otherwise hold the stop forever.
constexpr auto kStalledReader = std::chrono::seconds(2);

// Writes all of `data`, waiting for the reader; false when it is gone, or when it stalled after
// `stop` was asked (a frame under way is finished otherwise, and the last one sent at the stop).
// With `splice`, the pipe takes references to the pages instead of copies (vmsplice): no copy
// into the pipe and no pipe pages allocated and charged, then freed by the reader, for each 3 MB
// frame; the caller keeps the pages unchanged until the reader took them.
bool write_all(int fd, const std::uint8_t *data, std::size_t size, bool splice, const std::stop_token &stop) {
    std::optional<Clock::time_point> stalled_since;
    while (size > 0) {
        iovec iov{const_cast<std::uint8_t *>(data), size};
        // vmsplice waits for room unless told not to, whatever O_NONBLOCK says: stop must get through.
        ssize_t n = splice ? ::vmsplice(fd, &iov, 1, SPLICE_F_NONBLOCK) : ::write(fd, data, size);
        if (n > 0) {
            data += n;
            size -= static_cast<std::size_t>(n);
            stalled_since.reset();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN) return false; // EPIPE: ffmpeg ended
        if (stop.stop_requested()) {
            const auto now = Clock::now();
            if (!stalled_since) stalled_since = now;
            if (now - *stalled_since > kStalledReader) return false;
        }
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
    }
    return true;
}

} // namespace

struct ScreenFeed::Display {
    explicit Display(const std::string &name) : conn(xcb_connect(name.c_str(), nullptr), &xcb_disconnect) {
        if (xcb_connection_has_error(conn.get())) throw std::runtime_error("cannot connect to display " + name);
        xcb_connection_t *c = conn.get();
        root = xcb_setup_roots_iterator(xcb_get_setup(c)).data->root;
        const xcb_query_extension_reply_t *ext = xcb_get_extension_data(c, &xcb_damage_id);
        if (!ext || !ext->present) throw std::runtime_error("the X server has no DAMAGE extension");
        damage_notify = static_cast<std::uint8_t>(ext->first_event + XCB_DAMAGE_NOTIFY);
        // Each extension must be told the client's version before its first request.
        reply(xcb_damage_query_version_reply(c, xcb_damage_query_version(c, 1, 1), nullptr));
        pointer = reply(xcb_xfixes_query_version_reply(c, xcb_xfixes_query_version(c, 4, 0), nullptr)) != nullptr;
        damage = xcb_generate_id(c);
        // One event when the screen goes from unchanged to changed; subtracting re-arms it.
        xcb_damage_create(c, damage, root, XCB_DAMAGE_REPORT_LEVEL_NON_EMPTY);
        if (xcb::ShmImage::available(c)) shm.emplace(c);
        xcb_flush(c);
    }

    // The area, B, G, R, X; the memory is the caller's to change until the next read.
    std::uint8_t *read(int width, int height) {
        if (shm) {
            if (std::uint8_t *pixels = shm->get(root, 0, 0, width, height)) return pixels;
            shm.reset(); // the server cannot see our segment: through the socket from now on
        }
        image = reply(xcb_get_image_reply(conn.get(),
                                          xcb_get_image(conn.get(), XCB_IMAGE_FORMAT_Z_PIXMAP, root, 0, 0,
                                                        static_cast<std::uint16_t>(width),
                                                        static_cast<std::uint16_t>(height), ~0U),
                                          nullptr));
        return image ? xcb_get_image_data(image.get()) : nullptr;
    }

    std::unique_ptr<xcb_connection_t, decltype(&xcb_disconnect)> conn;
    xcb_window_t root = 0;
    xcb_damage_damage_t damage = 0;
    std::uint8_t damage_notify = 0;
    bool pointer = false;
    std::optional<xcb::ShmImage> shm; // after conn: detached before it closes
    Reply<xcb_get_image_reply_t> image{nullptr, &std::free};
};

ScreenFeed::ScreenFeed(const std::string &display, int width, int height, int fps, std::chrono::seconds max_duration,
                       proc::Fd out, Clock::time_point start)
    : x_(std::make_unique<Display>(display)), out_(std::move(out)), width_(width), height_(height), fps_(fps),
      last_slot_(max_duration.count() * fps - 1), start_(start) {
    // The largest pipe (fewer wake-ups on both sides) that still holds less than half a frame, so
    // frames can be spliced (see run()); 1 MB is what the system allows without privileges.
    const auto frame = static_cast<long>(width) * height * 3 / 2;
    long size = 1 << 20;
    while (size > 4096 && size > frame / 2)
        size /= 2;
    ::fcntl(out_.get(), F_SETPIPE_SZ, static_cast<int>(size));
    pipe_bytes_ = std::max(0, ::fcntl(out_.get(), F_GETPIPE_SZ));
    ::fcntl(out_.get(), F_SETFL, ::fcntl(out_.get(), F_GETFL) | O_NONBLOCK);
    thread_ = std::jthread([this](const std::stop_token &stop) { run(stop); });
}

ScreenFeed::~ScreenFeed() {
    stop();
}

void ScreenFeed::stop() {
    if (!thread_.joinable()) return;
    thread_.request_stop();
    thread_.join();
}

bool ScreenFeed::wait_flowing(std::chrono::milliseconds timeout) const {
    // More written than the pipe holds: ffmpeg has read.
    for (auto until = Clock::now() + timeout; written_.load() <= pipe_bytes_;
         std::this_thread::sleep_for(std::chrono::milliseconds(5)))
        if (ended_.load() || Clock::now() >= until) return false;
    return true;
}

void ScreenFeed::run(const std::stop_token &stop) {
    const auto w = static_cast<std::size_t>(width_), h = static_cast<std::size_t>(height_);
    const std::size_t cw = (w + 1) / 2, ch = (h + 1) / 2;
    const std::size_t frame_size = w * h + 2 * cw * ch;
    // Two frames: the last one sent, which the next is compared with, and the next. Converted
    // into by turns, they also let the pipe hold references to the pages of the last one sent
    // (vmsplice) while the next is made: once a whole other frame went into a pipe that holds
    // less than a frame, the reader has copied every page of this one.
    const bool splice = frame_size > static_cast<std::size_t>(pipe_bytes_);
    std::vector<std::uint8_t> frames(2 * frame_size);
    std::uint8_t *sent = nullptr; // the last frame sent
    std::int64_t sent_slot = -1;
    xcb_connection_t *c = x_->conn.get();
    auto finish = [&] {
        out_.reset(); // ffmpeg reads the end of its input and finishes the file
        ended_ = true;
    };
    auto send = [&](std::uint8_t *frame, std::int64_t slot) {
        const auto head = ivf_frame_header(static_cast<std::uint32_t>(frame_size), slot);
        if (!write_all(out_.get(), head.data(), head.size(), false, stop) ||
            !write_all(out_.get(), frame, frame_size, splice, stop))
            return false;
        written_ += static_cast<std::int64_t>(head.size() + frame_size);
        sent = frame;
        sent_slot = slot;
        return true;
    };
    if (const auto head = ivf_file_header(width_, height_, fps_);
        !write_all(out_.get(), head.data(), head.size(), false, stop)) {
        finish();
        return;
    }

    const auto interval = std::chrono::nanoseconds(1'000'000'000 / fps_);
    const auto start = start_;
    bool changed = true; // the first frame is always read
    std::int32_t pointer_x = -1, pointer_y = -1;
    std::uint32_t pointer_serial = 0;
    std::int64_t n = 0; // the slot (frame time) the screen is looked at for
    const std::int64_t still_repeat = std::max(1, fps_ / 4);
    auto now_slot = [&] { return static_cast<std::int64_t>((Clock::now() - start) / interval); };
    for (; !stop.stop_requested() && n <= last_slot_; n = std::max(n + 1, now_slot())) {
        std::this_thread::sleep_until(start + n * interval);
        while (auto *event = xcb_poll_for_event(c)) {
            if ((event->response_type & 0x7F) == x_->damage_notify) changed = true;
            std::free(event);
        }
        if (xcb_connection_has_error(c)) break; // the display is gone: the recording ends here
        Reply<xcb_xfixes_get_cursor_image_reply_t> cursor{nullptr, &std::free};
        if (x_->pointer) {
            cursor = reply(xcb_xfixes_get_cursor_image_reply(c, xcb_xfixes_get_cursor_image(c), nullptr));
            if (cursor && (cursor->x != pointer_x || cursor->y != pointer_y || cursor->cursor_serial != pointer_serial))
                changed = true;
        }
        if (!changed) {
            // A still screen is sent again a few times a second all the same: tools that seek to
            // the first frame at or after a time (ffmpeg -ss) then find the one on screen then.
            if (sent && n - sent_slot >= still_repeat && !send(sent, n)) {
                finish();
                return;
            }
            continue;
        }
        // Re-armed before reading, so a change during the read raises a new event.
        xcb_damage_subtract(c, x_->damage, XCB_NONE, XCB_NONE);
        std::uint8_t *pixels = x_->read(width_, height_);
        if (!pixels) break;
        if (cursor) {
            draw_pointer(pixels, width_, height_, *cursor);
            pointer_x = cursor->x;
            pointer_y = cursor->y;
            pointer_serial = cursor->cursor_serial;
        }
        std::uint8_t *next = sent == frames.data() ? frames.data() + frame_size : frames.data();
        std::uint8_t *y = next, *u = y + w * h, *v = u + cw * ch;
        libyuv::ARGBToI420(pixels, width_ * 4, y, width_, u, static_cast<int>(cw), v, static_cast<int>(cw), width_,
                           height_);
        changed = false;
        // Damage without a visible change (a repaint of the same pixels) sends nothing.
        if (sent && std::memcmp(next, sent, frame_size) == 0) continue;
        if (!send(next, n)) {
            finish();
            return;
        }
    }
    // At the maximum duration the last slot's frame still has its time on screen before the end.
    if (n > last_slot_) std::this_thread::sleep_until(start + (last_slot_ + 1) * interval);
    // The last frame once more at the end's slot: the video lasts until the stop (or the maximum
    // duration, or the display's end), however long the screen stood still before it.
    const std::int64_t end = std::min(last_slot_, now_slot());
    if (sent && end > sent_slot) send(sent, end);
    finish();
}

} // namespace hangar::replays
