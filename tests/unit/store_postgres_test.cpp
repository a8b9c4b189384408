// The PostgreSQL store against a real PostgreSQL (Debian `postgresql`), started by
// tests/pg/pgtemp.sh in a temporary folder as an unprivileged user, once for the suite.
// Covers: connection errors name the setting without the password, types, migrations,
// transactions on pooled connections, the schema version guard, the host's own tables and
// queries (Auth, audit), and every real plugin's migrations.
#include "audit.hpp"
#include "auth.hpp"
#include "blobs.hpp"
#include "core.hpp"
#include "secrets.hpp"
#include "store.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <Poco/Logger.h>
#include <Poco/Net/ServerSocket.h>

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

using hangar::host::parse_store_url;
using hangar::host::Store;
using nlohmann::json;

#ifndef HANGAR_REAL_PLUGIN_DIR
#error "HANGAR_REAL_PLUGIN_DIR must name the folder the real plugins are built into"
#endif

namespace {

std::string run_capture(const std::string &cmd) {
    std::string out;
    FILE *p = ::popen(cmd.c_str(), "r");
    if (!p) return out;
    char buf[512];
    while (std::fgets(buf, sizeof buf, p))
        out += buf;
    if (::pclose(p) != 0) throw std::runtime_error(cmd + " failed: " + out);
    while (!out.empty() && out.back() == '\n')
        out.pop_back();
    return out;
}

// One server for the whole suite; stopped when the test runner exits.
class PgServer {
public:
    static PgServer &get() {
        static PgServer server;
        return server;
    }
    const std::string &url() const { return url_; }
    unsigned port() const { return port_; }
    // An outage: an immediate stop (as a crash), then a start on the same port and data.
    void stop() { run_capture(script() + " stop " + (dir_ / "pg")); }
    void restart() { run_capture(script() + " restart " + (dir_ / "pg")); }
    ~PgServer() {
        if (!url_.empty()) std::system((script() + " stop " + (dir_ / "pg") + " >/dev/null 2>&1").c_str());
    }

private:
    PgServer() {
        ::chmod(dir_.path().c_str(), 0711); // the server's own user must pass through
        {
            Poco::Net::ServerSocket probe(Poco::Net::SocketAddress("127.0.0.1", 0));
            port_ = probe.address().port();
        }
        url_ = run_capture(script() + " start " + (dir_ / "pg") + " " + std::to_string(port_));
    }
    static std::string script() { return std::string(HANGAR_SOURCE_DIR) + "/tests/pg/pgtemp.sh"; }

    hangar::test::TempDir dir_;
    unsigned port_ = 0;
    std::string url_;
};

std::string error_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const std::exception &e) {
        return e.what();
    }
    return "";
}

const std::string kSetting = "[store] url / HANGAR_STORE_URL";

} // namespace

class StorePostgresTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(StorePostgresTest);
    CPPUNIT_TEST(testBadCredentialsNameTheSettingNotThePassword);
    CPPUNIT_TEST(testUnreachableAndMissingDatabaseFailFast);
    CPPUNIT_TEST(testPlaceholderNumbering);
    CPPUNIT_TEST(testParamsAndResultTypes);
    CPPUNIT_TEST(testMigrationsApplyOnceAndRollBack);
    CPPUNIT_TEST(testNodesStartingAtOnceMigrateOnce);
    CPPUNIT_TEST(testRowidColumnsFillThemselves);
    CPPUNIT_TEST(testTransactionsPinOneConnection);
    CPPUNIT_TEST(testPreparedStatementsFollowAnotherNodesMigration);
    CPPUNIT_TEST(testPooledConnectionsRunSideBySide);
    CPPUNIT_TEST(testNewerSchemaVersionRefused);
    CPPUNIT_TEST(testOutageIsUnavailableThenRecovers);
    CPPUNIT_TEST(testHostAuthAndAuditRun);
    CPPUNIT_TEST(testEveryPluginsMigrations);
    CPPUNIT_TEST(testBlobsReachEveryNodeThroughTheStore);
    CPPUNIT_TEST(testBlobWriteInAnOutageKeepsTheOldCopy);
    CPPUNIT_TEST(testSharedBlobsDirBypassesTheStore);
    CPPUNIT_TEST(testBlobCacheStaysUnderItsCap);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<Store> store_;

    static void reset_database() {
        // A clean public schema per test, on the bare engine (a Store would check the version).
        auto engine = hangar::host::open_postgres_backend(parse_store_url(PgServer::get().url(), "/unused"));
        engine->script("DROP SCHEMA public CASCADE; CREATE SCHEMA public");
    }

