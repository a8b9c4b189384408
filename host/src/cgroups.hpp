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
//     systemd would then fail the next start of the unit while an instance still ran in it
//     (systemd#24064), so there instances end with the server: limits, but no survival.
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

// The server records its roots in <data_dir>/cgroup-roots (one "controller folder" a line), so
// `hangar doctor`, which runs outside the service's cgroup, finds the instances' cgroups too.
void record_cgroup_roots(const std::string &data_dir, const CgroupLayout &layout);
// The recorded roots, then the defaults under <mount>/hangar (a server of an older version).
std::vector<std::string> recorded_cgroup_roots(const std::string &data_dir);

} // namespace hangar::host
