// Store: typed parameters and results, per-plugin migrations, WAL, transactions.
#include "store.hpp"
#include "test_support.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <atomic>
#include <limits>
#include <thread>

using hangar::host::Store;
using hangar::host::StoreError;
using hangar::test::TempDir;
using nlohmann::json;

namespace {

bool table_exists(Store &s, const std::string &name) {
    return !s.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", {name}).empty();
}

std::vector<unsigned> recorded_versions(Store &s, const std::string &owner) {
    std::vector<unsigned> out;
    for (auto &row : s.exec("SELECT version FROM plugin_migrations WHERE plugin = ? ORDER BY version", {owner}))
        out.push_back(row["version"].get<unsigned>());
    return out;
}

} // namespace

class StoreTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(StoreTest);
    CPPUNIT_TEST(testWalMode);
    CPPUNIT_TEST(testParamsOfEveryJsonTypeRoundTrip);
    CPPUNIT_TEST(testResultTypesFollowValues);
    CPPUNIT_TEST(testBadStatementsThrow);
    CPPUNIT_TEST(testMigrationsApplyOnceInOrder);
    CPPUNIT_TEST(testMigrationsArePerPlugin);
    CPPUNIT_TEST(testFailingMigrationRollsBackAndThrows);
    CPPUNIT_TEST(testMigrationVersionsMustIncrease);
    CPPUNIT_TEST(testMigrationsSurviveReopen);
    CPPUNIT_TEST(testTransaction);
    CPPUNIT_TEST(testConcurrentWriters);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TempDir> dir_;
    std::unique_ptr<Store> store_;

