// Nodes (issue 24 point 2): the heartbeat freshness rule, the plugin-set comparison, the public
// URL check, and the claim/refuse/take-over rules on a real SQLite store.
#include "nodes.hpp"
#include "store.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <unistd.h>

using hangar::host::check_public_url;
using hangar::host::list_nodes;
using hangar::host::mem_available_bytes;
using hangar::host::migrate_nodes;
using hangar::host::node_state;
using hangar::host::NodeError;
using hangar::host::NodeRegistration;
using hangar::host::NodeSettings;
using hangar::host::NodeState;
using hangar::host::NodeStatus;
using hangar::host::plugin_set_difference;
using hangar::host::PluginSet;
using hangar::host::Store;
using hangar::test::TempDir;

namespace {
std::string refusal(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const NodeError &e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string &text, const std::string &part) {
    return text.find(part) != std::string::npos;
}

NodeSettings settings(const std::string &name, PluginSet plugins = {{"browsers", "0.1.0"}, {"fs", "0.1.0"}}) {
    NodeSettings s;
    s.name = name;
    s.public_url = "http://10.0.0.1:8080";
    s.heartbeat_seconds = 5;
    s.plugins = std::move(plugins);
    return s;
}
} // namespace

class NodesTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(NodesTest);
    CPPUNIT_TEST(testFreshnessRule);
    CPPUNIT_TEST(testPluginSetDifferenceNamesEachPlugin);
    CPPUNIT_TEST(testPublicUrlMustBeHttp);
    CPPUNIT_TEST(testMemAvailable);
    CPPUNIT_TEST(testClaimBeatAndStop);
    CPPUNIT_TEST(testLiveNameRefusedWithoutWriting);
    CPPUNIT_TEST(testStaleNameTakenOver);
    CPPUNIT_TEST(testDifferentPluginsRefusedOnlyAgainstLiveNodes);
    CPPUNIT_TEST(testDrain);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TempDir> dir_;
    std::unique_ptr<Store> store_;

