// cgroups: where instance cgroups go (own tree, systemd-delegated v2 with and without
// DelegateSubgroup, delegated v1) and the record `hangar doctor` reads.
//
// A test double stands in for cgroupfs: a plain folder with the files the kernel would create on
// mkdir written beforehand, because this machine's cgroups are v1 under a root we may not
// reshape, and no systemd runs here to delegate anything. What it checks is which folders the
// server makes and what it writes where; the kernel's answers to those writes are not simulated.
#include "cgroups.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <filesystem>

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

} // namespace

class CgroupsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CgroupsTest);
    CPPUNIT_TEST(testOwnTreeWhereWeMayMakeOne);
    CPPUNIT_TEST(testDelegatedWithoutSubgroupMovesTheServerAndEndsInstancesWithIt);
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

    void testDelegatedWithoutSubgroupMovesTheServerAndEndsInstancesWithIt() {
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
        CPPUNIT_ASSERT(!layout.survives_restart);
        CPPUNIT_ASSERT(layout.warnings.empty());
        CPPUNIT_ASSERT_EQUAL(unit + "/instances", layout.roots.at(0).second);
        // The server left the unit's cgroup for a leaf, then the controllers were handed down.
        CPPUNIT_ASSERT_EQUAL(std::string("4242"), text(unit + "/server/cgroup.procs"));
        CPPUNIT_ASSERT_EQUAL(std::string("+memory +pids +cpu"), text(unit + "/cgroup.subtree_control"));
        CPPUNIT_ASSERT_EQUAL(std::string("+memory +pids +cpu"), text(unit + "/instances/cgroup.subtree_control"));

        // At the server's stop: instance cgroups gone (empty folders, as the kernel's are once
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
