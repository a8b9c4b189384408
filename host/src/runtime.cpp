#include "runtime.hpp"

#include "util.hpp"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/StreamCopier.h>

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

namespace fs = std::filesystem;

namespace hangar::host {

namespace {

bool under(const std::string &path, const std::string &dir) {
    return path == dir || path.rfind(dir + "/", 0) == 0;
}

// Waits for `pid` to exit for up to `timeout_ms`; true when it was reaped.
bool wait_exit(pid_t pid, int timeout_ms) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        ::poll(&p, 1, timeout_ms);
        ::close(pidfd);
    }
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    return r == pid || (r < 0 && errno == ECHILD);
}

std::string tail_of(const std::string &path, std::size_t max) {
    try {
        auto text = read_file(path);
        return text.size() > max ? text.substr(text.size() - max) : text;
    } catch (const std::exception &) {
        return {};
    }
}

} // namespace

bool Runtime::valid_id(const std::string &id) {
    static const std::regex re("^[a-z0-9_-]{1,64}$");
    return std::regex_match(id, re);
}

Runtime::Runtime(RuntimeOptions options, Poco::Logger &log) : opt_(std::move(options)), log_(log) {
    fs::create_directories(opt_.data_dir + "/instances");
    ::chmod((opt_.data_dir + "/instances").c_str(), 0711);
    if (::geteuid() == 0) {
        // Instances never run as root: use the sandbox user, or nobody when it does not exist.
        std::string user = opt_.sandbox_user.empty() ? "hangar" : opt_.sandbox_user;
        passwd *pw = ::getpwnam(user.c_str());
        if (!pw) pw = ::getpwnam("nobody");
        if (!pw) throw std::runtime_error("no unprivileged user to run instances as (set sandbox.user)");
        uid_ = pw->pw_uid;
        gid_ = pw->pw_gid;
        drop_privileges_ = true;
        log_.information("instances run as user %s (uid %u)", std::string(pw->pw_name), static_cast<unsigned>(uid_));
    } else {
        uid_ = ::geteuid();
        gid_ = ::getegid();
    }
    // cgroup v2 when the unified hierarchy has the memory controller, else the v1 controller.
    if (opt_.memory_limit_bytes > 0) {
        std::string v2 = "/sys/fs/cgroup/cgroup.controllers";
        if (fs::exists(v2) && read_file(v2).find("memory") != std::string::npos) {
            cgroup_root_ = "/sys/fs/cgroup/hangar";
            cgroup_mode_ = "v2";
        } else if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") ||
                   fs::is_directory("/sys/fs/cgroup/memory")) {
            cgroup_root_ = "/sys/fs/cgroup/memory/hangar";
            cgroup_mode_ = "v1";
        }
        if (!cgroup_root_.empty()) {
            std::error_code ec;
            fs::create_directories(cgroup_root_, ec);
            if (ec) {
                log_.warning("no cgroup memory limit: cannot create %s (%s)", cgroup_root_, ec.message());
                cgroup_root_.clear();
                cgroup_mode_ = "none";
            } else if (cgroup_mode_ == "v2") {
                std::ofstream("/sys/fs/cgroup/cgroup.subtree_control") << "+memory";
                std::ofstream(cgroup_root_ + "/cgroup.subtree_control") << "+memory";
            }
        }
    }
    // Sandbox processes that outlive their parent are re-parented to us rather than to PID 1
    // (which in a container may never reap them); the spawner thread reaps them.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    spawner_ = std::thread([this] { spawner_loop(); });
}

Runtime::~Runtime() {
    stop_all();
    {
        std::lock_guard lock(spawn_mutex_);
        spawner_stop_ = true;
    }
    spawn_cv_.notify_all();
    if (spawner_.joinable()) spawner_.join();
}

