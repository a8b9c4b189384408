#include "sandbox.hpp"

#include "event_loop.hpp"
#include "util.hpp"

#include <seccomp.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <stdexcept>

namespace fs = std::filesystem;

namespace hangar::host::sandbox {

std::string port_spec(const std::string &list) {
    std::string spec;
    for (auto &raw : split(list, ',')) {
        auto entry = trim(raw);
        if (entry.empty()) continue;
        auto dash = entry.find('-');
        auto port = [&](const std::string &text) {
            if (text.empty() || text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos)
                throw std::invalid_argument("allow_host_ports: \"" + entry + "\" is not a port or a range");
            int value = std::stoi(text);
            if (value < 1 || value > 65535)
                throw std::invalid_argument("allow_host_ports: \"" + entry + "\" is outside 1-65535");
            return value;
        };
        int first = port(dash == std::string::npos ? entry : entry.substr(0, dash));
        int last = dash == std::string::npos ? first : port(entry.substr(dash + 1));
        if (last < first) throw std::invalid_argument("allow_host_ports: \"" + entry + "\" is a reversed range");
        spec += (spec.empty() ? "" : ",") + std::to_string(first) + (last == first ? "" : "-" + std::to_string(last));
    }
    return spec.empty() ? "none" : spec;
}

std::vector<std::string> root_args(const std::vector<std::string> &extra_ro) {
    std::vector<std::string> a = {"--ro-bind", "/usr", "/usr"};
    // Merged /usr (Debian 12) makes these symlinks; an older layout has real folders.
    for (const char *top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
        std::error_code ec;
        if (fs::is_symlink(top, ec)) {
            a.insert(a.end(), {"--symlink", fs::read_symlink(top, ec).string(), top});
        } else if (fs::is_directory(top, ec)) {
            a.insert(a.end(), {"--ro-bind", top, top});
        }
    }
    // Only what the programs of an instance read from /etc: the loader, name service files (no
    // password hashes: shadow stays out), certificates, fonts, time zone, Chromium's own
    // settings, the alternatives /usr/bin links point through, and toolkit defaults.
    for (const char *item : {"/etc/ld.so.cache",
                             "/etc/ld.so.conf",
                             "/etc/ld.so.conf.d",
                             "/etc/nsswitch.conf",
                             "/etc/passwd",
                             "/etc/group",
                             "/etc/host.conf",
                             "/etc/gai.conf",
                             "/etc/protocols",
                             "/etc/services",
                             "/etc/ssl",
                             "/etc/ca-certificates",
                             "/etc/ca-certificates.conf",
                             "/etc/fonts",
                             "/etc/localtime",
                             "/etc/timezone",
                             "/etc/alternatives",
                             "/etc/chromium",
                             "/etc/chromium.d",
                             "/etc/mime.types",
                             "/etc/xdg",
                             "/etc/gtk-3.0",
                             "/etc/X11",
                             "/etc/os-release",
                             "/etc/debian_version",
                             "/etc/machine-id",
                             "/etc/pulse",
                             "/etc/python3",
                             "/etc/python3.11",
                             "/etc/mailcap",
                             "/etc/magic",
                             "/etc/inputrc",
                             "/etc/terminfo",
                             "/etc/vulkan",
                             "/etc/glvnd"})
        a.insert(a.end(), {"--ro-bind-try", item, item});
    a.insert(a.end(), {"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run",
                       "--tmpfs", "/home"});
    // After the private folders: one of these may lie under /tmp or /home (a test's config).
    for (const auto &dir : extra_ro)
        if (!dir.empty()) a.insert(a.end(), {"--ro-bind-try", dir, dir});
    return a;
}

namespace {

struct SeccompCtx {
    scmp_filter_ctx ctx;
    explicit SeccompCtx(std::uint32_t def) : ctx(seccomp_init(def)) {
        if (!ctx) throw std::runtime_error("seccomp_init failed");
    }
    ~SeccompCtx() { seccomp_release(ctx); }
    SeccompCtx(const SeccompCtx &) = delete;
    SeccompCtx &operator=(const SeccompCtx &) = delete;

    void deny(int syscall, int err = EPERM) {
        if (syscall < 0) return; // not on this architecture
        check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(static_cast<std::uint16_t>(err)), syscall, 0));
    }
    void deny_if_flag(int syscall, unsigned arg, std::uint64_t flag) {
        scmp_arg_cmp cmp{arg, SCMP_CMP_MASKED_EQ, flag, flag};
        check(seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), syscall, 1, &cmp));
    }
    // An argument the kernel reads as a 32-bit int (an ioctl request) equal to `value`.
    void deny_if_int(int syscall, unsigned arg, std::uint32_t value) {
        scmp_arg_cmp cmp{arg, SCMP_CMP_MASKED_EQ, 0xffffffffu, value};
        check(seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EPERM), syscall, 1, &cmp));
    }
    static void check(int rc) {
        if (rc < 0) throw std::runtime_error("seccomp rule: " + std::string(strerror(-rc)));
    }
};

