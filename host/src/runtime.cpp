#include "runtime.hpp"

#include "sandbox.hpp"
#include "util.hpp"

#include <hangar/beneath.hpp>

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/Net/StreamSocket.h>

#include <fcntl.h>
#include <grp.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>
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

// Waits for `pid` to exit for up to `timeout_ms`; true when it was reaped (its wait status in
// `status` when given).
bool wait_exit(pid_t pid, int timeout_ms, int *status_out = nullptr) {
    int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
        pollfd p{pidfd, POLLIN, 0};
        ::poll(&p, 1, timeout_ms);
        ::close(pidfd);
    }
    int status = 0;
    pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (status_out) *status_out = r == pid ? status : -1;
    return r == pid || (r < 0 && errno == ECHILD);
}

// The end of a log a helper or the agent wrote: in the instance's folder, so opened the way any
// sandbox-writable path is (beneath.hpp).
std::string tail_of(const std::string &path, std::size_t max) {
    auto slash = path.find_last_of('/');
    return beneath::read_tail(path.substr(0, slash), path.substr(slash + 1), max);
}

// bwrap's --info-fd JSON ({"child-pid": N, ...}), read until it parses or the deadline passes.
pid_t read_info_pid(int fd, std::int64_t deadline) {
    std::string text;
    while (true) {
        auto info = nlohmann::json::parse(text, nullptr, false);
        if (!info.is_discarded() && info.contains("child-pid")) return info["child-pid"].get<pid_t>();
        int left = static_cast<int>(deadline - steady_ms());
        if (left <= 0) throw std::runtime_error("bwrap did not report its sandbox in time");
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, left) <= 0) continue;
        char buf[512];
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) throw std::runtime_error("bwrap exited before the sandbox started");
        text.append(buf, static_cast<std::size_t>(n));
    }
}

// In a forked child, before exec (async-signal-safe calls only): the signal state a fresh
// program expects, then the instance user when the server runs as root; exits 126 if that fails.
void child_becomes(bool drop, uid_t uid, gid_t gid) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // An ignored SIGPIPE survives exec; pasta refuses to start with it.
    ::signal(SIGPIPE, SIG_DFL);
    if (drop && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)) ::_exit(126);
}

// The instances a folder holds: each one's folder, pid file or disk image names it.
std::set<std::string> instance_ids_on_disk(const std::string &root) {
    std::set<std::string> ids;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(root, ec)) {
        auto name = entry.path().filename().string();
        if (entry.is_directory())
            ids.insert(name.ends_with(".host") ? name.substr(0, name.size() - 5) : name);
        else if (name.ends_with(".pids") || name.ends_with(".disk"))
            ids.insert(name.substr(0, name.size() - 5));
    }
    return ids;
}

bool process_runs(pid_t pid, const char *name) {
    if (pid <= 0) return false;
    try {
        return read_file("/proc/" + std::to_string(pid) + "/cmdline").find(name) != std::string::npos;
    } catch (const std::exception &) {
        return false;
    }
}

// "<sandbox pid> <pasta pid> <server pid>" as the runtime writes it; missing fields are -1.
std::array<pid_t, 3> read_pids(const std::string &file) {
    std::array<pid_t, 3> out{-1, -1, -1};
    try {
        auto fields = split(trim(read_file(file)), ' ');
        for (std::size_t i = 0; i < fields.size() && i < out.size(); ++i)
            out[i] = static_cast<pid_t>(std::stol(fields[i]));
    } catch (const std::exception &) {
        // no pid file, or a malformed one: nothing runs that we know of
    }
    return out;
}

// In a freshly forked child: moves it into each cgroup (`<cgroup>/cgroup.procs` files). Only
// async-signal-safe calls: the paths were made before the fork.
void join_cgroups(const std::vector<std::string> &procs) {
    for (const auto &file : procs) {
        int cg = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
        if (cg >= 0) {
            [[maybe_unused]] auto n = ::write(cg, "0", 1);
            ::close(cg);
        }
    }
}

bool agent_answers(const std::string &socket) {
    try {
        return unix_http_call(socket, "GET", "/_agent/health", "", 2000).status == 200;
    } catch (const std::exception &) {
        return false;
    }
}

// A write to a kernel control file (a user namespace's maps, a cgroup's procs): one write() of the
// whole text.
void write_proc(const std::string &path, const std::string &text) {
    UniqueFd f(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!f || ::write(f.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
}

// An instance's cgroup under one of the layout's roots (cgroups.hpp), named by its id, and the
// file that lists its processes.
std::string instance_cgroup(const std::string &root, const std::string &id) {
    return root + "/" + id;
}
std::string instance_cgroup_procs(const std::string &root, const std::string &id) {
    return instance_cgroup(root, id) + "/cgroup.procs";
}

} // namespace

void Runtime::write_pids(const Instance &inst) const {
    write_file_atomic(pids_file(inst.id),
                      std::to_string(inst.pid) + " " + std::to_string(inst.pasta_pid) + " " +
                          std::to_string(::getpid()) + "\n",
                      0600);
}

std::string Runtime::pids_file(const std::string &id) const {
    // Beside, not inside, the instance folder: the sandbox can write there, and must not steer
    // which processes the server kills after a restart.
    return opt_.data_dir + "/instances/" + id + ".pids";
}

std::string Runtime::disk_image(const std::string &id) const {
    return opt_.data_dir + "/instances/" + id + ".disk";
}

// What the server itself keeps of an instance beside its folder: the agent's socket (and sockets
// plugins serve to the instance). The sandbox sees it read-only at /run/hangar-host; nothing in it
// can be created, renamed or linked from inside, so a path the server follows there is its own.
std::string Runtime::host_dir(const std::string &id) const {
    return opt_.data_dir + "/instances/" + id + ".host";
}

void Runtime::remove_host_dir(const std::string &id) const {
    const std::string dir = host_dir(id);
    if (::umount2(dir.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT && errno != EPERM)
        log_.warning("could not unmount %s: %s", dir, std::string(std::strerror(errno)));
    std::error_code ec;
    fs::remove_all(dir, ec);
}

// The agent's listening socket, bound by the server in the instance's host folder and handed to
// the agent as a descriptor: the agent never names the path, so nothing in its sandbox can put
// another socket (a fake agent, another instance's) where the server connects.
UniqueFd Runtime::listen_agent_socket(const Instance &inst) const {
    remove_host_dir(inst.id);
    fs::create_directory(inst.host_dir);
    // Readable by the instance's group only: code inside connects to its own agent (the Playwright
    // executor, the BiDi mapper); other users of the host do not.
    const mode_t dir_mode = drop_privileges_ ? 0750 : 0700;
    // A small file system of its own where the server may mount, as the instance folder is: a
    // bind of a plain folder would show its host path (the data dir) in the instance's
    // /proc/self/mountinfo.
    if (::geteuid() == 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%o", dir_mode);
        std::string options = "size=64k,nr_inodes=32,mode=" + std::string(mode) + ",uid=0,gid=" + std::to_string(gid_);
        // Where mounting is refused (a container without CAP_SYS_ADMIN) the folder stays a plain
        // one: still out of the sandbox's reach, only its path shows inside.
        if (::mount("hangar-host", inst.host_dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.c_str()) !=
            0)
            log_.debug("instance %s: host folder not mounted: %s", inst.id, std::string(std::strerror(errno)));
    }
    if ((drop_privileges_ && ::chown(inst.host_dir.c_str(), 0, gid_) != 0) ||
        ::chmod(inst.host_dir.c_str(), dir_mode) != 0)
        throw std::runtime_error("cannot prepare the instance's host folder");
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (!fd || inst.socket.size() >= sizeof addr.sun_path) throw std::runtime_error("cannot make the agent's socket");
    std::memcpy(addr.sun_path, inst.socket.c_str(), inst.socket.size() + 1);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof addr) != 0 || ::listen(fd.get(), 64) != 0)
        throw std::runtime_error("cannot listen on the agent's socket");
    if (drop_privileges_ && (::chown(inst.socket.c_str(), 0, gid_) != 0 || ::chmod(inst.socket.c_str(), 0660) != 0))
        throw std::runtime_error("cannot hand the agent's socket to the instance's group");
    return fd;
}

