// Unit tests of the org plugin's model: name and lifetime rules, key masking, timestamps, the
// audit-log window and cursors.
#include "org_model.hpp"

#include <hangar/plugin.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <functional>
#include <stdexcept>

using namespace org;

class OrgModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(OrgModelTest);
    CPPUNIT_TEST(names);
    CPPUNIT_TEST(days);
    CPPUNIT_TEST(masking);
    CPPUNIT_TEST(times);
    CPPUNIT_TEST(window);
    CPPUNIT_TEST(cursors);
    CPPUNIT_TEST(lists);
    CPPUNIT_TEST_SUITE_END();

    static std::string problem_of(const std::function<void()> &fn) {
        try {
            fn();
        } catch (const std::invalid_argument &e) {
            return e.what();
        }
        return "";
    }

public:
    void names() {
        CPPUNIT_ASSERT(!name_problem("ci key"));
        CPPUNIT_ASSERT(!name_problem(std::string(255, 'a')));
        CPPUNIT_ASSERT(name_problem(std::string(256, 'a')));
        // 255 code points of two bytes each: still a valid name.
        std::string umlauts;
        for (int i = 0; i < 255; ++i)
            umlauts += "\xC3\xA4";
        CPPUNIT_ASSERT(!name_problem(umlauts));
        CPPUNIT_ASSERT(name_problem(umlauts + "\xC3\xA4"));
        CPPUNIT_ASSERT(name_problem(""));
        CPPUNIT_ASSERT(name_problem("   "));
        CPPUNIT_ASSERT(name_problem(42));
        CPPUNIT_ASSERT(name_problem(json()));
        CPPUNIT_ASSERT(name_problem("\xC3"));
    }

    void days() {
        CPPUNIT_ASSERT(!parse_days(json::object(), "days_to_expire", 1).present);
        auto never = parse_days({{"days_to_expire", nullptr}}, "days_to_expire", 1);
        CPPUNIT_ASSERT(never.present && !never.days);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(30), *parse_days({{"days_to_expire", 30}}, "days_to_expire", 1).days);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), *parse_days({{"expire_in_days", 0}}, "expire_in_days", 0).days);
        for (const json &bad : {json(0), json(3651), json(-1), json(1.5), json("7"), json(true)}) {
            auto p = problem_of([&] { parse_days({{"days_to_expire", bad}}, "days_to_expire", 1); });
            CPPUNIT_ASSERT_MESSAGE(bad.dump(), p.starts_with("days_to_expire: "));
        }
    }

    void masking() {
        CPPUNIT_ASSERT_EQUAL(std::string("hgr_****wxyz"), mask_key("hgr_abcdefghijklmnopwxyz"));
        CPPUNIT_ASSERT_EQUAL(std::string("****3456"), mask_key("sk_test_0123456"));
        CPPUNIT_ASSERT_EQUAL(std::string("****"), mask_key("short"));
    }

    void times() {
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), *parse_time("1970-01-01T00:00:00Z"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1500), *parse_time("1970-01-01T00:00:01.5Z"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1234), *parse_time("1970-01-01T00:00:01.234567Z"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-3600000), *parse_time("1970-01-01T00:00:00+01:00"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(86400000), *parse_time("1970-01-02"));
        for (const char *bad : {"", "yesterday", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00", "2026-01-01T00:00:00Q",
                                "2026-01-01T00:00:00."})
            CPPUNIT_ASSERT_MESSAGE(bad, !parse_time(bad));
    }

    void window() {
        auto w = parse_window("2026-01-01T00:00:00Z", "2026-01-31T00:00:00Z");
        CPPUNIT_ASSERT_EQUAL(kMaxWindowMs, w.end_ms - w.start_ms);
        CPPUNIT_ASSERT(
            problem_of([] { parse_window("2026-01-01T00:00:00Z", "2026-01-31T00:00:01Z"); }).starts_with("end: "));
        CPPUNIT_ASSERT(problem_of([] { parse_window(std::nullopt, "2026-01-31T00:00:00Z"); }).starts_with("start: "));
        CPPUNIT_ASSERT(problem_of([] { parse_window("2026-01-01T00:00:00Z", std::nullopt); }).starts_with("end: "));
        CPPUNIT_ASSERT(problem_of([] { parse_window("later", "2026-01-31T00:00:00Z"); }).starts_with("start: "));
        CPPUNIT_ASSERT(
            problem_of([] { parse_window("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"); }).starts_with("end: "));
    }

    void cursors() {
        CPPUNIT_ASSERT_EQUAL(std::int64_t(12345), *decode_cursor(encode_cursor(12345)));
        for (const char *bad : {"", "a", "12", "a-1", "a1x", "b12"})
            CPPUNIT_ASSERT_MESSAGE(bad, !decode_cursor(bad));
    }

    void lists() {
        // The SDKs' array parameters: comma-joined (Python 0.131) or repeated, `x[]` too.
        auto list = [](const char *query) { return hangar::query_list(hangar::query_pairs(query), "exclude_method"); };
        CPPUNIT_ASSERT((list("exclude_method=GET,%20POST,,") == std::vector<std::string>{"GET", "POST"}));
        CPPUNIT_ASSERT((list("exclude_method=GET&method=PUT&exclude_method[]=POST&exclude_method=DELETE,PATCH") ==
                        std::vector<std::string>{"GET", "POST", "DELETE", "PATCH"}));
        CPPUNIT_ASSERT(list("exclude_method=").empty() && list("exclude_methods=GET").empty());
        CPPUNIT_ASSERT(one_of("name", {"created_at", "name"}));
        CPPUNIT_ASSERT(!one_of("id", {"created_at", "name"}));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(OrgModelTest);
