// The local instance runtime: one `hangar agent` per browser instance, each under bubblewrap
// with its own mount, pid, ipc and uts namespaces (and a user namespace when started by an
// unprivileged user), an unprivileged uid, and a cgroup memory limit where the machine has one.
#pragma once

#include "cgroups.hpp"
#include "event_loop.hpp"

#include <nlohmann/json.hpp>

#include <Poco/Logger.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace hangar::host {

class Config;

struct RuntimeOptions {
    std::string data_dir;    // instances live in <data_dir>/instances/<id>
    std::string blob_root;   // plugin blobs (Blobs::root): spec binds come from its folders only
    std::string exe;         // the hangar binary
    std::string config_file; // passed to agents
    std::vector<std::string> plugin_dirs;
    std::vector<std::string> enabled_plugins;
    std::string sandbox_user;             // when running as root: the uid instances run as
    std::uint64_t memory_limit_bytes = 0; // 0: no cgroup limit
    int start_timeout_ms = 30000;
    bool use_bwrap = true;
    // Network: each instance in its own namespace, linked out by pasta ("isolated"), or sharing
    // the host's ("host", for machines without pasta; nothing then keeps instances apart).
    bool isolated_network = true;
    std::string allow_host_ports;            // host loopback ports reachable inside, "3000,20000-20999"
    bool allow_private_networks = false;     // RFC 1918, link-local and CGNAT destinations
    std::uint64_t pids_max = 4096;           // tasks (threads count) per instance; 0: no limit
    std::uint64_t cpu_weight = 100;          // cgroup v2 cpu.weight (v1: shares = weight * 1024 / 100)
    std::vector<std::string> extra_ro_paths; // more host folders an agent may read
    // Size cap of each instance folder (its own ext4 file system on a sparse image, when the
    // server may mount); 0: no cap.
    std::uint64_t disk_quota_bytes = 0;
    // How many network namespaces (linked out and routed: isolated network, as root, with cgroups)
    // and disk images (formatted: with a disk quota) are made ahead of cold starts, so a start
    // waits for neither; 0: none.
    int prepared = 2;
};

class Runtime {
public:
    Runtime(RuntimeOptions options, Poco::Logger &log);
    ~Runtime(); // stops every instance
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;

    // Starts an instance and waits until its agent reported ready (all plugins started).
    // Returns {"id","socket","dir","pid"}; throws std::runtime_error with the agent's reason.
    // {"id": X, "adopt": true} instead claims instance X, which a previous server left running
    // and this start adopted ("adopted": true in the answer); it throws when X was not adopted.
    nlohmann::json start(const nlohmann::json &spec);
    void stop(const std::string &id);
    // The first step of a shutdown: refuses new starts and ends those under way (their callers
    // are stopping too), so plugins that wait on a start (spare fillers) stop at once.
    void close_starts();
    void stop_all();
    // Forgets every instance without stopping it, for the next start to adopt (a planned restart).
    // Only where instances outlive the server; otherwise they are stopped.
    void detach_all();
    // Whether instances outlive this process: each has its own cgroups, which find every process
    // of it, so nothing ties them to the server (no --die-with-parent).
    bool instances_outlive_server() const { return outlive_; }
    // At start: adopts every instance a previous server left whose agent answers its socket, and
    // kills and removes the others (and any folder, pid file or disk image left behind).
    void adopt_or_clean_leftovers();
    // Once every plugin started: stops the adopted instances no plugin claimed (warm spares, idle
    // pool members, an instance whose session ended while its server was going down). Returns
    // how many.
    std::size_t stop_unclaimed();
    std::optional<std::string> socket_path(const std::string &id) const;
    std::optional<std::string> dir_path(const std::string &id) const;
    // The directory of a running instance's memory cgroup and the cgroup version (1 or 2).
    std::optional<std::pair<std::string, int>> memory_cgroup(const std::string &id) const;
    std::vector<std::string> running() const;
    // Each running instance and its cgroup folders (one per hierarchy), for /metrics.
    std::vector<std::pair<std::string, std::vector<std::string>>> instance_cgroups() const;
    std::string cgroup_mode() const { return cgroup_layout_.mode; }
    // Whether instance folders are size-capped file systems (a quota is set and we may mount).
    bool disk_quota() const { return disk_quota_; }