std::string build_seccomp_program() {
    SeccompCtx f(SCMP_ACT_ALLOW);
    // Processes of another ABI (i386, x32) are killed: their syscall numbers would slip past
    // the rules below.
    SeccompCtx::check(seccomp_attr_set(f.ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS));
    for (const char *name : {"ptrace",
                             "process_vm_readv",
                             "process_vm_writev",
                             "mount",
                             "umount2",
                             "pivot_root",
                             "move_mount",
                             "open_tree",
                             "fsopen",
                             "fsmount",
                             "fsconfig",
                             "fspick",
                             "mount_setattr",
                             "keyctl",
                             "add_key",
                             "request_key",
                             "bpf",
                             "init_module",
                             "finit_module",
                             "delete_module",
                             "kexec_load",
                             "kexec_file_load",
                             "reboot",
                             "swapon",
                             "swapoff",
                             "acct",
                             "setns",
                             "unshare",
                             "perf_event_open",
                             "userfaultfd",
                             "io_uring_setup",
                             "io_uring_enter",
                             "io_uring_register",
                             "open_by_handle_at",
                             "name_to_handle_at",
                             "syslog",
                             "settimeofday",
                             "clock_settime",
                             "clock_adjtime",
                             "adjtimex",
                             "quotactl",
                             "lookup_dcookie",
                             "vhangup",
                             "nfsservctl",
                             "uselib",
                             "iopl",
                             "ioperm",
                             "kcmp",
                             "fanotify_init"})
        f.deny(seccomp_syscall_resolve_name(name));
    // New namespaces through clone: the flags are arguments, so each one is checked. clone3
    // passes them in memory a filter cannot read, so it reports "not implemented" and libc
    // falls back to clone.
    for (std::uint64_t flag : std::initializer_list<std::uint64_t>{
             CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWCGROUP})
        f.deny_if_flag(SCMP_SYS(clone), 0, flag);
    f.deny(seccomp_syscall_resolve_name("clone3"), ENOSYS);
    // TIOCSTI pushes keystrokes into the terminal of whoever holds it.
    f.deny_if_int(SCMP_SYS(ioctl), 1, 0x5412 /* TIOCSTI */);

    // Export the program through a pipe into memory (libseccomp writes to a descriptor).
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    UniqueFd r(fds[0]), w(fds[1]);
    if (seccomp_export_bpf(f.ctx, w.get()) < 0) throw std::runtime_error("seccomp_export_bpf failed");
    w.reset();
    std::string program;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(r.get(), buf, sizeof buf)) > 0)
        program.append(buf, static_cast<std::size_t>(n));
    if (program.empty() || program.size() % 8 != 0) throw std::runtime_error("seccomp program is malformed");
    return program;
}

} // namespace

const std::string &seccomp_program() {
    static const std::string program = build_seccomp_program();
    return program;
}

std::vector<std::string> host_addresses() {
    std::vector<std::string> out;
    ifaddrs *list = nullptr;
    if (::getifaddrs(&list) != 0) return out;
    std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
    for (auto *it = list; it; it = it->ifa_next) {
        if (!it->ifa_addr || it->ifa_addr->sa_family != AF_INET || (it->ifa_flags & IFF_LOOPBACK)) continue;
        char text[INET_ADDRSTRLEN];
        auto *in = reinterpret_cast<sockaddr_in *>(it->ifa_addr);
        if (::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text)) out.emplace_back(text);
    }
    return out;
}

std::string route_batch(bool allow_private_networks, const std::vector<std::string> &host_addrs) {
    // The instance is IPv4 only, but the kernel still gives the link an IPv6 link-local address
    // whose duplicate detection ends about a second later, after Chromium has started. Chromium
    // takes that as a network change and fails the navigations in flight with
    // ERR_NETWORK_CHANGED, so the address goes (and is never made again) before the sandbox runs.
    std::string batch = std::string("link set dev ") + kNsInterface + " addrgenmode none\n" + "addr flush dev " +
                        kNsInterface + " scope link\n";
    for (const auto &addr : host_addrs)
        batch += "route add unreachable " + addr + "/32\n";
    if (!allow_private_networks)
        // RFC 1918, carrier-grade NAT, link-local (cloud metadata at 169.254.169.254),
        // benchmarking and "this network".
        for (const char *range : {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
                                  "198.18.0.0/15", "0.0.0.0/8"})
            batch += std::string("route add unreachable ") + range + "\n";
    return batch;
}

std::vector<std::string> pasta_argv(const std::string &port_spec, const std::string &pid_file) {
    return {"pasta", "--quiet", "--ipv4-only", "--config-net", "--address", kNsAddress, "--netmask",
            std::to_string(kNsPrefix), "--gateway", kNsGateway, "--ns-ifname", kNsInterface,
            // The gateway is not the host: without this, dialling it reaches the host's loopback.
            "--no-map-gw", "--dns-forward", kNsGateway, "--tcp-ports", "none", "--udp-ports", "none", "--tcp-ns",
            port_spec, "--udp-ns", "none", "--pid", pid_file, "--userns", "/proc/self/fd/3", "--netns",
            "/proc/self/fd/4"};
}

} // namespace hangar::host::sandbox
