// cgroups: where instance cgroups go (own tree, systemd-delegated v2 with and without
// DelegateSubgroup, delegated v1) and the record `hangar doctor` reads.
//
// A test double stands in for cgroupfs: a plain folder with the files the kernel would create on
// mkdir written beforehand, because this machine's cgroups are v1 under a root we may not
// reshape, and no systemd runs here to delegate anything. What it checks is which folders the
// server makes and what it writes where; the kernel's answers to those writes are not simulated.
// The park of instances under systemd before 254 is checked against the real kernel instead: a
// cgroup2 hierarchy mounted in a temporary folder (testParkedInstances…), the one controller v1
// leaves it standing in for memory.
#include "cgroups.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace hangar::host;
using hangar::test::TempDir;
using hangar::test::write_text;

namespace {

const std::string kAll = "cpuset cpu io memory hugetlb pids rdma misc\n";

// A cgroup folder as the kernel makes it: its control files exist, empty.
void fake_cgroup(const std::string &dir) {
    write_text(dir + "/cgroup.procs", "");
    write_text(dir + "/cgroup.subtree_control", "");
    write_text(dir + "/cgroup.controllers", kAll);
}

std::string text(const std::string &path) {
    return trim(read_file(path));
}

// errno of writing `value` to a cgroup file in one write(2), 0 when it took.
int cgroup_write_errno(const std::string &path, const std::string &value) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size()) ? 0 : errno;
    ::close(fd);
    return err;
}

// A cgroup2 hierarchy mounted for one test, and everything the test made in it undone, whatever
// an assertion cut short.
struct Cgroup2Mount {
    std::string dir;
    std::vector<pid_t> children;
    std::vector<std::string> made; // cgroups, parents first
    std::string enabled_at_root;   // a controller the test turned on at the root, turned off again
    bool mounted = false;

    ~Cgroup2Mount() {
        for (pid_t pid : children) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        for (auto it = made.rbegin(); it != made.rend(); ++it)
            ::rmdir(it->c_str());
        if (!enabled_at_root.empty()) cgroup_write_errno(dir + "/cgroup.subtree_control", "-" + enabled_at_root);
        if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
    }
    void make(const std::string &cgroup) {
        CPPUNIT_ASSERT_EQUAL(0, ::mkdir(cgroup.c_str(), 0755));
        made.push_back(cgroup);
    }
};

} // namespace

class CgroupsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CgroupsTest);
    CPPUNIT_TEST(testOwnTreeWhereWeMayMakeOne);
    CPPUNIT_TEST(testDelegatedWithoutSubgroupMovesTheServerAndKeepsInstances);
    CPPUNIT_TEST(testParkedInstancesLetTheNextServerJoinTheUnitOnARealKernel);
    CPPUNIT_TEST(testOnlyOldEmptyUnclaimedCgroupsAreSwept);
    CPPUNIT_TEST(testDelegatedSubgroupLetsInstancesOutliveTheServer);
    CPPUNIT_TEST(testNotDelegatedMeansNoCgroupsAndSaysWhy);
    CPPUNIT_TEST(testV1DelegatedGoesBelowOwnCgroupPerHierarchy);
    CPPUNIT_TEST(testV1CpuAccountingHierarchyJoinedUnlessCoMounted);
    CPPUNIT_TEST(testRecordedRootsComeFirst);
    CPPUNIT_TEST_SUITE_END();

