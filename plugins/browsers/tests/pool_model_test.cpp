// Unit tests of how pool members are split over the nodes of a cluster.
#include "pool_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::browsers;

class PoolModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(PoolModelTest);
    CPPUNIT_TEST(nodes_alike_split_evenly);
    CPPUNIT_TEST(busy_nodes_take_fewer);
    CPPUNIT_TEST(caps_are_kept);
    CPPUNIT_TEST(pools_share_the_room);
    CPPUNIT_TEST(every_node_computes_the_same_split);
    CPPUNIT_TEST_SUITE_END();

    using Split = std::map<std::string, int>;

public:
    void nodes_alike_split_evenly() {
        auto shares = pool_shares({{"p", 4}}, {{"c", 0, 0}, {"a", 0, 0}, {"b", 0, 0}});
        CPPUNIT_ASSERT((shares["p"] == Split{{"a", 2}, {"b", 1}, {"c", 1}}));
        CPPUNIT_ASSERT((pool_shares({{"p", 0}}, {{"a", 0, 0}})["p"] == Split{{"a", 0}}));
    }

    void busy_nodes_take_fewer() {
        // a runs five browsers of its users, b one: b takes members until it is as busy as a.
        auto shares = pool_shares({{"p", 6}}, {{"a", 0, 5}, {"b", 0, 1}});
        CPPUNIT_ASSERT((shares["p"] == Split{{"a", 1}, {"b", 5}}));
    }

    void caps_are_kept() {
        // b is at its cap: a takes the whole pool. With a capped too, what fits nowhere is kept by none.
        CPPUNIT_ASSERT((pool_shares({{"p", 2}}, {{"a", 0, 0}, {"b", 1, 1}})["p"] == Split{{"a", 2}, {"b", 0}}));
        CPPUNIT_ASSERT((pool_shares({{"p", 5}}, {{"a", 2, 0}, {"b", 3, 1}})["p"] == Split{{"a", 2}, {"b", 2}}));
    }

    void pools_share_the_room() {
        // The first pool (by id) fills a's room under its cap; the second finds it taken.
        auto shares = pool_shares({{"q", 2}, {"p", 2}}, {{"a", 2, 0}, {"b", 0, 0}});
        CPPUNIT_ASSERT((shares["p"] == Split{{"a", 1}, {"b", 1}}));
        CPPUNIT_ASSERT((shares["q"] == Split{{"a", 1}, {"b", 1}}));
        auto tight = pool_shares({{"q", 3}, {"p", 3}}, {{"a", 2, 0}, {"b", 2, 0}});
        CPPUNIT_ASSERT((tight["p"] == Split{{"a", 2}, {"b", 1}}));
        CPPUNIT_ASSERT((tight["q"] == Split{{"a", 0}, {"b", 1}}));
    }

    void every_node_computes_the_same_split() {
        // The order the store listed nodes and pools in does not matter.
        auto one = pool_shares({{"p", 5}, {"q", 3}}, {{"a", 0, 2}, {"b", 4, 0}, {"c", 0, 1}});
        auto other = pool_shares({{"q", 3}, {"p", 5}}, {{"c", 0, 1}, {"b", 4, 0}, {"a", 0, 2}});
        CPPUNIT_ASSERT(one == other);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(PoolModelTest);
