// The live view of a headless instance: a unix socket in the instance dir (reached like x11vnc's,
// through ws_bridge_unix and the server's relay) that, per viewer connection, opens its own CDP
// connection to the instance's Chromium, screencasts the followed page and, in control mode,
// turns the viewer's input into CDP input events. The viewer never speaks CDP itself.
//
// Stream to the viewer: records of [u32 big-endian length][u8 kind][payload], length counting
// kind + payload; kind 1 = JSON {"width","height"} (the page's size in CSS pixels, sent when it
// changes), kind 2 = one JPEG frame, kind 3 = JSON {"text"}: what was selected in the page when the
// viewer pressed copy or cut. From the viewer: newline-delimited JSON input (see input_command),
// {"type":"copy"} before a copy or cut key, all ignored in view mode; and {"type":"view"} with
// the viewer window's size, which the frames then fit (view mode too).
#pragma once

#include "input.hpp"

#include <hangar/cdp.hpp>
#include <hangar/process.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace hangar::liveview {

// Where the instance's Chromium answers, and the viewport its screencast is sized to.
struct CastTarget {
    int port = 0;
    std::string browser_path; // /devtools/browser/...
    int width = 0;
    int height = 0;
};

class ScreencastBridge {
public:
    using Locate = std::function<CastTarget()>;

    ScreencastBridge(std::string socket_path, bool view_only, Locate locate, int quality)
        : path_(std::move(socket_path)), view_only_(view_only), locate_(std::move(locate)), quality_(quality) {
        wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        listen_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!wake_ || !listen_) throw hangar::proc::detail::sys_error("screencast socket");
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (path_.size() >= sizeof addr.sun_path) throw std::runtime_error("screencast socket path too long");
        std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
        ::unlink(path_.c_str());
        if (::bind(listen_.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
            ::listen(listen_.get(), 16) != 0)
            throw hangar::proc::detail::sys_error("screencast socket " + path_);
        acceptor_ = std::thread([this] { accept_loop(); });
    }

    ScreencastBridge(const ScreencastBridge &) = delete;
    ScreencastBridge &operator=(const ScreencastBridge &) = delete;

    // Ends every viewer (their CDP connections close with them) and the listener.
    ~ScreencastBridge() {
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
        if (acceptor_.joinable()) acceptor_.join();
        std::list<Viewer> viewers;
        {
            std::lock_guard lock(mutex_);
            viewers.swap(viewers_);
        }
        for (auto &v : viewers)
            if (v.thread.joinable()) v.thread.join();
        ::unlink(path_.c_str());
    }

    const std::string &socket() const { return path_; }

private:
    struct Viewer {
        std::thread thread;
        std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
    };

    bool stopping() const {
        pollfd p{wake_.get(), POLLIN, 0};
        return ::poll(&p, 1, 0) > 0;
    }

    void accept_loop() {
        for (;;) {
            pollfd p[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
            if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
            if (p[1].revents) return;
            if (!(p[0].revents & POLLIN)) continue;
            hangar::proc::Fd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (!conn) continue;
            std::lock_guard lock(mutex_);
            // Threads of viewers that left are joined here, so they do not pile up.
            for (auto it = viewers_.begin(); it != viewers_.end();) {
                if (it->done->load()) {
                    it->thread.join();
                    it = viewers_.erase(it);
                } else {
                    ++it;
                }
            }
            Viewer &v = viewers_.emplace_back();
            v.thread = std::thread([this, fd = std::move(conn), done = v.done]() mutable {
                try {
                    serve(fd.get());
                } catch (const std::exception &) {
                    // Chromium went away or restarted, or the viewer left: the page reconnects.
                }
                done->store(true);
            });
        }
    }

    // Writes all of `data` to the viewer unless it leaves or the bridge stops.
    void write_viewer(int fd, std::string_view data) const {
        while (!data.empty()) {
            pollfd p[2] = {{fd, POLLOUT, 0}, {wake_.get(), POLLIN, 0}};
            if (::poll(p, 2, -1) < 0) {
                if (errno == EINTR) continue;
                throw std::runtime_error("poll");
            }
            if (p[1].revents) throw std::runtime_error("stopping");
            ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) throw std::runtime_error("the viewer left");
            data.remove_prefix(static_cast<std::size_t>(n));
        }
    }

