// What an instance's sandbox is made of, apart from starting it: the filesystem it sees, the
// syscalls it may make, and its network namespace's outside link (pasta) and routes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hangar::host::sandbox {

// A comma list of ports and ranges ("3000,20000-20999") as pasta's port spec; throws
// std::invalid_argument naming the bad entry.
std::string port_spec(const std::string &list);

// The read-only binds, symlinks and private folders of an instance's minimal root, as bwrap
// arguments. `extra_ro` are host folders the agent needs that lie outside /usr (the binary,
// plugins, config, runtimes of a build tree); they are bound read-only at the same path.
std::vector<std::string> root_args(const std::vector<std::string> &extra_ro);

// The seccomp program every instance runs under, as classic BPF bytes for `bwrap --seccomp`.
// Built once (libseccomp); denies what a browser never needs and a breakout would: ptrace, mount,
// keyrings, bpf, kernel modules, namespace creation, perf, userfaultfd, io_uring, kexec.
const std::string &seccomp_program();

// The host's own IPv4 addresses (every interface but loopback), which an instance must never
// dial: a server listening on 0.0.0.0 would otherwise be reached through them.
std::vector<std::string> host_addresses();

// `ip -batch` lines for the instance's network namespace: no IPv6 on pasta's link, unreachable
// routes for the host's addresses, and for private, shared and link-local ranges unless they are
// allowed.
std::string route_batch(bool allow_private_networks, const std::vector<std::string> &host_addrs);

// The address plan of every instance's namespace: pasta's side of the link is the gateway
// and the DNS forwarder; the documentation range keeps it clear of any real network.
inline constexpr const char *kNsAddress = "192.0.2.2";
inline constexpr const char *kNsGateway = "192.0.2.1";
inline constexpr int kNsPrefix = 30;
inline constexpr const char *kNsInterface = "eth0";

// pasta's command line for an instance's namespace, joined through the two descriptors the
// child inherits at 3 (user namespace) and 4 (network namespace).
std::vector<std::string> pasta_argv(const std::string &port_spec, const std::string &pid_file);

} // namespace hangar::host::sandbox
