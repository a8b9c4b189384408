// ABI v1 stability: today's plugin.h against the frozen copy of v1 as first released
// (tests/sdk/abi_v1). Every member a v1 plugin was compiled against sits at the same offset with
// the same size, the tables only grew, and the constants a plugin carries kept their values. A
// change that breaks this is ABI v2 (sdk/README.md, "Versions").
#include "../sdk/abi_v1/members.h"

#include <hangar/plugin.h>

#include <cppunit/extensions/HelperMacros.h>

#include <cstddef>
#include <string>
#include <vector>

extern "C" {
extern const std::size_t hangar_abi_v1_host_offsets[];
extern const std::size_t hangar_abi_v1_host_sizes[];
extern const std::size_t hangar_abi_v1_plugin_offsets[];
extern const std::size_t hangar_abi_v1_plugin_sizes[];
extern const std::size_t hangar_abi_v1_host_size;
extern const std::size_t hangar_abi_v1_plugin_size;
extern const unsigned hangar_abi_v1_constants[];
}

namespace {

struct Member {
    std::string name;
    std::size_t offset;
    std::size_t size;
};

#define HANGAR_HOST_MEMBER(name) {#name, offsetof(hangar_host_v1, name), sizeof(hangar_host_v1::name)},
#define HANGAR_PLUGIN_MEMBER(name) {#name, offsetof(hangar_plugin_v1, name), sizeof(hangar_plugin_v1::name)},

void same_layout(const std::vector<Member> &today, const std::size_t *offsets, const std::size_t *sizes) {
    for (std::size_t i = 0; i < today.size(); ++i) {
        CPPUNIT_ASSERT_EQUAL_MESSAGE(today[i].name + " moved", offsets[i], today[i].offset);
        CPPUNIT_ASSERT_EQUAL_MESSAGE(today[i].name + " changed size", sizes[i], today[i].size);
    }
}

} // namespace

class AbiV1Test : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(AbiV1Test);
    CPPUNIT_TEST(testHostTableOnlyGrew);
    CPPUNIT_TEST(testPluginDescriptorUnchanged);
    CPPUNIT_TEST(testConstantsUnchanged);
    CPPUNIT_TEST_SUITE_END();

public:
    void testHostTableOnlyGrew() {
        same_layout({HANGAR_ABI_V1_HOST_MEMBERS(HANGAR_HOST_MEMBER)}, hangar_abi_v1_host_offsets,
                    hangar_abi_v1_host_sizes);
        CPPUNIT_ASSERT(sizeof(hangar_host_v1) >= hangar_abi_v1_host_size);
    }

    void testPluginDescriptorUnchanged() {
        // The host reads this table from the plugin: it may not grow within v1 either, unless the
        // host learns to check struct_size first.
        same_layout({HANGAR_ABI_V1_PLUGIN_MEMBERS(HANGAR_PLUGIN_MEMBER)}, hangar_abi_v1_plugin_offsets,
                    hangar_abi_v1_plugin_sizes);
        CPPUNIT_ASSERT_EQUAL(hangar_abi_v1_plugin_size, sizeof(hangar_plugin_v1));
    }

    void testConstantsUnchanged() {
        const unsigned today[] = {HANGAR_ABI_VERSION, HANGAR_ROLE_SERVER,  HANGAR_ROLE_INSTANCE,
                                  HANGAR_LOG_DEBUG,   HANGAR_LOG_INFO,     HANGAR_LOG_WARN,
                                  HANGAR_LOG_ERROR,   HANGAR_ROUTE_PUBLIC, HANGAR_ROUTE_STREAMING,
                                  sizeof(hangar_str), sizeof(hangar_buf),  sizeof(hangar_migration)};
        for (std::size_t i = 0; i < sizeof today / sizeof today[0]; ++i)
            CPPUNIT_ASSERT_EQUAL_MESSAGE("constant #" + std::to_string(i), hangar_abi_v1_constants[i], today[i]);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(AbiV1Test);