    void write_record(int fd, char kind, std::string_view payload) const {
        std::uint32_t len = static_cast<std::uint32_t>(payload.size() + 1);
        std::string head = {static_cast<char>(len >> 24), static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                            static_cast<char>(len), kind};
        write_viewer(fd, head + std::string(payload));
    }

    // One viewer: its own CDP connection, following one page at a time (the newest page that
    // opens, another when it closes).
    void serve(int viewer) {
        using namespace std::chrono_literals;
        // Short: a stopping bridge waits for a viewer thread inside a call.
        constexpr std::chrono::milliseconds kCallTimeout = 5s;
        CastTarget t = locate_();
        cdp::Connection cdp(t.port, t.browser_path, kCallTimeout);
        cdp.call("Target.setDiscoverTargets", {{"discover", true}}, {}, kCallTimeout);
        std::set<std::string> known;
        std::string target, session;
        // The viewport, until the viewer says its window is smaller.
        int max_width = t.width, max_height = t.height;
        auto cast = [&] {
            json params = {{"format", "jpeg"}, {"quality", quality_}, {"everyNthFrame", 1}};
            if (max_width > 0 && max_height > 0) {
                params["maxWidth"] = max_width;
                params["maxHeight"] = max_height;
            }
            return params;
        };
        // Whether the followed page sent a frame since it was attached, and when its screencast
        // was last (re)started: a page attached while it is still being set up (a new tab that
        // its opener holds paused, a first document swapped for another) may never send one,
        // and the viewer would go on showing the page before it.
        bool framed = false;
        auto cast_started = std::chrono::steady_clock::now();
        auto attach = [&](const std::string &id) {
            target = id;
            session = cdp.call("Target.attachToTarget", {{"targetId", id}, {"flatten", true}}, {}, kCallTimeout)
                          .value("sessionId", std::string());
            cdp.call("Page.startScreencast", cast(), session, kCallTimeout);
            framed = false;
            cast_started = std::chrono::steady_clock::now();
        };
        auto restart_cast = [&] {
            cdp.send("Page.stopScreencast", json::object(), session);
            cdp.send("Page.startScreencast", cast(), session);
            cast_started = std::chrono::steady_clock::now();
        };
        // A frame size the viewer asked for, never above the viewport (Chromium would only scale
        // the page up): the screencast restarts at it.
        auto resize_cast = [&](std::pair<int, int> wanted) {
            int w = t.width > 0 ? std::min(wanted.first, t.width) : wanted.first;
            int h = t.height > 0 ? std::min(wanted.second, t.height) : wanted.second;
            if (w == max_width && h == max_height) return;
            max_width = w;
            max_height = h;
            if (!session.empty()) restart_cast();
        };
        auto attach_any = [&] {
            target.clear();
            session.clear();
            for (const auto &ti :
                 cdp.call("Target.getTargets", json::object(), {}, kCallTimeout).value("targetInfos", json::array())) {
                known.insert(ti.value("targetId", ""));
                if (target.empty() && ti.value("type", "") == "page") {
                    try {
                        attach(ti.value("targetId", ""));
                    } catch (const cdp::Failure &e) {
                        if (e.timed_out()) throw;
                        target.clear(); // it closed meanwhile: try the next
                        session.clear();
                    }
                }
            }
        };
        attach_any();

        int width = 0, height = 0;
        std::string input;
        for (;;) {
            // Until the first frame comes, the screencast starts again every second, which makes
            // Chromium send the page as it is now.
            if (!framed && !session.empty() && std::chrono::steady_clock::now() - cast_started >= 1s) restart_cast();
            bool ready = cdp.pending();
            if (!ready) {
                pollfd p[3] = {{cdp.fd(), POLLIN, 0}, {viewer, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
                if (::poll(p, 3, 1000) < 0) {
                    if (errno == EINTR) continue;
                    return;
                }
                if (p[2].revents) return;
                if (p[1].revents) {
                    char buf[16384];
                    ssize_t n = ::recv(viewer, buf, sizeof buf, 0);
                    if (n <= 0) return; // the viewer left
                    input.append(buf, static_cast<std::size_t>(n));
                    for (auto nl = input.find('\n'); nl != std::string::npos; nl = input.find('\n')) {
                        std::string line = input.substr(0, nl);
                        input.erase(0, nl + 1);
                        if (auto size = view_request(line)) {
                            resize_cast(*size);
                        } else if (!view_only_ && !session.empty()) {
                            // (View mode: input is read, to notice the viewer leaving, and dropped.)
                            if (is_copy_request(line))
                                write_record(viewer, 3, json{{"text", selected_text(cdp, session)}}.dump());
                            else if (auto cmd = input_command(line))
                                cdp.send(cmd->first, cmd->second, session); // the reply is not waited for
                        }
                    }
                    if (input.size() > (2u << 20)) return; // not line-delimited input
                }
                ready = p[0].revents != 0;
            }
            if (!ready) continue;
            json msg = cdp.next(cdp::Clock::now() + 10s);
            std::string method = msg.value("method", "");
            const json &params = msg.contains("params") ? msg["params"] : json::object();
            if (method == "Page.screencastFrame" && msg.value("sessionId", "") == session) {
                framed = true;
                const json &meta = params.contains("metadata") ? params["metadata"] : json::object();
                int w = static_cast<int>(meta.value("deviceWidth", 0.0)),
                    h = static_cast<int>(meta.value("deviceHeight", 0.0));
                if (w != width || h != height) {
                    width = w;
                    height = h;
                    write_record(viewer, 1, json{{"width", w}, {"height", h}}.dump());
                }
                write_record(viewer, 2, cdp::base64_decode(params.value("data", "")));
                // Acked once written: a slow viewer slows the screencast instead of queueing frames.
                cdp.send("Page.screencastFrameAck", {{"sessionId", params.value("sessionId", 0)}}, session);
            } else if (method == "Target.targetCreated") {
                const json &ti = params.contains("targetInfo") ? params["targetInfo"] : json::object();
                std::string id = ti.value("targetId", "");
                if (known.insert(id).second && ti.value("type", "") == "page") {
                    // A new tab is where the user (or agent) works next.
                    if (!session.empty()) cdp.send("Target.detachFromTarget", {{"sessionId", session}});
                    try {
                        attach(id);
                    } catch (const cdp::Failure &e) {
                        if (e.timed_out()) throw;
                        attach_any();
                    }
                }
            } else if ((method == "Target.detachedFromTarget" && params.value("sessionId", "") == session) ||
                       (method == "Target.targetDestroyed" && params.value("targetId", "") == target)) {
                known.erase(target);
                attach_any();
            }
        }
    }

    // Headless Chromium keeps its clipboard to itself (no CDP read, no X selection), so a copy in
    // the viewer takes the page's selection instead, read before the copy or cut key goes (a cut
    // removes it). In a world of its own: the page's scripts neither see the read nor steer it.
    static std::string selected_text(cdp::Connection &cdp, const std::string &session) {
        using namespace std::chrono_literals;
        constexpr auto kTimeout = 2s;
        static constexpr std::string_view kRead = R"js((() => {
          const e = document.activeElement;
          if (e && typeof e.selectionStart === 'number' && typeof e.value === 'string')
            return e.value.slice(e.selectionStart, e.selectionEnd);
          return String(document.getSelection() ?? '');
        })())js";
        try {
            std::string frame =
                cdp.call("Page.getFrameTree", json::object(), session, kTimeout)["frameTree"]["frame"].value(
                    "id", std::string());
            int world = cdp.call("Page.createIsolatedWorld", {{"frameId", frame}, {"worldName", "hangar-liveview"}},
                                 session, kTimeout)
                            .value("executionContextId", 0);
            json r =
                cdp.call("Runtime.evaluate", {{"expression", kRead}, {"contextId", world}, {"returnByValue", true}},
                         session, kTimeout);
            std::string text = r["result"].value("value", std::string());
            return text.size() > (1u << 20) ? std::string() : text;
        } catch (const cdp::Failure &e) {
            if (e.timed_out()) throw;
            return {}; // the page went away meanwhile: nothing was selected
        }
    }

    std::string path_;
    bool view_only_;
    Locate locate_;
    int quality_;
    hangar::proc::Fd wake_;
    hangar::proc::Fd listen_;
    std::mutex mutex_;
    std::list<Viewer> viewers_;
    std::thread acceptor_;
};

} // namespace hangar::liveview
