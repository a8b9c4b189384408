// process: run commands inside a browser instance (Kernel API §3.9, endpoints [42]-[48]).
//
// Server role: the seven /browsers/{id}/process/... routes, each a relay to the session's agent.
// Instance role: the agent's /process/... routes. Every child runs in its own session (hence its
// own process group), is watched by one reader thread that drains its pipes or PTY into a bounded
// buffer (so output is never lost before the first reader and never blocks the child), reaps it,
// and fans output out to SSE readers. Stopping the plugin kills every group and joins the threads.
#include <hangar/plugin.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <pwd.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char **environ;

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using Clock = std::chrono::steady_clock;

// ---- small helpers ----------------------------------------------------------------------------

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string b64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8 | (unsigned char)in[i + 2];
        out += kB64[v >> 18 & 63];
        out += kB64[v >> 12 & 63];
        out += kB64[v >> 6 & 63];
        out += kB64[v & 63];
    }
    if (i + 1 == in.size()) {
        unsigned v = (unsigned char)in[i] << 16;
        out += kB64[v >> 18 & 63];
        out += kB64[v >> 12 & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        unsigned v = (unsigned char)in[i] << 16 | (unsigned char)in[i + 1] << 8;
        out += kB64[v >> 18 & 63];
        out += kB64[v >> 12 & 63];
        out += kB64[v >> 6 & 63];
        out += '=';
    }
    return out;
}

// Standard or URL-safe alphabet, padding optional. nullopt when not base64.
std::optional<std::string> b64_decode(std::string_view in) {
    auto val = [](char c) -> int {
        if (c >= 'A' && c <= 'Z') return c - 'A';
        if (c >= 'a' && c <= 'z') return c - 'a' + 26;
        if (c >= '0' && c <= '9') return c - '0' + 52;
        if (c == '+' || c == '-') return 62;
        if (c == '/' || c == '_') return 63;
        return -1;
    };
    while (!in.empty() && in.back() == '=')
        in.remove_suffix(1);
    if (in.size() % 4 == 1) return std::nullopt;
    std::string out;
    unsigned acc = 0;
    int bits = 0;
    for (char c : in) {
        int v = val(c);
        if (v < 0) return std::nullopt;
        acc = acc << 6 | static_cast<unsigned>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>(acc >> bits & 0xff);
        }
    }
    return out;
}

std::string uuid4() {
    static std::mutex m;
    static std::mt19937_64 rng{std::random_device{}()};
    unsigned char b[16];
    {
        std::lock_guard lock(m);
        for (int i = 0; i < 16; i += 8) {
            auto v = rng();
            std::memcpy(b + i, &v, 8);
        }
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    char out[37];
    std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return out;
}

std::string now_rfc3339() {
    auto now = std::chrono::system_clock::now();
    auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(micros / 1000000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[64];
    std::snprintf(out, sizeof out, "%s.%06dZ", buf, static_cast<int>(micros % 1000000));
    return out;
}

std::string path_escape(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            out += static_cast<char>(c);
        } else {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", c);
            out += buf;
        }
    }
    return out;
}