// Why a file system per instance, not a check of what was written: only the kernel sees every
// write an instance makes (Chromium's cache, downloads, a process filling /home/kernel), and
// ENOSPC is what programs already handle. Its own superblock also keeps the host path of the
// folder out of the instance's /proc/self/mountinfo. Sparse and without a journal: it costs the
// disk only what is written, and an instance's files do not outlive the machine's uptime anyway.
void Runtime::format_disk(const std::string &image, const std::string &log) {
    {
        UniqueFd f(::open(image.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
        if (f.get() < 0 || ::ftruncate(f.get(), static_cast<off_t>(opt_.disk_quota_bytes)) != 0)
            throw std::runtime_error("cannot create the instance's disk image");
    }
    const std::string owner = "root_owner=" + std::to_string(uid_) + ":" + std::to_string(gid_);
    run_helper("disk", log,
               {"mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "lazy_itable_init=1," + owner, image},
               {}, "", 10000, true);
    std::error_code ec;
    fs::remove(log, ec);
}

void Runtime::attach_disk(const Instance &inst) {
    const std::string image = disk_image(inst.id);
    const std::string log = image + ".log";
    // A prepared one (same size and owner) is renamed into place: the data dir is one file system.
    auto prepared = take_prepared_disk();
    if (!prepared || ::rename(prepared->c_str(), image.c_str()) != 0) format_disk(image, log);
    run_helper(inst.id, log, {"mount", "-o", "loop,nosuid,nodev", image, inst.dir}, {}, "", 10000, true);
    std::error_code ec;
    fs::remove(log, ec);
    fs::remove_all(inst.dir + "/lost+found", ec);
}

void Runtime::detach_disk(const std::string &id, const std::string &dir) {
    // Lazily: the loop device (autoclear) goes when its last user does, and nothing waits for it.
    if (::umount2(dir.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        log_.warning("could not unmount %s: %s", dir, std::string(std::strerror(errno)));
    std::error_code ec;
    fs::remove(disk_image(id), ec);
    fs::remove(disk_image(id) + ".log", ec);
}

pid_t Runtime::connect_network(const Instance &inst, pid_t child) {
    const auto began = steady_ms();
    UniqueFd net(::open(("/proc/" + std::to_string(child) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (net.get() < 0) throw std::runtime_error("cannot open the sandbox's network namespace");
    // bwrap nests the sandbox in a second user namespace; the network namespace belongs to the
    // first, which only this ioctl names.
    UniqueFd user(::ioctl(net.get(), NS_GET_USERNS));
    if (user.get() < 0) throw std::runtime_error("cannot find the network namespace's owner");
    // bwrap reports the child's pid before the child has given the namespace's loopback its
    // address (bubblewrap.c: info fd, then loopback_setup, then the block fd). pasta brings the
    // loopback up, and the kernel then adds 127.0.0.1 itself, so a pasta that comes first makes
    // bwrap's own address request fail ("loopback: Failed RTM_NEWADDR") and the sandbox die.
    // Wait for the address (it shows in the namespace's FIB at once, up or not).
    const std::string fib = "/proc/" + std::to_string(child) + "/net/fib_trie";
    for (auto until = steady_ms() + 2000;;) {
        std::string table;
        try {
            table = read_file(fib);
        } catch (const std::exception &) {
            throw std::runtime_error("the sandbox exited before its network was set up");
        }
        if (table.find("127.0.0.1") != std::string::npos) break;
        if (steady_ms() > until) throw std::runtime_error("the sandbox did not set up its loopback within 2 s");
        ::usleep(500);
    }
    const auto loopback_at = steady_ms();
    // pasta stays running (a daemon) once this returns. In the instance's cgroups, a server killed
    // before the pid file names it still leaves it findable: the next start's sweep of the
    // instance's cgroups ends it. (This pasta does not quit when the namespace goes.)
    pid_t pasta = link_out(inst.id, inst.dir + "/logs/agent.log", user.get(), net.get(), inst.dir + "/logs/pasta.pid",
                           inst.cgroups);
    log_.debug("instance %s network: loopback %dms", inst.id, static_cast<int>(loopback_at - began));
    return pasta;
}

pid_t Runtime::link_out(const std::string &id, const std::string &log, int user, int net, const std::string &pid_file,
                        const std::vector<std::string> &cgroups) {
    const auto began = steady_ms();
    run_helper(id, log, sandbox::pasta_argv(pasta_ports_, pid_file), {user, net}, "", 5000, false, cgroups);
    pid_t pasta = -1;
    try {
        pasta = static_cast<pid_t>(std::stol(read_file(pid_file)));
    } catch (const std::exception &) {
        throw std::runtime_error("pasta started but left no pid");
    }
    const auto pasta_at = steady_ms();
    try {
        run_helper(id, log,
                   {"nsenter", "--preserve-credentials", "--user=/proc/self/fd/3", "--net=/proc/self/fd/4", "ip",
                    "-batch", "-"},
                   {user, net}, route_batch_, 5000);
    } catch (const std::exception &) {
        if (process_runs(pasta, "pasta")) ::kill(pasta, SIGKILL);
        throw;
    }
    // Its parts: pasta's start grows with the host ports it forwards (one listening socket each
    // in the namespace).
    log_.debug("%s network: pasta %dms, routes %dms", id, static_cast<int>(pasta_at - began),
               static_cast<int>(steady_ms() - pasta_at));
    return pasta;
}

// The cgroup prepared networks' pasta runs in until a start takes it: one per data dir, so a
// restart on the same data dir finds (and ends) what its predecessor left, and another server
// sharing the cgroup root does not.
std::string Runtime::networks_cgroup_id() const {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(opt_.data_dir));
    return std::string("networks-") + hex;
}

bool Runtime::prepares_networks() const {
    // setns() into a namespace another user namespace owns needs the server's privileges, and
    // only cgroups find a prepared pasta again after a crash.
    return opt_.prepared > 0 && opt_.use_bwrap && opt_.isolated_network && drop_privileges_ &&
           !cgroup_layout_.roots.empty();
}

bool Runtime::prepares_disks() const {
    return opt_.prepared > 0 && disk_quota_;
}

Runtime::PreparedNetwork Runtime::prepare_network() {
    const std::string dir = opt_.data_dir + "/networks";
    const std::string log = dir + "/pasta.log";
    const auto cgroups = make_cgroups(networks_cgroup_id());
    // A child of the instance user's makes the user and network namespaces and holds them until
    // their descriptors are open here; it runs no program.
    int go[2], hold[2];
    if (::pipe2(go, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    UniqueFd go_r(go[0]), go_w(go[1]);
    if (::pipe2(hold, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    UniqueFd hold_r(hold[0]), hold_w(hold[1]);
    const int go_fd = go_w.get(), hold_fd = hold_r.get(), held_fd = hold_w.get();
    const pid_t server = ::getpid();
    const uid_t uid = uid_;
    const gid_t gid = gid_;
    pid_t child = spawn([&]() -> pid_t {
                      pid_t pid = ::fork();
                      if (pid > 0) {
                          std::lock_guard lock(mutex_);
                          helpers_.insert(pid);
                      }
                      if (pid != 0) return pid;
                      // Its copy of the write end would keep the read below from ever ending.
                      ::close(held_fd);
                      child_becomes(true, uid, gid);
                      ::prctl(PR_SET_PDEATHSIG, SIGKILL); // after the uid change, which clears it
                      if (::getppid() != server) ::_exit(1);
                      if (::unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) ::_exit(1);
                      if (::write(go_fd, "1", 1) != 1) ::_exit(1);
                      char byte;
                      [[maybe_unused]] auto n = ::read(hold_fd, &byte, 1);
                      ::_exit(0);
                  }).get();
    if (child < 0) throw std::runtime_error("fork failed");
    go_w.reset();
    hold_r.reset();
    struct Reap {
        Runtime &rt;
        pid_t pid;
        UniqueFd &hold;
        ~Reap() {
            hold.reset(); // the child exits
            rt.reap_helper(pid, 2000);
        }
    } reap{*this, child, hold_w};
    pollfd p{go_r.get(), POLLIN, 0};
    char byte = 0;
    if (::poll(&p, 1, 5000) <= 0 || ::read(go_r.get(), &byte, 1) != 1)
        throw std::runtime_error("could not make a network namespace");
    const std::string proc = "/proc/" + std::to_string(child);
    PreparedNetwork n;
    n.user = UniqueFd(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
    n.net = UniqueFd(::open((proc + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
    if (!n.user || !n.net) throw std::runtime_error("cannot open a new network namespace");
    // The instance user is root inside, as in the user namespace bwrap makes first (which owns its
    // network namespace): pasta and `ip` keep their capabilities there across exec.
    write_proc(proc + "/setgroups", "deny");
    write_proc(proc + "/uid_map", "0 " + std::to_string(uid_) + " 1\n");
    write_proc(proc + "/gid_map", "0 " + std::to_string(gid_) + " 1\n");
    const std::string pid_file = dir + "/pasta-" + std::to_string(child) + ".pid";
    n.pasta = link_out(networks_cgroup_id(), log, n.user.get(), n.net.get(), pid_file, cgroups);
    std::error_code ec;
    fs::remove(pid_file, ec);
    return n;
}

// An empty file system of the instance size, owned by the instance user: all a start then does is
// rename it into place and mount it. In a folder of its own, which the next start empties.
std::string Runtime::prepare_disk() {
    std::string image = opt_.data_dir + "/disks/" + std::to_string(++disks_made_) + ".disk";
    format_disk(image, image + ".log");
    return image;
}

template <typename T> std::optional<T> Runtime::take_prepared(std::deque<T> &ready) {
    std::lock_guard lock(prepared_mutex_);
    if (ready.empty()) return std::nullopt;
    std::optional<T> taken(std::move(ready.front()));
    ready.pop_front();
    prepared_cv_.notify_all(); // the preparer makes the next one
    return taken;
}

std::optional<Runtime::PreparedNetwork> Runtime::take_prepared_network() {
    return take_prepared(networks_);
}

std::optional<std::string> Runtime::take_prepared_disk() {
    return take_prepared(disks_);
}

void Runtime::preparer_loop() {
    const auto wanted = static_cast<std::size_t>(opt_.prepared);
    int failures = 0;
    for (;;) {
        bool network = false;
        {
            std::unique_lock lock(prepared_mutex_);
            prepared_cv_.wait(lock, [&] {
                return prepared_stop_ || (prepares_networks() && networks_.size() < wanted) ||
                       (prepares_disks() && disks_.size() < wanted);
            });
            if (prepared_stop_) return;
            network = prepares_networks() && networks_.size() < wanted &&
                      (!prepares_disks() || networks_.size() <= disks_.size());
        }
        // Not beside a start under way: its Chromium needs the two cores more than the next
        // start needs its network or disk now.
        for (int i = 0; i < 40; ++i) {
            {
                std::lock_guard lock(mutex_);
                if (starting_.empty()) break;
            }
            std::unique_lock lock(prepared_mutex_);
            if (prepared_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return prepared_stop_; })) return;
        }
        try {
            if (network) {
                auto n = prepare_network();
                std::lock_guard lock(prepared_mutex_);
                networks_.push_back(std::move(n));
            } else {
                auto image = prepare_disk();
                std::lock_guard lock(prepared_mutex_);
                disks_.push_back(std::move(image));
            }
            failures = 0;
        } catch (const std::exception &e) {
            // Starts make their own meanwhile; retried less often while it keeps failing.
            log_.warning("could not prepare a %s: %s", std::string(network ? "network namespace" : "disk image"),
                         std::string(e.what()));
            std::unique_lock lock(prepared_mutex_);
            const auto wait = std::chrono::seconds(std::min(60, 1 << std::min(++failures, 6)));
            if (prepared_cv_.wait_for(lock, wait, [&] { return prepared_stop_; })) return;
        }
    }
}

void Runtime::end_prepared() {
    {
        std::lock_guard lock(prepared_mutex_);
        prepared_stop_ = true;
    }
    prepared_cv_.notify_all();
    if (preparer_.joinable()) preparer_.join();
    std::lock_guard lock(prepared_mutex_);
    for (auto &n : networks_)
        if (process_runs(n.pasta, "pasta")) ::kill(n.pasta, SIGKILL);
    networks_.clear();
    std::error_code ec;
    for (const auto &image : disks_)
        fs::remove(image, ec);
    disks_.clear();
}

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
    if (opt_.disk_quota_bytes > 0) {
        // Mounting needs root (CAP_SYS_ADMIN in the host's namespace) and loop devices.
        disk_quota_ = ::geteuid() == 0 && ::access("/dev/loop-control", R_OK | W_OK) == 0 &&
                      (::access("/usr/sbin/mkfs.ext4", X_OK) == 0 || ::access("/sbin/mkfs.ext4", X_OK) == 0);
        if (disk_quota_)
            log_.information("instance folders are capped at %s MiB each", std::to_string(opt_.disk_quota_bytes >> 20));
        else
            log_.warning("sandbox.disk_quota_mb is set, but instance folders cannot be capped here (it needs the "
                         "server to run as root, /dev/loop-control and mkfs.ext4)");
    }
    // Limits per instance: memory, tasks (a fork bomb stops at pids_max) and a CPU weight, so one
    // busy instance cannot starve the others or the server. Where the cgroups go: cgroups.hpp.
    std::string self_cgroup;
    try {
        self_cgroup = read_file("/proc/self/cgroup");
    } catch (const std::exception &) {
        // no /proc: no delegated cgroup to find
    }
    auto layout = choose_cgroup_layout("/sys/fs/cgroup", self_cgroup, ::getpid());
    for (const auto &why : layout.warnings)
        log_.warning("%s", why);
    cgroup_layout_ = layout;
    record_cgroup_roots(opt_.data_dir, layout);
    for (const auto &[controller, root] : cgroup_layout_.roots)
        log_.information("instance cgroups (%s, %s): %s", controller, layout.origin, root);
    // Instances outlive the server only where their cgroups can find every process of them
    // (a restart adopts or kills them by it) and can never block the next start.
    outlive_ = opt_.use_bwrap && !cgroup_layout_.roots.empty() && layout.survives_restart;
    if (!outlive_ && !cgroup_layout_.roots.empty())
        log_.warning("instances end with the server: without bubblewrap they cannot be told apart from it");
    else if (!outlive_)
        log_.warning("instances end with the server (no cgroups to track them): sessions do not survive a restart");
    if (opt_.use_bwrap && opt_.isolated_network) {
        pasta_ports_ = sandbox::port_spec(opt_.allow_host_ports);
        route_batch_ = sandbox::route_batch(opt_.allow_private_networks, sandbox::host_addresses());
    }
    if (opt_.use_bwrap) sandbox::seccomp_program(); // built now, so a libseccomp problem shows at start
    // Sandbox processes that outlive their parent are re-parented to us rather than to PID 1
    // (which in a container may never reap them); the spawner thread reaps them.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    spawner_ = std::thread([this] { spawner_loop(); });
    // What a server that died on this data dir prepared and nobody took.
    if (prepares_networks()) kill_cgroup_processes(networks_cgroup_id());
    for (const char *sub : {"/networks", "/disks"}) {
        std::error_code ec;
        fs::remove_all(opt_.data_dir + sub, ec);
    }
    if (prepares_networks()) {
        const std::string dir = opt_.data_dir + "/networks";
        fs::create_directories(dir);
        // pasta, as the instance user, writes its pid file there.
        if (::chown(dir.c_str(), uid_, gid_) != 0 || ::chmod(dir.c_str(), 0700) != 0)
            throw std::runtime_error("cannot hand " + dir + " to the instance user");
    }
    if (prepares_disks()) fs::create_directories(opt_.data_dir + "/disks");
    if (prepares_networks() || prepares_disks()) preparer_ = std::thread([this] { preparer_loop(); });
}

Runtime::~Runtime() {
    stop_all(); // ends what was prepared too (close_starts)
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
    // An instance whose sandbox ended by itself (the agent crashed, the OOM killer, a kill from
    // outside) stops being running at once: its socket is no longer handed out, and the plugin
    // that owns the session sees it gone and ends it. stop() still cleans its folder.
    std::set<pid_t> tracked;
    {
        std::lock_guard lock(mutex_);
        for (auto &[id, inst] : instances_) {
            int status = 0;
            if (inst.pid > 0 && inst.pidfd) {
                // Adopted: not our child, its exit shows on the pidfd (init reaps it).
                pollfd p{inst.pidfd->get(), POLLIN, 0};
                if (::poll(&p, 1, 0) > 0) {
                    log_.warning("adopted instance %s exited by itself", id);
                    inst.pid = -1;
                }
            } else if (inst.pid > 0 && ::waitpid(inst.pid, &status, WNOHANG) == inst.pid) {
                log_.warning("instance %s exited by itself (%s)", id,
                             std::string(WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                             : "status " + std::to_string(WEXITSTATUS(status))));
                inst.pid = -1;
            }
            tracked.insert(inst.pid);
        }
        tracked.insert(helpers_.begin(), helpers_.end());
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

void Runtime::apply_limits(const std::string &controller, const std::string &path, std::uint64_t memory_limit_bytes) {
    auto set = [&](const std::string &file, const std::string &value) {
        std::ofstream out(file);
        out << value;
        if (!out.flush()) log_.warning("cgroup %s: cannot write %s", file, value);
    };
    bool all = controller == "all";
    const std::uint64_t memory = memory_limit_bytes ? memory_limit_bytes : opt_.memory_limit_bytes;
    if ((all || controller == "memory") && memory > 0)
        set(path + (all ? "/memory.max" : "/memory.limit_in_bytes"), std::to_string(memory));
    if ((all || controller == "pids") && opt_.pids_max > 0) set(path + "/pids.max", std::to_string(opt_.pids_max));
    if (all && opt_.cpu_weight > 0) set(path + "/cpu.weight", std::to_string(opt_.cpu_weight));
    if (controller == "cpu" && opt_.cpu_weight > 0)
        set(path + "/cpu.shares", std::to_string(opt_.cpu_weight * 1024 / 100));
}

std::vector<std::string> Runtime::make_cgroups(const std::string &id, std::uint64_t memory_limit_bytes) {
    std::vector<std::string> made;
    for (const auto &[controller, root] : cgroup_layout_.roots) {
        const std::string path = instance_cgroup(root, id);
        std::error_code ec;
        fs::create_directory(path, ec);
        if (ec) {
            log_.warning("cgroup %s: %s", path, ec.message());
            continue;
        }
        made.push_back(path);
        apply_limits(controller, path, memory_limit_bytes);
    }
    return made;
}

std::uint64_t Runtime::memory_limit_of(const std::string &id) const {
    std::ifstream in(host_dir(id) + "/memory_limit");
    std::uint64_t bytes = 0;
    return in >> bytes ? bytes : 0;
}

void Runtime::unpark(const std::string &id) {
    // A parked instance (cgroups.hpp) lost its limits with the controllers this start handed down
    // again: limits first, then it may run.
    for (const auto &[controller, root] : cgroup_layout_.roots) {
        const std::string path = instance_cgroup(root, id);
        std::error_code ec;
        if (!fs::is_directory(path, ec)) continue;
        apply_limits(controller, path, memory_limit_of(id));
        if (auto why = thaw_cgroup(path); !why.empty()) log_.warning("cannot thaw instance %s: %s", id, why);
    }
}

void Runtime::kill_cgroup_processes(const std::string &id) {
    for (auto until = steady_ms() + 2000;;) {
        bool any = false;
        for (const auto &[_, root] : cgroup_layout_.roots) {
            std::string procs;
            try {
                procs = read_file(instance_cgroup_procs(root, id));
            } catch (const std::exception &) {
                continue; // no such cgroup
            }
            for (const auto &tok : split(procs, '\n'))
                if (auto pid = std::atoi(tok.c_str()); pid > 0) {
                    ::kill(pid, SIGKILL);
                    any = true;
                }
        }
        if (!any || steady_ms() > until) return;
        ::usleep(20000);
    }
}

void Runtime::remove_cgroups(const std::string &id) {
    for (const auto &[_, root] : cgroup_layout_.roots)
        ::rmdir(instance_cgroup(root, id).c_str());
}

std::vector<std::string> Runtime::agent_ro_paths() const {
    // The agent binary, its plugins and config; in a build tree also the plugins' sources
    // (runtimes such as the Playwright executor run from there). Installed, all live in /usr.
    std::vector<std::string> paths = {fs::path(opt_.exe).parent_path().string()};
    // The runtimes plugins start inside (the Playwright executor, the BiDi mapper) live in
    // <prefix>/share/hangar beside <prefix>/bin: under /usr for a package, elsewhere for an
    // install into another prefix (or a staging root), which must be bound as well.
    paths.push_back((fs::path(opt_.exe).parent_path().parent_path() / "share" / "hangar").string());
    if (!opt_.config_file.empty()) paths.push_back(fs::path(opt_.config_file).parent_path().string());
    paths.insert(paths.end(), opt_.plugin_dirs.begin(), opt_.plugin_dirs.end());
    if (under(opt_.exe, HANGAR_BUILD_DIR)) paths.emplace_back(HANGAR_SOURCE_DIR "/plugins");
    paths.insert(paths.end(), opt_.extra_ro_paths.begin(), opt_.extra_ro_paths.end());
    std::vector<std::string> kept;
    for (auto &p : paths) {
        p = fs::path(p).lexically_normal().string();
        if (p.empty() || p == "/" || under(p, "/usr") || !fs::is_directory(p)) continue;
        kept.push_back(p);
    }
    return kept;
}

std::vector<std::string> Runtime::sandbox_argv(const Instance &inst, bool network_ready) const {
    std::vector<std::string> a = {"bwrap",      "--new-session", "--unshare-pid",  "--unshare-ipc", "--unshare-uts",
                                  "--hostname", "hangar",        "--unshare-user", "--cap-drop",    "ALL"};
    // Tied to the server only where nothing else would find the sandbox's processes once it is
    // gone; with cgroups, instances outlive a restart and the next start adopts them.
    if (!outlive_) a.insert(a.begin() + 1, "--die-with-parent");
    if (inst.offline)
        a.emplace_back("--unshare-net");
    else if (opt_.isolated_network && !network_ready)
        a.insert(a.end(), {"--unshare-net", "--info-fd", "4"});
    a.insert(a.end(), {"--seccomp", "6"});
    auto ro = agent_ro_paths();
    auto root = sandbox::root_args(ro);
    a.insert(a.end(), root.begin(), root.end());
    // A folder bound above that holds the data dir or a shared blobs folder must not show it
    // (database, secrets, other tenants' blobs).
    std::vector<std::string> hidden_dirs = {opt_.data_dir};
    if (!opt_.blob_root.empty() && !under(opt_.blob_root, opt_.data_dir)) hidden_dirs.push_back(opt_.blob_root);
    for (const auto &hidden : hidden_dirs)
        for (const auto &dir : ro)
            if (under(hidden, dir)) {
                a.insert(a.end(), {"--tmpfs", hidden});
                break;
            }
    a.insert(a.end(), {"--ro-bind", inst.dir + "/etc/hosts", "/etc/hosts"});
    if (opt_.isolated_network || inst.offline)
        a.insert(a.end(), {"--ro-bind", inst.dir + "/etc/resolv.conf", "/etc/resolv.conf"});
    else
        a.insert(a.end(), {"--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"});
    a.insert(a.end(), {"--bind", inst.dir, "/run/hangar", "--bind", inst.dir + "/home", "/home/kernel"});
    a.insert(a.end(), {"--ro-bind", inst.host_dir, "/run/hangar-host"});
    if (fs::is_directory("/etc/chromium/policies/managed"))
        a.insert(a.end(), {"--ro-bind", inst.dir + "/policy", "/etc/chromium/policies/managed"});
    for (const auto &[source, target] : inst.ro_binds)
        a.insert(a.end(), {"--ro-bind", source, target});
    for (const auto &[source, target] : inst.rw_binds)
        a.insert(a.end(), {"--bind", source, target});
    a.insert(a.end(), {"--remount-ro", "/", "--setenv", "HOME", "/home/kernel", "--setenv", "USER", "kernel",
                       "--setenv", "TMPDIR", "/tmp", "--chdir", "/home/kernel", "--"});
    return a;
}

bool Runtime::reap_helper(pid_t pid, int timeout_ms, int *status) {
    const bool exited = wait_exit(pid, timeout_ms, status);
    if (!exited) {
        ::kill(pid, SIGKILL);
        wait_exit(pid, 1000);
    }
    std::lock_guard lock(mutex_);
    helpers_.erase(pid);
    return exited;
}

void Runtime::run_helper(const std::string &id, const std::string &log_path, std::vector<std::string> args,
                         const std::vector<int> &fds, const std::string &stdin_text, int timeout_ms, bool as_server,
                         const std::vector<std::string> &cgroups) {
    std::vector<char *> argv;
    argv.reserve(args.size() + 1);
    for (auto &s : args)
        argv.push_back(s.data());
    argv.push_back(nullptr);
    std::vector<std::string> procs;
    procs.reserve(cgroups.size());
    for (const auto &cg : cgroups)
        procs.push_back(cg + "/cgroup.procs");
    // Sized before fork: the child may not allocate (another thread may hold the heap's lock).
    std::vector<int> moved(fds.size(), -1);
    char env_path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    char *envp[] = {env_path, nullptr};
    int in_pipe[2];
    if (::pipe2(in_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
    UniqueFd logfd(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    const int ifd = in_r.get(), lfd = logfd.get();
    const bool drop = drop_privileges_ && !as_server;
    const uid_t uid = uid_;
    const gid_t gid = gid_;
    pid_t pid = spawn([&]() -> pid_t {
                    pid_t child = ::fork();
                    if (child > 0) {
                        // Ours to reap, not reap_orphans' (which runs on this thread next).
                        std::lock_guard lock(mutex_);
                        helpers_.insert(child);
                    }
                    if (child != 0) return child;
                    join_cgroups(procs); // while still allowed to (before the uid change)
                    // Descriptors first to high numbers, so moving them to 3.. cannot clobber one.
                    for (std::size_t i = 0; i < fds.size(); ++i)
                        moved[i] = ::fcntl(fds[i], F_DUPFD, 100);
                    ::dup2(ifd, 0);
                    ::dup2(lfd, 1);
                    ::dup2(lfd, 2);
                    for (std::size_t i = 0; i < moved.size(); ++i)
                        ::dup2(moved[i], static_cast<int>(3 + i));
                    ::syscall(SYS_close_range, 3 + moved.size(), ~0U, 0);
                    child_becomes(drop, uid, gid);
                    ::execvpe(argv[0], argv.data(), envp);
                    ::_exit(127);
                }).get();
    if (pid < 0) throw std::runtime_error("fork failed");
    in_r.reset();
    logfd.reset();
    if (!stdin_text.empty()) [[maybe_unused]]
        auto n = ::write(in_w.get(), stdin_text.data(), stdin_text.size());
    in_w.reset();
    int status = -1;
    const bool exited = reap_helper(pid, timeout_ms, &status);
    if (!exited) throw std::runtime_error(args[0] + " did not finish within " + std::to_string(timeout_ms) + " ms");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        log_.warning("instance %s: %s exited with status %d:\n%s", id, args[0], status, tail_of(log_path, 600));
        throw std::runtime_error(args[0] + " failed");
    }
}

nlohmann::json Runtime::start(const nlohmann::json &spec) {
    const auto started = steady_ms();
    std::string id = spec.value("id", "");
    if (!valid_id(id)) throw std::runtime_error("invalid instance id");
    if (spec.value("adopt", false)) {
        std::lock_guard lock(mutex_);
        auto it = instances_.find(id);
        if (!unclaimed_.erase(id) || it == instances_.end() || it->second.pid <= 0)
            throw std::runtime_error("instance " + id + " did not survive the server restart");
        return {{"id", id},
                {"socket", it->second.socket},
                {"dir", it->second.dir},
                {"pid", it->second.pid},
                {"adopted", true}};
    }
    Instance inst;
    inst.id = id;
    inst.dir = opt_.data_dir + "/instances/" + id;
    inst.ro_binds = spec_binds(spec);
    inst.host_dir = host_dir(id);
    inst.socket = inst.host_dir + "/agent.sock";
    {
        std::lock_guard lock(mutex_);
        if (closing_) throw std::runtime_error("the server is stopping");
        if (instances_.count(id)) throw std::runtime_error("instance " + id + " already exists");
        instances_[id] = inst;
        starting_.insert(id);
    }
    struct StartDone {
        Runtime &rt;
        const std::string &id;
        ~StartDone() {
            {
                std::lock_guard lock(rt.mutex_);
                rt.starting_.erase(id);
            }
            rt.starts_done_.notify_all();
        }
    } start_done{*this, id};
    // `inst` holds everything this start made so far: a stop() meanwhile (a shutdown) only saw
    // what was recorded when it ran, so the clean-up here goes by `inst`, not by the table.
    auto fail = [&](const std::string &why) {
        {
            std::lock_guard lock(mutex_);
            instances_.erase(id);
        }
        kill_instance(inst, false);
        throw std::runtime_error(why);
    };
    // Records what the start made in the table; an instance stopped meanwhile is not recreated
    // there (its pasta and disk would outlive the server) but ends the start.
    auto record = [&](auto &&set) {
        bool present = false;
        {
            std::lock_guard lock(mutex_);
            if (auto it = instances_.find(id); it != instances_.end()) {
                set(it->second);
                present = true;
            }
        }
        if (!present) fail("instance " + id + " was stopped while it was starting");
    };

    std::error_code ec;
    fs::remove_all(inst.dir, ec);
    fs::create_directories(inst.dir);
    if (disk_quota_) {
        inst.disk = true; // from here, a failed start also removes the image
        record([](Instance &i) { i.disk = true; });
        try {
            attach_disk(inst);
        } catch (const std::exception &e) {
            fail(e.what());
        }
    }
    for (const char *sub : {"", "/home", "/logs", "/policy"}) {
        fs::create_directories(inst.dir + sub);
        if (::chown((inst.dir + sub).c_str(), uid_, gid_) != 0 && drop_privileges_) fail("cannot chown instance dir");
    }
    ::chmod(inst.dir.c_str(), 0700);
    try {
        copy_inputs(spec, inst.dir);
        take_build_spec(spec, inst);
    } catch (const std::exception &e) {
        fail(e.what());
    }
    write_file_atomic(inst.dir + "/spec.json", spec.dump(), 0644);
    // The instance's own name service files, written by us (root-owned) and bound read-only.
    fs::create_directories(inst.dir + "/etc");
    write_file_atomic(inst.dir + "/etc/hosts", "127.0.0.1 localhost\n::1 localhost\n127.0.1.1 hangar\n", 0644);
    write_file_atomic(inst.dir + "/etc/resolv.conf", std::string("nameserver ") + sandbox::kNsGateway + "\n", 0644);
    // A browser's own memory size (its create's `memory`); the node's limit otherwise. Kept where
    // a restart's unpark finds it again.
    const std::uint64_t memory_limit = spec.value("memory_limit_bytes", std::uint64_t{0});
    inst.cgroups = make_cgroups(id, memory_limit);
    record([&](Instance &i) { i.cgroups = inst.cgroups; });

    int ready[2], info[2], block[2], filter[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe failed");
    UniqueFd ready_r(ready[0]), ready_w(ready[1]);
    if (::pipe2(info, O_CLOEXEC) != 0) fail("pipe failed");
    UniqueFd info_r(info[0]), info_w(info[1]);
    if (::pipe2(block, O_CLOEXEC) != 0) fail("pipe failed");
    UniqueFd block_r(block[0]), block_w(block[1]);
    if (::pipe2(filter, O_CLOEXEC) != 0) fail("pipe failed");
    UniqueFd filter_r(filter[0]), filter_w(filter[1]);
    if (opt_.use_bwrap) {
        // bwrap reads the program to its end before the sandbox starts; it fits in a pipe.
        const auto &program = sandbox::seccomp_program();
        if (::write(filter_w.get(), program.data(), program.size()) != static_cast<ssize_t>(program.size()))
            fail("cannot hand the seccomp program to bwrap");
    }
    filter_w.reset();
    UniqueFd listener;
    try {
        listener = listen_agent_socket(inst);
        if (memory_limit > 0)
            write_file_atomic(inst.host_dir + "/memory_limit", std::to_string(memory_limit) + "\n", 0644);
    } catch (const std::exception &e) {
        fail(e.what());
    }
    UniqueFd logfd(::open((inst.dir + "/logs/agent.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    ::fchown(logfd.get(), uid_, gid_);

    // A network linked out beforehand spares this start pasta and the routes. Its pasta becomes
    // the instance's (pid file, cgroups) before the sandbox exists, so a crash from here on finds it.
    const bool own_network = opt_.use_bwrap && opt_.isolated_network && !inst.offline;
    std::optional<PreparedNetwork> network;
    if (own_network) network = take_prepared_network();
    if (network) {
        inst.pasta_pid = network->pasta;
        record([&](Instance &i) { i.pasta_pid = inst.pasta_pid; });
        write_pids(inst);
        for (const auto &cg : inst.cgroups)
            try {
                write_proc(cg + "/cgroup.procs", std::to_string(network->pasta));
            } catch (const std::exception &e) {
                log_.warning("instance %s: %s", id, std::string(e.what()));
            }
    }
    std::vector<std::string> args;
    if (opt_.use_bwrap) args = sandbox_argv(inst, network.has_value());
    args.push_back(opt_.exe);
    args.push_back("agent");
    args.push_back("--instance-dir=" + std::string(opt_.use_bwrap ? "/run/hangar" : inst.dir));
    args.push_back("--ready-fd=3");
    args.push_back("--listen-fd=7");
    // Otherwise the agent loads its plugins while the network is linked out, and starts none
    // (Chromium least of all: it must never see its network change) before it reads the byte we
    // write on 5.
    const bool network_after_spawn = own_network && !network;
    if (network_after_spawn) args.push_back("--network-fd=5");
    if (!opt_.config_file.empty()) args.push_back("--config=" + opt_.config_file);
    std::string dirs;
    for (const auto &d : opt_.plugin_dirs)
        dirs += (dirs.empty() ? "" : ":") + d;
    args.push_back("--plugin-dirs=" + dirs);
    // A spec may name the plugins its agent needs ("plugins": ["apps"]): an app's sandbox runs
    // no Chromium. Only enabled plugins can be named.
    std::set<std::string> wanted;
    if (auto it = spec.find("plugins"); it != spec.end() && it->is_array())
        for (const auto &p : *it)
            if (p.is_string()) wanted.insert(p.get<std::string>());
    std::string enabled;
    for (const auto &p : opt_.enabled_plugins)
        if (!spec.contains("plugins") || wanted.count(p)) enabled += (enabled.empty() ? "" : ",") + p;
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
    std::vector<std::string> procs;
    for (const auto &cg : inst.cgroups)
        procs.push_back(cg + "/cgroup.procs");
    std::string bwrap_path = "/usr/bin/bwrap";
    const char *exec_path = opt_.use_bwrap ? bwrap_path.c_str() : opt_.exe.c_str();
    // Inherited as 3 (readiness), 4 (bwrap's info), 5 (the agent waits on it), 6 (seccomp) and 7
    // (the agent's listening socket).
    const int child_fds[] = {ready_w.get(), info_w.get(), block_r.get(), filter_r.get(), listener.get()};
    constexpr int kChildFds = static_cast<int>(std::size(child_fds));
    const int lfd = logfd.get();
    const bool drop = drop_privileges_;
    const uid_t uid = uid_;
    const gid_t gid = gid_;
    const pid_t server = ::getpid();
    const bool die_with_server = !outlive_;
    const int netns = network ? network->net.get() : -1;

    pid_t pid = spawn([&]() -> pid_t {
                    pid_t child = ::fork();
                    if (child != 0) return child;
                    join_cgroups(procs);
                    // Still privileged: the namespace belongs to another user namespace.
                    if (netns >= 0 && ::setns(netns, CLONE_NEWNET) != 0) ::_exit(125);
                    int moved[kChildFds];
                    for (int i = 0; i < kChildFds; ++i)
                        moved[i] = ::fcntl(child_fds[i], F_DUPFD, 100);
                    int devnull = ::open("/dev/null", O_RDONLY);
                    ::dup2(devnull, 0);
                    ::dup2(lfd, 1);
                    ::dup2(lfd, 2);
                    for (int i = 0; i < kChildFds; ++i)
                        ::dup2(moved[i], 3 + i);
                    ::syscall(SYS_close_range, 3 + kChildFds, ~0U, 0);
                    child_becomes(drop, uid, gid);
                    // Without cgroups: dies with the server from here on (after the uid change,
                    // which clears it); bwrap's own --die-with-parent comes only once it runs, and
                    // a server killed in between would otherwise leave this sandbox behind with no
                    // pid file. With cgroups the sandbox may outlive the server: its cgroup, which
                    // it joined above, finds it even without a pid file.
                    if (die_with_server) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
                    if (::getppid() != server) ::_exit(1);
                    ::execve(exec_path, argv.data(), envp.data());
                    ::_exit(127);
                }).get();
    if (pid < 0) fail("fork failed");
    const auto spawned_at = steady_ms();
    inst.pid = pid;
    record([&](Instance &i) { i.pid = pid; });
    // At once, so a restart after a crash finds and stops even a sandbox still starting.
    write_pids(inst);
    ready_w.reset();
    info_w.reset();
    block_r.reset();
    filter_r.reset();
    listener.reset();
    logfd.reset();
    network.reset(); // the sandbox and pasta hold the namespaces now

    if (network_after_spawn) {
        // bwrap reports the sandbox's first process; its agent waits on `block` until the network
        // namespace is linked out and routed.
        try {
            auto child = read_info_pid(info_r.get(), steady_ms() + opt_.start_timeout_ms);
            inst.pasta_pid = connect_network(inst, child);
        } catch (const std::exception &e) {
            fail(std::string("sandbox network: ") + e.what());
        }
        record([&](Instance &i) { i.pasta_pid = inst.pasta_pid; });
        if (::write(block_w.get(), "1", 1) != 1) fail("the sandbox exited during start-up");
    }
    block_w.reset();
    write_pids(inst);
    const auto released_at = steady_ms();

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
    record([](Instance &) {}); // still wanted: a stop from here on finds it whole in the table
    // The phases of a cold start: disk, folders and cgroups until the sandbox is spawned; its
    // network (pasta, routes); the agent's plugins and Chromium until "ready".
    log_.debug("instance %s ready in %dms (spawned after %dms, network %dms, agent and Chromium %dms)", id,
               static_cast<int>(steady_ms() - started), static_cast<int>(spawned_at - started),
               static_cast<int>(released_at - spawned_at), static_cast<int>(steady_ms() - released_at));
    return {{"id", id}, {"socket", inst.socket}, {"dir", inst.dir}, {"host_dir", inst.host_dir}, {"pid", pid}};
}

void Runtime::kill_instance(Instance &inst, bool graceful) {
    if (inst.pid > 0) {
        bool gone = false;
        if (graceful) {
            // The agent answers once its plugins have ended what they own (recordings closed,
            // Chromium gone); what is left of it is cut short below. Code in the sandbox can hold
            // that answer back, so the answer and the exit share one budget: an agent that has not
            // answered, or not exited, within it is killed.
            constexpr int kStopBudgetMs = 10000;
            const auto asked = steady_ms();
            bool plugins_stopped = false;
            try {
                plugins_stopped =
                    unix_http_call(inst.socket, "POST", "/_agent/shutdown", "", kStopBudgetMs).status == 204;
            } catch (const std::exception &) {
            }
            if (!plugins_stopped)
                gone = wait_exit(inst.pid, std::max(0, kStopBudgetMs - static_cast<int>(steady_ms() - asked)));
        }
        if (!gone) {
            // An adopted sandbox is signalled through its pidfd: its pid is not ours to reuse.
            if (inst.pidfd)
                ::syscall(SYS_pidfd_send_signal, inst.pidfd->get(), SIGKILL, nullptr, 0);
            else
                ::kill(inst.pid, SIGKILL);
            wait_exit(inst.pid, 5000);
        }
        inst.pid = -1;
    }
    // Without --die-with-parent, the sandbox's processes outlive bwrap; its cgroups hold them all.
    if (!inst.id.empty()) kill_cgroup_processes(inst.id);
    // pasta ends with its namespace; killing it makes that certain.
    if (process_runs(inst.pasta_pid, "pasta")) ::kill(inst.pasta_pid, SIGKILL);
    inst.pasta_pid = -1;
    std::error_code ec;
    if (inst.disk) detach_disk(inst.id, inst.dir);
    if (!inst.dir.empty()) fs::remove_all(inst.dir, ec);
    if (ec) log_.warning("could not remove %s: %s", inst.dir, ec.message());
    if (!inst.host_dir.empty()) remove_host_dir(inst.id);
    if (!inst.id.empty()) {
        fs::remove(pids_file(inst.id), ec);
        remove_cgroups(inst.id);
    }
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

void Runtime::close_starts() {
    end_prepared();
    std::vector<Instance> unfinished;
    {
        std::lock_guard lock(mutex_);
        closing_ = true;
        for (const auto &id : starting_)
            if (auto it = instances_.find(id); it != instances_.end()) {
                unfinished.push_back(it->second);
                instances_.erase(it);
            }
    }
    // Nobody has had an answer for these: each start ends at its next record() and cleans up
    // what it made after this; killed at once, so a stop does not wait out a whole start.
    for (auto &inst : unfinished)
        kill_instance(inst, false);
    wait_for_starts();
}

void Runtime::stop_all() {
    close_starts();
    std::vector<std::string> ids = running();
    std::vector<std::thread> stoppers;
    stoppers.reserve(ids.size());
    for (const auto &id : ids)
        stoppers.emplace_back([this, id] { stop(id); });
    for (auto &t : stoppers)
        t.join();
    if (!outlive_) release_delegated_cgroups(cgroup_layout_);
}

void Runtime::wait_for_starts() {
    std::unique_lock lock(mutex_);
    if (!starts_done_.wait_for(lock, std::chrono::milliseconds(opt_.start_timeout_ms + 10000),
                               [&] { return starting_.empty(); }))
        log_.warning("%z instance starts did not end before the server stopped", starting_.size());
}

std::vector<std::string> Runtime::running() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (const auto &[id, _] : instances_)
        ids.push_back(id);
    return ids;
}

std::vector<std::pair<std::string, std::vector<std::string>>> Runtime::instance_cgroups() const {
    std::lock_guard lock(mutex_);
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    out.reserve(instances_.size());
    for (const auto &[id, inst] : instances_)
        out.emplace_back(id, inst.cgroups);
    return out;
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

std::optional<std::pair<std::string, int>> Runtime::memory_cgroup(const std::string &id) const {
    std::lock_guard lock(mutex_);
    auto it = instances_.find(id);
    if (it == instances_.end() || it->second.pid <= 0) return std::nullopt;
    for (const auto &[controller, root] : cgroup_layout_.roots) {
        if (controller != "all" && controller != "memory") continue;
        const std::string path = instance_cgroup(root, id);
        if (std::find(it->second.cgroups.begin(), it->second.cgroups.end(), path) != it->second.cgroups.end())
            return std::make_pair(path, controller == "all" ? 2 : 1);
    }
    return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> Runtime::spec_binds(const nlohmann::json &spec, bool writable) const {
    std::vector<std::pair<std::string, std::string>> binds;
    auto it = spec.find("binds");
    if (it == spec.end() || it->is_null()) return binds;
    if (!it->is_array()) throw std::runtime_error("spec binds must be an array of {source, target}");
    // Only folders of the blobs (what plugins own), never the database or secrets, and only below
    // /srv, which the sandbox root otherwise lacks.
    const std::string blobs =
        fs::path(opt_.blob_root.empty() ? opt_.data_dir + "/blobs" : opt_.blob_root).lexically_normal().string();
    for (const auto &b : *it) {
        if (b.value("writable", false) != writable) continue;
        std::string source = fs::path(b.value("source", "")).lexically_normal().string();
        std::string target = fs::path(b.value("target", "")).lexically_normal().string();
        if (!under(source, blobs) || source == blobs || source.find("/../") != std::string::npos ||
            !fs::is_directory(source))
            throw std::runtime_error("spec bind source must be a folder of the blobs");
        if (!target.starts_with("/srv/") || target.find("/..") != std::string::npos)
            throw std::runtime_error("spec bind target must be a path under /srv");
        binds.emplace_back(source, target);
    }
    return binds;
}

// A writable bind is the instance's to fill: the folder itself (not what it holds) passes to the
// instance's user, opened without following a link, so a link in its place is refused rather
// than what it names handed over.
void Runtime::take_build_spec(const nlohmann::json &spec, Instance &inst) const {
    inst.rw_binds = spec_binds(spec, true);
    for (const auto &[source, _] : inst.rw_binds) {
        UniqueFd dir(::open(source.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (dir.get() < 0 || (::fchown(dir.get(), uid_, gid_) != 0 && drop_privileges_))
            throw std::runtime_error("cannot hand a writable bind to the instance");
    }
    auto it = spec.find("network");
    if (it == spec.end() || it->is_null()) return;
    if (*it != "none") throw std::runtime_error("spec network must be \"none\" when given");
    // Without bubblewrap there is no namespace to leave the network out of.
    if (!opt_.use_bwrap)
        throw std::runtime_error("a sandbox without network needs bubblewrap ([sandbox] bwrap = true)");
    inst.offline = true;
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

void Runtime::clean_leftover(const std::string &id) {
    std::error_code ec;
    auto pids = read_pids(pids_file(id));
    if (process_runs(pids[0], "bwrap")) {
        ::kill(pids[0], SIGKILL);
        log_.information("killed leftover instance process %d", static_cast<int>(pids[0]));
    }
    if (process_runs(pids[1], "pasta")) ::kill(pids[1], SIGKILL);
    // A sandbox that was still starting when its server died can outlive both its first
    // process and bwrap's --die-with-parent; whatever of it runs is still in its cgroup.
    kill_cgroup_processes(id);
    detach_disk(id, opt_.data_dir + "/instances/" + id);
    fs::remove_all(opt_.data_dir + "/instances/" + id, ec);
    remove_host_dir(id);
    fs::remove(pids_file(id), ec);
    remove_cgroups(id);
    log_.information("removed leftover instance %s", id);
}

bool Runtime::in_own_cgroup(pid_t pid, const std::string &id) const {
    // A pid file names a process; its cgroup says it is still that instance's, not a reused pid.
    for (const auto &[_, root] : cgroup_layout_.roots) {
        try {
            for (const auto &tok : split(read_file(instance_cgroup_procs(root, id)), '\n'))
                if (std::atoi(tok.c_str()) == pid) return true;
        } catch (const std::exception &) {
            // no such cgroup
        }
    }
    return false;
}

bool Runtime::try_adopt(const std::string &id, Instance &inst) {
    if (!outlive_) return false;
    auto pids = read_pids(pids_file(id));
    // Its first process still runs bwrap in the instance's own cgroup, and its agent answers.
    if (!process_runs(pids[0], "bwrap") || !in_own_cgroup(pids[0], id)) return false;
    inst.id = id;
    inst.dir = opt_.data_dir + "/instances/" + id;
    inst.host_dir = host_dir(id);
    inst.socket = inst.host_dir + "/agent.sock";
    inst.pid = pids[0];
    if (!agent_answers(inst.socket)) return false;
    inst.pidfd = std::make_shared<UniqueFd>(static_cast<int>(::syscall(SYS_pidfd_open, inst.pid, 0)));
    if (inst.pidfd->get() < 0) return false;
    inst.pasta_pid = process_runs(pids[1], "pasta") ? pids[1] : -1;
    for (const auto &[_, root] : cgroup_layout_.roots)
        if (auto path = instance_cgroup(root, id); fs::is_directory(path)) inst.cgroups.push_back(path);
    std::error_code ec;
    inst.disk = fs::exists(disk_image(id), ec);
    return true;
}

void Runtime::adopt_or_clean_leftovers() {
    // A pid file being written when the last server died stays as its temporary (write_file_atomic
    // renames it into place): never valid, so removed with the rest of what that start left.
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(opt_.data_dir + "/instances", ec))
        if (entry.is_regular_file(ec) && entry.path().filename().string().find(".tmp-") != std::string::npos)
            fs::remove(entry.path(), ec);
    for (const auto &id : instance_ids_on_disk(opt_.data_dir + "/instances")) {
        unpark(id);
        Instance inst;
        if (!try_adopt(id, inst)) {
            clean_leftover(id);
            continue;
        }
        write_pids(inst); // this server owns it now (hangar doctor reads the third field)
        log_.information("adopted instance %s (sandbox pid %d)", id, static_cast<int>(inst.pid));
        std::lock_guard lock(mutex_);
        instances_[id] = inst;
        unclaimed_.insert(id);
    }
    remove_abandoned_cgroups();
}

void Runtime::remove_abandoned_cgroups() {
    // A server killed with -9 whose data dir is never served again (a test's, a machine's old
    // one) leaves its instances' cgroups behind, emptied by the kernel when their processes died.
    constexpr std::int64_t kOlderThanAnyStartS = 600;
    std::size_t removed = 0;
    auto ours = [this](const std::string &id) {
        std::lock_guard lock(mutex_);
        return instances_.count(id) > 0;
    };
    for (const auto &[_, root] : cgroup_layout_.roots)
        removed += remove_empty_cgroups(root, ours, static_cast<std::int64_t>(::time(nullptr)), kOlderThanAnyStartS);
    if (removed) log_.information("removed %z empty instance cgroup(s) a server that is gone left", removed);
}

std::size_t Runtime::stop_unclaimed() {
    std::vector<std::string> ids;
    {
        std::lock_guard lock(mutex_);
        ids.assign(unclaimed_.begin(), unclaimed_.end());
        unclaimed_.clear();
    }
    std::vector<std::thread> stoppers;
    stoppers.reserve(ids.size());
    for (const auto &id : ids) {
        log_.information("stopping adopted instance %s: no session or pool holds it", id);
        stoppers.emplace_back([this, id] { stop(id); });
    }
    for (auto &t : stoppers)
        t.join();
    return ids.size();
}

void Runtime::detach_all() {
    if (!outlive_) return stop_all();
    close_starts();
    std::lock_guard lock(mutex_);
    for (const auto &[id, inst] : instances_)
        log_.information("leaving instance %s running for the next start (sandbox pid %d)", id,
                         static_cast<int>(inst.pid));
    instances_.clear();
    unclaimed_.clear();
    if (cgroup_layout_.origin == "delegated, no subgroup") {
        log_.information("parking the instances (frozen, controllers given back) for systemd to start the next server");
        for (const auto &why : park_delegated_instances(cgroup_layout_.base, cgroup_layout_.roots.at(0).second))
            log_.warning("park: %s", why);
    }
}

std::vector<InstanceOnDisk> survey_instances(const std::string &data_dir) {
    const std::string root = data_dir + "/instances";
    std::string mounts;
    try {
        mounts = read_file("/proc/self/mountinfo");
    } catch (const std::exception &) {
        // no mount table: nothing is reported as mounted
    }
    const auto cgroup_roots = recorded_cgroup_roots(data_dir);
    std::vector<InstanceOnDisk> found;
    for (const auto &id : instance_ids_on_disk(root)) {
        InstanceOnDisk inst;
        inst.id = id;
        std::string folder = root;
        folder.append("/").append(id);
        inst.mounted = mounts.find(" " + folder + " ") != std::string::npos;
        try {
            auto pids = read_pids(folder + ".pids");
            if (process_runs(pids[0], "bwrap")) {
                inst.sandbox_pid = pids[0];
                // stat's fourth field, after the parenthesised name (which may hold spaces).
                auto stat = read_file("/proc/" + std::to_string(pids[0]) + "/stat");
                auto fields = split(trim(stat.substr(stat.rfind(')') + 2)), ' ');
                auto parent = fields.size() > 1 ? static_cast<pid_t>(std::stol(fields[1])) : -1;
                if (process_runs(parent, "hangar")) {
                    inst.server_pid = parent;
                } else if (pids[2] > 0 && process_runs(pids[2], "hangar")) {
                    // Started by an earlier server, adopted by the one the pid file names.
                    inst.server_pid = pids[2];
                    inst.adopted = true;
                } else {
                    // A frozen agent accepts a connection and never answers: ask its cgroup first.
                    for (const auto &cgroup_root : cgroup_roots)
                        inst.parked = inst.parked || cgroup_frozen(instance_cgroup(cgroup_root, id));
                    inst.answers = !inst.parked && agent_answers(folder + ".host/agent.sock");
                }
            }
        } catch (const std::exception &) {
            // the process went away while we looked
        }
        if (inst.sandbox_pid < 0) {
            std::set<std::string> stray;
            for (const auto &root : cgroup_roots)
                try {
                    for (const auto &tok : split(read_file(instance_cgroup_procs(root, id)), '\n'))
                        if (!trim(tok).empty()) stray.insert(trim(tok));
                } catch (const std::exception &) {
                    // no such cgroup
                }
            inst.stray_processes = stray.size();
        }
        found.push_back(inst);
    }
    return found;
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
    // The agent may be hostile: what it answers is held in memory only up to a bound. The largest
    // honest answer is a profile archive.
    constexpr std::size_t kMaxAnswer = std::size_t{512} << 20;
    std::string out;
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        out.append(buf, static_cast<std::size_t>(in.gcount()));
        if (out.size() > kMaxAnswer)
            throw std::runtime_error("the instance's answer is larger than " + std::to_string(kMaxAnswer >> 20) +
                                     " MiB");
    }
    return {static_cast<int>(res.getStatus()), out};
}

} // namespace hangar::host
