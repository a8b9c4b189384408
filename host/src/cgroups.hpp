#pragma once
// Where each instance's cgroup goes, decided once at server start.
//
// Root (or anyone who may create <mount>/hangar): a tree of Hangar's own at the top of each
// hierarchy, outside the service manager's, as before. The packaged service runs as the user
// `hangar` under systemd with Delegate=yes instead: it may write only below its own cgroup.
//   - cgroup v1: instances go in `hangar-instances` below the server's cgroup of each hierarchy.
//   - cgroup v2, with `DelegateSubgroup=server` (systemd 254+): the server runs in
//     <unit>/server, and instances in <unit>/instances, the controllers enabled on the way.
//   - cgroup v2, systemd before 254 (Debian 12's 252): the server moves itself from the unit's
//     cgroup into <unit>/server (v2 lets only a cgroup without processes hand controllers down).
//     systemd starts the next server in the unit's cgroup itself, which fails while that cgroup
//     hands controllers down (systemd#24064). So a stop that keeps sessions parks them first
//     (park_delegated_instances: frozen, controllers taken back), and the next start hands the
//     controllers down again, restores each instance's limits and thaws it.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <sys/types.h>

namespace hangar::host {

struct CgroupLayout {
    std::string mode = "none"; // v2 | v1 | none
    // {controller, folder holding one folder per instance}; controller "all" on v2.
    std::vector<std::pair<std::string, std::string>> roots;
    // Whether instances may outlive the server: their cgroups can never block its next start.
    bool survives_restart = false;
    std::string origin;                // "own tree" | "delegated" | "delegated, no subgroup"
    std::string base;                  // v2 delegated: the unit's cgroup, which hands the controllers down
    std::vector<std::string> warnings; // what was tried and failed, for the log
};

// `fs_root` is the cgroup mount ("/sys/fs/cgroup"), `self_cgroup` the text of /proc/self/cgroup
// and `self` the pid moved into <unit>/server when that is needed. Never throws: a layout it
// cannot make is mode "none", with warnings saying why.
CgroupLayout choose_cgroup_layout(const std::string &fs_root, const std::string &self_cgroup, pid_t self);

// For "delegated, no subgroup", once every instance stopped: the instances' cgroups removed and
// the controllers taken back from the unit's cgroup, so systemd finds it as it made it and the
// next start can join it (it fails while the unit's cgroup hands controllers down). Best effort.
void release_delegated_cgroups(const CgroupLayout &layout);

// For "delegated, no subgroup" when instances stay for the next start (and from the unit's
// ExecStopPost, `hangar park`, after a crash): each cgroup below `instances` frozen, then every
// controller taken back from `instances` and `base`, deepest first. Frozen, an instance cannot
// use what its limits, gone with the controllers, no longer bound. What failed, empty when all took.
std::vector<std::string> park_delegated_instances(const std::string &base, const std::string &instances);
// Whether a v2 cgroup is frozen (a parked instance's); false where there is no such file.
bool cgroup_frozen(const std::string &dir);
// Thaws a cgroup a park froze: "" when it took, or when it was not frozen.
std::string thaw_cgroup(const std::string &dir);

// The server records its roots in <data_dir>/cgroup-roots (one "controller folder" a line), so
// `hangar doctor`, which runs outside the service's cgroup, finds the instances' cgroups too.
void record_cgroup_roots(const std::string &data_dir, const CgroupLayout &layout);
// Removes the cgroups below `root` that hold no process (rmdir refuses the others), were made
// more than `older_than_s` before `now` (so none a start is still filling) and `keep` does not
// claim: what a server killed with -9 left where it never starts again. The roots may be shared
// by several servers, hence no other test. How many went.
std::size_t remove_empty_cgroups(const std::string &root, const std::function<bool(const std::string &)> &keep,
                                 std::int64_t now, std::int64_t older_than_s);

// One line of that record ("mode", "origin", "base"), "" when it is not there.
std::string recorded_cgroup_value(const std::string &data_dir, const std::string &key);
// The recorded roots, then the defaults under <mount>/hangar (a server of an older version).
std::vector<std::string> recorded_cgroup_roots(const std::string &data_dir);

} // namespace hangar::host
