// sdk/include/hangar/resource.hpp: paging and id-or-name lookup as the plugins use them, against a
// real SQLite store.
#include "store.hpp"
#include "test_support.hpp"

#include <hangar/resource.hpp>

#include <cppunit/extensions/HelperMacros.h>

#include <map>

using hangar::json;
using hangar::test::TempDir;

namespace {

hangar::QueryParam params(std::map<std::string, std::string> values) {
    return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
        auto it = values.find(std::string(name));
        if (it == values.end()) return std::nullopt;
        return it->second;
    };
}

} // namespace

class SdkResourceTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkResourceTest);
    CPPUNIT_TEST(testPagingDefaultsAndCap);
    CPPUNIT_TEST(testPagingRejectsBadValuesByName);
    CPPUNIT_TEST(testFindByIdOrName);
    CPPUNIT_TEST(testRfc3339RoundTripsAndRefusals);
    CPPUNIT_TEST_SUITE_END();

public:
    void testPagingDefaultsAndCap() {
        hangar::Validation v;
        auto p = hangar::parse_paging(params({}), v);
        CPPUNIT_ASSERT(v.ok());
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), static_cast<std::int64_t>(p.offset));
        CPPUNIT_ASSERT_EQUAL(20, p.limit);
        p = hangar::parse_paging(params({{"offset", "40"}, {"limit", "1000"}}), v, 10, 50);
        CPPUNIT_ASSERT(v.ok());
        CPPUNIT_ASSERT_EQUAL(std::int64_t(40), static_cast<std::int64_t>(p.offset));
        CPPUNIT_ASSERT_EQUAL(50, p.limit);
    }

    void testPagingRejectsBadValuesByName() {
        hangar::Validation v;
        hangar::parse_paging(params({{"offset", "-1"}, {"limit", "x"}}), v);
        CPPUNIT_ASSERT(!v.ok());
        try {
            v.throw_if_failed("invalid list query");
            CPPUNIT_FAIL("no error");
        } catch (const hangar::Error &e) {
            CPPUNIT_ASSERT_EQUAL(400, e.status());
            CPPUNIT_ASSERT_EQUAL(std::size_t(2), e.details().size());
            CPPUNIT_ASSERT(e.details()[0].message.starts_with("offset"));
            CPPUNIT_ASSERT(e.details()[1].message.starts_with("limit"));
        }
        hangar::Validation zero;
        hangar::parse_paging(params({{"limit", "0"}}), zero);
        CPPUNIT_ASSERT_EQUAL(400, hangar::test::error_status([&] { zero.throw_if_failed(); }));
    }

    void testFindByIdOrName() {
        TempDir dir;
        hangar::host::Store store(dir / "db.sqlite");
        store.exec("CREATE TABLE things (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, name TEXT)");
        // "b" is named like a's id: the id wins.
        store.exec("INSERT INTO things VALUES ('a1', 'p', 'First'), ('b2', 'p', 'a1'), ('c3', 'q', 'first')");
        auto sql = [&](const std::string &q, const json &p) { return store.exec(q, p); };
        auto id_of = [&](const std::string &project, const std::string &key) {
            auto row = hangar::find_by_id_or_name(sql, "things", project, key);
            return row ? row->at("id").get<std::string>() : std::string("none");
        };
        CPPUNIT_ASSERT_EQUAL(std::string("a1"), id_of("p", "a1"));
        CPPUNIT_ASSERT_EQUAL(std::string("a1"), id_of("p", "first")); // names without case
        CPPUNIT_ASSERT_EQUAL(std::string("b2"), id_of("p", "b2"));
        CPPUNIT_ASSERT_EQUAL(std::string("c3"), id_of("q", "FIRST"));
        CPPUNIT_ASSERT_EQUAL(std::string("none"), id_of("q", "a1")); // another project's row
        CPPUNIT_ASSERT_EQUAL(std::string("none"), id_of("p", "missing"));
    }

    void testRfc3339RoundTripsAndRefusals() {
        using hangar::parse_rfc3339_us;
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'700'000'000'123'000),
                             *parse_rfc3339_us(hangar::rfc3339(1'700'000'000'123)));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'500'000), *parse_rfc3339_us("1970-01-01t00:00:01.5Z"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'234'567), *parse_rfc3339_us("1970-01-01 00:00:01.234567z"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-3'600'000'000), *parse_rfc3339_us("1970-01-01T00:00:00+01:00"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(86'400'000'000), *parse_rfc3339_us("1970-01-02"));
        for (const char *bad : {"", "1970", "1970-01-0x", "1970-13-01", "1970-01-01T00:00:00", "1970-01-01T00:00:00.Z",
                                "1970-01-01T24:00:00Z", "1970-01-01T00:00:00+1:00", "1970-01-01T00:00:00Zjunk"})
            CPPUNIT_ASSERT_MESSAGE(bad, !parse_rfc3339_us(bad));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkResourceTest);
