#include "event_loop.hpp"

#include "util.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <system_error>
#include <vector>

namespace hangar::host {

void UniqueFd::reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

UniqueFd loop_fd(int fd) {
    UniqueFd dup(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (dup) ::fcntl(dup.get(), F_SETFL, ::fcntl(dup.get(), F_GETFL) | O_NONBLOCK);
    return dup;
}

namespace {
constexpr std::size_t kChunk = std::size_t{64} * 1024;
constexpr std::int64_t kHeartbeatMs = 15000;

// Writes as much as the socket takes; false on a hard error.
bool write_some(int fd, std::string &pending) {
    while (!pending.empty()) {
        ssize_t n = ::send(fd, pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            pending.erase(0, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
}

// For a socket nobody reads from (an SSE client, a watched connection): drops what arrived and
// tells whether the other end is gone.
bool peer_ended(int fd, std::uint32_t events) {
    char buf[512];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    }
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || (events & (EPOLLHUP | EPOLLERR)) != 0;
}
} // namespace

struct EventLoop::Conn {
    std::uint64_t id = 0;
    UniqueFd a, b;      // a: the client (or the watched socket); b: the upstream (splices only)
    std::string ab, ba; // bytes waiting to be written a→b and b→a
    bool a_eof = false, b_eof = false;
    std::uint32_t mask_a = 0, mask_b = 0;
    std::function<void()> on_close;
    std::shared_ptr<SseConnection> sse;
    bool close_after_flush = false;
    std::unique_ptr<SpliceWatcher> watcher;
    std::optional<SpliceEnd> end; // the first side seen to end

    void ended(int side, bool error) {
        if (!end)
            end = side == 0 ? (error ? SpliceEnd::client_error : SpliceEnd::client_close)
                            : (error ? SpliceEnd::upstream_error : SpliceEnd::upstream_close);
    }
};

EventLoop::EventLoop() : epoll_(::epoll_create1(EPOLL_CLOEXEC)), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!epoll_ || !wake_) throw std::system_error(errno, std::generic_category(), "epoll");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
    thread_ = std::thread([this] { run(); });
}

EventLoop::~EventLoop() {
    stop();
}

void EventLoop::stop() {
    if (stopping_.exchange(true)) return;
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
    if (thread_.joinable()) thread_.join();
}

void EventLoop::post(std::function<void()> fn) {
    {
        std::lock_guard lock(posted_mutex_);
        posted_.push_back(std::move(fn));
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
}

void EventLoop::splice(UniqueFd a, UniqueFd b, std::string to_b, std::string to_a, std::function<void()> on_close,
                       std::unique_ptr<SpliceWatcher> watcher) {
    auto conn = std::make_shared<Conn>();
    conn->id = next_id_++;
    conn->a = std::move(a);
    conn->b = std::move(b);
    conn->ab = std::move(to_b);
    conn->ba = std::move(to_a);
    conn->on_close = std::move(on_close);
    conn->watcher = std::move(watcher);
    open_count_++;
    post([this, conn] {
        auto owned = std::make_unique<Conn>(std::move(*conn));
        auto &c = *owned;
        conns_.emplace(c.id, std::move(owned));
        update_interest(c);
    });
}

void EventLoop::watch(UniqueFd fd, std::function<void()> on_close) {
    if (!fd) {
        if (on_close) on_close();
        return;
    }
    splice(std::move(fd), UniqueFd(), {}, {}, std::move(on_close));
}

std::shared_ptr<SseConnection> EventLoop::add_sse(UniqueFd fd, std::string head, std::function<void()> on_close) {
    auto id = next_id_++;
    std::shared_ptr<SseConnection> sse(new SseConnection(*this, id));
    {
        // Frames may be queued before the loop registers the socket; the head goes first.
        std::lock_guard lock(sse->mutex_);
        sse->out_ = std::move(head);
        sse->fd_ = fd.get();
    }
    auto conn = std::make_shared<Conn>();
    conn->id = id;
    conn->a = std::move(fd);
    conn->sse = sse;
    conn->on_close = std::move(on_close);
    open_count_++;
    post([this, conn] {
        auto owned = std::make_unique<Conn>(std::move(*conn));
        auto &c = *owned;
        conns_.emplace(c.id, std::move(owned));
        update_interest(c);
    });
    return sse;
}

void EventLoop::update_interest(Conn &c) {
    auto apply = [this](int fd, std::uint32_t want, std::uint32_t &have, std::uint64_t tag) {
        if (fd < 0 || want == have) return;
        epoll_event ev{};
        ev.events = want;
        ev.data.u64 = tag;
        ::epoll_ctl(epoll_.get(), have == 0 ? EPOLL_CTL_ADD : (want == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD), fd, &ev);
        have = want;
    };
    if (c.sse) {
        bool pending;
        {
            std::lock_guard lock(c.sse->mutex_);
            pending = !c.sse->out_.empty();
        }
        apply(c.a.get(), EPOLLIN | EPOLLRDHUP | (pending ? EPOLLOUT : 0u), c.mask_a, c.id << 1);
        return;
    }
    if (!c.b) { // watched
        apply(c.a.get(), EPOLLIN | EPOLLRDHUP, c.mask_a, c.id << 1);
        return;
    }
    // Read from a side only while the other side has nothing pending (back-pressure).
    std::uint32_t want_a = (!c.a_eof && c.ab.empty() ? EPOLLIN : 0u) | (!c.ba.empty() ? EPOLLOUT : 0u);
    std::uint32_t want_b = (!c.b_eof && c.ba.empty() ? EPOLLIN : 0u) | (!c.ab.empty() ? EPOLLOUT : 0u);
    // Keep both registered so hang-ups are noticed even when neither reads.
    apply(c.a.get(), want_a ? want_a : EPOLLRDHUP, c.mask_a, c.id << 1);
    apply(c.b.get(), want_b ? want_b : EPOLLRDHUP, c.mask_b, (c.id << 1) | 1);
}

void EventLoop::close_conn(std::uint64_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    auto conn = std::move(it->second);
    conns_.erase(it);
    if (conn->mask_a) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn->a.get(), nullptr);
    if (conn->mask_b && conn->b) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, conn->b.get(), nullptr);
    if (conn->sse) {
        std::lock_guard lock(conn->sse->mutex_);
        conn->sse->closed_ = true;
        conn->sse->fd_ = -1;
        conn->sse->out_.clear();
    }
    conn->a.reset();
    conn->b.reset();
    open_count_--;
    if (conn->watcher) conn->watcher->closed(stopping_ ? SpliceEnd::shutdown : conn->end.value_or(SpliceEnd::shutdown));
    if (conn->on_close) conn->on_close();
}

void EventLoop::handle(Conn &c, std::uint32_t events, int side) {
    const std::uint64_t id = c.id;
    if (c.sse) {
        if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && peer_ended(c.a.get(), events))
            return close_conn(id);
        bool drained, failed;
        {
            std::lock_guard lock(c.sse->mutex_);
            if (!write_some(c.a.get(), c.sse->out_)) c.sse->failed_ = true;
            drained = c.sse->out_.empty();
            failed = c.sse->failed_;
        }
        if (failed || (c.close_after_flush && drained)) return close_conn(id);
        return update_interest(c);
    }