std::future<pid_t> Runtime::spawn(std::function<pid_t()> fn) {
    std::packaged_task<pid_t()> task(std::move(fn));
    auto fut = task.get_future();
    {
        std::lock_guard lock(spawn_mutex_);
        spawn_queue_.push_back(std::move(task));
    }
    spawn_cv_.notify_one();
    return fut;
}

void Runtime::reap_orphans() {
    // Only processes we do not track: an instance's own pid is reaped by kill_instance.
    std::set<pid_t> tracked;
    {
        std::lock_guard lock(mutex_);
        for (const auto &[_, inst] : instances_)
            tracked.insert(inst.pid);
    }
    std::string children;
    try {
        for (const auto &task : fs::directory_iterator("/proc/self/task"))
            children += read_file(task.path().string() + "/children") + " ";
    } catch (const std::exception &) {
        return;
    }
    for (auto &tok : split(children, ' ')) {
        if (tok.empty()) continue;
        pid_t pid = static_cast<pid_t>(std::stol(tok));
        if (tracked.count(pid)) continue;
        int status;
        ::waitpid(pid, &status, WNOHANG);
    }
}

void Runtime::spawner_loop() {
    while (true) {
        std::packaged_task<pid_t()> task;
        {
            std::unique_lock lock(spawn_mutex_);
            spawn_cv_.wait_for(lock, std::chrono::seconds(1),
                               [this] { return spawner_stop_ || !spawn_queue_.empty(); });
            if (spawner_stop_ && spawn_queue_.empty()) return;
            reap_orphans();
            if (spawn_queue_.empty()) continue;
            task = std::move(spawn_queue_.front());
            spawn_queue_.pop_front();
        }
        task();
    }
}

std::string Runtime::make_cgroup(const std::string &id) {
    if (cgroup_root_.empty()) return {};
    std::string path = cgroup_root_ + "/" + id;
    std::error_code ec;
    fs::create_directory(path, ec);
    if (ec) {
        log_.warning("cgroup %s: %s", path, ec.message());
        return {};
    }
    std::string limit = std::to_string(opt_.memory_limit_bytes);
    std::ofstream(path + (cgroup_mode_ == "v2" ? "/memory.max" : "/memory.limit_in_bytes")) << limit;
    return path;
}

void Runtime::remove_cgroup(const std::string &path) {
    if (path.empty()) return;
    ::rmdir(path.c_str());
}

std::vector<std::string> Runtime::sandbox_argv(const Instance &inst) const {
    std::vector<std::string> a = {"bwrap",         "--die-with-parent", "--new-session", "--unshare-pid",
                                  "--unshare-ipc", "--unshare-uts",     "--hostname",    "hangar"};
    if (uid_ != 0) a.push_back("--unshare-user");
    a.insert(a.end(), {"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/run",
                       "--tmpfs", "/home"});
    // Hide the data dir (database, secrets, other instances); only this instance's dir returns.
    a.insert(a.end(), {"--tmpfs", opt_.data_dir});
    // What the agent needs to run, when it sits under a folder hidden above.
    std::vector<std::string> needed = {fs::path(opt_.exe).parent_path().string()};
    if (!opt_.config_file.empty()) needed.push_back(fs::path(opt_.config_file).parent_path().string());
    for (const auto &d : opt_.plugin_dirs)
        needed.push_back(d);
    for (const auto &d : needed) {
        if (!fs::is_directory(d)) continue;
        for (const char *hidden : {"/tmp", "/run", "/home"})
            if (under(d, hidden) || under(d, opt_.data_dir)) {
                a.insert(a.end(), {"--ro-bind", d, d});
                break;
            }
    }
    a.insert(a.end(), {"--bind", inst.dir, "/run/hangar", "--bind", inst.dir + "/home", "/home/kernel"});
    if (fs::is_directory("/etc/chromium/policies/managed"))
        a.insert(a.end(), {"--ro-bind", inst.dir + "/policy", "/etc/chromium/policies/managed"});
    a.insert(a.end(), {"--setenv", "HOME", "/home/kernel", "--setenv", "USER", "kernel", "--setenv", "TMPDIR", "/tmp",
                       "--chdir", "/home/kernel", "--"});
    return a;
}

