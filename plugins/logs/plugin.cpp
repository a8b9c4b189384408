// logs: Kernel API §3.10 [49] and §4.4: a browser's log files as an SSE stream of LogEvents.
//
// Server role: one streaming route that relays to the session's agent (spliced in the host's
// event loop). Instance role: `/logs/stream` reads the file inside the sandbox — a service log
// (source=supervisor: chromium, xvfb, agent, under /run/hangar/logs) or any file
// (source=path) — line by line, and with follow keeps tailing it through inotify. One thread per
// open stream; it ends when the client goes away, the plugin stops, or (without follow) at the
// end of the file.
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

constexpr std::size_t kMaxLine = std::size_t{64} * 1024; // longer lines are cut, as on Kernel

class Fd {
public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }

private:
    int fd_;
};

// The service logs the agent and the browsers plugin write, by their Kernel (supervisord) names
// and ours.
const std::map<std::string, std::string> &service_logs() {
    static const std::map<std::string, std::string> logs = {
        {"chromium", "chromium.log"},       {"xvfb", "xvfb.log"}, {"xorg", "xvfb.log"}, {"agent", "agent.log"},
        {"kernel-images-api", "agent.log"},
    };
    return logs;
}

bool follow_param(const Request &req) {
    auto f = req.query("follow");
    if (!f || f->empty()) return true; // tail -f unless told otherwise
    if (*f == "true" || *f == "1") return true;
    if (*f == "false" || *f == "0") return false;
    throw Error::invalid("follow", "must be true or false");
}

class LogsPlugin final : public hangar::Plugin {
public:
    void start() override {
        if (role() == HANGAR_ROLE_INSTANCE) {
            run_dir_ = instance_run_dir();
            route(
                "GET", "/logs/stream", [this](Request &q, Response &r) { stream(q, r); }, HANGAR_ROUTE_STREAMING);
        } else {
            route(
                "GET", "/browsers/{id}/logs/stream",
                [this](Request &q, Response &r) { relay_to_session(q, r, "/logs/stream"); }, HANGAR_ROUTE_STREAMING);
        }
    }

    void stop() override {
        stopping_ = true;
        std::list<Tail> tails;
        {
            std::lock_guard lock(m_);
            tails.swap(tails_);
        }
        for (auto &t : tails)
            t.thread.join();
    }

private:
    std::string resolve(const Request &req) const {
        auto source = req.query("source").value_or("");
        if (source == "supervisor") {
            auto name = req.query("supervisor_process").value_or("");
            if (name.empty()) throw Error::invalid("supervisor_process", "is required when source is supervisor");
            auto it = service_logs().find(name);
            if (it == service_logs().end())
                throw Error::invalid("supervisor_process", "must be one of chromium, xvfb (xorg), agent");
            return run_dir_ + "/logs/" + it->second;
        }
        if (source == "path") {
            auto path = req.query("path").value_or("");
            if (path.empty()) throw Error::invalid("path", "is required when source is path");
            // The sandbox is the boundary (nothing outside it is mounted); these only keep the
            // request honest about what it names.
            if (path.front() != '/') throw Error::invalid("path", "must be absolute");
            if (path.find("/../") != std::string::npos || path.ends_with("/..") || path.find('\0') != std::string::npos)
                throw Error::invalid("path", "must not contain '..'");
            return path;
        }
        throw Error::invalid("source", "must be path or supervisor");
    }

    void stream(Request &req, Response &res) {
        std::string path = resolve(req);
        bool follow = follow_param(req);
        auto fd = std::make_shared<Fd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
        if (fd->get() < 0) {
            if (errno == ENOENT || errno == ENOTDIR) throw Error::not_found("no file at " + path);
            throw Error::invalid("path", std::string("cannot be read: ") + std::strerror(errno));
        }
        struct stat st {};
        if (::fstat(fd->get(), &st) != 0 || S_ISDIR(st.st_mode)) throw Error::invalid("path", "is a folder");
        std::shared_ptr<hangar::SseStream> sse = res.sse();
        std::lock_guard lock(m_);
        // Streams that ended since the last one are joined here, so finished threads do not pile up.
        tails_.remove_if([](Tail &t) {
            if (!t.done) return false;
            t.thread.join();
            return true;
        });
        auto &t = tails_.emplace_back();
        t.thread = std::thread([this, path, follow, fd, sse, &done = t.done] {
            tail(path, follow, *fd, *sse);
            done = true;
        });
    }

    // Sends every complete line, then (with follow) waits for more. A file that shrinks was
    // truncated or rotated in place: start again from its beginning.
    void tail(const std::string &path, bool follow, const Fd &fd, hangar::SseStream &sse) {
        Fd notify(follow ? ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK) : -1);
        if (follow && notify.get() >= 0) ::inotify_add_watch(notify.get(), path.c_str(), IN_MODIFY | IN_ATTRIB);
        std::string pending;
        off_t offset = 0;
        char buf[65536];
        auto emit = [&](std::string line) {
            if (line.size() > kMaxLine) line.resize(kMaxLine);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            return sse.send({{"event", "log"}, {"message", line}, {"timestamp", hangar::rfc3339(hangar::now_ms())}});
        };
        while (!stopping_) {
            struct stat st {};
            if (::fstat(fd.get(), &st) == 0 && st.st_size < offset) {
                offset = 0;
                pending.clear();
            }
            ssize_t n = ::pread(fd.get(), buf, sizeof buf, offset);
            if (n < 0 && errno == EINTR) continue;
            if (n > 0) {
                offset += n;
                pending.append(buf, static_cast<std::size_t>(n));
                std::size_t start = 0;
                for (std::size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
                    if (!emit(pending.substr(start, nl - start))) return;
                pending.erase(0, start);
                if (pending.size() > kMaxLine) { // a line with no end yet: send what fits
                    if (!emit(pending)) return;
                    pending.clear();
                }
                continue;
            }
            if (!follow) {
                if (!pending.empty()) emit(pending);
                return;
            }
            // Nothing new: wait for a change, and look at the client now and then.
            pollfd pfd{notify.get(), POLLIN, 0};
            if (::poll(&pfd, 1, 1000) > 0) {
                char events[4096];
                while (::read(notify.get(), events, sizeof events) > 0) {
                }
            }
            if (!sse.open()) return;
        }
    }

    struct Tail {
        std::thread thread;
        std::atomic<bool> done{false};
    };
    std::string run_dir_;
    std::atomic<bool> stopping_{false};
    std::mutex m_;
    std::list<Tail> tails_; // list: a Tail never moves, so its thread may hold `done`
};

} // namespace

HANGAR_PLUGIN(LogsPlugin, "logs", "0.1.0", "browsers", nullptr, 0)
