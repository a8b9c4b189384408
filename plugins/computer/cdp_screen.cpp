// The headless backend: one CDP connection to the session's first page, kept open, with input
// events and screenshots through the page. The page viewport is the screen. Kernel has no
// OS-level control in headless; this gives the same endpoints the same meaning there.
#include "screen.hpp"

#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>

#include <mutex>
#include <stdexcept>

namespace hangar::computer {

namespace {

using hangar::json;
using hangar::cdp::base64_decode;
using hangar::cdp::first_page_path;
using CdpConnection = hangar::cdp::Connection;

class CdpScreen final : public Screen {
public:
    explicit CdpScreen(std::function<ChromiumInfo()> locate) : locate_(std::move(locate)) {}

    Size size() override {
        std::lock_guard lock(m_);
        return viewport();
    }

    void move(int x, int y) override {
        std::lock_guard lock(m_);
        x_ = x;
        y_ = y;
        mouse("mouseMoved", "none", 0);
    }

    void button(Button b, bool down) override {
        static constexpr const char *names[] = {"left", "middle", "right", "back", "forward"};
        static constexpr int bits[] = {1, 4, 2, 8, 16};
        std::lock_guard lock(m_);
        int bit = bits[static_cast<int>(b)];
        if (down) {
            // Quick repeats at one spot are double and triple clicks, as the OS would count them.
            auto now = std::chrono::steady_clock::now();
            bool again =
                now - last_press_ < std::chrono::milliseconds(500) && last_press_x_ == x_ && last_press_y_ == y_;
            click_count_ = again ? click_count_ + 1 : 1;
            last_press_ = now;
            last_press_x_ = x_;
            last_press_y_ = y_;
            buttons_ |= bit;
        } else {
            buttons_ &= ~bit;
        }
        mouse(down ? "mousePressed" : "mouseReleased", names[static_cast<int>(b)], click_count_);
    }

    void wheel(int dx, int dy) override {
        std::lock_guard lock(m_);
        // One xdotool wheel click scrolls about as far as Chromium's own wheel tick.
        constexpr int kPixelsPerClick = 100;
        call("Input.dispatchMouseEvent", {{"type", "mouseWheel"},
                                          {"x", x_},
                                          {"y", y_},
                                          {"deltaX", dx * kPixelsPerClick},
                                          {"deltaY", dy * kPixelsPerClick},
                                          {"modifiers", modifiers_}});
    }

    void key(const Key &k, bool down) override {
        std::lock_guard lock(m_);
        if (k.modifier) modifiers_ = down ? (modifiers_ | k.modifier) : (modifiers_ & ~k.modifier);
        json e = {{"type", down ? (k.text.empty() || (modifiers_ & 0x7) ? "rawKeyDown" : "keyDown") : "keyUp"},
                  {"key", k.dom_key},
                  {"code", k.dom_code},
                  {"windowsVirtualKeyCode", k.virtual_key},
                  {"nativeVirtualKeyCode", k.virtual_key},
                  {"modifiers", modifiers_}};
        if (down && !k.text.empty() && !(modifiers_ & 0x7)) e["text"] = shifted_text(k);
        call("Input.dispatchKeyEvent", e);
    }

    void type_char(char32_t cp) override {
        Key k = key_for_codepoint(cp);
        std::lock_guard lock(m_);
        if (k.virtual_key == 0) { // no key for it: insert as an IME would
            call("Input.insertText", {{"text", k.text}});
            return;
        }
        json down = {{"type", "keyDown"},      {"key", k.dom_key},
                     {"code", k.dom_code},     {"windowsVirtualKeyCode", k.virtual_key},
                     {"text", k.text},         {"unmodifiedText", k.text},
                     {"modifiers", modifiers_}};
        call("Input.dispatchKeyEvent", down);
        call("Input.dispatchKeyEvent", {{"type", "keyUp"},
                                        {"key", k.dom_key},
                                        {"code", k.dom_code},
                                        {"windowsVirtualKeyCode", k.virtual_key},
                                        {"modifiers", modifiers_}});
    }

    std::string screenshot(const std::optional<Region> &region) override {
        std::lock_guard lock(m_);
        json params = {{"format", "png"}};
        if (region)
            params["clip"] = {
                {"x", region->x}, {"y", region->y}, {"width", region->width}, {"height", region->height}, {"scale", 1}};
        return base64_decode(call("Page.captureScreenshot", params).value("data", ""));
    }