nlohmann::json Runtime::start(const nlohmann::json &spec) {
    const auto started = steady_ms();
    std::string id = spec.value("id", "");
    if (!valid_id(id)) throw std::runtime_error("invalid instance id");
    Instance inst;
    inst.id = id;
    inst.dir = opt_.data_dir + "/instances/" + id;
    inst.socket = inst.dir + "/agent.sock";
    {
        std::lock_guard lock(mutex_);
        if (instances_.count(id)) throw std::runtime_error("instance " + id + " already exists");
        instances_[id] = inst;
    }
    auto fail = [&](const std::string &why) {
        Instance copy;
        {
            std::lock_guard lock(mutex_);
            copy = instances_[id];
            instances_.erase(id);
        }
        kill_instance(copy, false);
        throw std::runtime_error(why);
    };

    std::error_code ec;
    fs::remove_all(inst.dir, ec);
    for (const char *sub : {"", "/home", "/logs", "/policy"}) {
        fs::create_directories(inst.dir + sub);
        if (::chown((inst.dir + sub).c_str(), uid_, gid_) != 0 && drop_privileges_) fail("cannot chown instance dir");
    }
    ::chmod(inst.dir.c_str(), 0700);
    try {
        copy_inputs(spec, inst.dir);
    } catch (const std::exception &e) {
        fail(e.what());
    }
    write_file_atomic(inst.dir + "/spec.json", spec.dump(), 0644);
    inst.cgroup = make_cgroup(id);

    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe failed");
    UniqueFd ready_r(ready[0]), ready_w(ready[1]);
    UniqueFd logfd(::open((inst.dir + "/logs/agent.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    ::fchown(logfd.get(), uid_, gid_);

    std::vector<std::string> args;
    if (opt_.use_bwrap) args = sandbox_argv(inst);
    args.push_back(opt_.exe);
    args.push_back("agent");
    args.push_back("--instance-dir=" + std::string(opt_.use_bwrap ? "/run/hangar" : inst.dir));
    args.push_back("--ready-fd=3");
    if (!opt_.config_file.empty()) args.push_back("--config=" + opt_.config_file);
    std::string dirs;
    for (const auto &d : opt_.plugin_dirs)
        dirs += (dirs.empty() ? "" : ":") + d;
    args.push_back("--plugin-dirs=" + dirs);
    std::string enabled;
    for (const auto &p : opt_.enabled_plugins)
        enabled += (enabled.empty() ? "" : ",") + p;
    args.push_back("--plugins=" + enabled);

    // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
    std::vector<char *> argv;
    argv.reserve(args.size() + 1);
    for (auto &s : args)
        argv.push_back(s.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_store = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                          "LANG=C.UTF-8"};
    std::vector<char *> envp;
    envp.reserve(env_store.size() + 1);
    for (auto &s : env_store)
        envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string procs = inst.cgroup.empty() ? std::string() : inst.cgroup + "/cgroup.procs";
    std::string bwrap_path = "/usr/bin/bwrap";
    const char *exec_path = opt_.use_bwrap ? bwrap_path.c_str() : opt_.exe.c_str();
    const int rfd = ready_w.get(), lfd = logfd.get();
    const bool drop = drop_privileges_;
    const uid_t uid = uid_;
    const gid_t gid = gid_;

    pid_t pid = spawn([&]() -> pid_t {
                    pid_t child = ::fork();
                    if (child != 0) return child;
                    if (!procs.empty()) {
                        int cg = ::open(procs.c_str(), O_WRONLY);
                        if (cg >= 0) {
                            [[maybe_unused]] auto n = ::write(cg, "0", 1);
                            ::close(cg);
                        }
                    }
                    int devnull = ::open("/dev/null", O_RDONLY);
                    ::dup2(devnull, 0);
                    ::dup2(lfd, 1);
                    ::dup2(lfd, 2);
                    ::dup2(rfd, 3);
                    ::syscall(SYS_close_range, 4, ~0U, 0);
                    sigset_t none;
                    sigemptyset(&none);
                    ::sigprocmask(SIG_SETMASK, &none, nullptr);
                    if (drop && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0))
                        ::_exit(126);
                    ::execve(exec_path, argv.data(), envp.data());
                    ::_exit(127);
                }).get();
    if (pid < 0) fail("fork failed");
    const auto spawned_at = steady_ms();
    {
        std::lock_guard lock(mutex_);
        instances_[id].pid = pid;
        instances_[id].cgroup = inst.cgroup;
    }
    inst.pid = pid;
    write_file_atomic(inst.dir + "/sandbox.pid", std::to_string(pid) + "\n", 0644);
    ready_w.reset();
    logfd.reset();

    // The agent writes "ready" once every plugin started (Chromium is up), or "error: ...".
    std::string line;
    auto deadline = steady_ms() + opt_.start_timeout_ms;
    while (line.find('\n') == std::string::npos) {
        int left = static_cast<int>(deadline - steady_ms());
        if (left <= 0)
            fail("the instance did not become ready within " + std::to_string(opt_.start_timeout_ms) + " ms");
        pollfd p{ready_r.get(), POLLIN, 0};
        if (::poll(&p, 1, left) <= 0) continue;
        char buf[512];
        ssize_t n = ::read(ready_r.get(), buf, sizeof buf);
        if (n <= 0) break;
        line.append(buf, static_cast<std::size_t>(n));
    }
    line = trim(line);
    if (line != "ready") {
        std::string why = line.rfind("error: ", 0) == 0 ? line.substr(7) : "the instance exited during start-up";
        std::string tail = tail_of(inst.dir + "/logs/agent.log", 600);
        log_.warning("instance %s failed to start: %s\n%s", id, why, tail);
        fail(why);
    }
    log_.debug("instance %s ready in %dms (spawned after %dms)", id, static_cast<int>(steady_ms() - started),
               static_cast<int>(spawned_at - started));
    return {{"id", id}, {"socket", inst.socket}, {"dir", inst.dir}, {"pid", pid}};
}

void Runtime::kill_instance(Instance &inst, bool graceful) {
    if (inst.pid > 0) {
        bool gone = false;
        if (graceful) {
            try {
                unix_http_call(inst.socket, "POST", "/_agent/shutdown", "", 5000);
            } catch (const std::exception &) {
                // an agent that cannot answer is killed below
            }
            gone = wait_exit(inst.pid, 5000);
        }
        if (!gone) {
            ::kill(inst.pid, SIGKILL); // --die-with-parent takes the whole sandbox with it
            wait_exit(inst.pid, 5000);
        }
        inst.pid = -1;
    }
    std::error_code ec;
    if (!inst.dir.empty()) fs::remove_all(inst.dir, ec);
    if (ec) log_.warning("could not remove %s: %s", inst.dir, ec.message());
    remove_cgroup(inst.cgroup);
}

void Runtime::stop(const std::string &id) {
    Instance inst;
    {
        std::lock_guard lock(mutex_);
        auto it = instances_.find(id);
        if (it == instances_.end()) return;
        inst = it->second;
        instances_.erase(it);
    }
    kill_instance(inst, true);
}

void Runtime::stop_all() {
    std::vector<std::string> ids = running();
    std::vector<std::thread> stoppers;
    stoppers.reserve(ids.size());
    for (const auto &id : ids)
        stoppers.emplace_back([this, id] { stop(id); });
    for (auto &t : stoppers)
        t.join();
}

std::vector<std::string> Runtime::running() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (const auto &[id, _] : instances_)
        ids.push_back(id);
    return ids;
}

std::optional<std::string> Runtime::socket_path(const std::string &id) const {
    std::lock_guard lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end() || it->second.pid <= 0) return std::nullopt;
    return it->second.socket;
}

