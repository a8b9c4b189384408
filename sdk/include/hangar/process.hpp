// Child processes and file descriptors with RAII, for plugins (which must not link Poco).
//
// A Child runs in its own process group, so stopping it also stops what it started (Chromium's
// zygote and renderers, ffmpeg's helpers). Destroying a Child always kills and reaps it: a
// plugin that holds its children as members cannot leak one, whatever path its stop() takes.
// Header-only (everything `inline`) so that a plugin built from the installed SDK needs no
// library of Hangar's.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char **environ;

namespace hangar::proc {

namespace detail {

inline std::runtime_error sys_error(const std::string &what, int err = errno) {
    return std::runtime_error(what + ": " + std::strerror(err));
}

// Owns posix_spawn's attribute and file-action objects.
struct SpawnSetup {
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t actions;
    SpawnSetup() {
        posix_spawnattr_init(&attr);
        posix_spawn_file_actions_init(&actions);
    }
    ~SpawnSetup() {
        posix_spawn_file_actions_destroy(&actions);
        posix_spawnattr_destroy(&attr);
    }
    SpawnSetup(const SpawnSetup &) = delete;
    SpawnSetup &operator=(const SpawnSetup &) = delete;
};

} // namespace detail

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
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

private:
    int fd_ = -1;
};

struct Pipe {
    Fd read;
    Fd write;
};

// Both ends close-on-exec; a spawn maps the end it passes on explicitly.
inline Pipe make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw detail::sys_error("pipe2");
    return {Fd(fds[0]), Fd(fds[1])};
}

// Opens (creating, appending) a log file, close-on-exec.
inline Fd open_log(const std::string &path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0) throw detail::sys_error("open " + path);
    return Fd(fd);
}

// Waits up to `timeout` for `fd` to become readable. Returns false on timeout.
inline bool wait_readable(int fd, std::chrono::milliseconds timeout) {
    pollfd p{fd, POLLIN, 0};
    int ms = static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, timeout.count()));
    for (;;) {
        int r = ::poll(&p, 1, ms);
        if (r < 0 && errno == EINTR) continue;
        return r > 0;
    }
}

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
    Child &operator=(Child &&o) noexcept {
        if (this != &o) {
            stop();
            pid_ = std::exchange(o.pid_, -1);
            status_ = o.status_;
        }
        return *this;
    }
    ~Child() { stop(); }

    // Throws std::runtime_error when the program cannot be started.
    static Child spawn(const Spec &spec) {
        // Move every fd we hand on above the numbers the child will use, so a dup2 can never
        // clobber another mapping and never be a no-op that leaves close-on-exec set.
        std::vector<Fd> temps;
        auto lift = [&](int fd) {
            int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
            if (copy < 0) throw detail::sys_error("fcntl(F_DUPFD_CLOEXEC)");
            temps.emplace_back(copy);
            return copy;
        };

        detail::SpawnSetup s;
        int max_target = 2;
        if (posix_spawn_file_actions_addopen(&s.actions, 0, "/dev/null", O_RDONLY, 0) != 0)
            throw std::runtime_error("posix_spawn_file_actions_addopen");
        for (auto [fd, target] : {std::pair{spec.stdout_fd, 1}, std::pair{spec.stderr_fd, 2}}) {
            if (fd < 0)
                posix_spawn_file_actions_addopen(&s.actions, target, "/dev/null", O_WRONLY, 0);
            else
                posix_spawn_file_actions_adddup2(&s.actions, lift(fd), target);
        }
        for (auto [fd, target] : spec.extra_fds) {
            posix_spawn_file_actions_adddup2(&s.actions, lift(fd), target);
            max_target = std::max(max_target, target);
        }
        // The host's sockets and files are not all close-on-exec; none of them belongs in a child.
        posix_spawn_file_actions_addclosefrom_np(&s.actions, max_target + 1);

        // Own process group (so stop() reaches grandchildren), default signal handling and an
        // empty mask: the host's request threads may block or ignore signals, and exec would keep
        // that.
        sigset_t all, none;
        sigfillset(&all);
        sigemptyset(&none);
        posix_spawnattr_setpgroup(&s.attr, 0);
        posix_spawnattr_setsigdefault(&s.attr, &all);
        posix_spawnattr_setsigmask(&s.attr, &none);
        posix_spawnattr_setflags(&s.attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

        std::vector<char *> argv, envp;
        argv.push_back(const_cast<char *>(spec.path.c_str()));
        for (const auto &a : spec.args)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        for (const auto &e : spec.env)
            envp.push_back(const_cast<char *>(e.c_str()));
        envp.push_back(nullptr);

        pid_t pid = -1;
        int rc = ::posix_spawn(&pid, spec.path.c_str(), &s.actions, &s.attr, argv.data(), envp.data());
        if (rc != 0) throw detail::sys_error("cannot start " + spec.path, rc);
        Child c;
        c.pid_ = pid;
        return c;
    }

    pid_t pid() const { return pid_; }

    // Whether it is still running; does not reap, so the process group stays addressable.
    bool running() {
        if (pid_ <= 0 || status_) return false;
        siginfo_t info{};
        for (;;) {
            int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return false; // not our child any more
            return info.si_pid == 0;
        }
    }

    // SIGTERM to the group, up to `grace` for the leader to exit, then SIGKILL to the group, reap.
    void stop(std::chrono::milliseconds grace = std::chrono::milliseconds(3000)) {
        if (pid_ <= 0) return;
        using clock = std::chrono::steady_clock;
        if (running()) {
            ::kill(-pid_, SIGTERM);
            auto deadline = clock::now() + grace;
            while (running() && clock::now() < deadline)
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        // The leader is gone or late; its group may still hold children it started. The leader
        // is not reaped yet, so the group id cannot have been reused.
        ::kill(-pid_, SIGKILL);
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        status_ = status;
        pid_ = -1;
    }

    // After it exited: "exit code 1" / "signal 9".
    std::string exit_description() const {
        if (!status_) return "still running";
        if (WIFEXITED(*status_)) return "exit code " + std::to_string(WEXITSTATUS(*status_));
        if (WIFSIGNALED(*status_)) return std::string("signal ") + std::to_string(WTERMSIG(*status_));
        return "unknown status";
    }

private:
    pid_t pid_ = -1;
    std::optional<int> status_;
};

// Whether something listens on the unix socket at `path` (a connect succeeds).
inline bool unix_socket_answers(const std::string &path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return false;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    return fd && ::connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof addr) == 0;
}