    static bool valid_id(const std::string &id);

private:
    struct Instance {
        std::string id;
        std::string dir;
        std::string host_dir; // the server's own folder of it (host_dir()), outside the sandbox's reach
        std::string socket;
        pid_t pid = -1;
        pid_t pasta_pid = -1;
        std::vector<std::string> cgroups; // one per hierarchy (v1) or one (v2)
        bool disk = false;                // dir is the mount point of <id>.disk
        // Adopted from a previous server: not our child, so its exit shows on this pidfd.
        std::shared_ptr<UniqueFd> pidfd;
        // Read-only binds a plugin asked for in the spec ("binds": [{source, target}]): a folder
        // of the data dir (an app's unpacked code) shown at a path under /srv.
        std::vector<std::pair<std::string, std::string>> ro_binds;
        // What an app's build asks for: binds with "writable": true (its code folder or venv)
        // and "network": "none" (loopback only, no pasta: its one way out is a proxy socket its
        // plugin serves in the instance folder). Set by take_build_spec.
        std::vector<std::pair<std::string, std::string>> rw_binds;
        bool offline = false;
    };
    std::vector<std::pair<std::string, std::string>> spec_binds(const nlohmann::json &spec,
                                                                bool writable = false) const;
    void take_build_spec(const nlohmann::json &spec, Instance &inst) const;
    // Kills whatever of a leftover instance runs and removes its files.
    void clean_leftover(const std::string &id);
    // Whether the leftover instance `id` can be adopted; fills `inst` when so.
    bool try_adopt(const std::string &id, Instance &inst);
    bool in_own_cgroup(pid_t pid, const std::string &id) const;
    void write_pids(const Instance &inst) const;
    // fork/exec happens on one long-lived thread: bwrap's --die-with-parent is tied to the
    // thread that forked it, and request threads come and go.
    std::future<pid_t> spawn(std::function<pid_t()> fn);
    void spawner_loop();
    void reap_orphans();
    void kill_instance(Instance &inst, bool graceful);
    // `network_ready`: the sandbox starts in a prepared network namespace (no --unshare-net).
    std::vector<std::string> sandbox_argv(const Instance &inst, bool network_ready) const;
    void copy_inputs(const nlohmann::json &spec, const std::string &dir) const;
    // `memory_limit_bytes` 0: the node's [sandbox] memory_limit_mb.
    std::vector<std::string> make_cgroups(const std::string &id, std::uint64_t memory_limit_bytes = 0);
    void apply_limits(const std::string &controller, const std::string &path, std::uint64_t memory_limit_bytes = 0);
    // An instance's own memory limit (the spec's memory_limit_bytes, kept in its host folder where
    // the sandbox cannot write), or 0 for the node's.
    std::uint64_t memory_limit_of(const std::string &id) const;
    void unpark(const std::string &id);
    void remove_abandoned_cgroups();
    void remove_cgroups(const std::string &id);
    // SIGKILLs every process left in the instance's cgroups (a sandbox whose first process
    // outlived a crashed server), until they are empty or 2 s passed.
    void kill_cgroup_processes(const std::string &id);
    std::vector<std::string> agent_ro_paths() const;
    std::string pids_file(const std::string &id) const;
    std::string disk_image(const std::string &id) const;
    std::string host_dir(const std::string &id) const;
    void remove_host_dir(const std::string &id) const; // unmounted and removed
    UniqueFd listen_agent_socket(const Instance &inst) const;
    // Makes the instance folder its own file system of opt_.disk_quota_bytes (sparse image, ext4,
    // owned by the instance user); detach_disk unmounts it and deletes the image.
    void attach_disk(const Instance &inst);
    void detach_disk(const std::string &id, const std::string &dir);
    // Links the new network namespace of the sandbox whose first process is `child` to the
    // outside (pasta) and sets its routes; returns pasta's pid. Throws with the reason.
    pid_t connect_network(const Instance &inst, pid_t child);
    // pasta and the routes for the network namespace `net` (owned by the user namespace `user`);
    // pasta runs in `cgroups`. Returns pasta's pid. Throws with the reason.
    pid_t link_out(const std::string &id, const std::string &log, int user, int net, const std::string &pid_file,
                   const std::vector<std::string> &cgroups);

