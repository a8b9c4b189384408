// `hangar doctor`: checks an installation and says what to fix. Every check prints one line
// (ok / warn / FAIL); the exit status is 1 when anything failed.
#include "doctor.hpp"

#include "config.hpp"
#include "core.hpp"
#include "plugins.hpp"
#include "runtime.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/SocketAddress.h>

#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>

namespace fs = std::filesystem;

namespace hangar::host {

namespace {

class Report {
public:
    void ok(const std::string &what) { std::cout << "  ok    " << what << "\n"; }
    void warn(const std::string &what, const std::string &fix) {
        std::cout << "  warn  " << what << "\n        fix: " << fix << "\n";
    }
    void fail(const std::string &what, const std::string &fix) {
        std::cout << "  FAIL  " << what << "\n        fix: " << fix << "\n";
        ++failures_;
    }
    int failures() const { return failures_; }

private:
    int failures_ = 0;
};

// Runs a command (no shell), returns its exit status and up to 64 KiB of its output.
std::pair<int, std::string> run(const std::vector<std::string> &argv) {
    std::string cmd;
    for (const auto &a : argv) {
        cmd += " '";
        for (char c : a)
            cmd += c == '\'' ? std::string("'\\''") : std::string(1, c);
        cmd += "'";
    }
    cmd += " 2>&1";
    std::unique_ptr<FILE, int (*)(FILE *)> p(::popen(cmd.c_str(), "r"), ::pclose);
    if (!p) return {-1, "cannot run " + argv.front()};
    std::string out;
    std::array<char, 4096> buf{};
    while (out.size() < 65536) {
        auto n = std::fread(buf.data(), 1, buf.size(), p.get());
        if (n == 0) break;
        out.append(buf.data(), n);
    }
    int status = ::pclose(p.release());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool executable(const std::string &path) {
    return ::access(path.c_str(), X_OK) == 0;
}

// Whether a Hangar server answers GET /healthz at host:port (the address is taken by us, then).
bool hangar_answers(const std::string &host, std::uint16_t port) {
    try {
        Poco::Net::HTTPClientSession session(host == "0.0.0.0" ? "127.0.0.1" : host, port);
        session.setTimeout(Poco::Timespan(2, 0));
        Poco::Net::HTTPRequest req(Poco::Net::HTTPRequest::HTTP_GET, "/healthz", Poco::Net::HTTPMessage::HTTP_1_1);
        session.sendRequest(req);
        Poco::Net::HTTPResponse res;
        std::string body;
        std::getline(session.receiveResponse(res), body);
        return res.getStatus() == Poco::Net::HTTPResponse::HTTP_OK && body.find("\"ok\"") != std::string::npos;
    } catch (const std::exception &) {
        return false;
    }
}

// A listen address the server will bind: free, or already ours, or taken by something else.
void check_port(Report &r, const std::string &listen, const std::string &what) {
    Poco::Net::SocketAddress addr;
    try {
        addr = Poco::Net::SocketAddress(listen);
    } catch (const std::exception &e) {
        r.fail(what + " address '" + listen + "' is not host:port (" + e.what() + ")", "set it like 127.0.0.1:8080");
        return;
    }
    if (addr.port() == 0) {
        r.ok(what + " on " + listen + ": the server picks a free port and prints it");
        return;
    }
    try {
        Poco::Net::ServerSocket probe;
        probe.bind(addr, true, false);
        r.ok(what + " address " + listen + " is free");
    } catch (const Poco::Net::NetException &e) {
        if (hangar_answers(addr.host().toString(), addr.port()))
            r.ok("a Hangar server already answers on " + listen + " (" + what + ")");
        else
            r.fail(what + " address " + listen + " cannot be bound: " + e.displayText(),
                   "stop what listens there (ss -ltnp) or choose another address");
    }
}

// What limits instances get. The server's own record of its last start says it best (it may
// be using a cgroup delegated to the service, which this process, outside it, cannot judge).
void check_cgroups(Report &r, const std::string &data_dir) {
    std::string recorded;
    try {
        recorded = read_file(data_dir + "/cgroup-roots");
    } catch (const std::exception &) {
        // the server has not started with this data dir yet
    }
    std::map<std::string, std::string> said;
    for (const auto &line : split(recorded, '\n'))
        if (auto space = line.find(' '); space != std::string::npos && line[0] != '#')
            said.emplace(line.substr(0, space), line.substr(space + 1));
    if (said.count("mode") && said["mode"] != "none") {
        r.ok("at its last start the server put each instance in a cgroup (" + said["mode"] + ", " + said["origin"] +
             ", under " + said["root"] + "): memory, task and CPU limits apply");
        if (said["survives_restart"] != "yes")
            r.warn("instances end with the server, so a restart ends every session",
                   "run it with bubblewrap, which keeps each instance's processes together");
        else if (said["origin"] == "delegated, no subgroup")
            r.ok("a stop that keeps sessions parks them (frozen, controllers given back to the unit) for the next "
                 "start: systemd before 254 starts no server in a cgroup that hands controllers down");
        return;
    }
    auto writable = [](const std::string &root) {
        return ::access((root + "/hangar").c_str(), W_OK) == 0 || ::access(root.c_str(), W_OK) == 0;
    };
    std::string v2 = "/sys/fs/cgroup/cgroup.controllers";
    std::ifstream controllers(v2);
    std::string line;
    std::getline(controllers, line);
    if (line.find("memory") != std::string::npos) {
        if (writable("/sys/fs/cgroup"))
            r.ok("cgroup v2 (" + line + "): memory, task and CPU limits apply to each instance");
        else
            r.warn("cgroup v2, but /sys/fs/cgroup is not writable: instances run without memory and CPU limits",
                   "run the server as root, or delegate a cgroup subtree to the hangar user (systemd Delegate=yes)");
        return;
    }
    std::vector<std::string> usable, missing;
    for (const char *controller : {"memory", "pids", "cpu"}) {
        std::string root = std::string("/sys/fs/cgroup/") + controller;
        (fs::is_directory(root) && writable(root) ? usable : missing).emplace_back(controller);
    }
    if (missing.empty())
        r.ok("cgroup v1: memory, pids and cpu limits apply to each instance");
    else
        r.warn(
            "cgroup v1 without a writable " +
                [&] {
                    std::string names;
                    for (const auto &m : missing)
                        names += (names.empty() ? "" : ", ") + m;
                    return names;
                }() +
                " hierarchy: instances run without those limits",
            "run the server as root, or mount the missing cgroup controllers");
    if (!fs::exists("/sys/fs/cgroup/cpu/cpuacct.usage"))
        r.ok("no cpuacct in the cpu hierarchy: /metrics sums each instance's CPU time from /proc instead");
}

} // namespace

int doctor(Config &cfg, const std::string &exe, const std::vector<std::string> &plugin_dirs,
           const std::string &chromium_path) {
    Report r;
    std::cout << "hangar doctor: " << exe << "\n";

    std::cout << "configuration\n";
    if (cfg.main_file().empty())
        r.warn("no hangar.ini found (built-in defaults apply, no plugin is enabled)",
               "install /etc/hangar/hangar.ini (the package does) or pass --config=FILE");
    else
        r.ok("config " + cfg.main_file());
    auto enabled = cfg.enabled_plugins();
    if (enabled.empty())
        r.fail("no plugin is enabled", "set enabled = true in /etc/hangar/plugins.d/<name>.ini (browsers at least)");

    std::cout << "plugins\n";
    HostCore core(HANGAR_ROLE_SERVER, cfg);
    PluginManager plugins(core);
    std::set<std::string> found;
    for (const auto &dir : plugin_dirs) {
        std::error_code ec;
        if (!fs::is_directory(dir, ec)) {
            if (dir == plugin_dirs.back())
                r.fail("plugin folder " + dir + " does not exist", "reinstall the package, or set plugins.dir");
            continue;
        }
        for (const auto &entry : fs::directory_iterator(dir, ec)) {
            if (entry.path().extension() != ".so") continue;
            auto info = plugins.inspect(entry.path().string());
            if (!found.insert(info.name).second) continue; // the first folder wins, as in serve
            bool on = std::find(enabled.begin(), enabled.end(), info.name) != enabled.end();
            if (!info.problem.empty())
                (on ? r.fail(info.name + ": " + info.problem,
                             "rebuild it against this Hangar's SDK (ABI v" + std::to_string(HANGAR_ABI_VERSION) + ")")
                    : r.warn(info.name + " (disabled): " + info.problem, "rebuild it or remove " + info.file));
            else
                r.ok(info.name + " " + info.version + " (ABI v" + std::to_string(HANGAR_ABI_VERSION) + ", " +
                     (on ? "enabled" : "disabled") + ")");
        }
    }
    for (const auto &name : enabled)
        if (!found.count(name))
            r.fail(std::string(name).append(" is enabled but no ").append(name).append(".so was found"),
                   "install it, or set enabled = false");

    std::cout << "programs\n";
    for (const auto &[path, package] :
         std::vector<std::pair<std::string, std::string>>{{chromium_path, "chromium"},
                                                          {"/usr/bin/Xvfb", "xvfb"},
                                                          {"/usr/bin/bwrap", "bubblewrap"},
                                                          {"/usr/bin/pasta", "passt"},
                                                          {"/usr/bin/nsenter", "util-linux"},
                                                          {"/usr/sbin/ip", "iproute2"},
                                                          {"/usr/bin/ffmpeg", "ffmpeg"},
                                                          {"/usr/bin/x11vnc", "x11vnc"}}) {
        if (executable(path))
            r.ok(path);
        else
            r.fail(path + " is missing", "apt-get install " + package);
    }
    // The live-view page loads noVNC from here (liveview.novnc_dir).
    std::string novnc = cfg.get("liveview.novnc_dir", "/usr/share/novnc");
    if (fs::exists(novnc + "/core/rfb.js"))
        r.ok(novnc + " (noVNC)");
    else
        r.fail(novnc + "/core/rfb.js is missing: live view pages cannot load", "apt-get install novnc");

    std::cout << "ports\n";
    check_port(r, cfg.get("server.listen", "127.0.0.1:8080"), "API");
    if (auto metrics = cfg.get("metrics.listen", ""); !metrics.empty()) check_port(r, metrics, "metrics");

    std::string data = fs::absolute(cfg.get("server.data_dir", ".data")).lexically_normal().string();
    std::cout << "cgroups\n";
    check_cgroups(r, data);

    std::cout << "data\n";
    std::error_code ec;
    fs::create_directories(data, ec);
    std::string probe = data + "/.doctor-probe";
    if (FILE *f = std::fopen(probe.c_str(), "w")) {
        std::fclose(f);
        std::remove(probe.c_str());
        r.ok("data dir " + data + " is writable");
    } else {
        r.fail("data dir " + data + " is not writable by uid " + std::to_string(::geteuid()),
               "chown hangar:hangar " + data + " (the package's service runs as hangar)");
    }
    struct statvfs fsinfo {};
    if (::statvfs(data.c_str(), &fsinfo) == 0) {
        double free_gb = static_cast<double>(fsinfo.f_bavail) * static_cast<double>(fsinfo.f_frsize) / (1 << 30);
        char line[128];
        std::snprintf(line, sizeof line, "%.1f GB free under %s", free_gb, data.c_str());
        if (free_gb < 2)
            r.warn(line, "free space: profiles, replays and browser state live there (2 GB or more)");
        else
            r.ok(line);
    }

    std::cout << "sandbox\n";
    // pasta, running as the sandbox user, opens the tap device of each instance's namespace.
    if (cfg.get("sandbox.network", "isolated") != "host") {
        struct stat tun {};
        if (::stat("/dev/net/tun", &tun) != 0)
            r.fail("/dev/net/tun is missing: instances get no network",
                   "load the tun module (modprobe tun) or set [sandbox] network = host");
        else if ((tun.st_mode & 0006) != 0006) {
            char mode[8];
            std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(tun.st_mode & 07777));
            r.fail(std::string("/dev/net/tun (mode ") + mode +
                       ") is not usable by the sandbox user: instances get no network",
                   "chmod 0666 /dev/net/tun (Debian's udev default)");
        } else
            r.ok("/dev/net/tun is usable: each instance gets its own network namespace");
    }
    // The same isolation instances get (bubblewrap, new pid namespace, user namespace when not
    // root), with Chromium rendering one page headless inside it.
    std::vector<std::string> argv = {
        "/usr/bin/bwrap", "--die-with-parent", "--unshare-pid", "--ro-bind", "/",   "/", "--dev", "/dev", "--proc",
        "/proc",          "--tmpfs",           "/tmp",          "--tmpfs",   "/run"};
    if (::geteuid() != 0) argv.emplace_back("--unshare-user");
    for (const char *a : {"--setenv", "HOME", "/tmp", "--"})
        argv.emplace_back(a);
    argv.insert(argv.end(),
                {chromium_path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=/tmp/doctor",
                 "--dump-dom", "data:text/html,<p id=hangar>sandbox-ok</p>"});
    auto [status, out] = run(argv);
    if (status == 0 && out.find("sandbox-ok") != std::string::npos)
        r.ok("Chromium renders a page inside the bubblewrap sandbox");
    else
        r.fail("Chromium did not start in the sandbox (exit " + std::to_string(status) +
                   "): " + out.substr(0, out.find('\n')),
               "check that unprivileged user namespaces are allowed (sysctl kernel.unprivileged_userns_clone=1) "
               "and that chromium and bubblewrap are installed");

