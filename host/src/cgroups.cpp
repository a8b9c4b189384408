#include "cgroups.hpp"

#include "event_loop.hpp"
#include "util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

namespace fs = std::filesystem;

namespace hangar::host {

namespace {

constexpr const char *kLimited[] = {"memory", "pids", "cpu"};
// v1 keeps CPU accounting in a hierarchy of its own unless it is mounted together with cpu:
// without it, an instance's CPU time is only the sum over its live processes' /proc stats,
// which a metrics scrape would read for every process of every instance.
constexpr const char *kV1Hierarchies[] = {"memory", "pids", "cpu", "cpuacct"};

// Writes `value` to a cgroup file in one write(2), as the kernel wants it; "" when it took,
// else why not.
std::string write_cgroup_file(const std::string &path, const std::string &value) {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return path + ": " + std::strerror(errno);
    if (::write(fd.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size()))
        return path + ": cannot write '" + value + "': " + std::strerror(errno);
    return "";
}

std::string make_dir(const std::string &path) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return path + ": " + ec.message();
    return "";
}

bool may_write(const std::string &path) {
    return ::access(path.c_str(), W_OK) == 0;
}

// A cgroup we may make and fill: "" when usable, else why not. One that exists already (made by
// an earlier run as root, say) is usable only if it is ours to write.
std::string usable_cgroup(const std::string &path) {
    if (auto why = make_dir(path); !why.empty()) return why;
    if (!may_write(path) || !may_write(path + "/cgroup.procs")) return path + ": not ours to write";
    return "";
}

// The path of this process in the hierarchy whose /proc/self/cgroup line names `controller`
// ("" for the v2 line); nullopt when there is no such line.
std::optional<std::string> own_path(const std::string &self_cgroup, const std::string &controller) {
    for (const auto &line : split(self_cgroup, '\n')) {
        if (controller.empty()) {
            if (line.rfind("0::", 0) == 0) return line.substr(3);
            continue;
        }
        auto first = line.find(':');
        auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
        if (second == std::string::npos) continue;
        auto controllers = split(line.substr(first + 1, second - first - 1), ',');
        if (std::find(controllers.begin(), controllers.end(), controller) != controllers.end())
            return line.substr(second + 1);
    }
    return std::nullopt;
}

// "+memory +pids +cpu", limited to what `dir` has to hand down.
std::string enable_line(const std::string &dir) {
    std::string available;
    try {
        available = " " + trim(read_file(dir + "/cgroup.controllers")) + " ";
    } catch (const std::exception &) {
        return "";
    }
    std::string line;
    for (const char *c : kLimited)
        if (available.find(std::string(" ") + c + " ") != std::string::npos)
            line += (line.empty() ? "+" : " +") + std::string(c);
    return line;
}

void choose_v2(CgroupLayout &layout, const std::string &fs_root, const std::string &self_cgroup, pid_t self) {
    // A tree of our own at the top, where we may make one.
    std::string top = fs_root + "/hangar";
    std::string own_tree = usable_cgroup(top);
    if (own_tree.empty()) {
        write_cgroup_file(fs_root + "/cgroup.subtree_control", "+memory +pids +cpu");
        write_cgroup_file(top + "/cgroup.subtree_control", "+memory +pids +cpu");
        layout.roots.emplace_back("all", top);
        layout.origin = "own tree";
        layout.survives_restart = true;
        return;
    }
    // Said only when the delegated subtree fails too: under the packaged unit it is the rule.
    auto give_up = [&](const std::string &why) {
        layout.warnings.push_back("no cgroup tree of our own (" + own_tree + "), and " + why);
    };
    // Else the subtree the service manager delegated to us (systemd Delegate=yes).
    auto path = own_path(self_cgroup, "");
    if (!path || *path == "/" || path->empty()) {
        give_up("no delegated one: this process is in the root cgroup");
        return;
    }
    std::string dir = fs_root + *path;
    auto delegated = [](const std::string &d) {
        return may_write(d + "/cgroup.subtree_control") && may_write(d + "/cgroup.procs");
    };
    if (!delegated(dir)) {
        give_up("no delegated one: " + dir + " is not ours to write (systemd: Delegate=yes, as the packaged unit has)");
        return;
    }
    std::string base;
    std::string parent = fs::path(dir).parent_path().string();
    if (fs::path(dir).filename() == "server" && delegated(parent)) {
        // systemd 254+ with DelegateSubgroup=server: it starts every server in <unit>/server,
        // so instances left in <unit>/instances never stand in the way of the next start.
        base = parent;
        layout.origin = "delegated";
        layout.survives_restart = true;
    } else {
        // The server is in the unit's cgroup itself, which may hand controllers down only once it
        // holds no process: move into a leaf first. Instances outlive the server only parked
        // (park_delegated_instances): systemd before 254 starts the next server in this cgroup,
        // which it may join only while it hands no controller down.
        base = dir;
        if (auto why = make_dir(base + "/server"); !why.empty()) {
            give_up("cannot make the server's own cgroup: " + why);
            return;
        }
        if (auto why = write_cgroup_file(base + "/server/cgroup.procs", std::to_string(self)); !why.empty()) {
            give_up("cannot move the server into its own cgroup: " + why);
            return;
        }
        layout.origin = "delegated, no subgroup";
        layout.survives_restart = true;
    }
    std::string enable = enable_line(base);
    if (enable.empty()) {
        give_up("the delegated cgroup " + base + " has no memory, pids or cpu controller to use");
        return;
    }
    layout.base = base;
    std::string instances = base + "/instances";
    for (const auto &why : {write_cgroup_file(base + "/cgroup.subtree_control", enable), make_dir(instances),
                            write_cgroup_file(instances + "/cgroup.subtree_control", enable)})
        if (!why.empty()) {
            give_up("cannot use the delegated cgroup: " + why);
            return;
        }
    layout.roots.emplace_back("all", instances);
}

void choose_v1(CgroupLayout &layout, const std::string &fs_root, const std::string &self_cgroup) {
    bool delegated_any = false;
    for (const char *controller : kV1Hierarchies) {
        std::string mount = fs_root + "/" + controller;
        if (!fs::is_directory(mount)) continue;
        std::error_code ec;
        if (std::string_view(controller) == "cpuacct" && fs::equivalent(mount, fs_root + "/cpu", ec)) continue;
        auto why = usable_cgroup(mount + "/hangar");
        if (why.empty()) {
            layout.roots.emplace_back(controller, mount + "/hangar");
            continue;
        }
        // v1 has no rule against processes beside child cgroups: below our own cgroup will do.
        auto path = own_path(self_cgroup, controller);
        std::string dir = path && *path != "/" ? mount + *path : "";
        if (!dir.empty() && may_write(dir) && may_write(dir + "/cgroup.procs") &&
            make_dir(dir + "/hangar-instances").empty()) {
            layout.roots.emplace_back(controller, dir + "/hangar-instances");
            delegated_any = true;
        } else {
            layout.warnings.push_back("no " + std::string(controller) + " cgroup for instances: " + why);
        }
    }
    layout.origin = delegated_any ? "delegated" : "own tree";
    layout.survives_restart = true;
}

// Every controller `dir` hands down, as the line that takes them all back ("" for none).
std::string take_back_line(const std::string &dir) {
    std::string off;
    for (const auto &controller : split(trim(read_file(dir + "/cgroup.subtree_control")), ' '))
        if (!controller.empty()) off += (off.empty() ? "-" : " -") + controller;
    return off;
}

} // namespace