public:
    void testOwnTreeWhereWeMayMakeOne() {
        TempDir fsroot;
        write_text(fsroot / "cgroup.controllers", kAll);
        fake_cgroup(fsroot / "hangar"); // as an earlier start (or the kernel, on mkdir) left it
        auto layout = choose_cgroup_layout(fsroot.path(), "0::/\n", 42);
        CPPUNIT_ASSERT_EQUAL(std::string("v2"), layout.mode);
        CPPUNIT_ASSERT_EQUAL(std::string("own tree"), layout.origin);
        CPPUNIT_ASSERT(layout.survives_restart);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), layout.roots.size());
        CPPUNIT_ASSERT_EQUAL(fsroot / "hangar", layout.roots[0].second);
    }

    void testDelegatedWithoutSubgroupMovesTheServerAndKeepsInstances() {
        TempDir fsroot;
        write_text(fsroot / "cgroup.controllers", kAll);
        write_text(fsroot / "hangar",
                   "a file where our own tree would go: mkdir fails as it would for a non-root user");
        std::string unit = fsroot / "system.slice/hangar.service";
        fake_cgroup(unit);
        fake_cgroup(unit + "/server");
        fake_cgroup(unit + "/instances");
        auto layout = choose_cgroup_layout(fsroot.path(), "0::/system.slice/hangar.service\n", 4242);
        CPPUNIT_ASSERT_EQUAL(std::string("v2"), layout.mode);
        CPPUNIT_ASSERT_EQUAL(std::string("delegated, no subgroup"), layout.origin);
        CPPUNIT_ASSERT(layout.survives_restart); // parked at a stop: the next test
        CPPUNIT_ASSERT(layout.warnings.empty());
        CPPUNIT_ASSERT_EQUAL(unit + "/instances", layout.roots.at(0).second);
        // The server left the unit's cgroup for a leaf, then the controllers were handed down.
        CPPUNIT_ASSERT_EQUAL(std::string("4242"), text(unit + "/server/cgroup.procs"));
        CPPUNIT_ASSERT_EQUAL(std::string("+memory +pids +cpu"), text(unit + "/cgroup.subtree_control"));
        CPPUNIT_ASSERT_EQUAL(std::string("+memory +pids +cpu"), text(unit + "/instances/cgroup.subtree_control"));

        // At a stop that ends every session: instance cgroups gone (empty folders, as the kernel's are once
        // their processes ended), controllers taken back, so systemd can start the next server.
        std::filesystem::remove(unit + "/instances/cgroup.subtree_control");
        std::filesystem::remove(unit + "/instances/cgroup.procs");
        std::filesystem::remove(unit + "/instances/cgroup.controllers");
        std::filesystem::create_directories(unit + "/instances/some-instance");
        write_text(unit + "/cgroup.subtree_control", "memory pids cpu\n"); // as the kernel shows it
        release_delegated_cgroups(layout);
        CPPUNIT_ASSERT(!std::filesystem::exists(unit + "/instances"));
        CPPUNIT_ASSERT_EQUAL(std::string("-memory -pids -cpu"), text(unit + "/cgroup.subtree_control"));
    }

    // systemd before 254 starts the next server in the unit's cgroup, which the kernel refuses
    // (EBUSY) while that cgroup hands a domain controller down. A park must end that state with
    // the instance's processes still there, frozen; the next server hands the controllers down
    // again and thaws them.
    void testParkedInstancesLetTheNextServerJoinTheUnitOnARealKernel() {
        TempDir where;
        Cgroup2Mount cg;
        cg.dir = where.path();
        if (::mount("none", cg.dir.c_str(), "cgroup2", 0, nullptr) != 0) {
            // Only root may mount one; CI runs as root, where this must work.
            CPPUNIT_ASSERT_MESSAGE(std::string("cannot mount cgroup2 as root: ") + std::strerror(errno),
                                   ::geteuid() != 0);
            std::cerr << "\n  [not run: mounting cgroup2 needs root]\n";
            return;
        }
        cg.mounted = true;
        // memory where systemd delegates it; on this v1 machine hugetlb is all v2 has, and as a
        // domain controller the same rule binds it.
        std::string controller, available = " " + text(cg.dir + "/cgroup.controllers") + " ";
        for (const char *c : {"memory", "io", "hugetlb", "misc", "rdma"})
            if (available.find(std::string(" ") + c + " ") != std::string::npos) {
                controller = c;
                break;
            }
        CPPUNIT_ASSERT_MESSAGE("no domain controller in cgroup2 to test with: " + available, !controller.empty());
        if ((" " + text(cg.dir + "/cgroup.subtree_control") + " ").find(" " + controller + " ") == std::string::npos) {
            CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(cg.dir + "/cgroup.subtree_control", "+" + controller));
            cg.enabled_at_root = controller;
        }
        const std::string unit = cg.dir + "/hangar-park-test-" + std::to_string(::getpid());
        const std::string instances = unit + "/instances", instance = instances + "/i1";
        for (const auto &dir : {unit, unit + "/server", instances, instance})
            cg.make(dir);
        // What the server hands down at its start (choose_v2).
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(unit + "/cgroup.subtree_control", "+" + controller));
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(instances + "/cgroup.subtree_control", "+" + controller));

        // An instance: a process that writes a byte every 5 ms while it runs.
        int beats[2];
        CPPUNIT_ASSERT_EQUAL(0, ::pipe2(beats, O_CLOEXEC));
        pid_t instance_pid = ::fork();
        if (instance_pid == 0) {
            ::close(beats[0]);
            for (;;) {
                if (::write(beats[1], "x", 1) < 0) ::_exit(1);
                ::usleep(5000);
            }
        }
        ::close(beats[1]);
        cg.children.push_back(instance_pid);
        ::fcntl(beats[0], F_SETFL, O_NONBLOCK);
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(instance + "/cgroup.procs", std::to_string(instance_pid)));
        auto beat_within = [&](int ms) {
            char buf[4096];
            while (::read(beats[0], buf, sizeof buf) > 0) {
            }
            for (int waited = 0; waited < ms; waited += 10) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                if (::read(beats[0], buf, sizeof buf) > 0) return true;
            }
            return false;
        };
        CPPUNIT_ASSERT(beat_within(1000));

        // The next server, as systemd starts it: in the unit's cgroup itself. Refused as it is.
        pid_t next_server = ::fork();
        if (next_server == 0) {
            for (;;)
                ::pause();
        }
        cg.children.push_back(next_server);
        CPPUNIT_ASSERT_EQUAL(EBUSY, cgroup_write_errno(unit + "/cgroup.procs", std::to_string(next_server)));

        auto failed = park_delegated_instances(unit, instances);
        CPPUNIT_ASSERT_MESSAGE(failed.empty() ? "" : failed.front(), failed.empty());
        CPPUNIT_ASSERT(cgroup_frozen(instance));
        CPPUNIT_ASSERT(!beat_within(200));
        CPPUNIT_ASSERT_EQUAL(std::string(), text(unit + "/cgroup.subtree_control"));
        CPPUNIT_ASSERT_EQUAL(0, ::kill(instance_pid, 0)); // parked, not ended
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(unit + "/cgroup.procs", std::to_string(next_server)));

        // The next server moves to its leaf and hands the controller down again, past the frozen
        // instance, which gets it back (its limits are written then) and is thawed.
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(unit + "/server/cgroup.procs", std::to_string(next_server)));
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(unit + "/cgroup.subtree_control", "+" + controller));
        CPPUNIT_ASSERT_EQUAL(0, cgroup_write_errno(instances + "/cgroup.subtree_control", "+" + controller));
        CPPUNIT_ASSERT(text(instance + "/cgroup.controllers").find(controller) != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::string(), thaw_cgroup(instance));
        CPPUNIT_ASSERT(!cgroup_frozen(instance));
        CPPUNIT_ASSERT(beat_within(1000));
        CPPUNIT_ASSERT_EQUAL(std::string(), thaw_cgroup(instance)); // not frozen: nothing to do

        // The sweep of what a server killed with -9 left: the kernel keeps a cgroup with a
        // process, the empty one goes.
        cg.make(instances + "/left-empty");
        auto never = [](const std::string &) { return false; };
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), remove_empty_cgroups(instances, never, ::time(nullptr) + 3600, 600));
        CPPUNIT_ASSERT(std::filesystem::exists(instance));
        CPPUNIT_ASSERT(!std::filesystem::exists(instances + "/left-empty"));
        ::close(beats[0]);
    }

    void testOnlyOldEmptyUnclaimedCgroupsAreSwept() {
        TempDir root;
        for (const char *name : {"gone", "busy", "ours"})
            std::filesystem::create_directory(root / name);
        write_text(root / "busy/cgroup.procs", "123\n"); // stands for a process: rmdir refuses
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat((root / "gone").c_str(), &st));
        auto ours = [](const std::string &id) { return id == "ours"; };
        // Made a moment ago: a start may still be filling it.
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), remove_empty_cgroups(root.path(), ours, st.st_ctime + 10, 600));
        CPPUNIT_ASSERT(std::filesystem::exists(root / "gone"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), remove_empty_cgroups(root.path(), ours, st.st_ctime + 601, 600));
        CPPUNIT_ASSERT(!std::filesystem::exists(root / "gone"));
        CPPUNIT_ASSERT(std::filesystem::exists(root / "busy"));
        CPPUNIT_ASSERT(std::filesystem::exists(root / "ours"));
    }

    void testDelegatedSubgroupLetsInstancesOutliveTheServer() {
        TempDir fsroot;
        write_text(fsroot / "cgroup.controllers", kAll);
        write_text(fsroot / "hangar", "not a folder");
        std::string unit = fsroot / "system.slice/hangar.service";
        fake_cgroup(unit);
        fake_cgroup(unit + "/server");
        fake_cgroup(unit + "/instances");
        write_text(unit + "/cgroup.controllers", "memory pids\n"); // no cpu delegated: not asked for
        auto layout = choose_cgroup_layout(fsroot.path(), "0::/system.slice/hangar.service/server\n", 4242);
        CPPUNIT_ASSERT_EQUAL(std::string("delegated"), layout.origin);
        CPPUNIT_ASSERT(layout.survives_restart);
        CPPUNIT_ASSERT_EQUAL(unit + "/instances", layout.roots.at(0).second);
        CPPUNIT_ASSERT_EQUAL(std::string(), text(unit + "/server/cgroup.procs")); // systemd put us there
        CPPUNIT_ASSERT_EQUAL(std::string("+memory +pids"), text(unit + "/cgroup.subtree_control"));
    }

    void testNotDelegatedMeansNoCgroupsAndSaysWhy() {
        TempDir fsroot;
        write_text(fsroot / "cgroup.controllers", kAll);
        write_text(fsroot / "hangar", "not a folder");
        std::filesystem::create_directories(fsroot / "user.slice"); // no control files of ours
        auto layout = choose_cgroup_layout(fsroot.path(), "0::/user.slice\n", 4242);
        CPPUNIT_ASSERT_EQUAL(std::string("none"), layout.mode);
        CPPUNIT_ASSERT(layout.roots.empty());
        CPPUNIT_ASSERT(!layout.survives_restart);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), layout.warnings.size());
        CPPUNIT_ASSERT(layout.warnings[0].find("Delegate=yes") != std::string::npos);
    }

    void testV1DelegatedGoesBelowOwnCgroupPerHierarchy() {
        TempDir fsroot;
        for (const char *c : {"memory", "pids", "cpu"}) {
            write_text(fsroot / (std::string(c) + "/hangar"), "not a folder");
            fake_cgroup(fsroot / (std::string(c) + "/system.slice/hangar.service"));
        }
        auto layout = choose_cgroup_layout(fsroot.path(),
                                           "12:memory:/system.slice/hangar.service\n"
                                           "8:pids:/system.slice/hangar.service\n"
                                           "3:cpu,cpuacct:/system.slice/hangar.service\n"
                                           "0::/system.slice/hangar.service\n",
                                           4242);
        CPPUNIT_ASSERT_EQUAL(std::string("v1"), layout.mode);
        CPPUNIT_ASSERT_EQUAL(std::string("delegated"), layout.origin);
        CPPUNIT_ASSERT(layout.survives_restart); // v1 lets the next start join a cgroup with children
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), layout.roots.size());
        for (const auto &[controller, root] : layout.roots) {
            CPPUNIT_ASSERT_EQUAL(fsroot / (controller + "/system.slice/hangar.service/hangar-instances"), root);
            CPPUNIT_ASSERT(std::filesystem::is_directory(root));
        }
    }

    // A scrape of /metrics reads each instance's CPU time from cpuacct.usage; without that
    // hierarchy it would have to walk every process of every instance.
    void testV1CpuAccountingHierarchyJoinedUnlessCoMounted() {
        TempDir separate;
        for (const char *c : {"memory", "pids", "cpu", "cpuacct"})
            fake_cgroup(separate / (std::string(c) + "/hangar"));
        auto layout = choose_cgroup_layout(separate.path(), "", 7);
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), layout.roots.size());
        CPPUNIT_ASSERT_EQUAL(std::string("cpuacct"), layout.roots.back().first);
        CPPUNIT_ASSERT_EQUAL(separate / "cpuacct/hangar", layout.roots.back().second);

        TempDir together; // "cpu" and "cpuacct" both name the "cpu,cpuacct" mount
        for (const char *c : {"memory", "pids", "cpu,cpuacct"})
            fake_cgroup(together / (std::string(c) + "/hangar"));
        std::filesystem::create_directory_symlink("cpu,cpuacct", together / "cpu");
        std::filesystem::create_directory_symlink("cpu,cpuacct", together / "cpuacct");
        layout = choose_cgroup_layout(together.path(), "", 7);
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), layout.roots.size());
        for (const auto &[controller, root] : layout.roots)
            CPPUNIT_ASSERT(controller != "cpuacct");
    }

    void testRecordedRootsComeFirst() {
        TempDir data;
        CgroupLayout layout;
        layout.mode = "v2";
        layout.origin = "delegated";
        layout.survives_restart = true;
        layout.roots = {{"all", "/sys/fs/cgroup/system.slice/hangar.service/instances"}};
        record_cgroup_roots(data.path(), layout);
        auto roots = recorded_cgroup_roots(data.path());
        CPPUNIT_ASSERT_EQUAL(std::string("/sys/fs/cgroup/system.slice/hangar.service/instances"), roots.at(0));
        CPPUNIT_ASSERT(std::find(roots.begin(), roots.end(), "/sys/fs/cgroup/hangar") != roots.end());
        CPPUNIT_ASSERT(read_file(data / "cgroup-roots").find("survives_restart yes") != std::string::npos);
        // Nothing recorded: the places an older server used.
        TempDir empty;
        CPPUNIT_ASSERT_EQUAL(std::string("/sys/fs/cgroup/hangar"), recorded_cgroup_roots(empty.path()).at(0));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CgroupsTest);