    if (cfg.get_int("sandbox.disk_quota_mb", 4096) > 0) {
        if (::geteuid() == 0 && ::access("/dev/loop-control", R_OK | W_OK) == 0)
            r.ok("instance folders are capped at " + cfg.get("sandbox.disk_quota_mb", "4096") + " MiB each");
        else
            r.warn("instance folders cannot be capped here: a tenant can fill the data dir's disk",
                   "run the server as root (instances still run as the sandbox user) with loop devices "
                   "(/dev/loop-control), or keep the data dir on a file system of its own");
    }

    std::cout << "instances\n";
    auto left = survey_instances(data);
    std::size_t owned = 0;
    for (const auto &inst : left) {
        const std::string sandbox = "sandbox pid " + std::to_string(inst.sandbox_pid);
        if (inst.server_pid > 0 && inst.adopted) {
            r.ok("instance " + inst.id + " adopted by server " + std::to_string(inst.server_pid) + " (" + sandbox +
                 ")");
        } else if (inst.server_pid > 0) {
            ++owned;
        } else if (inst.sandbox_pid > 0 && inst.parked) {
            r.warn("instance " + inst.id + " is parked for the next start to thaw and adopt (" + sandbox +
                       ", frozen, no server runs)",
                   "start hangar to adopt it, or kill " + std::to_string(inst.sandbox_pid) + " to end it");
        } else if (inst.sandbox_pid > 0 && inst.answers) {
            // A planned stop (SIGTERM) leaves sessions running for the next start.
            r.warn("instance " + inst.id + " waits for the next start to adopt it (" + sandbox + ", no server runs)",
                   "start hangar to adopt it, or kill " + std::to_string(inst.sandbox_pid) + " to end it");
        } else if (inst.sandbox_pid > 0) {
            r.fail("instance " + inst.id + " runs without a server (" + sandbox + ")",
                   "start hangar (it stops what a previous run left) or kill " + std::to_string(inst.sandbox_pid));
        } else if (inst.stray_processes > 0) {
            r.fail("instance " + inst.id + " runs without a server (" + std::to_string(inst.stray_processes) +
                       " process(es) left in its cgroup, no sandbox)",
                   "start hangar (it kills what a previous run left)");
        } else {
            r.warn("instance " + inst.id + " left its folder" + (inst.mounted ? " (still mounted)" : ""),
                   "the next start of hangar removes it");
        }
    }
    if (owned) r.ok(std::to_string(owned) + " instance(s) run under a live server");
    if (left.empty()) r.ok("no instance left behind");

    std::cout << (r.failures() ? std::to_string(r.failures()) + " problem(s) to fix\n" : "all checks passed\n");
    return r.failures() ? 1 : 0;
}

} // namespace hangar::host
