// The host's event loop for long-lived connections (CDP relays, SSE streams, spliced instance
// streams). Poco's HTTP server parks one thread per connection, so once a handler has upgraded
// or started a stream, the socket is moved here and served by one epoll thread instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace hangar::host {

// Owns one file descriptor.
class UniqueFd {
public:
    UniqueFd() = default;
    explicit UniqueFd(int fd) : fd_(fd) {}
    UniqueFd(UniqueFd &&o) noexcept : fd_(o.release()) {}
    UniqueFd &operator=(UniqueFd &&o) noexcept {
        if (this != &o) reset(o.release());
        return *this;
    }
    UniqueFd(const UniqueFd &) = delete;
    UniqueFd &operator=(const UniqueFd &) = delete;
    ~UniqueFd() { reset(); }
    int get() const { return fd_; }
    int release() {
        int fd = fd_;
        fd_ = -1;
        return fd;
    }
    void reset(int fd = -1);
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

// A duplicate of `fd` the event loop can own: close-on-exec and non-blocking. Empty on failure.
UniqueFd loop_fd(int fd);

class EventLoop;

// Why a splice ended, from the loop's side: which side ended (or failed) first.
enum class SpliceEnd { client_close, client_error, upstream_close, upstream_error, shutdown };

// Sees the bytes of one splice as they are read, without changing them, and its end
// (relay observers, relay_watch.hpp). Called on the loop thread only.
class SpliceWatcher {
public:
    virtual ~SpliceWatcher() = default;
    virtual void bytes(bool from_client, const char *data, std::size_t len) = 0;
    virtual void closed(SpliceEnd end) = 0;
};

// One server-sent-events connection. Frames may be queued from any thread.
class SseConnection {
public:
    bool send_frame(const std::string &json);
    bool send_frame(const std::string &id, const std::string &json);
    bool send_id(const std::string &id);
    bool open() const { return !closed_.load(); }
    void close(); // flushes what is queued, then ends the response

private:
    friend class EventLoop;
    SseConnection(EventLoop &loop, std::uint64_t id) : loop_(loop), id_(id) {}
    bool queue(const std::string &bytes);
    EventLoop &loop_;
    std::uint64_t id_;
    std::mutex mutex_;
    std::string out_;
    int fd_ = -1;                     // valid while the loop holds the socket; under mutex_
    std::atomic<bool> closed_{false}; // no more frames accepted
    bool failed_ = false;             // the client went away; under mutex_
};

class EventLoop {
public:
    EventLoop();
    ~EventLoop();
    EventLoop(const EventLoop &) = delete;
    EventLoop &operator=(const EventLoop &) = delete;

    // Splices bytes between `a` and `b` until both directions end. `to_b`/`to_a` are written
    // first (a request head for the upstream, bytes already read from the client). `on_close`
    // runs on the loop thread when the pair is gone.
    void splice(UniqueFd a, UniqueFd b, std::string to_b, std::string to_a, std::function<void()> on_close,
                std::unique_ptr<SpliceWatcher> watcher = nullptr);
    // Holds `fd` until its other end closes it (what arrives is dropped), then runs `on_close`
    // on the loop thread: the lifetime of a connection another process serves. An empty `fd`
    // runs `on_close` at once.
    void watch(UniqueFd fd, std::function<void()> on_close);
    // Takes an SSE client socket; `head` is the HTTP response head to send first.
    std::shared_ptr<SseConnection> add_sse(UniqueFd fd, std::string head, std::function<void()> on_close = {});

    std::size_t connection_count() const { return open_count_.load(); }
    void stop(); // closes every connection; idempotent

    static constexpr std::size_t kMaxQueuedBytes = 8u << 20; // a client this far behind is dropped

private:
    friend class SseConnection;
    struct Conn;
    void run();
    void post(std::function<void()> fn);
    void update_interest(Conn &c);
    void handle(Conn &c, std::uint32_t events, int fd);
    void close_conn(std::uint64_t id);
    void heartbeat();
    void want_write(std::uint64_t id);

    UniqueFd epoll_;
    UniqueFd wake_;
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::mutex posted_mutex_;
    std::deque<std::function<void()>> posted_;
    std::map<std::uint64_t, std::unique_ptr<Conn>> conns_; // loop thread only
    std::atomic<std::uint64_t> next_id_{1};
    std::atomic<std::size_t> open_count_{0};
};

} // namespace hangar::host