CgroupLayout choose_cgroup_layout(const std::string &fs_root, const std::string &self_cgroup, pid_t self) {
    CgroupLayout layout;
    std::string v2 = fs_root + "/cgroup.controllers";
    std::string controllers;
    try {
        controllers = read_file(v2);
    } catch (const std::exception &) {
        // not cgroup v2 at the mount
    }
    if (controllers.find("memory") != std::string::npos) {
        choose_v2(layout, fs_root, self_cgroup, self);
        layout.mode = "v2";
    } else {
        choose_v1(layout, fs_root, self_cgroup);
        layout.mode = "v1";
    }
    if (layout.roots.empty()) {
        layout.mode = "none";
        layout.origin.clear();
        layout.survives_restart = false;
    }
    return layout;
}

void release_delegated_cgroups(const CgroupLayout &layout) {
    if (layout.origin != "delegated, no subgroup" || layout.base.empty()) return;
    for (const auto &[_, root] : layout.roots) {
        std::error_code ec;
        for (const auto &entry : fs::directory_iterator(root, ec))
            if (entry.is_directory(ec)) ::rmdir(entry.path().c_str());
        ::rmdir(root.c_str());
    }
    try {
        if (auto off = take_back_line(layout.base); !off.empty())
            write_cgroup_file(layout.base + "/cgroup.subtree_control", off);
    } catch (const std::exception &) {
        // no such cgroup any more: nothing to give back
    }
}