public:
    void setUp() override {
        dir_ = std::make_unique<TempDir>();
        store_ = std::make_unique<Store>(*dir_ / "hangar.db");
    }
    void tearDown() override {
        store_.reset();
        dir_.reset();
    }

    void testWalMode() {
        auto rows = store_->exec("PRAGMA journal_mode");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size());
        CPPUNIT_ASSERT_EQUAL(std::string("wal"), rows[0]["journal_mode"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(1LL, store_->exec("PRAGMA foreign_keys")[0]["foreign_keys"].get<long long>());
    }

    void testParamsOfEveryJsonTypeRoundTrip() {
        store_->exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v)");
        const json values = json::array({
            nullptr,
            true,
            false,
            0,
            42,
            -7,
            9007199254740993LL,
            std::numeric_limits<std::int64_t>::min(),
            3.5,
            -0.25,
            1e300,
            "",
            "text",
            "caf\xc3\xa9 \xf0\x9f\x9a\x80",
            std::string("nul\0inside", 10),
            json::object({{"k", 1}, {"nested", {1, "two"}}}),
            json::array({1, 2, 3}),
            json::array(),
        });
        for (std::size_t i = 0; i < values.size(); ++i)
            CPPUNIT_ASSERT(store_->exec("INSERT INTO t (k, v) VALUES (?, ?)", {i, values[i]}).empty());
        auto rows = store_->exec("SELECT k, v FROM t ORDER BY k");
        CPPUNIT_ASSERT_EQUAL(values.size(), rows.size());
        for (std::size_t i = 0; i < values.size(); ++i) {
            const json &in = values[i];
            const json &out = rows[i]["v"];
            CPPUNIT_ASSERT_EQUAL(static_cast<std::int64_t>(i), rows[i]["k"].get<std::int64_t>());
            json expected;
            if (in.is_boolean())
                expected = in.get<bool>() ? 1 : 0; // booleans are integers
            else if (in.is_object() || in.is_array())
                expected = in.dump(); // structures are JSON text
            else
                expected = in;
            CPPUNIT_ASSERT_EQUAL_MESSAGE("value #" + std::to_string(i) + " " + in.dump(), expected.dump(), out.dump());
            CPPUNIT_ASSERT_EQUAL_MESSAGE("type of #" + std::to_string(i), expected.type_name(), out.type_name());
        }
        // Values also work as parameters in WHERE clauses.
        auto hit = store_->exec("SELECT k FROM t WHERE v = ?", {"text"});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), hit.size());
        auto big = store_->exec("SELECT k FROM t WHERE v = ?", {9007199254740993LL});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), big.size());
        CPPUNIT_ASSERT_EQUAL(6, big[0]["k"].get<int>());
    }

    void testResultTypesFollowValues() {
        store_->exec("CREATE TABLE t (name TEXT, n INTEGER)");
        store_->exec("INSERT INTO t VALUES ('a', 1), ('b', 2), ('c', NULL)");
        auto rows = store_->exec("SELECT COUNT(*) AS c, SUM(n) AS s, AVG(n) AS a, MAX(name) AS m, NULL AS z FROM t");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size());
        CPPUNIT_ASSERT(rows[0]["c"].is_number_integer());
        CPPUNIT_ASSERT_EQUAL(3, rows[0]["c"].get<int>());
        CPPUNIT_ASSERT_EQUAL(3, rows[0]["s"].get<int>());
        CPPUNIT_ASSERT(rows[0]["a"].is_number_float());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, rows[0]["a"].get<double>(), 1e-12);
        CPPUNIT_ASSERT_EQUAL(std::string("c"), rows[0]["m"].get<std::string>());
        CPPUNIT_ASSERT(rows[0]["z"].is_null());
        CPPUNIT_ASSERT(store_->exec("SELECT * FROM t WHERE name = ?", {"none"}).empty());
        CPPUNIT_ASSERT(store_->exec("  ").empty()); // no statement at all
    }

    void testBadStatementsThrow() {
        store_->exec("CREATE TABLE t (a)");
        CPPUNIT_ASSERT_THROW(store_->exec("SELEC nonsense"), StoreError);
        CPPUNIT_ASSERT_THROW(store_->exec("SELECT * FROM missing_table"), StoreError);
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO t VALUES (?)", json::array()), StoreError);
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO t VALUES (?)", {1, 2}), StoreError);
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO t VALUES (?)", json::object({{"a", 1}})), StoreError);
        store_->exec("CREATE TABLE u (a TEXT NOT NULL UNIQUE)");
        store_->exec("INSERT INTO u VALUES (?)", {"x"});
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO u VALUES (?)", {"x"}), StoreError);
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO u VALUES (?)", {nullptr}), StoreError);
        // The store still works after errors.
        CPPUNIT_ASSERT_EQUAL(1, store_->exec("SELECT COUNT(*) AS n FROM u")[0]["n"].get<int>());
    }

    void testMigrationsApplyOnceInOrder() {
        std::vector<Store::Migration> m = {
            {1, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)"},
            {2, "ALTER TABLE items ADD COLUMN tags TEXT NOT NULL DEFAULT '{}'; "
                "INSERT INTO items (name) VALUES ('from v2')"},
        };
        CPPUNIT_ASSERT_EQUAL(0u, store_->schema_version("items-plugin"));
        store_->migrate("items-plugin", m);
        CPPUNIT_ASSERT_EQUAL(2u, store_->schema_version("items-plugin"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT * FROM items").size());
        // Again: nothing re-runs (a second CREATE TABLE would throw, a second INSERT would add a row).
        store_->migrate("items-plugin", m);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT * FROM items").size());
        // A new version applies just that one.
        m.push_back({3, "INSERT INTO items (name) VALUES ('from v3')"});
        store_->migrate("items-plugin", m);
        CPPUNIT_ASSERT_EQUAL(3u, store_->schema_version("items-plugin"));
        auto rows = store_->exec("SELECT name, tags FROM items ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), rows.size());
        CPPUNIT_ASSERT_EQUAL(std::string("from v2"), rows[0]["name"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("{}"), rows[0]["tags"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("from v3"), rows[1]["name"].get<std::string>());
        auto versions = recorded_versions(*store_, "items-plugin");
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), versions.size());
        CPPUNIT_ASSERT_EQUAL(1u, versions[0]);
        CPPUNIT_ASSERT_EQUAL(3u, versions[2]);
        // Gaps are allowed; only increase matters.
        m.push_back({10, "CREATE TABLE items_v10 (x)"});
        store_->migrate("items-plugin", m);
        CPPUNIT_ASSERT_EQUAL(10u, store_->schema_version("items-plugin"));
        CPPUNIT_ASSERT(table_exists(*store_, "items_v10"));
    }

    void testMigrationsArePerPlugin() {
        store_->migrate("a", {{1, "CREATE TABLE a1 (x)"}, {2, "CREATE TABLE a2 (x)"}});
        store_->migrate("b", {{1, "CREATE TABLE b1 (x)"}});
        CPPUNIT_ASSERT_EQUAL(2u, store_->schema_version("a"));
        CPPUNIT_ASSERT_EQUAL(1u, store_->schema_version("b"));
        CPPUNIT_ASSERT_EQUAL(0u, store_->schema_version("c"));
        CPPUNIT_ASSERT(table_exists(*store_, "b1"));
    }

    void testFailingMigrationRollsBackAndThrows() {
        store_->migrate("p", {{1, "CREATE TABLE p1 (x)"}});
        std::vector<Store::Migration> m = {
            {1, "CREATE TABLE p1 (x)"},
            {2, "CREATE TABLE p2 (x); INSERT INTO p1 VALUES (2)"},
            {3, "CREATE TABLE p3 (x); INSERT INTO p1 VALUES (3); INSERT INTO no_such_table VALUES (1)"},
            {4, "CREATE TABLE p4 (x)"},
        };
        bool threw = false;
        try {
            store_->migrate("p", m);
        } catch (const StoreError &e) {
            threw = true;
            std::string what = e.what();
            CPPUNIT_ASSERT_MESSAGE(what, what.find("p migration 3") != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(what, what.find("no_such_table") != std::string::npos);
        }
        CPPUNIT_ASSERT(threw);
        CPPUNIT_ASSERT_EQUAL(2u, store_->schema_version("p")); // 2 applied, 3 not, 4 never tried
        CPPUNIT_ASSERT(table_exists(*store_, "p2"));
        CPPUNIT_ASSERT(!table_exists(*store_, "p3"));
        CPPUNIT_ASSERT(!table_exists(*store_, "p4"));
        auto rows = store_->exec("SELECT x FROM p1");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size()); // migration 3's insert was rolled back
        CPPUNIT_ASSERT_EQUAL(2, rows[0]["x"].get<int>());
        // Not inside a dangling transaction: a fixed migration 3 applies later.
        m[2].sql = "CREATE TABLE p3 (x)";
        store_->migrate("p", m);
        CPPUNIT_ASSERT_EQUAL(4u, store_->schema_version("p"));
        CPPUNIT_ASSERT(table_exists(*store_, "p4"));
    }

    void testMigrationVersionsMustIncrease() {
        CPPUNIT_ASSERT_THROW(store_->migrate("dup", {{1, "CREATE TABLE d1 (x)"}, {1, "CREATE TABLE d2 (x)"}}),
                             StoreError);
        CPPUNIT_ASSERT_THROW(store_->migrate("down", {{2, "CREATE TABLE e2 (x)"}, {1, "CREATE TABLE e1 (x)"}}),
                             StoreError);
        CPPUNIT_ASSERT_THROW(store_->migrate("zero", {{0, "CREATE TABLE z0 (x)"}}), StoreError);
        CPPUNIT_ASSERT(!table_exists(*store_, "d2"));
        CPPUNIT_ASSERT(!table_exists(*store_, "e1"));
        CPPUNIT_ASSERT(!table_exists(*store_, "z0"));
        CPPUNIT_ASSERT_EQUAL(0u, store_->schema_version("zero"));
    }

    void testMigrationsSurviveReopen() {
        store_->migrate("p", {{1, "CREATE TABLE kept (x)"}});
        store_->exec("INSERT INTO kept VALUES (?)", {"row"});
        store_.reset();
        store_ = std::make_unique<Store>(*dir_ / "hangar.db");
        CPPUNIT_ASSERT_EQUAL(1u, store_->schema_version("p"));
        store_->migrate("p", {{1, "CREATE TABLE kept (x)"}}); // would throw if it ran again
        CPPUNIT_ASSERT_EQUAL(std::string("row"), store_->exec("SELECT x FROM kept")[0]["x"].get<std::string>());
    }

    void testTransaction() {
        store_->exec("CREATE TABLE t (x INTEGER)");
        int n = store_->transaction([&] {
            store_->exec("INSERT INTO t VALUES (1)");
            store_->exec("INSERT INTO t VALUES (2)");
            return 2;
        });
        CPPUNIT_ASSERT_EQUAL(2, n);
        CPPUNIT_ASSERT_THROW(store_->transaction([&]() -> int {
            store_->exec("INSERT INTO t VALUES (3)");
            throw std::runtime_error("changed my mind");
        }),
                             std::runtime_error);
        CPPUNIT_ASSERT_EQUAL(2, store_->exec("SELECT COUNT(*) AS n FROM t")[0]["n"].get<int>());
    }

    void testConcurrentWriters() {
        store_->exec("CREATE TABLE t (who INTEGER, i INTEGER)");
        std::vector<std::thread> threads;
        std::atomic<int> failures{0};
        for (int w = 0; w < 4; ++w)
            threads.emplace_back([&, w] {
                for (int i = 0; i < 50; ++i) {
                    try {
                        store_->exec("INSERT INTO t VALUES (?, ?)", {w, i});
                        store_->exec("SELECT COUNT(*) AS n FROM t");
                    } catch (const std::exception &) {
                        failures++;
                    }
                }
            });
        for (auto &t : threads)
            t.join();
        CPPUNIT_ASSERT_EQUAL(0, failures.load());
        CPPUNIT_ASSERT_EQUAL(200, store_->exec("SELECT COUNT(*) AS n FROM t")[0]["n"].get<int>());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(StoreTest);