// For programs with no readiness signal of their own (x11vnc, PulseAudio): true once `child`
// listens on `path`; false when it exited or `deadline` passed first.
inline bool wait_listening(Child &child, const std::string &path, std::chrono::steady_clock::time_point deadline,
                           std::chrono::milliseconds poll) {
    for (;;) {
        if (unix_socket_answers(path)) return true;
        if (!child.running() || std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(poll);
    }
}

// The current environment with `overrides` ("K=V") replacing or adding entries and the keys in
// `remove` left out.
inline std::vector<std::string> environment_with(const std::vector<std::string> &overrides,
                                                 const std::vector<std::string> &remove = {}) {
    auto key_of = [](std::string_view kv) { return kv.substr(0, kv.find('=')); };
    std::vector<std::string> env;
    for (char **e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        auto key = key_of(kv);
        bool drop = false;
        for (const auto &o : overrides)
            drop = drop || key_of(o) == key;
        for (const auto &r : remove)
            drop = drop || r == key;
        if (!drop) env.emplace_back(kv);
    }
    env.insert(env.end(), overrides.begin(), overrides.end());
    return env;
}

// A bare program name looked up on PATH, as a shell would; a name with a slash as it is.
// Throws std::runtime_error when nothing on PATH is executable under that name.
inline std::string find_program(const std::string &name) {
    if (name.find('/') != std::string::npos) return name;
    const char *path = std::getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    while (start <= dirs.size()) {
        auto end = dirs.find(':', start);
        auto dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
        auto candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (end == std::string::npos) break;
        start = end + 1;
    }
    throw std::runtime_error(name + " was not found on PATH");
}

// Where a plugin's runtime files (a Node program and its node_modules) are: `configured` when
// set, else `<prefix>/share/hangar/<installed_name>` beside the running binary when it holds
// `marker`, else `source_dir` (the source tree a development build came from).
inline std::string runtime_dir(const std::string &configured, const std::string &installed_name,
                               const std::string &marker, const std::string &source_dir) {
    if (!configured.empty()) return configured;
    char exe[4096];
    auto n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        std::string bin(exe, static_cast<std::size_t>(n));
        auto bin_dir = bin.substr(0, bin.find_last_of('/'));
        auto prefix = bin_dir.substr(0, bin_dir.find_last_of('/'));
        auto installed = prefix + "/share/hangar/" + installed_name;
        if (::access((installed + "/" + marker).c_str(), R_OK) == 0) return installed;
    }
    return source_dir;
}

// Runs a short command to completion and returns its stdout (first 64 KiB), or nullopt when it
// cannot start or takes longer than `timeout`.
inline std::optional<std::string> run_capture(const std::string &path, const std::vector<std::string> &args,
                                              std::chrono::milliseconds timeout) {
    Pipe out = make_pipe();
    Child child;
    try {
        child = Child::spawn({path, args, environment_with({}), out.write.get(), -1, {}});
    } catch (const std::exception &) {
        return std::nullopt;
    }
    out.write.reset();
    std::string text;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0 || !wait_readable(out.read.get(), left)) return std::nullopt; // child stopped by ~Child
        ssize_t n = ::read(out.read.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (text.size() < 65536) text.append(buf, static_cast<std::size_t>(n));
    }
    child.stop(std::chrono::milliseconds(1000));
    return text;
}

// mkdir -p with mode 0750 for each folder it creates.
inline void make_dirs(const std::string &path) {
    std::string partial;
    std::size_t i = 0;
    while (i <= path.size()) {
        auto slash = path.find('/', i);
        if (slash == std::string::npos) slash = path.size();
        partial = path.substr(0, slash);
        if (!partial.empty() && ::mkdir(partial.c_str(), 0750) != 0 && errno != EEXIST)
            throw detail::sys_error("mkdir " + partial);
        i = slash + 1;
    }
}

} // namespace hangar::proc
