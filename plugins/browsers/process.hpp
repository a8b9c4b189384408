// RAII for file descriptors and child processes, without Poco (plugins must not link it).
//
// A Child runs in its own process group, so stopping it also stops what it started (Chromium's
// zygote, renderers and GPU process). Destroying a Child always kills and reaps it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hangar::browsers {

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    Fd(Fd &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd &operator=(Fd &&o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    ~Fd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1);

private:
    int fd_ = -1;
};

struct Pipe {
    Fd read;
    Fd write;
};
// Both ends close-on-exec; a spawn maps the end it passes on explicitly.
Pipe make_pipe();
// Opens (creating, appending) a log file, close-on-exec.
Fd open_log(const std::string &path);

// Waits up to `timeout` for `fd` to become readable. Returns false on timeout.
bool wait_readable(int fd, std::chrono::milliseconds timeout);

class Child {
public:
    struct Spec {
        std::string path;
        std::vector<std::string> args; // without argv[0]
        std::vector<std::string> env;  // "K=V"; the whole environment of the child
        int stdout_fd = -1;            // -1: /dev/null
        int stderr_fd = -1;            // -1: /dev/null
        // (fd in this process, fd number in the child), child numbers >= 3.
        std::vector<std::pair<int, int>> extra_fds;
    };

    Child() = default;
    Child(const Child &) = delete;
    Child &operator=(const Child &) = delete;
    Child(Child &&o) noexcept : pid_(std::exchange(o.pid_, -1)), status_(o.status_) {}
    Child &operator=(Child &&o) noexcept;
    ~Child() { stop(); }

    // Throws std::runtime_error when the program cannot be started.
    static Child spawn(const Spec &spec);

    pid_t pid() const { return pid_; }
    // Whether it is still running; does not reap, so the process group stays addressable.
    bool running();
    // SIGTERM to the group, up to `grace` for the leader to exit, then SIGKILL to the group, reap.
    void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000));
    // After it exited: "exit code 1" / "signal 9".
    std::string exit_description() const;

private:
    pid_t pid_ = -1;
    std::optional<int> status_;
};

// The current environment with `overrides` ("K=V") replacing or adding entries.
std::vector<std::string> environment_with(const std::vector<std::string> &overrides,
                                          const std::vector<std::string> &remove = {});

// Runs a short command to completion and returns its stdout (first 64 KiB), or nullopt when it
// fails or takes longer than `timeout`.
std::optional<std::string> run_capture(const std::string &path, const std::vector<std::string> &args,
                                       std::chrono::milliseconds timeout);

void make_dirs(const std::string &path);

} // namespace hangar::browsers
