// The headless backend: one CDP connection to the session's first page, kept open, with input
// events and screenshots through the page. The page viewport is the screen. Kernel has no
// OS-level control in headless; this gives the same endpoints the same meaning there.
#include "screen.hpp"

#include <hangar/plugin.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>

namespace hangar::computer {

namespace {

using hangar::json;

class Socket {
public:
    Socket() = default;
    explicit Socket(int fd) : fd_(fd) {}
    Socket(Socket &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Socket &operator=(Socket &&o) noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = std::exchange(o.fd_, -1);
        return *this;
    }
    Socket(const Socket &) = delete;
    Socket &operator=(const Socket &) = delete;
    ~Socket() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

[[noreturn]] void cdp_failed(const std::string &what) {
    throw std::runtime_error("CDP: " + what);
}

void send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) cdp_failed("the connection to Chromium broke");
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::string base64_decode(std::string_view in) {
    static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve(in.size() * 3 / 4);
    unsigned val = 0;
    int bits = -8;
    for (char c : in) {
        auto pos = chars.find(c);
        if (pos == std::string::npos) continue; // '=' and anything else
        val = (val << 6) | static_cast<unsigned>(pos);
        bits += 6;
        if (bits >= 0) {
            out.push_back(static_cast<char>((val >> bits) & 0xFF));
            bits -= 8;
        }
    }
    return out;
}

// A minimal synchronous WebSocket client for one DevTools target: text frames out (masked, as
// clients must), whole messages in, events skipped while waiting for a reply.
class CdpConnection {
public:
    CdpConnection(int port, const std::string &path) {
        sock_ = Socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (!sock_ || ::connect(sock_.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0)
            cdp_failed("cannot connect to Chromium on port " + std::to_string(port));
        int one = 1;
        ::setsockopt(sock_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        timeval tv{30, 0};
        ::setsockopt(sock_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        send_all(sock_.get(), "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
                                  "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                  "Sec-WebSocket-Key: aGFuZ2FyLWNvbXB1dGVyLWtleQ==\r\n\r\n");
        std::string head;
        while (head.find("\r\n\r\n") == std::string::npos)
            head += read_some();
        auto end = head.find("\r\n\r\n");
        if (!head.starts_with("HTTP/1.1 101")) cdp_failed("Chromium refused the WebSocket: " + head.substr(0, 40));
        buffer_ = head.substr(end + 4);
    }

    json call(const std::string &method, const json &params = json::object()) {
        int id = ++next_id_;
        send_text(json{{"id", id}, {"method", method}, {"params", params}}.dump());
        for (;;) {
            json msg = json::parse(read_message(), nullptr, false);
            if (!msg.is_object() || msg.value("id", 0) != id) continue; // events
            if (msg.contains("error")) cdp_failed(method + ": " + msg["error"].value("message", "failed"));
            return msg.value("result", json::object());
        }
    }

private:
    std::string read_some() {
        char buf[65536];
        for (;;) {
            ssize_t n = ::recv(sock_.get(), buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) cdp_failed("the connection to Chromium closed");
            return {buf, static_cast<std::size_t>(n)};
        }
    }

    void need(std::size_t n) {
        while (buffer_.size() < n)
            buffer_ += read_some();
    }

    std::string read_message() {
        std::string message;
        for (;;) {
            need(2);
            auto b0 = static_cast<unsigned char>(buffer_[0]), b1 = static_cast<unsigned char>(buffer_[1]);
            std::size_t header = 2;
            std::uint64_t len = b1 & 0x7F;
            if (len == 126) {
                need(4);
                len = (static_cast<std::uint64_t>(static_cast<unsigned char>(buffer_[2])) << 8) |
                      static_cast<unsigned char>(buffer_[3]);
                header = 4;
            } else if (len == 127) {
                need(10);
                len = 0;
                for (int i = 0; i < 8; ++i)
                    len = (len << 8) | static_cast<unsigned char>(buffer_[2 + static_cast<std::size_t>(i)]);
                header = 10;
            }
            need(header + len);
            int opcode = b0 & 0x0F;
            std::string payload = buffer_.substr(header, len);
            buffer_.erase(0, header + len);
            if (opcode == 0x8) cdp_failed("Chromium closed the WebSocket");
            if (opcode == 0x9) { // ping: answer, keep reading
                send_frame(0xA, payload);
                continue;
            }
            if (opcode == 0x1 || opcode == 0x2 || opcode == 0x0) message += payload;
            if (b0 & 0x80) return message;
        }
    }

    void send_text(const std::string &text) { send_frame(0x1, text); }

    void send_frame(int opcode, std::string_view payload) {
        std::string frame;
        frame.push_back(static_cast<char>(0x80 | opcode));
        if (payload.size() < 126) {
            frame.push_back(static_cast<char>(0x80 | payload.size()));
        } else if (payload.size() < 65536) {
            frame.push_back(static_cast<char>(0x80 | 126));
            frame.push_back(static_cast<char>(payload.size() >> 8));
            frame.push_back(static_cast<char>(payload.size() & 0xFF));
        } else {
            frame.push_back(static_cast<char>(0x80 | 127));
            for (int i = 7; i >= 0; --i)
                frame.push_back(static_cast<char>((static_cast<std::uint64_t>(payload.size()) >> (8 * i)) & 0xFF));
        }
        unsigned char mask[4];
        for (auto &m : mask)
            m = static_cast<unsigned char>(rng_());
        frame.append(reinterpret_cast<const char *>(mask), 4);
        for (std::size_t i = 0; i < payload.size(); ++i)
            frame.push_back(static_cast<char>(payload[i] ^ static_cast<char>(mask[i % 4])));
        send_all(sock_.get(), frame);
    }

    Socket sock_;
    std::string buffer_;
    int next_id_ = 0;
    std::minstd_rand rng_{std::random_device{}()};
};

// The first page target's WebSocket path, from Chromium's /json/list.
std::string first_page_path(int port) {
    Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!sock || ::connect(sock.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0)
        cdp_failed("cannot reach Chromium on port " + std::to_string(port));
    send_all(sock.get(), "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    timeval tv{10, 0};
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    // Chromium keeps the connection open whatever the request says: the body ends at its length.
    std::string data;
    std::size_t body = std::string::npos, length = std::string::npos;
    char buf[16384];
    while (body == std::string::npos || data.size() < body + length) {
        ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        data.append(buf, static_cast<std::size_t>(n));
        if (body == std::string::npos && (body = data.find("\r\n\r\n")) != std::string::npos) {
            body += 4;
            std::string head = data.substr(0, body);
            for (auto &c : head)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            auto at = head.find("content-length:");
            length = at == std::string::npos ? 0 : std::stoul(head.substr(at + 15));
        }
    }
    json list = json::parse(body == std::string::npos ? "" : data.substr(body), nullptr, false);
    if (list.is_array())
        for (const auto &t : list)
            if (t.is_object() && t.value("type", "") == "page") {
                std::string url = t.value("webSocketDebuggerUrl", "");
                auto at = url.find("/devtools/");
                if (at != std::string::npos) return url.substr(at);
            }
    cdp_failed("Chromium has no page to act on");
}

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
        if (r.contains("exceptionDetails")) cdp_failed("the page could not read the clipboard");
        return r["result"].value("value", "");
    }

    void clipboard_write(const std::string &text) override {
        std::lock_guard lock(m_);
        grant_clipboard();
        auto r = call("Runtime.evaluate", {{"expression", "navigator.clipboard.writeText(" + json(text).dump() + ")"},
                                           {"awaitPromise", true},
                                           {"userGesture", true}});
        if (r.contains("exceptionDetails")) cdp_failed("the page could not write the clipboard");
    }

private:
    static std::string shifted_text(const Key &k) { return k.text; }

    void grant_clipboard() {
        if (granted_) return;
        // Browser-level permission for every origin, so whatever page is open may use the clipboard.
        call("Browser.grantPermissions", {{"permissions", {"clipboardReadWrite", "clipboardSanitizedWrite"}}});
        call("Page.bringToFront");
        granted_ = true;
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