std::optional<std::string> Runtime::dir_path(const std::string &id) const {
    std::lock_guard lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end() || it->second.pid <= 0) return std::nullopt;
    return it->second.dir;
}

// A plugin hands the agent host files (a profile archive, extension zips) through the spec:
// {"inputs": {"<name>": "<host path>"}} arrives as /run/hangar/inputs/<name>. Copies, not binds:
// the sandbox may read them but never reach, or change, what the server keeps.
void Runtime::copy_inputs(const nlohmann::json &spec, const std::string &dir) const {
    auto it = spec.find("inputs");
    if (it == spec.end() || it->is_null()) return;
    if (!it->is_object()) throw std::runtime_error("spec inputs must be an object of name: host path");
    std::string inputs = dir + "/inputs";
    fs::create_directories(inputs);
    if (::chown(inputs.c_str(), uid_, gid_) != 0 && drop_privileges_)
        throw std::runtime_error("cannot chown " + inputs);
    static const std::regex input_name("^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$");
    for (const auto &[name, source] : it->items()) {
        if (!std::regex_match(name, input_name) || !source.is_string())
            throw std::runtime_error("invalid spec input \"" + name + "\"");
        std::string target = inputs;
        target.append("/").append(name);
        fs::copy_file(source.get<std::string>(), target, fs::copy_options::overwrite_existing);
        ::chmod(target.c_str(), 0400);
        if (::chown(target.c_str(), uid_, gid_) != 0 && drop_privileges_)
            throw std::runtime_error("cannot chown " + target);
    }
}