public:
    void setUp() override {
        reset_database();
        store_ = std::make_unique<Store>(parse_store_url(PgServer::get().url(), "/unused"));
    }
    void tearDown() override { store_.reset(); }

    void testBadCredentialsNameTheSettingNotThePassword() {
        auto url = "postgresql://hangar:wrong-sekret@127.0.0.1:" + std::to_string(PgServer::get().port()) + "/postgres";
        auto msg = error_of([&] { Store s(parse_store_url(url, "/unused")); });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find(kSetting) != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("password authentication failed") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("wrong-sekret") == std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("hangar:***@127.0.0.1") != std::string::npos);
    }

    void testUnreachableAndMissingDatabaseFailFast() {
        unsigned closed = 0;
        {
            Poco::Net::ServerSocket probe(Poco::Net::SocketAddress("127.0.0.1", 0));
            closed = probe.address().port();
        }
        auto msg = error_of([&] {
            Store s(parse_store_url("postgresql://hangar:x@127.0.0.1:" + std::to_string(closed) + "/postgres", "/u"));
        });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find(kSetting) != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("cannot connect") != std::string::npos);
        // A host that never answers: connect_timeout ends the wait instead of a hang.
        auto started = std::chrono::steady_clock::now();
        msg = error_of([&] { Store s(parse_store_url("postgresql://u:p@192.0.2.1:5432/d?connect_timeout=2", "/u")); });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find(kSetting) != std::string::npos);
        CPPUNIT_ASSERT(std::chrono::steady_clock::now() - started < std::chrono::seconds(20));
        auto url = PgServer::get().url();
        url = url.substr(0, url.rfind('/')) + "/no_such_db";
        msg = error_of([&] { Store s(parse_store_url(url, "/u")); });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("no_such_db") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("hangar-test-pw") == std::string::npos);
    }

    void testPlaceholderNumbering() {
        CPPUNIT_ASSERT_EQUAL(std::string("SELECT $1, '?', \"a?\", $2 -- ?\n, $3 /* ? */"),
                             hangar::host::number_placeholders("SELECT ?, '?', \"a?\", ? -- ?\n, ? /* ? */"));
        CPPUNIT_ASSERT_EQUAL(std::string("SELECT 'it''s ?', $1"),
                             hangar::host::number_placeholders("SELECT 'it''s ?', ?"));
    }

    void testParamsAndResultTypes() {
        store_->exec("CREATE TABLE t (i BIGINT, r DOUBLE PRECISION, s TEXT, n TEXT, b INTEGER, j TEXT)");
        store_->exec("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)",
                     {std::numeric_limits<std::int64_t>::max(), 2.5, "it's ✓", nullptr, true, json{{"a", 1}}});
        auto r = store_->exec("SELECT * FROM t")[0];
        CPPUNIT_ASSERT_EQUAL(std::numeric_limits<std::int64_t>::max(), r["i"].get<std::int64_t>());
        CPPUNIT_ASSERT_EQUAL(2.5, r["r"].get<double>());
        CPPUNIT_ASSERT_EQUAL(std::string("it's ✓"), r["s"].get<std::string>());
        CPPUNIT_ASSERT(r["n"].is_null());
        CPPUNIT_ASSERT_EQUAL(1, r["b"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("{\"a\":1}"), r["j"].get<std::string>());
        auto agg = store_->exec("SELECT COUNT(*) AS c, SUM(i - 1) AS s, MAX(s) AS m, 1 = 1 AS yes FROM t")[0];
        CPPUNIT_ASSERT(agg["c"].is_number_integer() && agg["c"] == 1);
        CPPUNIT_ASSERT(agg["s"].is_number_integer());
        CPPUNIT_ASSERT(agg["yes"] == 1);
        CPPUNIT_ASSERT(store_->exec("UPDATE t SET b = 2").empty());
        CPPUNIT_ASSERT(!error_of([&] { store_->exec("SELECT nope FROM t"); }).empty());
        CPPUNIT_ASSERT(!error_of([&] { store_->exec("SELECT ? FROM t", {1, 2}); }).empty());
    }

    void testMigrationsApplyOnceAndRollBack() {
        store_->migrate("p", {{1, "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER)"}});
        store_->migrate("p", {{1, "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER)"}});
        CPPUNIT_ASSERT_EQUAL(1u, store_->schema_version("p"));
        auto msg = error_of([&] { store_->migrate("p", {{1, ""}, {2, "CREATE TABLE c (z INTEGER); SELECT nope"}}); });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("p migration 2") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(1u, store_->schema_version("p"));
        CPPUNIT_ASSERT(store_->exec("SELECT 1 FROM information_schema.tables WHERE table_name = 'c'").empty());
        auto applied = store_->exec("SELECT applied_at FROM plugin_migrations WHERE plugin = 'p'")[0]["applied_at"];
        CPPUNIT_ASSERT_EQUAL(std::size_t(19), applied.get<std::string>().size()); // YYYY-MM-DD HH:MM:SS as SQLite
    }

    void testRowidColumnsFillThemselves() {
        // SQLite's `INTEGER PRIMARY KEY` fills itself when an INSERT leaves it out; the frozen ABI v1
        // test plugin (tests/sdk/abi_v1) relies on it and cannot change its SQL.
        store_->migrate("rowid", {{1, "CREATE TABLE calls (id INTEGER PRIMARY KEY, at TEXT NOT NULL, blob BLOB); "
                                      "CREATE TABLE logged (n integer primary key autoincrement, x TEXT)"}});
        store_->exec("INSERT INTO calls (at) VALUES (?)", {"a"});
        store_->exec("INSERT INTO calls (at, blob) VALUES (?, ?)", {"b", "bytes"});
        store_->exec("INSERT INTO logged (x) VALUES ('x')");
        auto rows = store_->exec("SELECT id, at FROM calls ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), rows.size());
        CPPUNIT_ASSERT(rows[0]["id"] == 1 && rows[1]["id"] == 2);
        CPPUNIT_ASSERT(store_->exec("SELECT n FROM logged")[0]["n"] == 1);
        // A column named blob keeps its name; the type became bytea.
        auto type = store_->exec("SELECT data_type FROM information_schema.columns WHERE table_name = 'calls' AND "
                                 "column_name = 'blob'");
        CPPUNIT_ASSERT_EQUAL(std::string("bytea"), type.at(0)["data_type"].get<std::string>());
    }

    void testNodesStartingAtOnceMigrateOnce() {
        // Two stores (two nodes) opened on an empty database at the same moment, then migrating the
        // same plugin at the same moment. The sleep keeps the first migration's transaction open
        // while the second node reads the version: without the schema lock both would run the
        // CREATE TABLE and one would fail.
        store_.reset();
        reset_database();
        const auto url = parse_store_url(PgServer::get().url(), "/unused");
        const std::vector<Store::Migration> migrations{
            {1, "CREATE TABLE raced (x INTEGER); SELECT pg_sleep(0.5)"},
            {2, "ALTER TABLE raced ADD COLUMN y INTEGER"},
        };
        std::atomic<int> opening{0}, migrating{0};
        auto node = [&] {
            for (++opening; opening < 2;)
                std::this_thread::yield();
            std::optional<Store> opened;
            try {
                opened.emplace(url);
            } catch (...) {
                ++migrating; // the other node must not wait for this one forever
                throw;
            }
            Store &store = *opened;
            for (++migrating; migrating < 2;)
                std::this_thread::yield();
            store.migrate("raced", migrations);
            return store.schema_version("raced");
        };
        auto a = std::async(std::launch::async, node);
        auto b = std::async(std::launch::async, node);
        auto va = error_of([&] { CPPUNIT_ASSERT_EQUAL(2u, a.get()); });
        auto vb = error_of([&] { CPPUNIT_ASSERT_EQUAL(2u, b.get()); });
        CPPUNIT_ASSERT_MESSAGE(va + vb, va.empty() && vb.empty());
        store_ = std::make_unique<Store>(url);
        CPPUNIT_ASSERT(store_->exec("SELECT COUNT(*) AS c FROM plugin_migrations WHERE plugin = 'raced'")[0]["c"] == 2);
        CPPUNIT_ASSERT(store_->exec("SELECT COUNT(*) AS c FROM store_schema")[0]["c"] == 1);
    }

    void testPreparedStatementsFollowAnotherNodesMigration() {
        // Statements are prepared once per connection; another node's migration that changes what
        // a prepared `SELECT *` returns must be followed, not answered with PostgreSQL's "cached
        // plan must not change result type".
        store_->exec("CREATE TABLE t (x INTEGER)");
        store_->exec("INSERT INTO t VALUES (?)", {1});
        for (int i = 0; i < 3; ++i)
            CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT * FROM t WHERE x = ?", {1})[0].size());
        Store other(parse_store_url(PgServer::get().url(), "/unused"));
        other.exec("ALTER TABLE t ADD COLUMN y INTEGER DEFAULT 7");
        auto row = store_->exec("SELECT * FROM t WHERE x = ?", {1}).at(0);
        CPPUNIT_ASSERT_EQUAL(7, row.at("y").get<int>());
        // Parameters still bind per call, and a bad one is still the statement's error.
        CPPUNIT_ASSERT(store_->exec("SELECT * FROM t WHERE x = ?", {2}).empty());
        CPPUNIT_ASSERT(!error_of([&] { store_->exec("SELECT * FROM t WHERE x = ?", {"not a number"}); }).empty());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT * FROM t WHERE x = ?", {1}).size());
    }

    void testTransactionsPinOneConnection() {
        store_->exec("CREATE TABLE t (x INTEGER)");
        store_->transaction([&] {
            store_->exec("INSERT INTO t VALUES (1)");
            // Inside: the same connection sees its own write.
            CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT x FROM t").size());
            return 0;
        });
        CPPUNIT_ASSERT_THROW(store_->transaction([&]() -> int {
            store_->exec("INSERT INTO t VALUES (2)");
            throw std::runtime_error("abort");
        }),
                             std::runtime_error);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT x FROM t").size());
    }

    void testPooledConnectionsRunSideBySide() {
        // One thread holds a transaction open; another thread's statements still run (one
        // mutex-serialised connection would block them) and do not see the uncommitted row.
        store_->exec("CREATE TABLE t (x INTEGER)");
        std::promise<void> inserted, checked;
        auto holder = std::async(std::launch::async, [&] {
            store_->transaction([&] {
                store_->exec("INSERT INTO t VALUES (1)");
                inserted.set_value();
                checked.get_future().wait();
                return 0;
            });
        });
        inserted.get_future().wait();
        auto seen = std::async(std::launch::async, [&] { return store_->exec("SELECT x FROM t").size(); });
        bool ran = seen.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
        checked.set_value();
        holder.get();
        CPPUNIT_ASSERT(ran);
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), seen.get());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT x FROM t").size());
        // Many threads at once, more than the pool holds.
        std::vector<std::thread> threads;
        threads.reserve(16);
        std::atomic<int> failures{0};
        for (int i = 0; i < 16; ++i)
            threads.emplace_back([&, i] {
                try {
                    for (int k = 0; k < 20; ++k)
                        store_->exec("INSERT INTO t VALUES (?)", {i * 100 + k});
                } catch (...) {
                    ++failures;
                }
            });
        for (auto &t : threads)
            t.join();
        CPPUNIT_ASSERT_EQUAL(0, failures.load());
        CPPUNIT_ASSERT(store_->exec("SELECT COUNT(*) AS c FROM t")[0]["c"] == 321);
    }

    void testOutageIsUnavailableThenRecovers() {
        using hangar::host::StoreUnavailable;
        store_->exec("CREATE TABLE t (x INTEGER)");
        // Several pooled connections, all left idle: each goes stale in the outage.
        std::vector<std::future<void>> side;
        side.reserve(4);
        for (int i = 0; i < 4; ++i)
            side.push_back(std::async(std::launch::async, [&, i] { store_->exec("INSERT INTO t VALUES (?)", {i}); }));
        for (auto &f : side)
            f.get();
        PgServer::get().stop();
        CPPUNIT_ASSERT_THROW(store_->exec("SELECT x FROM t"), StoreUnavailable);
        CPPUNIT_ASSERT_THROW(store_->exec("INSERT INTO t VALUES (9)"), StoreUnavailable);
        CPPUNIT_ASSERT_THROW(store_->transaction([&] { return store_->exec("INSERT INTO t VALUES (9)"); }),
                             StoreUnavailable);
        PgServer::get().restart();
        // The stale connections are dropped together, so at most one call meets one.
        std::size_t rows = 0;
        for (int attempt = 0; attempt < 2 && rows == 0; ++attempt) {
            try {
                rows = store_->exec("SELECT x FROM t").size();
            } catch (const StoreUnavailable &) {
            }
        }
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), rows);
        store_->exec("INSERT INTO t VALUES (5)");
        CPPUNIT_ASSERT(store_->exec("SELECT COUNT(*) AS c FROM t")[0]["c"] == 5);
    }

    // Large objects live outside the schema each test starts afresh: compare counts.
    static long long large_objects(Store &store) {
        return store.exec("SELECT COUNT(*) AS c FROM pg_largeobject_metadata")[0]["c"].get<long long>();
    }

    // A node's copies of store-held blobs are a cache: past its cap the ones used longest ago
    // go (and come back on their next use), never a recent one, never a file the store lacks.
    void testBlobCacheStaysUnderItsCap() {
        using hangar::host::Blobs;
        using hangar::host::read_file;
        hangar::test::TempDir dir;
        const auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
        const auto cached = [&](const std::string &key) {
            return std::filesystem::exists(dir.path() + "/blobs/profiles/" + key);
        };
        Blobs blobs(*store_, dir.path(), "", Blobs::CacheLimits{1 << 20, std::chrono::seconds(0)});
        const std::string first(400 << 10, 'a'), second(400 << 10, 'b'), third(400 << 10, 'c');
        blobs.put("profiles", "1.tar.zst", first);
        pause();
        blobs.put("profiles", "2.tar.zst", second);
        pause();
        // A file the plugin writes itself and has not committed: the store lacks it, it stays.
        hangar::host::write_file_atomic(*blobs.path("replays", "r.mp4"), std::string(2 << 20, 'v'));
        blobs.path("profiles", "1.tar.zst"); // used now: 2 is the one used longest ago
        pause();
        blobs.put("profiles", "3.tar.zst", third); // 1.2 MiB of copies past a 1 MiB cap
        CPPUNIT_ASSERT(cached("1.tar.zst"));
        CPPUNIT_ASSERT(!cached("2.tar.zst"));
        CPPUNIT_ASSERT(cached("3.tar.zst"));
        CPPUNIT_ASSERT(std::filesystem::exists(dir.path() + "/blobs/replays/r.mp4"));
        // Evicted, not lost: the next use fetches it from the store.
        CPPUNIT_ASSERT(read_file(*blobs.path("profiles", "2.tar.zst")) == second);
        CPPUNIT_ASSERT(!cached("1.tar.zst")); // that fetch pushed the oldest out in turn

        // Nothing used within the grace period goes, whatever the cap: a plugin may be about to
        // open the path it was given.
        hangar::test::TempDir patient_dir;
        Blobs patient(*store_, patient_dir.path(), "", Blobs::CacheLimits{1, std::chrono::seconds(3600)});
        patient.put("profiles", "4.tar.zst", first);
        patient.put("profiles", "5.tar.zst", second);
        CPPUNIT_ASSERT(std::filesystem::exists(patient_dir.path() + "/blobs/profiles/4.tar.zst"));
        CPPUNIT_ASSERT(std::filesystem::exists(patient_dir.path() + "/blobs/profiles/5.tar.zst"));
    }

    // Two nodes: each its own data dir (its cache), one store.
    void testBlobsReachEveryNodeThroughTheStore() {
        using hangar::host::Blobs;
        using hangar::host::read_file;
        hangar::test::TempDir a_dir, b_dir;
        Store b_store(parse_store_url(PgServer::get().url(), "/unused"));
        Blobs a(*store_, a_dir.path(), ""), b(b_store, b_dir.path(), "");
        CPPUNIT_ASSERT(a.kept_in_store() && b.kept_in_store());
        const auto objects_before = large_objects(*store_);
        // Larger than libpq's chunk and not text: it must come back byte for byte.
        std::string archive(3 << 20, '\0');
        for (std::size_t i = 0; i < archive.size(); ++i)
            archive[i] = static_cast<char>((i * 2654435761u) >> 13);
        a.put("profiles", "p1.tar.zst", archive);
        CPPUNIT_ASSERT_EQUAL(a_dir.path() + "/blobs/profiles/p1.tar.zst", *a.path("profiles", "p1.tar.zst"));
        auto on_b = b.path("profiles", "p1.tar.zst");
        CPPUNIT_ASSERT_EQUAL(b_dir.path() + "/blobs/profiles/p1.tar.zst", *on_b);
        CPPUNIT_ASSERT(read_file(*on_b) == archive);
        // Replaced on B: A's cached copy is stale and fetched again; the old object is gone.
        b.put("profiles", "p1.tar.zst", "second");
        CPPUNIT_ASSERT_EQUAL(std::string("second"), read_file(*a.path("profiles", "p1.tar.zst")));
        CPPUNIT_ASSERT_EQUAL(objects_before + 1, large_objects(*store_));
        // A file the plugin wrote itself (a recording) reaches B once committed, not before.
        auto video = *a.path("replays", "r1.mp4");
        hangar::host::write_file_atomic(video, "mp4 bytes");
        CPPUNIT_ASSERT(!std::filesystem::exists(*b.path("replays", "r1.mp4")));
        a.commit("replays", "r1.mp4");
        CPPUNIT_ASSERT_EQUAL(std::string("mp4 bytes"), read_file(*b.path("replays", "r1.mp4")));
        CPPUNIT_ASSERT_THROW(a.commit("replays", "never-written.mp4"), std::exception);
        // Deleted on A: B's cached copy goes at its next use, and no large object is left behind.
        CPPUNIT_ASSERT(a.remove("profiles", "p1.tar.zst"));
        CPPUNIT_ASSERT(!std::filesystem::exists(*b.path("profiles", "p1.tar.zst")));
        CPPUNIT_ASSERT(b.remove("replays", "r1.mp4"));
        CPPUNIT_ASSERT(!std::filesystem::exists(*a.path("replays", "r1.mp4")));
        CPPUNIT_ASSERT_EQUAL(objects_before, large_objects(*store_));
        CPPUNIT_ASSERT(!a.remove("profiles", "p1.tar.zst"));
        CPPUNIT_ASSERT(!a.path("profiles", "../escape"));
        CPPUNIT_ASSERT_THROW(a.put("profiles", "a/../../b", "x"), std::exception);
    }

    void testBlobWriteInAnOutageKeepsTheOldCopy() {
        hangar::test::TempDir dir;
        hangar::host::Blobs blobs(*store_, dir.path(), "");
        blobs.put("extensions", "e1.zip", "old");
        PgServer::get().stop();
        CPPUNIT_ASSERT_THROW(blobs.put("extensions", "e1.zip", "new"), hangar::host::StoreUnavailable);
        CPPUNIT_ASSERT(Store::unavailable_seen(true));
        PgServer::get().restart();
        // Neither half-written here nor in the store; the staged file is gone.
        std::string read;
        for (int attempt = 0; attempt < 2 && read.empty(); ++attempt) {
            try {
                read = hangar::host::read_file(*blobs.path("extensions", "e1.zip"));
            } catch (const hangar::host::StoreUnavailable &) { // a stale pooled connection
            }
        }
        CPPUNIT_ASSERT_EQUAL(std::string("old"), read);
        std::size_t files = 0;
        for ([[maybe_unused]] const auto &entry : std::filesystem::directory_iterator(dir.path() + "/blobs/extensions"))
            ++files;
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), files);
    }

    void testSharedBlobsDirBypassesTheStore() {
        hangar::test::TempDir dir, shared;
        hangar::host::Blobs blobs(*store_, dir.path(), shared.path());
        const auto objects_before = large_objects(*store_);
        CPPUNIT_ASSERT(!blobs.kept_in_store());
        CPPUNIT_ASSERT_EQUAL(shared.path(), blobs.root());
        blobs.put("profiles", "p.tar.zst", "on the shared folder");
        CPPUNIT_ASSERT_EQUAL(std::string("on the shared folder"),
                             hangar::host::read_file(shared.path() + "/profiles/p.tar.zst"));
        CPPUNIT_ASSERT_EQUAL(objects_before, large_objects(*store_));
    }

    void testNewerSchemaVersionRefused() {
        store_->exec("UPDATE store_schema SET version = ?", {hangar::host::kStoreSchemaVersion + 1});
        auto msg = error_of([&] { Store s(parse_store_url(PgServer::get().url(), "/u")); });
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find(kSetting) != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("newer than this hangar") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(msg, msg.find("hangar-test-pw") == std::string::npos);
    }

    void testHostAuthAndAuditRun() {
        hangar::test::TempDir dir;
        hangar::host::Auth auth(*store_);
        auth.bootstrap("pg-test-key-0123456789abcdef", (dir / "bootstrap-api-key"));
        auto project = auth.create_project("second");
        CPPUNIT_ASSERT(!project.empty());
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), store_->exec("SELECT id FROM projects").size());
        auto ok = auth.authenticate(std::string("Bearer pg-test-key-0123456789abcdef"), project);
        CPPUNIT_ASSERT(std::holds_alternative<hangar::host::Caller>(ok));
        auto key = auth.create_key("k2", project);
        CPPUNIT_ASSERT(std::holds_alternative<hangar::host::Caller>(auth.authenticate("Bearer " + key, std::nullopt)));
        CPPUNIT_ASSERT(
            !std::holds_alternative<hangar::host::Caller>(auth.authenticate(std::string("Bearer nope"), std::nullopt)));
        hangar::host::AuditLog::Options opts;
        hangar::host::AuditLog audit(*store_, Poco::Logger::get("test"), opts);
        CPPUNIT_ASSERT(store_->schema_version("host.audit") > 0);
    }

    void testEveryPluginsMigrations() {
        hangar::host::Config cfg("", {});
        hangar::host::HostCore core(HANGAR_ROLE_SERVER, cfg);
        hangar::host::Auth auth(*store_); // plugins' tables reference the host's
        hangar::host::migrate_secret_registry(*store_);
        std::vector<std::string> failed;
        std::size_t ran = 0;
        // The sanitizer configuration (make test-asan) builds the unit tests alone, without the
        // plugins; make test builds them all and runs this check on every one.
        if (!std::filesystem::is_directory(HANGAR_REAL_PLUGIN_DIR) ||
            std::none_of(std::filesystem::directory_iterator(HANGAR_REAL_PLUGIN_DIR),
                         std::filesystem::directory_iterator(),
                         [](const auto &e) { return e.path().extension() == ".so"; }))
            return;
        for (const auto &entry : std::filesystem::directory_iterator(HANGAR_REAL_PLUGIN_DIR)) {
            if (entry.path().extension() != ".so") continue;
            std::unique_ptr<void, int (*)(void *)> dl(::dlopen(entry.path().c_str(), RTLD_NOW | RTLD_LOCAL), ::dlclose);
            CPPUNIT_ASSERT_MESSAGE(entry.path().string(), dl != nullptr);
            auto init = reinterpret_cast<hangar_plugin_init_fn>(::dlsym(dl.get(), HANGAR_PLUGIN_INIT_SYMBOL));
            hangar_plugin_v1 desc{};
            CPPUNIT_ASSERT(init && init(core.api(), &desc) == 0);
            std::vector<Store::Migration> migrations;
            for (std::size_t i = 0; i < desc.migration_count; ++i)
                migrations.push_back({desc.migrations[i].version, desc.migrations[i].sql});
            auto msg = error_of([&] { store_->migrate(entry.path().stem().string(), migrations); });
            if (!msg.empty()) failed.push_back(msg);
            ++ran;
        }
        CPPUNIT_ASSERT(ran >= 10);
        std::string all;
        for (auto &f : failed)
            all += "\n  " + f;
        CPPUNIT_ASSERT_MESSAGE("plugins whose migrations fail on PostgreSQL:" + all, failed.empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(StorePostgresTest);