    // A network namespace that is linked out and routed before a start takes it: the start only
    // moves pasta into the instance's cgroups and spawns the sandbox inside it. Its namespace
    // belongs to a user namespace of the instance user's, as bwrap's own would.
    struct PreparedNetwork {
        UniqueFd user, net;
        pid_t pasta = -1;
    };
    bool prepares_networks() const;
    bool prepares_disks() const;
    std::string networks_cgroup_id() const;
    template <typename T> std::optional<T> take_prepared(std::deque<T> &ready);
    std::optional<PreparedNetwork> take_prepared_network();
    std::optional<std::string> take_prepared_disk();
    PreparedNetwork prepare_network();
    std::string prepare_disk();
    // A sparse image of the instance size with an empty ext4 owned by the instance user.
    void format_disk(const std::string &image, const std::string &log);
    // Keeps `prepared` of each ready, one at a time, while no start is under way.
    void preparer_loop();
    // Stops the preparer and ends what no start took (a shutdown).
    void end_prepared();
    // Waits up to `timeout_ms` for a child registered in helpers_ to exit (SIGKILL after), then
    // lets reap_orphans have its pid again; whether it exited by itself, and how (`status`).
    bool reap_helper(pid_t pid, int timeout_ms, int *status = nullptr);
    // Runs a helper to completion with the given descriptors at 3.. (the sandbox's namespaces),
    // as the instance user unless `as_server`, in `cgroups` when given (what it leaves running is
    // then the instance's); its output goes to `log_path`. Throws unless it exits 0.
    void run_helper(const std::string &id, const std::string &log_path, std::vector<std::string> args,
                    const std::vector<int> &fds, const std::string &stdin_text, int timeout_ms, bool as_server = false,
                    const std::vector<std::string> &cgroups = {});

    RuntimeOptions opt_;
    Poco::Logger &log_;
    uid_t uid_ = 0;
    gid_t gid_ = 0;
    bool drop_privileges_ = false;
    bool disk_quota_ = false;
    bool outlive_ = false;
    std::set<std::string> unclaimed_; // adopted, not yet claimed by a plugin
    CgroupLayout cgroup_layout_;      // where instance cgroups go (cgroups.hpp), decided at start
    std::string pasta_ports_;
    std::string route_batch_;
    // Waits until no start is under way; from close_starts, once closing_ is set.
    void wait_for_starts();

    mutable std::mutex mutex_;
    std::map<std::string, Instance> instances_;
    // Set once the server stops: a start is refused from then on. starting_ holds the starts
    // under way, which a stop must wait for: the process exiting in the middle of one would leave
    // its pasta and disk behind.
    bool closing_ = false;
    std::set<std::string> starting_;
    std::condition_variable starts_done_;
    std::set<pid_t> helpers_; // short-lived children (pasta, route set-up) their caller reaps
    std::mutex spawn_mutex_;
    std::condition_variable spawn_cv_;
    std::deque<std::packaged_task<pid_t()>> spawn_queue_;
    bool spawner_stop_ = false;
    std::thread spawner_;

    std::mutex prepared_mutex_;
    std::condition_variable prepared_cv_;
    std::deque<PreparedNetwork> networks_;
    std::deque<std::string> disks_; // images under <data_dir>/disks
    std::uint64_t disks_made_ = 0;  // names them (the preparer's own)
    bool prepared_stop_ = false;
    std::thread preparer_;
};

// What `hangar doctor` reports of <data_dir>/instances: each instance a server left there, with
// the state of its sandbox process.
struct InstanceOnDisk {
    std::string id;
    pid_t sandbox_pid = -1; // -1: no sandbox process runs
    pid_t server_pid = -1;  // the hangar process that owns the sandbox; -1: none (orphaned)
    bool adopted = false;   // owned by a server that did not start it (adopted at its start)
    bool answers = false;   // orphaned, but its agent answers: the next start adopts it
    bool parked = false;    // orphaned and frozen by a stop under systemd before 254: the next start thaws it
    bool mounted = false;   // its folder is still a mounted file system
    // Processes left in its cgroups when no sandbox process runs (its agent died, what it
    // started did not): only the next start, or a kill, ends them.
    std::size_t stray_processes = 0;
};
std::vector<InstanceOnDisk> survey_instances(const std::string &data_dir);

// A plain HTTP call over a unix socket (server → agent).
struct UnixCallResult {
    int status;
    std::string body;
};
UnixCallResult unix_http_call(const std::string &socket, const std::string &method, const std::string &path,
                              const std::string &body, int timeout_ms);

} // namespace hangar::host