void Runtime::cleanup_leftovers() {
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(opt_.data_dir + "/instances", ec)) {
        std::string dir = entry.path().string();
        try {
            pid_t pid = static_cast<pid_t>(std::stol(read_file(dir + "/sandbox.pid")));
            std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
            if (cmd.find("bwrap") != std::string::npos || cmd.find("hangar") != std::string::npos) {
                ::kill(pid, SIGKILL);
                log_.information("killed leftover instance process %d", static_cast<int>(pid));
            }
        } catch (const std::exception &) {
            // no pid file or the process is gone
        }
        fs::remove_all(dir, ec);
        remove_cgroup(cgroup_root_.empty() ? std::string() : cgroup_root_ + "/" + entry.path().filename().string());
        log_.information("removed leftover instance %s", entry.path().filename().string());
    }
}

UnixCallResult unix_http_call(const std::string &socket, const std::string &method, const std::string &path,
                              const std::string &body, int timeout_ms) {
    Poco::Net::StreamSocket sock;
    sock.connect(Poco::Net::SocketAddress(Poco::Net::SocketAddress::UNIX_LOCAL, socket), Poco::Timespan(5, 0));
    // HTTPClientSession(SocketAddress) cannot take a unix address in Poco 1.11; hand it a socket.
    Poco::Net::HTTPClientSession session(sock);
    session.setTimeout(Poco::Timespan(static_cast<long>(timeout_ms) * 1000));
    Poco::Net::HTTPRequest req(method, path, Poco::Net::HTTPMessage::HTTP_1_1);
    req.setHost("localhost");
    req.setKeepAlive(false);
    if (!body.empty() || method != "GET") {
        req.setContentType("application/json");
        req.setContentLength64(static_cast<Poco::Int64>(body.size()));
    }
    session.sendRequest(req) << body;
    Poco::Net::HTTPResponse res;
    std::istream &in = session.receiveResponse(res);
    std::string out;
    Poco::StreamCopier::copyToString(in, out);
    return {static_cast<int>(res.getStatus()), out};
}

} // namespace hangar::host