    if (!c.b) { // watched: only its end matters
        if (peer_ended(c.a.get(), events)) close_conn(id);
        return;
    }

    int from = side == 0 ? c.a.get() : c.b.get();
    int to = side == 0 ? c.b.get() : c.a.get();
    std::string &outgoing = side == 0 ? c.ab : c.ba; // bytes read from `from`, bound for `to`
    std::string &incoming = side == 0 ? c.ba : c.ab; // bytes bound for `from`
    bool &from_eof = side == 0 ? c.a_eof : c.b_eof;

    if (events & EPOLLOUT) {
        if (!write_some(from, incoming)) {
            c.ended(side, true);
            return close_conn(id);
        }
    }
    if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP)) && !from_eof && outgoing.empty()) {
        char buf[kChunk];
        while (true) {
            ssize_t n = ::recv(from, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                if (c.watcher) c.watcher->bytes(side == 0, buf, static_cast<std::size_t>(n));
                outgoing.assign(buf, static_cast<std::size_t>(n));
                if (!write_some(to, outgoing)) {
                    c.ended(1 - side, true);
                    return close_conn(id);
                }
                if (!outgoing.empty() || static_cast<std::size_t>(n) < sizeof buf) break;
                continue;
            }
            if (n == 0) {
                from_eof = true;
                c.ended(side, false);
                break;
            }
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            c.ended(side, errno != ECONNRESET);
            return close_conn(id);
        }
    } else if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) {
        c.ended(side, (events & EPOLLERR) != 0);
        return close_conn(id);
    }
    // WebSocket, SSE and Connection: close responses have no use for half-open connections:
    // once a side ended and its last bytes are delivered, the pair closes. A client that keeps
    // its socket after Chromium went away must not keep the session "active" forever.
    if ((c.a_eof && c.ab.empty()) || (c.b_eof && c.ba.empty())) return close_conn(id);
    update_interest(c);
}