void set_nonblock(int fd) {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void close_fd(int &fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

int signal_number(const std::string &name) {
    std::string n = name;
    for (auto &c : n)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (n.rfind("SIG", 0) == 0) n = n.substr(3);
    if (n == "TERM") return SIGTERM;
    if (n == "KILL") return SIGKILL;
    if (n == "INT") return SIGINT;
    if (n == "HUP") return SIGHUP;
    return 0;
}

// ---- request parsing ----------------------------------------------------------------------------

struct Command {
    std::vector<std::string> argv;
    std::vector<std::string> env; // the whole environment, "K=V"
    std::string cwd;
    std::optional<double> timeout_sec;
    bool tty = false;
    unsigned short rows = 24, cols = 80;
};

std::string current_user() {
    struct passwd pw {
    }, *out = nullptr;
    char buf[4096];
    if (::getpwuid_r(::getuid(), &pw, buf, sizeof buf, &out) == 0 && out) return out->pw_name;
    return std::to_string(::getuid());
}

std::optional<unsigned short> dimension(const json &body, const char *field, hangar::Validation &v) {
    if (!body.contains(field) || body[field].is_null()) return std::nullopt;
    const auto &x = body[field];
    if (!x.is_number() || (x.is_number_float() && std::floor(x.get<double>()) != x.get<double>())) {
        v.fail(field, "must be an integer");
        return std::nullopt;
    }
    double d = x.get<double>();
    if (d < 1 || d > 1000) {
        v.fail(field, "must be between 1 and 1000");
        return std::nullopt;
    }
    return static_cast<unsigned short>(d);
}

Command parse_command(const json &body, bool spawn) {
    hangar::Validation v;
    Command c;
    std::string command;
    if (!body.contains("command") || body["command"].is_null())
        v.fail("command", "required");
    else if (!body["command"].is_string())
        v.fail("command", "must be a string");
    else if ((command = body["command"].get<std::string>()).find_first_not_of(" \t\r\n") == std::string::npos)
        v.fail("command", "must not be empty");
    else if (command.find('\0') != std::string::npos)
        v.fail("command", "must not contain NUL");

    std::vector<std::string> args;
    bool has_args = false;
    if (body.contains("args") && !body["args"].is_null()) {
        if (!body["args"].is_array()) {
            v.fail("args", "must be an array of strings");
        } else {
            has_args = true;
            for (std::size_t i = 0; i < body["args"].size(); ++i) {
                const auto &a = body["args"][i];
                if (!a.is_string())
                    v.fail("args[" + std::to_string(i) + "]", "must be a string");
                else
                    args.push_back(a.get<std::string>());
            }
        }
    }

    bool as_root = false;
    if (body.contains("as_root") && !body["as_root"].is_null()) {
        if (!body["as_root"].is_boolean())
            v.fail("as_root", "must be a boolean");
        else
            as_root = body["as_root"].get<bool>();
    }
    std::string as_user;
    if (body.contains("as_user") && !body["as_user"].is_null()) {
        if (!body["as_user"].is_string() || body["as_user"].get<std::string>().empty())
            v.fail("as_user", "must be a non-empty string");
        else
            as_user = body["as_user"].get<std::string>();
    }
    if (as_root && !as_user.empty())
        v.fail("as_root", "cannot be combined with as_user");
    else if (as_root)
        v.fail("as_root", "not available: processes run unprivileged as the instance user (" + current_user() +
                              "); the sandbox has no root");
    else if (!as_user.empty()) {
        std::string me = current_user(), uid = std::to_string(::getuid()), gid = std::to_string(::getgid());
        const char *env_user = std::getenv("USER"); // the sandbox's own name for its user ("kernel")
        if (as_user != me && as_user != uid && as_user != uid + ":" + gid && !(env_user && as_user == env_user))
            v.fail("as_user", "only the instance user (" + me + ") is available in the sandbox");
    }

    c.cwd = ".";
    if (body.contains("cwd") && !body["cwd"].is_null()) {
        if (!body["cwd"].is_string()) {
            v.fail("cwd", "must be a string");
        } else {
            c.cwd = body["cwd"].get<std::string>();
            struct stat st {};
            if (c.cwd.empty() || c.cwd[0] != '/')
                v.fail("cwd", "must be an absolute path");
            else if (::stat(c.cwd.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
                v.fail("cwd", "is not an existing directory");
        }
    }

    std::map<std::string, std::string> env;
    for (char **e = environ; e && *e; ++e) {
        std::string kv = *e;
        auto eq = kv.find('=');
        if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (body.contains("env") && !body["env"].is_null()) {
        if (!body["env"].is_object()) {
            v.fail("env", "must be an object of strings");
        } else {
            for (const auto &[k, val] : body["env"].items()) {
                if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos)
                    v.fail("env", "invalid variable name '" + k + "'");
                else if (!val.is_string())
                    v.fail("env." + k, "must be a string");
                else
                    env[k] = val.get<std::string>();
            }
        }
    }
    for (auto &[k, val] : env)
        c.env.push_back(std::string(k).append("=").append(val));

    if (body.contains("timeout_sec") && !body["timeout_sec"].is_null()) {
        const auto &t = body["timeout_sec"];
        if (!t.is_number() || t.get<double>() <= 0 || t.get<double>() > 7 * 86400)
            v.fail("timeout_sec", "must be a number of seconds greater than 0 and at most 604800");
        else
            c.timeout_sec = t.get<double>();
    }

    if (spawn) {
        if (body.contains("allocate_tty") && !body["allocate_tty"].is_null()) {
            if (!body["allocate_tty"].is_boolean())
                v.fail("allocate_tty", "must be a boolean");
            else
                c.tty = body["allocate_tty"].get<bool>();
        }
        auto rows = dimension(body, "rows", v);
        auto cols = dimension(body, "cols", v);
        if ((rows || cols) && !c.tty) v.fail(rows ? "rows" : "cols", "only valid with allocate_tty: true");
        if (rows) c.rows = *rows;
        if (cols) c.cols = *cols;
    }
    v.throw_if_failed();

    // With args, command is the executable; without, it is a shell command line.
    if (has_args) {
        c.argv.push_back(command);
        c.argv.insert(c.argv.end(), args.begin(), args.end());
    } else {
        c.argv = {"/bin/sh", "-c", command};
    }
    return c;
}

// ---- one child process ----------------------------------------------------------------------------

struct Chunk {
    bool err; // stderr
    std::string data;
};

class Proc {
public:
    std::string id;
    pid_t pid = -1;
    bool tty = false;
    std::string started_at;
    Clock::time_point start = Clock::now();
    std::optional<Clock::time_point> deadline;

    // Output kept for late readers (bounded) or, for exec, everything (up to a cap).
    std::mutex m;
    std::deque<Chunk> buffered;
    std::size_t buffered_bytes = 0;
    std::size_t buffer_cap = 1 << 20;
    bool keep_all = false; // exec: collect into out/err instead
    std::string out, err;
    std::size_t out_cap = 16 << 20;
    std::vector<std::unique_ptr<hangar::SseStream>> readers;
    bool exited = false;
    int exit_code = 0;
    bool timed_out = false;
    double cpu_seconds = 0;
    long long mem_bytes = 0;
    Clock::time_point end;

    int in_fd = -1;  // stdin pipe or PTY master (writes)
    int out_fd = -1; // stdout pipe or PTY master (reads)
    int err_fd = -1; // stderr pipe (none with a PTY)
    std::mutex in_m;

    std::thread reader;
    std::atomic<bool> stopping{false};
    const std::atomic<bool> *plugin_stopping = nullptr; // set while the plugin stops

    Proc() = default;
    Proc(const Proc &) = delete;
    Proc &operator=(const Proc &) = delete;
    ~Proc() {
        stopping = true;
        if (pid > 0) {
            std::lock_guard lock(m);
            if (!exited) ::kill(-pid, SIGKILL);
        }
        if (reader.joinable())
            reader.join();
        else if (pid > 0 && !exited)
            ::waitpid(pid, nullptr, 0); // its reader never started (no thread to be had): reap here
        if (in_fd == out_fd) in_fd = -1;
        close_fd(in_fd);
        close_fd(out_fd);
        close_fd(err_fd);
    }

    bool stop_requested() const { return stopping || (plugin_stopping && *plugin_stopping); }

    void signal(int sig) {
        std::lock_guard lock(m);
        if (!exited && pid > 0) ::kill(-pid, sig);
    }

    // Starts the child. Throws Error (400 for a command that cannot be executed).
    void launch(const Command &c) {
        tty = c.tty;
        std::vector<char *> argv, envp;
        for (auto &a : c.argv)
            argv.push_back(const_cast<char *>(a.c_str()));
        argv.push_back(nullptr);
        for (auto &e : c.env)
            envp.push_back(const_cast<char *>(e.c_str()));
        envp.push_back(nullptr);

        int errpipe[2];
        if (::pipe2(errpipe, O_CLOEXEC) != 0) throw Error::internal("pipe failed");
        int in[2] = {-1, -1}, o[2] = {-1, -1}, e[2] = {-1, -1};
        int master = -1, slave = -1;
        auto cleanup = [&] {
            for (int fd : {errpipe[0], errpipe[1], in[0], in[1], o[0], o[1], e[0], e[1], master, slave})
                if (fd >= 0) ::close(fd);
        };
        if (tty) {
            struct winsize ws {};
            ws.ws_row = c.rows;
            ws.ws_col = c.cols;
            if (::openpty(&master, &slave, nullptr, nullptr, &ws) != 0) {
                cleanup();
                throw Error::internal(std::string("openpty failed: ") + std::strerror(errno));
            }
            ::fcntl(master, F_SETFD, FD_CLOEXEC);
            ::fcntl(slave, F_SETFD, FD_CLOEXEC);
        } else if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(o, O_CLOEXEC) != 0 || ::pipe2(e, O_CLOEXEC) != 0) {
            cleanup();
            throw Error::internal("pipe failed");
        }

        pid_t child = ::fork();
        if (child < 0) {
            int err = errno;
            cleanup();
            // The instance at its task limit (sandbox.pids_max): its own processes must end first.
            if (err == EAGAIN)
                throw Error(429, "rate_limited",
                            "this browser instance is at its process limit; retry once some of its processes ended");
            throw Error::internal(std::string("fork failed: ") + std::strerror(err));
        }
        if (child == 0) {
            // Only async-signal-safe calls from here on.
            ::setsid(); // own session, so own process group (and a PTY can become its terminal)
            if (tty) {
                ::ioctl(slave, TIOCSCTTY, 0);
                ::dup2(slave, 0);
                ::dup2(slave, 1);
                ::dup2(slave, 2);
            } else {
                ::dup2(in[0], 0);
                ::dup2(o[1], 1);
                ::dup2(e[1], 2);
            }
            struct sigaction sa {};
            sa.sa_handler = SIG_DFL;
            for (int s = 1; s < NSIG; ++s)
                ::sigaction(s, &sa, nullptr);
            sigset_t none;
            sigemptyset(&none);
            ::sigprocmask(SIG_SETMASK, &none, nullptr);
            if (::chdir(c.cwd.c_str()) != 0) {
                int err = errno;
                (void)!::write(errpipe[1], &err, sizeof err);
                ::_exit(127);
            }
            ::execvpe(argv[0], argv.data(), envp.data());
            int err = errno;
            (void)!::write(errpipe[1], &err, sizeof err);
            ::_exit(127);
        }
        pid = child;
        ::close(errpipe[1]);
        errpipe[1] = -1;
        if (tty) {
            ::close(slave);
            slave = -1;
            in_fd = master;
            out_fd = master;
        } else {
            ::close(in[0]);
            ::close(o[1]);
            ::close(e[1]);
            in[0] = o[1] = e[1] = -1;
            in_fd = in[1];
            out_fd = o[0];
            err_fd = e[0];
        }
        int child_errno = 0;
        ssize_t n;
        while ((n = ::read(errpipe[0], &child_errno, sizeof child_errno)) < 0 && errno == EINTR) {
        }
        ::close(errpipe[0]);
        if (n == sizeof child_errno) {
            int status;
            ::waitpid(pid, &status, 0);
            pid = -1;
            throw Error::invalid("command", std::string("cannot be executed: ") + std::strerror(child_errno));
        }
        set_nonblock(out_fd);
        if (err_fd >= 0) set_nonblock(err_fd);
        start = Clock::now();
        started_at = now_rfc3339();
        if (c.timeout_sec) deadline = start + std::chrono::microseconds(static_cast<long long>(*c.timeout_sec * 1e6));
    }

    void add_output(bool is_err, const char *p, std::size_t n) {
        std::lock_guard lock(m);
        if (keep_all) {
            std::string &dst = is_err ? err : out;
            dst.append(p, std::min(n, out_cap - std::min(out_cap, dst.size())));
            return;
        }
        std::string data(p, n);
        if (!readers.empty()) {
            json ev = {{"stream", is_err ? "stderr" : "stdout"}, {"data_b64", b64_encode(data)}};
            std::erase_if(readers, [&](auto &s) { return !s->send(ev); });
        }
        buffered.push_back({is_err, std::move(data)});
        buffered_bytes += n;
        while (buffered_bytes > buffer_cap && buffered.size() > 1) {
            buffered_bytes -= buffered.front().data.size();
            buffered.pop_front();
        }
    }

    // Reads what is available on fd; false at end of file.
    bool drain(int &fd, bool is_err) {
        char buf[65536];
        while (true) {
            ssize_t n = ::read(fd, buf, sizeof buf);
            if (n > 0) {
                add_output(is_err, buf, static_cast<std::size_t>(n));
                continue;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
            return false; // 0 (EOF) or EIO (PTY slave closed)
        }
    }

    void sample_usage() {
        if (pid <= 0) return;
        std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        if (std::getline(st, line)) {
            auto rp = line.rfind(')');
            if (rp != std::string::npos) {
                std::istringstream is(line.substr(rp + 2));
                std::vector<std::string> f;
                std::string tok;
                while (is >> tok)
                    f.push_back(tok);
                // after "pid (comm)": state=f[0], utime=f[11], stime=f[12]
                if (f.size() > 12) {
                    double ticks = std::stod(f[11]) + std::stod(f[12]);
                    std::lock_guard lock(m);
                    cpu_seconds = ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
                }
            }
        }
        std::ifstream status("/proc/" + std::to_string(pid) + "/status");
        while (std::getline(status, line)) {
            if (line.rfind("VmRSS:", 0) == 0) {
                long long kb = std::atoll(line.c_str() + 6);
                std::lock_guard lock(m);
                mem_bytes = kb * 1024;
                break;
            }
        }
    }

    // The reader thread: drains output, enforces the timeout, reaps, announces the exit.
    void run() {
        int o = out_fd, e = err_fd;
        bool reaped = false;
        int wstatus = 0;
        struct rusage ru {};
        auto last_sample = Clock::now() - std::chrono::seconds(1);
        std::optional<Clock::time_point> drain_until;
        while (true) {
            struct pollfd fds[2];
            int nf = 0;
            if (o >= 0) fds[nf++] = {o, POLLIN, 0};
            if (e >= 0) fds[nf++] = {e, POLLIN, 0};
            if (nf)
                ::poll(fds, nf, 50);
            else if (!reaped)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            for (int i = 0; i < nf; ++i) {
                if (!fds[i].revents) continue;
                bool is_err = fds[i].fd == e && !tty;
                int &fd = is_err ? e : o;
                if (!drain(fd, is_err)) fd = -1; // keep the descriptor itself open until the end
            }
            if (!reaped) {
                if (Clock::now() - last_sample > std::chrono::milliseconds(200)) {
                    sample_usage();
                    last_sample = Clock::now();
                }
                pid_t r = ::wait4(pid, &wstatus, WNOHANG, &ru);
                if (r == pid) {
                    reaped = true;
                    drain_until = Clock::now() + std::chrono::milliseconds(tty ? 200 : 500);
                } else if (r < 0 && errno == ECHILD) {
                    reaped = true; // someone else reaped it; the status is unknown
                    wstatus = 0;
                    drain_until = Clock::now();
                } else if (stop_requested() || (deadline && Clock::now() >= *deadline)) {
                    if (!stop_requested()) timed_out = true;
                    ::kill(-pid, SIGKILL);
                }
            }
            if (reaped && ((o < 0 && e < 0) || Clock::now() >= *drain_until || stop_requested())) break;
        }
        // What is still in a PTY or pipe buffer.
        if (o >= 0) drain(o, false);
        if (e >= 0) drain(e, true);
        {
            // Done with the descriptors: an exited process keeps none open.
            std::lock_guard in_lock(in_m);
            if (in_fd == out_fd) in_fd = -1;
            close_fd(in_fd);
            close_fd(out_fd);
            close_fd(err_fd);
        }

        std::lock_guard lock(m);
        end = Clock::now();
        if (WIFEXITED(wstatus))
            exit_code = WEXITSTATUS(wstatus);
        else if (WIFSIGNALED(wstatus))
            exit_code = 128 + WTERMSIG(wstatus);
        double ru_cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                        static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
        if (ru_cpu > cpu_seconds) cpu_seconds = ru_cpu;
        if (ru.ru_maxrss * 1024LL > mem_bytes) mem_bytes = ru.ru_maxrss * 1024LL;
        exited = true;
        json ev = {{"event", "exit"}, {"exit_code", exit_code}};
        for (auto &s : readers)
            s->send(ev);
        readers.clear(); // closes every stream
    }

    json status_json() {
        if (!exited) sample_usage();
        std::lock_guard lock(m);
        double elapsed = std::chrono::duration<double>((exited ? end : Clock::now()) - start).count();
        double pct = elapsed > 0 ? cpu_seconds / elapsed * 100.0 : 0.0;
        pct = std::round(pct * 100.0) / 100.0;
        json j = {{"state", exited ? "exited" : "running"}, {"cpu_pct", pct}, {"mem_bytes", mem_bytes}};
        j["exit_code"] = exited ? json(exit_code) : json(nullptr);
        return j;
    }
};

// ---- the plugin ---------------------------------------------------------------------------------

class ProcessPlugin : public hangar::Plugin {
public:
    void stop() override {
        stopping_ = true; // running execs kill their group and return
        std::map<std::string, std::shared_ptr<Proc>> all;
        {
            std::lock_guard lock(m_);
            all.swap(procs_);
        }
        all.clear(); // each ~Proc kills its group, joins its reader, closes its descriptors
    }

private:
    // ---- server role: relays ----
    void start_server() override {
        auto rest = [](Request &req, std::string_view tail) {
            return "/process/" + path_escape(req.param("process_id")) + std::string(tail);
        };
        route("POST", "/browsers/{id}/process/exec",
              [this](Request &q, Response &r) { relay_to_session(q, r, "/process/exec"); });
        route("POST", "/browsers/{id}/process/spawn",
              [this](Request &q, Response &r) { relay_to_session(q, r, "/process/spawn"); });
        route("GET", "/browsers/{id}/process/{process_id}/status",
              [this, rest](Request &q, Response &r) { relay_to_session(q, r, rest(q, "/status")); });
        route("POST", "/browsers/{id}/process/{process_id}/stdin",
              [this, rest](Request &q, Response &r) { relay_to_session(q, r, rest(q, "/stdin")); });
        route(
            "GET", "/browsers/{id}/process/{process_id}/stdout/stream",
            [this, rest](Request &q, Response &r) { relay_to_session(q, r, rest(q, "/stdout/stream")); },
            HANGAR_ROUTE_STREAMING);
        route("POST", "/browsers/{id}/process/{process_id}/kill",
              [this, rest](Request &q, Response &r) { relay_to_session(q, r, rest(q, "/kill")); });
        route("POST", "/browsers/{id}/process/{process_id}/resize",
              [this, rest](Request &q, Response &r) { relay_to_session(q, r, rest(q, "/resize")); });
    }

    // ---- instance role: the agent ----
    void start_instance() override {
        buffer_cap_ = static_cast<std::size_t>(std::max<std::int64_t>(4096, config_int("buffer_bytes", 1 << 20)));
        exec_cap_ = static_cast<std::size_t>(std::max<std::int64_t>(4096, config_int("exec_output_bytes", 16 << 20)));
        max_exited_ = static_cast<std::size_t>(std::max<std::int64_t>(1, config_int("max_exited", 256)));

        route("POST", "/process/exec", [this](Request &q, Response &r) { exec(q, r); });
        route("POST", "/process/spawn", [this](Request &q, Response &r) { spawn(q, r); });
        route("GET", "/process/{process_id}/status",
              [this](Request &q, Response &r) { r.json(find(q)->status_json()); });
        route("POST", "/process/{process_id}/stdin", [this](Request &q, Response &r) { stdin_write(q, r); });
        route(
            "GET", "/process/{process_id}/stdout/stream", [this](Request &q, Response &r) { stream(q, r); },
            HANGAR_ROUTE_STREAMING);
        route("POST", "/process/{process_id}/kill", [this](Request &q, Response &r) { kill(q, r); });
        route("POST", "/process/{process_id}/resize", [this](Request &q, Response &r) { resize(q, r); });
    }

    std::shared_ptr<Proc> find(Request &req) {
        auto id = req.param("process_id");
        std::lock_guard lock(m_);
        auto it = procs_.find(id);
        if (it == procs_.end()) throw Error::not_found("process " + id + " not found");
        return it->second;
    }

    // At the process limit the answer says when to come back, as every 429 here does.
    static void launch(Proc &p, const Command &c, Response &res) {
        try {
            p.launch(c);
        } catch (const Error &e) {
            if (e.status() == 429) res.header("Retry-After", "1");
            throw;
        }
    }

    void exec(Request &req, Response &res) {
        Command c = parse_command(req.json_body(), false);
        Proc p;
        p.keep_all = true;
        p.plugin_stopping = &stopping_;
        p.out_cap = exec_cap_;
        launch(p, c, res);
        close_fd(p.in_fd); // exec has no stdin: the child reads end of file
        p.run();
        auto ms = std::chrono::duration<double, std::milli>(p.end - p.start).count();
        res.json({{"exit_code", p.exit_code},
                  {"stdout_b64", b64_encode(p.out)},
                  {"stderr_b64", b64_encode(p.err)},
                  {"duration_ms", static_cast<std::int64_t>(std::llround(ms))}});
    }

    void spawn(Request &req, Response &res) {
        Command c = parse_command(req.json_body(), true);
        auto p = std::make_shared<Proc>();
        p->id = uuid4();
        p->buffer_cap = buffer_cap_;
        p->plugin_stopping = &stopping_;
        launch(*p, c, res);
        Proc *raw = p.get();
        p->reader = std::thread([raw] { raw->run(); });
        {
            std::lock_guard lock(m_);
            procs_[p->id] = p;
            order_.push_back(p->id);
            forget_old();
        }
        res.json({{"process_id", p->id}, {"pid", p->pid}, {"started_at", p->started_at}});
    }

    // Keeps at most max_exited_ exited processes (caller holds m_).
    void forget_old() {
        std::size_t exited = 0;
        for (auto &[_, p] : procs_) {
            std::lock_guard lock(p->m);
            exited += p->exited;
        }
        for (auto it = order_.begin(); it != order_.end() && exited > max_exited_;) {
            auto pit = procs_.find(*it);
            bool gone = pit == procs_.end();
            if (!gone) {
                std::lock_guard lock(pit->second->m);
                gone = pit->second->exited;
            }
            if (gone) {
                if (pit != procs_.end()) {
                    procs_.erase(pit);
                    --exited;
                }
                it = order_.erase(it);
            } else {
                ++it;
            }
        }
    }

    void stdin_write(Request &req, Response &res) {
        auto p = find(req);
        json body = req.json_body();
        hangar::Validation v;
        std::optional<std::string> data;
        if (!body.contains("data_b64") || body["data_b64"].is_null())
            v.fail("data_b64", "required");
        else if (!body["data_b64"].is_string())
            v.fail("data_b64", "must be a base64 string");
        else if (!(data = b64_decode(body["data_b64"].get<std::string>())))
            v.fail("data_b64", "is not valid base64");
        v.throw_if_failed();
        {
            std::lock_guard lock(p->m);
            if (p->exited) throw Error::conflict("process " + p->id + " has exited");
        }
        std::lock_guard lock(p->in_m);
        if (p->in_fd < 0) throw Error::conflict("process " + p->id + " has no stdin");
        std::size_t written = 0;
        const std::string_view bytes = *data;
        auto deadline = Clock::now() + std::chrono::seconds(10);
        while (written < bytes.size()) {
            struct pollfd pfd {
                p->in_fd, POLLOUT, 0
            };
            int left = static_cast<int>(
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
            if (left <= 0 || ::poll(&pfd, 1, left) <= 0) break;
            ssize_t n = ::write(p->in_fd, bytes.data() + written, bytes.size() - written);
            if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (n <= 0) {
                if (written == 0) throw Error::conflict("process " + p->id + " no longer reads its stdin");
                break;
            }
            written += static_cast<std::size_t>(n);
        }
        res.json({{"written_bytes", written}});
    }

    void stream(Request &req, Response &res) {
        auto p = find(req);
        auto sse = res.sse();
        std::lock_guard lock(p->m);
        for (auto &c : p->buffered)
            if (!sse->send({{"stream", c.err ? "stderr" : "stdout"}, {"data_b64", b64_encode(c.data)}})) return;
        if (p->exited) {
            sse->send({{"event", "exit"}, {"exit_code", p->exit_code}});
            return; // the destructor closes the stream
        }
        p->readers.push_back(std::move(sse));
    }

    void kill(Request &req, Response &res) {
        auto p = find(req);
        json body = req.json_body();
        int sig = 0;
        if (!body.contains("signal") || body["signal"].is_null())
            throw Error::invalid("signal", "required (TERM, KILL, INT or HUP)");
        if (!body["signal"].is_string() || !(sig = signal_number(body["signal"].get<std::string>())))
            throw Error::invalid("signal", "must be one of TERM, KILL, INT, HUP");
        p->signal(sig);
        res.json({{"ok", true}});
    }

    void resize(Request &req, Response &res) {
        auto p = find(req);
        json body = req.json_body();
        hangar::Validation v;
        auto rows = dimension(body, "rows", v);
        auto cols = dimension(body, "cols", v);
        if (!rows && (!body.contains("rows") || body["rows"].is_null())) v.fail("rows", "required");
        if (!cols && (!body.contains("cols") || body["cols"].is_null())) v.fail("cols", "required");
        v.throw_if_failed();
        if (!p->tty) throw Error::invalid("process_id", "the process has no PTY (spawn it with allocate_tty: true)");
        std::lock_guard lock(p->in_m);
        {
            std::lock_guard plock(p->m);
            if (p->exited) throw Error::conflict("process " + p->id + " has exited");
        }
        if (p->in_fd < 0) throw Error::conflict("process " + p->id + " has exited");
        struct winsize ws {};
        ws.ws_row = *rows;
        ws.ws_col = *cols;
        if (::ioctl(p->in_fd, TIOCSWINSZ, &ws) != 0)
            throw Error::internal(std::string("resize failed: ") + std::strerror(errno));
        res.json({{"ok", true}});
    }

    std::mutex m_;
    std::map<std::string, std::shared_ptr<Proc>> procs_;
    std::deque<std::string> order_;
    std::size_t buffer_cap_ = 1 << 20;
    std::size_t exec_cap_ = 16 << 20;
    std::size_t max_exited_ = 256;
    std::atomic<bool> stopping_{false};
};

} // namespace

HANGAR_PLUGIN(ProcessPlugin, "process", "0.1.0", "browsers", nullptr, 0)