    std::pair<int, int> pointer() override {
        std::lock_guard lock(m_);
        return {x_, y_}; // CDP cannot ask; every move went through here
    }

    void cursor_hidden(bool) override {
        // Headless Chromium draws no cursor in its screenshots: hidden and shown look the same.
    }

    std::string clipboard_read() override {
        std::lock_guard lock(m_);
        grant_clipboard();
        auto r = call("Runtime.evaluate", {{"expression", "navigator.clipboard.readText()"},
                                           {"awaitPromise", true},
                                           {"userGesture", true},
                                           {"returnByValue", true}});
        if (r.contains("exceptionDetails"))
            throw hangar::cdp::Failure("the page could not read the clipboard: " + why(r));
        return r["result"].value("value", "");
    }

    void clipboard_write(const std::string &text) override {
        std::lock_guard lock(m_);
        grant_clipboard();
        auto r = call("Runtime.evaluate", {{"expression", "navigator.clipboard.writeText(" + json(text).dump() + ")"},
                                           {"awaitPromise", true},
                                           {"userGesture", true}});
        if (r.contains("exceptionDetails"))
            throw hangar::cdp::Failure("the page could not write the clipboard: " + why(r));
    }

private:
    static std::string shifted_text(const Key &k) { return k.text; }

    // The exception a Runtime.evaluate threw, as the page described it.
    static std::string why(const json &r) {
        const json &d = r["exceptionDetails"];
        if (d.contains("exception")) return d["exception"].value("description", d.value("text", "unknown error"));
        return d.value("text", "unknown error");
    }

    void grant_clipboard() {
        if (!granted_) {
            // Browser-level permission for every origin, so whatever page is open may use the clipboard.
            call("Browser.grantPermissions", {{"permissions", {"clipboardReadWrite", "clipboardSanitizedWrite"}}});
            granted_ = true;
        }
        // The clipboard API refuses a document without focus, which earlier input (a key combo,
        // a click elsewhere) can take away; emulated focus keeps the page focused whatever came before.
        call("Emulation.setFocusEmulationEnabled", {{"enabled", true}});
        call("Page.bringToFront");
        // Headless has no system clipboard: the page's API is the clipboard, and only a secure
        // context (https, localhost; not the blank first tab) has one. The caller can fix that.
        auto has = call("Runtime.evaluate",
                        {{"expression", "typeof navigator.clipboard !== 'undefined'"}, {"returnByValue", true}});
        if (!has["result"].value("value", false))
            throw hangar::Error(409, "conflict",
                                "the page open in this headless browser is not a secure context, so it has no "
                                "clipboard; open an https:// or localhost page first");
    }

    Size viewport() {
        auto m = call("Page.getLayoutMetrics");
        const json &v = m.contains("cssLayoutViewport") ? m["cssLayoutViewport"] : m["layoutViewport"];
        return {v.value("clientWidth", 0), v.value("clientHeight", 0)};
    }

    void mouse(const char *type, const char *button, int clicks) {
        call("Input.dispatchMouseEvent", {{"type", type},
                                          {"x", x_},
                                          {"y", y_},
                                          {"button", button},
                                          {"buttons", buttons_},
                                          {"clickCount", clicks},
                                          {"modifiers", modifiers_}});
    }

    // One retry on a fresh connection: Chromium may have restarted (viewport change, crash).
    json call(const std::string &method, const json &params = json::object()) {
        for (int attempt = 0;; ++attempt) {
            try {
                if (!conn_) {
                    int port = locate_().port;
                    conn_ = std::make_unique<CdpConnection>(port, first_page_path(port));
                    granted_ = false;
                }
                return conn_->call(method, params);
            } catch (const std::runtime_error &) {
                conn_.reset();
                if (attempt > 0) throw;
            }
        }
    }

    std::function<ChromiumInfo()> locate_;
    std::mutex m_;
    std::unique_ptr<CdpConnection> conn_;
    int x_ = 0, y_ = 0;
    int buttons_ = 0, modifiers_ = 0, click_count_ = 0;
    std::chrono::steady_clock::time_point last_press_{};
    int last_press_x_ = -1, last_press_y_ = -1;
    bool granted_ = false;
};

} // namespace

std::unique_ptr<Screen> make_cdp_screen(std::function<ChromiumInfo()> locate) {
    return std::make_unique<CdpScreen>(std::move(locate));
}

} // namespace hangar::computer