void EventLoop::heartbeat() {
    for (auto &[id, conn] : conns_)
        // A comment line alone, without the blank line that would end a block: a client that
        // dispatches every block (the Go SDK's decoder does) would parse an empty one as JSON.
        if (conn->sse && !conn->close_after_flush) conn->sse->queue(": keepalive\n");
}

void EventLoop::run() {
    std::vector<epoll_event> events(256);
    std::int64_t next_heartbeat = steady_ms() + kHeartbeatMs;
    while (!stopping_) {
        int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 1000);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < n; ++i) {
            std::uint64_t tag = events[i].data.u64;
            if (tag == 0) {
                std::uint64_t v;
                [[maybe_unused]] auto r = ::read(wake_.get(), &v, sizeof v);
                std::deque<std::function<void()>> work;
                {
                    std::lock_guard lock(posted_mutex_);
                    work.swap(posted_);
                }
                for (auto &fn : work)
                    fn();
                continue;
            }
            auto it = conns_.find(tag >> 1);
            if (it == conns_.end()) continue;
            handle(*it->second, events[i].events, static_cast<int>(tag & 1));
        }
        if (steady_ms() >= next_heartbeat) {
            heartbeat();
            next_heartbeat = steady_ms() + kHeartbeatMs;
        }
    }
    std::deque<std::function<void()>> work;
    {
        std::lock_guard lock(posted_mutex_);
        work.swap(posted_);
    }
    for (auto &fn : work)
        fn();
    std::vector<std::uint64_t> ids;
    for (auto &[id, _] : conns_)
        ids.push_back(id);
    for (auto id : ids)
        close_conn(id);
}

void EventLoop::want_write(std::uint64_t id) {
    post([this, id] {
        auto it = conns_.find(id);
        if (it != conns_.end()) update_interest(*it->second);
    });
}

bool SseConnection::queue(const std::string &bytes) {
    std::lock_guard lock(mutex_);
    if (closed_ || fd_ < 0) return false;
    bool was_empty = out_.empty();
    if (out_.size() + bytes.size() > EventLoop::kMaxQueuedBytes) {
        closed_ = true;
        failed_ = true; // a reader this slow is dropped rather than letting the writer block
        loop_.post([this_id = id_, &loop = loop_] { loop.close_conn(this_id); });
        return false;
    }
    out_ += bytes;
    if (was_empty) {
        if (!write_some(fd_, out_)) {
            closed_ = true;
            failed_ = true;
            loop_.post([this_id = id_, &loop = loop_] { loop.close_conn(this_id); });
            return false;
        }
        if (!out_.empty()) loop_.want_write(id_);
    }
    return true;
}

bool SseConnection::send_frame(const std::string &json) {
    return queue("data: " + json + "\n\n");
}

bool SseConnection::send_frame(const std::string &id, const std::string &json) {
    return queue("id: " + id + "\ndata: " + json + "\n\n");
}

bool SseConnection::send_id(const std::string &id) {
    return queue("id: " + id + "\n\n");
}

void SseConnection::close() {
    closed_ = true;
    loop_.post([this_id = id_, &loop = loop_] {
        auto it = loop.conns_.find(this_id);
        if (it == loop.conns_.end()) return;
        bool empty;
        {
            std::lock_guard lock(it->second->sse->mutex_);
            empty = it->second->sse->out_.empty();
        }
        if (empty) return loop.close_conn(this_id);
        it->second->close_after_flush = true;
        loop.update_interest(*it->second);
    });
}

} // namespace hangar::host