public:
    void setUp() override {
        dir_ = std::make_unique<TempDir>();
        store_ = std::make_unique<Store>(*dir_ / "hangar.db");
        migrate_nodes(*store_);
    }
    void tearDown() override {
        store_.reset();
        dir_.reset();
    }

    void testFreshnessRule() {
        const std::int64_t now = 1'000'000;
        CPPUNIT_ASSERT(node_state(false, now, 5, now) == NodeState::live);
        CPPUNIT_ASSERT(node_state(false, now - 15'000, 5, now) == NodeState::live); // three missed beats
        CPPUNIT_ASSERT(node_state(false, now - 15'001, 5, now) == NodeState::stale);
        CPPUNIT_ASSERT(node_state(false, now - 15'001, 10, now) == NodeState::live); // its own interval
        CPPUNIT_ASSERT(node_state(false, now + 2'000, 5, now) == NodeState::live);   // a clock ahead
        CPPUNIT_ASSERT(node_state(true, now, 5, now) == NodeState::stopped);
        CPPUNIT_ASSERT(node_state(false, now - 3'001, 0, now) == NodeState::stale); // interval at least 1 s
    }

    void testPluginSetDifferenceNamesEachPlugin() {
        PluginSet a = {{"browsers", "0.2.0"}, {"fs", "0.1.0"}, {"hello", "1.0"}};
        PluginSet b = {{"browsers", "0.1.0"}, {"fs", "0.1.0"}, {"proxies", "0.3.0"}};
        CPPUNIT_ASSERT_EQUAL(std::string(), plugin_set_difference(a, 2, a, 2));
        auto diff = plugin_set_difference(a, 2, b, 2);
        CPPUNIT_ASSERT_EQUAL(std::string("plugin browsers is 0.2.0 here, 0.1.0 there; plugin hello 1.0 is enabled "
                                         "here, not there; plugin proxies 0.3.0 is enabled there, not here"),
                             diff);
        CPPUNIT_ASSERT_EQUAL(std::string("plugin ABI v2 here, v1 there"), plugin_set_difference(a, 2, a, 1));
    }

    void testPublicUrlMustBeHttp() {
        check_public_url("");
        check_public_url("http://10.0.0.5:8080");
        check_public_url("https://node-1.example.com/");
        for (const char *bad : {"ftp://x", "10.0.0.5:8080", "http://", "https://h/?a=1", "not a url"}) {
            auto why = refusal([&] { check_public_url(bad); });
            CPPUNIT_ASSERT_MESSAGE(bad, contains(why, "HANGAR_PUBLIC_URL"));
            CPPUNIT_ASSERT_MESSAGE(bad, contains(why, bad));
        }
    }

    void testMemAvailable() {
        CPPUNIT_ASSERT_EQUAL(
            std::int64_t{2048} * 1024,
            mem_available_bytes("MemTotal:       16000 kB\nMemFree: 1 kB\nMemAvailable:    2048 kB\n"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t{-1}, mem_available_bytes("MemTotal: 1 kB\n"));
    }

    void testClaimBeatAndStop() {
        {
            NodeRegistration node(*store_, settings("a"));
            node.claim();
            NodeStatus st;
            st.browsers = 3;
            st.spares = 1;
            st.mem_available_bytes = 1 << 30;
            CPPUNIT_ASSERT(node.beat(st));
            auto list = list_nodes(*store_, hangar::host::now_ms());
            CPPUNIT_ASSERT_EQUAL(std::size_t{1}, list.size());
            CPPUNIT_ASSERT_EQUAL(std::string("live"), list[0]["state"].get<std::string>());
            CPPUNIT_ASSERT_EQUAL(3, list[0]["browsers"].get<int>());
            CPPUNIT_ASSERT_EQUAL(1, list[0]["spares"].get<int>());
            CPPUNIT_ASSERT_EQUAL(std::string("http://10.0.0.1:8080"), list[0]["public_url"].get<std::string>());
            CPPUNIT_ASSERT_EQUAL(std::string("0.1.0"), list[0]["plugins"]["fs"].get<std::string>());
            CPPUNIT_ASSERT_EQUAL(0, list[0]["max_browsers"].get<int>());
            CPPUNIT_ASSERT(contains(hangar::host::format_nodes(list), "MAX"));
        } // a planned stop marks the row stopped
        auto list = list_nodes(*store_, hangar::host::now_ms());
        CPPUNIT_ASSERT_EQUAL(std::string("stopped"), list[0]["state"].get<std::string>());
        auto capped = settings("a");
        capped.max_browsers = 12;
        NodeRegistration again(*store_, capped);
        again.claim(); // a stopped node's name is free, and its row takes the new cap
        list = list_nodes(*store_, hangar::host::now_ms());
        CPPUNIT_ASSERT_EQUAL(std::string("live"), list[0]["state"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(12, list[0]["max_browsers"].get<int>());
    }

    void testLiveNameRefusedWithoutWriting() {
        NodeRegistration first(*store_, settings("a"));
        first.claim();
        auto before = store_->exec("SELECT * FROM nodes");
        // A live row of this very process (pid) still counts as live: only a gone process frees it.
        NodeRegistration second(*store_, settings("a"));
        auto why = refusal([&] { second.claim(); });
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "HANGAR_NODE_NAME = \"a\" is taken by a live node at "
                                                  "http://10.0.0.1:8080"));
        CPPUNIT_ASSERT(store_->exec("SELECT * FROM nodes") == before);
        CPPUNIT_ASSERT(first.beat({})); // the holder keeps its row
    }

    void testStaleNameTakenOver() {
        NodeRegistration first(*store_, settings("a"));
        first.claim();
        store_->exec("UPDATE nodes SET heartbeat_at = heartbeat_at - 16000");
        CPPUNIT_ASSERT_EQUAL(std::string("stale"),
                             list_nodes(*store_, hangar::host::now_ms())[0]["state"].get<std::string>());
        NodeRegistration second(*store_, settings("a"));
        second.claim();
        auto rows = store_->exec("SELECT instance_id FROM nodes");
        CPPUNIT_ASSERT_EQUAL(second.instance_id(), rows[0]["instance_id"].get<std::string>());
        CPPUNIT_ASSERT(!first.beat({})); // the old holder learns it lost the name

        // A node calls others stale only once its own beats have succeeded for longer than the
        // longest allowance (5 s x 3 here): after a store outage every heartbeat is old.
        auto list = list_nodes(*store_, hangar::host::now_ms());
        const auto now = hangar::host::now_ms();
        CPPUNIT_ASSERT(!second.may_judge_others(list, now));
        CPPUNIT_ASSERT(second.may_judge_others(list, now + 15'100));
        CPPUNIT_ASSERT(!first.may_judge_others(list, now + 60'000)); // its beats fail
        CPPUNIT_ASSERT(second.beat({}));
        CPPUNIT_ASSERT(second.may_judge_others(list, now + 15'100)); // a beat keeps the streak
    }

    void testDifferentPluginsRefusedOnlyAgainstLiveNodes() {
        NodeRegistration first(*store_, settings("a"));
        first.claim();
        NodeRegistration other(*store_, settings("b", {{"browsers", "0.1.0"}, {"fs", "0.1.0"}, {"hello", "1.0"}}));
        auto why = refusal([&] { other.claim(); });
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "live node \"a\""));
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "plugin hello 1.0 is enabled here, not there"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, store_->exec("SELECT name FROM nodes").size());
        NodeRegistration same(*store_, settings("b"));
        same.claim();
        first.mark_stopped();
        same.mark_stopped();
        other.claim(); // no live node left to differ from
    }

    // `hangar drain`: only a live node; its next beat learns it; a restart's claim clears it.
    void testDrain() {
        auto why = refusal([&] { hangar::host::request_drain(*store_, "a", hangar::host::now_ms()); });
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "no node is named \"a\""));
        NodeRegistration node(*store_, settings("a"));
        node.claim();
        CPPUNIT_ASSERT(node.beat({}));
        CPPUNIT_ASSERT(!node.draining());
        auto since = hangar::host::request_drain(*store_, "a", 1000);
        CPPUNIT_ASSERT_EQUAL(std::int64_t{1000}, since);
        CPPUNIT_ASSERT_EQUAL(since, hangar::host::request_drain(*store_, "a", 2000)); // asked twice: the first stands
        CPPUNIT_ASSERT_EQUAL(std::string("draining"),
                             list_nodes(*store_, hangar::host::now_ms())[0]["state"].get<std::string>());
        CPPUNIT_ASSERT(node.beat({}));
        CPPUNIT_ASSERT(node.draining());
        node.mark_stopped();
        CPPUNIT_ASSERT_EQUAL(std::string("stopped"),
                             list_nodes(*store_, hangar::host::now_ms())[0]["state"].get<std::string>());
        why = refusal([&] { hangar::host::request_drain(*store_, "a", hangar::host::now_ms()); });
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "node \"a\" is stopped: only a live node can be drained"));
        NodeRegistration again(*store_, settings("a"));
        again.claim();
        CPPUNIT_ASSERT(again.beat({}));
        CPPUNIT_ASSERT(!again.draining());
        CPPUNIT_ASSERT_EQUAL(std::string("live"),
                             list_nodes(*store_, hangar::host::now_ms())[0]["state"].get<std::string>());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(NodesTest);
