// Handing an open socket to another process over a unix socket (SCM_RIGHTS). The server, the agent
// and the processes an agent runs use it so that a long-lived connection's bytes cross as few
// processes as possible: the agent hands the server the socket it opened to Chromium (CDP), and the
// server hands a BiDi client's own connection into the instance (the bidi plugin).
//
// The wire between the server and an agent (an upgrade relayed with X-Hangar-Pass-Fd): the agent's
// first bytes are either an ordinary HTTP answer, or one marker byte:
//   kUpstreamMarker with a descriptor: the upstream, connected and upgraded; the server splices it;
//   kClientWantedMarker alone (only when the server offered it with X-Hangar-Pass-Client): the agent
//   wants the client's connection itself; the server sends it with kClientMarker and keeps the
//   server ↔ agent connection open until the agent's side closes it, the connection's lifetime.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace hangar::fd_passing {

constexpr const char *kPassFdHeader = "X-Hangar-Pass-Fd";
constexpr const char *kPassClientHeader = "X-Hangar-Pass-Client";
constexpr char kUpstreamMarker = 'F';
constexpr char kClientWantedMarker = 'C';
constexpr char kClientMarker = 'c';

namespace detail {
// A message with room for one descriptor, laid out the same way by both ends.
struct Message {
    Message(char *data, std::size_t len) : iov{data, len} {
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
    }
    Message(const Message &) = delete;
    Message &operator=(const Message &) = delete;
    iovec iov;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
};
} // namespace detail

// Sends `data` (not empty) with `fd` attached to its first byte, on a blocking socket. Returns
// false when it could not be sent whole.
inline bool send(int over, std::string_view data, int fd) {
    std::string copy(data);
    detail::Message m(copy.data(), copy.size());
    cmsghdr *cm = CMSG_FIRSTHDR(&m.msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t n;
    do {
        n = ::sendmsg(over, &m.msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    // The descriptor went with the first part; a stream socket may take the rest in pieces.
    for (auto sent = static_cast<std::size_t>(n); sent < copy.size();) {
        n = ::send(over, copy.data() + sent, copy.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        sent += static_cast<std::size_t>(n);
    }
    return true;
}

// Reads what is there, up to 4 KiB, into `data`. Returns the descriptor that came with it
// (close-on-exec) or -1; `data` is empty at end of file or on an error.
inline int receive(int from, std::string &data) {
    char buf[4096];
    detail::Message m(buf, sizeof buf);
    ssize_t n;
    do {
        n = ::recvmsg(from, &m.msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    data.assign(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    int fd = -1;
    for (cmsghdr *cm = CMSG_FIRSTHDR(&m.msg); n > 0 && cm; cm = CMSG_NXTHDR(&m.msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && fd < 0)
            std::memcpy(&fd, CMSG_DATA(cm), sizeof(int));
    return fd;
}

} // namespace hangar::fd_passing
