// The headful backend: one xcb connection to the instance's Xvfb, kept open. Input goes through
// XTest; screenshots through MIT-SHM (the image lands in shared memory, no copy through the
// socket) and libpng at its fastest settings; the clipboard is owned by a hidden window whose
// events a thread answers.
#include "screen.hpp"

#include <hangar/xcb_shm.hpp>

#include <png.h>
#include <sys/socket.h>
#include <xcb/xcb.h>
#include <xcb/xfixes.h>
#include <xcb/xtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace hangar::computer {

namespace {

using hangar::xcb::Reply;
using hangar::xcb::reply;

[[noreturn]] void x_failed(const std::string &what) {
    throw std::runtime_error("X display: " + what);
}

// ICCCM's STRING is Latin-1: every byte is the code point of the same value.
std::string latin1_to_utf8(std::string_view in) {
    std::string out;
    out.reserve(in.size());
    for (char ch : in) {
        auto c = static_cast<unsigned char>(ch);
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
        } else {
            out.push_back(static_cast<char>(0xC0 | (c >> 6)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
        }
    }
    return out;
}

void png_append(png_structp png, png_bytep data, png_size_t n) {
    static_cast<std::string *>(png_get_io_ptr(png))->append(reinterpret_cast<const char *>(data), n);
}

// BGRX rows (X's 24/32-bit ZPixmap on little-endian) straight into an RGB PNG.
std::string encode_png(const std::uint8_t *pixels, int width, int height, std::size_t stride) {
    std::string out;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png ? png_create_info_struct(png) : nullptr;
    if (!info) {
        png_destroy_write_struct(&png, nullptr);
        throw std::runtime_error("libpng: out of memory");
    }
    struct Guard {
        png_structp *p;
        png_infop *i;
        ~Guard() { png_destroy_write_struct(p, i); }
    } guard{&png, &info};
    if (setjmp(png_jmpbuf(png))) throw std::runtime_error("libpng failed to encode the screenshot");
    png_set_write_fn(png, &out, png_append, nullptr);
    png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    // Speed over size: a screenshot is read once, soon after it is taken.
    png_set_compression_level(png, 1);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
    png_write_info(png, info);
    png_set_bgr(png);
    png_set_filler(png, 0, PNG_FILLER_AFTER);
    for (int y = 0; y < height; ++y)
        png_write_row(png, const_cast<png_bytep>(pixels + static_cast<std::size_t>(y) * stride));
    png_write_end(png, nullptr);
    return out;
}

class X11Screen final : public Screen {
public:
    explicit X11Screen(int display) : display_(":" + std::to_string(display)) { connect(); }

    ~X11Screen() override {
        stop_clipboard();
        shm_.reset();
        if (conn_) xcb_disconnect(conn_);
    }

    Size size() override {
        std::lock_guard lock(m_);
        ensure();
        return {screen_->width_in_pixels, screen_->height_in_pixels};
    }

    void move(int x, int y) override {
        std::lock_guard lock(m_);
        ensure();
        fake(XCB_MOTION_NOTIFY, 0, x, y);
    }

    void button(Button b, bool down) override {
        static constexpr std::uint8_t numbers[] = {1, 2, 3, 8, 9};
        std::lock_guard lock(m_);
        ensure();
        fake(down ? XCB_BUTTON_PRESS : XCB_BUTTON_RELEASE, numbers[static_cast<int>(b)], 0, 0);
    }

    void wheel(int dx, int dy) override {
        std::lock_guard lock(m_);
        ensure();
        auto clicks = [&](int n, std::uint8_t neg, std::uint8_t pos) {
            for (int i = 0; i < std::abs(n); ++i) {
                fake(XCB_BUTTON_PRESS, n < 0 ? neg : pos, 0, 0);
                fake(XCB_BUTTON_RELEASE, n < 0 ? neg : pos, 0, 0);
            }
        };
        clicks(dy, 4, 5);
        clicks(dx, 6, 7);
    }

    void key(const Key &k, bool down) override {
        std::lock_guard lock(m_);
        ensure();
        auto [code, shifted] = keycode_for(k.keysym);
        (void)shifted; // a named key is pressed as itself; the caller holds Shift if it wants it
        fake(down ? XCB_KEY_PRESS : XCB_KEY_RELEASE, code, 0, 0);
    }

    void type_char(char32_t cp) override {
        Key k = key_for_codepoint(cp);
        std::lock_guard lock(m_);
        ensure();
        auto [code, shifted] = keycode_for(k.keysym);
        xcb_keycode_t shift = shifted ? keycode_for(0xffe1 /* Shift_L */).first : 0;
        if (shift) fake(XCB_KEY_PRESS, shift, 0, 0);
        fake(XCB_KEY_PRESS, code, 0, 0);
        fake(XCB_KEY_RELEASE, code, 0, 0);
        if (shift) fake(XCB_KEY_RELEASE, shift, 0, 0);
    }

    std::string screenshot(const std::optional<Region> &region) override {
        std::lock_guard lock(m_);
        ensure();
        Region r = region.value_or(Region{0, 0, screen_->width_in_pixels, screen_->height_in_pixels});
        if (shm_) {
            if (const std::uint8_t *pixels = shm_->get(screen_->root, r.x, r.y, r.width, r.height))
                return encode_png(pixels, r.width, r.height, static_cast<std::size_t>(r.width) * 4);
            shm_.reset(); // e.g. the server cannot see our segment: fall back for good
        }
        auto img = reply(xcb_get_image_reply(
            conn_,
            xcb_get_image(conn_, XCB_IMAGE_FORMAT_Z_PIXMAP, screen_->root, static_cast<std::int16_t>(r.x),
                          static_cast<std::int16_t>(r.y), static_cast<std::uint16_t>(r.width),
                          static_cast<std::uint16_t>(r.height), ~0U),
            nullptr));
        if (!img) x_failed("GetImage failed");
        return encode_png(xcb_get_image_data(img.get()), r.width, r.height, static_cast<std::size_t>(r.width) * 4);
    }

    std::pair<int, int> pointer() override {
        std::lock_guard lock(m_);
        ensure();
        auto p = reply(xcb_query_pointer_reply(conn_, xcb_query_pointer(conn_, screen_->root), nullptr));
        if (!p) x_failed("QueryPointer failed");
        return {p->root_x, p->root_y};
    }

    void cursor_hidden(bool hidden) override {
        std::lock_guard lock(m_);
        ensure();
        // XFixes hides the cursor for as long as the hiding client stays connected: this one.
        auto cookie = hidden ? xcb_xfixes_hide_cursor_checked(conn_, screen_->root)
                             : xcb_xfixes_show_cursor_checked(conn_, screen_->root);
        if (auto *err = xcb_request_check(conn_, cookie)) {
            std::free(err);
            if (hidden) x_failed("XFixes HideCursor failed");
            // Showing a cursor that was not hidden is an error in X; it is visible, as asked.
        }
    }

    std::string clipboard_read() override {
        std::unique_lock lock(clip_m_);
        start_clipboard(lock);
        if (clip_owned_) return clip_text_;
        // Someone else (Chromium, x11vnc for a live-view paste) owns it: ask for UTF8_STRING into
        // our window's property, and for Latin-1 STRING from owners that offer only that.
        for (xcb_atom_t target : {atoms_.utf8, static_cast<xcb_atom_t>(XCB_ATOM_STRING)}) {
            clip_reply_.reset();
            clip_refused_ = false;
            xcb_convert_selection(clip_conn_, clip_window_, atoms_.clipboard, target, atoms_.property,
                                  XCB_CURRENT_TIME);
            xcb_flush(clip_conn_);
            if (!clip_cv_.wait_for(lock, std::chrono::seconds(2),
                                   [&] { return clip_reply_.has_value() || clip_refused_; }))
                x_failed("the clipboard owner did not answer");
            if (clip_reply_) return target == atoms_.utf8 ? *clip_reply_ : latin1_to_utf8(*clip_reply_);
        }
        return {};
    }

    void clipboard_write(const std::string &text) override {
        std::unique_lock lock(clip_m_);
        start_clipboard(lock);
        clip_text_ = text;
        clip_owned_ = true;
        xcb_set_selection_owner(clip_conn_, clip_window_, atoms_.clipboard, XCB_CURRENT_TIME);
        xcb_flush(clip_conn_);
    }

private:
    // Reconnects when Xvfb went away (a viewport change restarts it).
    void ensure() {
        if (!conn_ || xcb_connection_has_error(conn_)) connect();
    }

    void connect() {
        if (conn_) {
            shm_.reset();
            xcb_disconnect(conn_);
            conn_ = nullptr;
        }
        conn_ = xcb_connect(display_.c_str(), nullptr);
        if (xcb_connection_has_error(conn_)) x_failed("cannot connect to " + display_);
        screen_ = xcb_setup_roots_iterator(xcb_get_setup(conn_)).data;
        auto xtest = reply(xcb_test_get_version_reply(conn_, xcb_test_get_version(conn_, 2, 2), nullptr));
        if (!xtest) x_failed("the XTEST extension is missing");
        auto fixes = reply(xcb_xfixes_query_version_reply(conn_, xcb_xfixes_query_version(conn_, 4, 0), nullptr));
        if (!fixes) x_failed("the XFIXES extension is missing");
        if (hangar::xcb::ShmImage::available(conn_)) shm_.emplace(conn_);
        load_keymap();
    }

    void fake(std::uint8_t type, std::uint8_t detail, int x, int y) {
        auto cookie = xcb_test_fake_input_checked(conn_, type, detail, XCB_CURRENT_TIME, screen_->root,
                                                  static_cast<std::int16_t>(x), static_cast<std::int16_t>(y), 0);
        if (auto *err = xcb_request_check(conn_, cookie)) {
            std::free(err);
            x_failed("XTest FakeInput failed");
        }
    }

    void load_keymap() {
        const xcb_setup_t *setup = xcb_get_setup(conn_);
        min_code_ = setup->min_keycode;
        max_code_ = setup->max_keycode;
        auto map = reply(xcb_get_keyboard_mapping_reply(
            conn_, xcb_get_keyboard_mapping(conn_, min_code_, static_cast<std::uint8_t>(max_code_ - min_code_ + 1)),
            nullptr));
        if (!map) x_failed("GetKeyboardMapping failed");
        per_code_ = map->keysyms_per_keycode;
        const xcb_keysym_t *syms = xcb_get_keyboard_mapping_keysyms(map.get());
        keymap_.assign(syms, syms + xcb_get_keyboard_mapping_keysyms_length(map.get()));
        spare_ = 0;
    }

    std::size_t keymap_index(int code, int col) const {
        return static_cast<std::size_t>(code - min_code_) * static_cast<std::size_t>(per_code_) +
               static_cast<std::size_t>(col);
    }

    // The keycode that produces `sym`, and whether Shift is needed. A keysym the keymap lacks
    // (unicode text) is put on a spare keycode, as xdotool does.
    std::pair<xcb_keycode_t, bool> keycode_for(std::uint32_t sym) {
        for (int code = min_code_; code <= max_code_; ++code)
            for (int col = 0; col < std::min(per_code_, 2); ++col)
                if (keymap_[keymap_index(code, col)] == sym) return {static_cast<xcb_keycode_t>(code), col == 1};
        if (!spare_) {
            for (int code = max_code_; code >= min_code_ && !spare_; --code) {
                bool empty = true;
                for (int col = 0; col < per_code_; ++col)
                    empty = empty && keymap_[keymap_index(code, col)] == 0;
                if (empty) spare_ = static_cast<xcb_keycode_t>(code);
            }
            if (!spare_) x_failed("no free keycode to type this character");
        }
        std::vector<xcb_keysym_t> row(static_cast<std::size_t>(per_code_), sym);
        xcb_change_keyboard_mapping(conn_, 1, spare_, static_cast<std::uint8_t>(per_code_), row.data());
        for (int col = 0; col < per_code_; ++col)
            keymap_[keymap_index(spare_, col)] = sym;
        // Clients must see the new mapping before the key arrives.
        auto sync = reply(xcb_get_input_focus_reply(conn_, xcb_get_input_focus(conn_), nullptr));
        (void)sync;
        return {spare_, false};
    }

    // ---- clipboard: a second connection, its own window and event thread ----
    struct Atoms {
        xcb_atom_t clipboard = 0, utf8 = 0, targets = 0, property = 0;
    };

    xcb_atom_t intern(const char *name) {
        auto r = reply(xcb_intern_atom_reply(
            clip_conn_, xcb_intern_atom(clip_conn_, 0, static_cast<std::uint16_t>(std::strlen(name)), name), nullptr));
        if (!r) x_failed(std::string("InternAtom ") + name + " failed");
        return r->atom;
    }

    void start_clipboard(std::unique_lock<std::mutex> &) {
        if (clip_conn_ && !xcb_connection_has_error(clip_conn_)) return;
        stop_clipboard_locked();
        clip_conn_ = xcb_connect(display_.c_str(), nullptr);
        if (xcb_connection_has_error(clip_conn_)) x_failed("cannot connect to " + display_);
        const xcb_screen_t *s = xcb_setup_roots_iterator(xcb_get_setup(clip_conn_)).data;
        clip_window_ = xcb_generate_id(clip_conn_);
        std::uint32_t mask = XCB_EVENT_MASK_PROPERTY_CHANGE;
        xcb_create_window(clip_conn_, XCB_COPY_FROM_PARENT, clip_window_, s->root, 0, 0, 1, 1, 0,
                          XCB_WINDOW_CLASS_INPUT_ONLY, s->root_visual, XCB_CW_EVENT_MASK, &mask);
        atoms_ = {intern("CLIPBOARD"), intern("UTF8_STRING"), intern("TARGETS"), intern("HANGAR_CLIPBOARD")};
        xcb_flush(clip_conn_);
        clip_stop_ = false;
        clip_thread_ = std::thread([this] { clipboard_events(); });
    }

    void clipboard_events() {
        while (!clip_stop_) {
            xcb_generic_event_t *ev = xcb_wait_for_event(clip_conn_);
            if (!ev) return; // connection closed
            auto free_ev = reply(ev);
            switch (ev->response_type & 0x7f) {
            case XCB_SELECTION_REQUEST:
                answer(*reinterpret_cast<xcb_selection_request_event_t *>(ev));
                break;
            case XCB_SELECTION_CLEAR: {
                std::lock_guard lock(clip_m_);
                clip_owned_ = false;
                break;
            }
            case XCB_SELECTION_NOTIFY: {
                auto *n = reinterpret_cast<xcb_selection_notify_event_t *>(ev);
                if (n->property == XCB_NONE) { // the owner cannot give that format
                    std::lock_guard lock(clip_m_);
                    clip_refused_ = true;
                    clip_cv_.notify_all();
                    break;
                }
                std::string text;
                {
                    auto p = reply(xcb_get_property_reply(clip_conn_,
                                                          xcb_get_property(clip_conn_, 1, clip_window_, atoms_.property,
                                                                           XCB_ATOM_ANY, 0, 16 * 1024 * 1024),
                                                          nullptr));
                    if (p)
                        text.assign(static_cast<const char *>(xcb_get_property_value(p.get())),
                                    static_cast<std::size_t>(xcb_get_property_value_length(p.get())));
                }
                std::lock_guard lock(clip_m_);
                clip_reply_ = std::move(text);
                clip_cv_.notify_all();
                break;
            }
            default:
                break;
            }
        }
    }

    // Another client (Chromium pasting) asks for our selection: give it TARGETS or the text.
    void answer(const xcb_selection_request_event_t &req) {
        xcb_selection_notify_event_t note{};
        note.response_type = XCB_SELECTION_NOTIFY;
        note.time = req.time;
        note.requestor = req.requestor;
        note.selection = req.selection;
        note.target = req.target;
        note.property = XCB_NONE;
        std::string text;
        {
            std::lock_guard lock(clip_m_);
            text = clip_text_;
        }
        xcb_atom_t property = req.property == XCB_NONE ? req.target : req.property;
        if (req.target == atoms_.targets) {
            xcb_atom_t offered[] = {atoms_.targets, atoms_.utf8, XCB_ATOM_STRING};
            xcb_change_property(clip_conn_, XCB_PROP_MODE_REPLACE, req.requestor, property, XCB_ATOM_ATOM, 32, 3,
                                offered);
            note.property = property;
        } else if (req.target == atoms_.utf8 || req.target == XCB_ATOM_STRING) {
            xcb_change_property(clip_conn_, XCB_PROP_MODE_REPLACE, req.requestor, property, req.target, 8,
                                static_cast<std::uint32_t>(text.size()), text.data());
            note.property = property;
        }
        xcb_send_event(clip_conn_, 0, req.requestor, XCB_EVENT_MASK_NO_EVENT, reinterpret_cast<const char *>(&note));
        xcb_flush(clip_conn_);
    }

    void stop_clipboard() {
        std::unique_lock lock(clip_m_);
        stop_clipboard_locked();
    }

    void stop_clipboard_locked() {
        if (!clip_conn_) return;
        clip_stop_ = true;
        // Closing the socket wakes xcb_wait_for_event; the thread then sees the flag.
        ::shutdown(xcb_get_file_descriptor(clip_conn_), SHUT_RDWR);
        if (clip_thread_.joinable()) {
            clip_m_.unlock();
            clip_thread_.join();
            clip_m_.lock();
        }
        xcb_disconnect(clip_conn_);
        clip_conn_ = nullptr;
        clip_owned_ = false;
    }

    std::string display_;
    std::mutex m_;
    xcb_connection_t *conn_ = nullptr;
    xcb_screen_t *screen_ = nullptr;
    int min_code_ = 8, max_code_ = 255, per_code_ = 1;
    std::vector<xcb_keysym_t> keymap_;
    xcb_keycode_t spare_ = 0;
    std::optional<hangar::xcb::ShmImage> shm_; // unset: GetImage through the socket

    std::mutex clip_m_;
    std::condition_variable clip_cv_;
    xcb_connection_t *clip_conn_ = nullptr;
    xcb_window_t clip_window_ = 0;
    Atoms atoms_;
    std::thread clip_thread_;
    std::atomic<bool> clip_stop_{false};
    bool clip_owned_ = false;
    std::string clip_text_;
    std::optional<std::string> clip_reply_;
    bool clip_refused_ = false;
};

} // namespace

std::unique_ptr<Screen> make_x11_screen(int display) {
    return std::make_unique<X11Screen>(display);
}

} // namespace hangar::computer