std::vector<std::string> park_delegated_instances(const std::string &base, const std::string &instances) {
    std::vector<std::string> failed;
    auto note = [&](const std::string &why) {
        if (!why.empty()) failed.push_back(why);
    };
    std::vector<std::string> parked;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(instances, ec))
        if (entry.is_directory(ec)) {
            parked.push_back(entry.path().string());
            note(write_cgroup_file(parked.back() + "/cgroup.freeze", "1"));
        }
    // Freezing completes asynchronously; a task in the middle of a system call stops at its end.
    for (auto until = steady_ms() + 2000; steady_ms() < until;) {
        if (std::all_of(parked.begin(), parked.end(), cgroup_frozen)) break;
        ::usleep(10 * 1000);
    }
    for (const auto &dir : parked)
        if (!cgroup_frozen(dir)) failed.push_back(dir + ": not frozen after 2 s");
    // Deepest first: v2 refuses to take a controller back from a cgroup whose child hands it on.
    for (const auto &dir : {instances, base})
        try {
            if (!fs::exists(dir + "/cgroup.subtree_control", ec)) continue; // removed by a stop that ended them
            if (auto off = take_back_line(dir); !off.empty())
                note(write_cgroup_file(dir + "/cgroup.subtree_control", off));
        } catch (const std::exception &e) {
            failed.emplace_back(e.what());
        }
    return failed;
}

bool cgroup_frozen(const std::string &dir) {
    try {
        return read_file(dir + "/cgroup.events").find("frozen 1") != std::string::npos;
    } catch (const std::exception &) {
        return false;
    }
}

std::string thaw_cgroup(const std::string &dir) {
    if (!cgroup_frozen(dir)) return "";
    return write_cgroup_file(dir + "/cgroup.freeze", "0");
}

std::size_t remove_empty_cgroups(const std::string &root, const std::function<bool(const std::string &)> &keep,
                                 std::int64_t now, std::int64_t older_than_s) {
    std::size_t removed = 0;
    std::error_code ec;
    for (const auto &entry : fs::directory_iterator(root, ec)) {
        struct stat st {};
        if (!entry.is_directory(ec) || ::stat(entry.path().c_str(), &st) != 0) continue;
        if (now - static_cast<std::int64_t>(st.st_ctime) <= older_than_s || keep(entry.path().filename().string()))
            continue;
        if (::rmdir(entry.path().c_str()) == 0) ++removed; // refused while a process is in it
    }
    return removed;
}

std::string recorded_cgroup_value(const std::string &data_dir, const std::string &key) {
    try {
        for (const auto &line : split(read_file(data_dir + "/cgroup-roots"), '\n'))
            if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
    } catch (const std::exception &) {
        // never recorded
    }
    return "";
}

void record_cgroup_roots(const std::string &data_dir, const CgroupLayout &layout) {
    std::string text = "# where hangar serve put the instances' cgroups at its last start\n";
    text.append("mode ").append(layout.mode).append("\norigin ").append(layout.origin).append("\n");
    if (!layout.base.empty()) text.append("base ").append(layout.base).append("\n");
    text.append("survives_restart ").append(layout.survives_restart ? "yes" : "no").append("\n");
    for (const auto &[controller, root] : layout.roots)
        text.append("root ").append(controller).append(" ").append(root).append("\n");
    try {
        write_file_atomic(data_dir + "/cgroup-roots", text, 0644);
    } catch (const std::exception &) {
        // doctor then looks in the default places only
    }
}

std::vector<std::string> recorded_cgroup_roots(const std::string &data_dir) {
    std::vector<std::string> roots;
    try {
        for (const auto &line : split(read_file(data_dir + "/cgroup-roots"), '\n')) {
            auto parts = split(line, ' ');
            if (parts.size() >= 3 && parts[0] == "root") roots.push_back(line.substr(6 + parts[1].size()));
        }
    } catch (const std::exception &) {
        // never recorded
    }
    for (const char *fallback : {"/sys/fs/cgroup/hangar", "/sys/fs/cgroup/memory/hangar", "/sys/fs/cgroup/pids/hangar",
                                 "/sys/fs/cgroup/cpu/hangar", "/sys/fs/cgroup/cpuacct/hangar"})
        if (std::find(roots.begin(), roots.end(), fallback) == roots.end()) roots.emplace_back(fallback);
    return roots;
}

} // namespace hangar::host
