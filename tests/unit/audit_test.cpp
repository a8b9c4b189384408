// AuditLog: entries reach the store off the caller's thread, in order, and a full queue drops
// (and counts) rather than blocking a request.
#include "audit.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::host;
using hangar::test::TempDir;

namespace {
AuditEntry entry(int n, std::int64_t base_ms = now_ms() - 60000) {
    AuditEntry e;
    e.ts_ms = base_ms + n;
    e.org_id = "org_1";
    e.project_id = "proj_1";
    e.method = "GET";
    e.path = "/browsers/b" + std::to_string(n);
    e.route = "/browsers/{id_or_name}";
    e.status = 200;
    e.duration_ms = n;
    e.client_ip = "127.0.0.1";
    e.user_agent = "ua";
    e.domain = "localhost";
    e.auth_strategy = "api_key";
    e.user_id = "key_1";
    return e;
}
} // namespace

class AuditLogTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(AuditLogTest);
    CPPUNIT_TEST(testEntriesAreWrittenInOrder);
    CPPUNIT_TEST(testFullQueueDrops);
    CPPUNIT_TEST(testOldEntriesArePruned);
    CPPUNIT_TEST_SUITE_END();

public:
    void testEntriesAreWrittenInOrder() {
        TempDir dir;
        Store store(dir / "hangar.db");
        AuditLog log(store, Poco::Logger::get("test"), {});
        for (int i = 0; i < 1200; ++i)
            CPPUNIT_ASSERT(log.record(entry(i)));
        log.flush();
        auto rows = store.exec("SELECT path, route, ts_ms, timestamp FROM audit_logs ORDER BY seq");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1200), rows.size());
        CPPUNIT_ASSERT_EQUAL(std::string("/browsers/b0"), rows[0]["path"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("/browsers/b1199"), rows[1199]["path"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("/browsers/{id_or_name}"), rows[0]["route"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(rfc3339(rows[0]["ts_ms"].get<std::int64_t>()), rows[0]["timestamp"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::uint64_t(0), log.dropped());
    }

    void testFullQueueDrops() {
        TempDir dir;
        Store store(dir / "hangar.db");
        AuditLog::Options o;
        o.queue_capacity = 5;
        o.flush_interval_ms = 60000; // the writer sleeps: the queue fills
        AuditLog log(store, Poco::Logger::get("test"), o);
        int accepted = 0;
        for (int i = 0; i < 20; ++i)
            accepted += log.record(entry(i)) ? 1 : 0;
        CPPUNIT_ASSERT(accepted >= 5 && accepted < 20);
        CPPUNIT_ASSERT_EQUAL(std::uint64_t(20 - accepted), log.dropped());
        log.flush();
        CPPUNIT_ASSERT_EQUAL(std::size_t(accepted), store.exec("SELECT seq FROM audit_logs").size());
    }

    void testOldEntriesArePruned() {
        TempDir dir;
        Store store(dir / "hangar.db");
        {
            AuditLog log(store, Poco::Logger::get("test"), {});
            log.record(entry(1, 1000)); // 1970: far older than any retention
            log.flush();
        }
        AuditLog::Options o;
        o.retention_days = 1;
        AuditLog again(store, Poco::Logger::get("test"), o); // prunes when its writer starts
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return store.exec("SELECT seq FROM audit_logs").empty(); }));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(AuditLogTest);
