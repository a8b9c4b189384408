// Unit tests of what playwright/execute, the executors, the REPL and WebMCP accept
// (kernel-api-0131.md §1G–1I, §2.9) and of the executor cap.
#include "runtime_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using hangar::json;

namespace {

// The field a 400 names, or "" when the body was accepted.
template <typename F> std::string refused_field(F &&f) {
    try {
        f();
        return "";
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        return e.details_json().dump();
    }
}

} // namespace

class RuntimeModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RuntimeModelTest);
    CPPUNIT_TEST(executorNames);
    CPPUNIT_TEST(executorCap);
    CPPUNIT_TEST(executeCalls);
    CPPUNIT_TEST(replCalls);
    CPPUNIT_TEST(invokeCalls);
    CPPUNIT_TEST(customToolBodies);
    CPPUNIT_TEST_SUITE_END();

public:
    void executorNames() {
        CPPUNIT_ASSERT_EQUAL(std::string("default"), playwright::executor_name(json::object()));
        CPPUNIT_ASSERT_EQUAL(std::string("default"), playwright::executor_name({{"executor", nullptr}}));
        CPPUNIT_ASSERT_EQUAL(std::string("crawl-2.a_b"), playwright::executor_name({{"executor", "crawl-2.a_b"}}));
        for (json bad : {json(""), json("a b"), json("../x"), json(std::string(65, 'a')), json(3)})
            CPPUNIT_ASSERT(refused_field([&] {
                               playwright::executor_name({{"executor", bad}});
                           }).find("executor") != std::string::npos);
    }

    void executorCap() {
        std::vector<std::string> named;
        named.reserve(8);
        for (int i = 0; i < 8; ++i)
            named.push_back("e" + std::to_string(i));
        playwright::check_executor_cap(named, "e3");      // exists
        playwright::check_executor_cap(named, "default"); // always there
        playwright::check_executor_cap({named.begin(), named.end() - 1}, "new");
        try {
            playwright::check_executor_cap(named, "ninth");
            CPPUNIT_FAIL("a ninth named executor was allowed");
        } catch (const hangar::Error &e) {
            CPPUNIT_ASSERT_EQUAL(409, e.status());
            CPPUNIT_ASSERT(std::string(e.what()).find("e0, e1") != std::string::npos);
        }
    }

    void executeCalls() {
        auto call = playwright::execute_call({{"code", "return 1"}, {"executor", "a"}});
        CPPUNIT_ASSERT_EQUAL(std::string("a"), call.executor);
        CPPUNIT_ASSERT_EQUAL(60.0, call.timeout_sec);
        CPPUNIT_ASSERT_EQUAL(std::string("default"), playwright::execute_call({{"code", "x"}}).executor);
        for (json bad : {json::object(), json{{"code", ""}}, json{{"code", 1}}})
            CPPUNIT_ASSERT(refused_field([&] { playwright::execute_call(bad); }).find("code") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::execute_call({{"code", "x"}, {"timeout_sec", 301}});
                       }).find("timeout_sec") != std::string::npos);
    }

    void replCalls() {
        auto call = playwright::repl_call({{"code", "repl.write(1)"}});
        CPPUNIT_ASSERT(!call.reset);
        CPPUNIT_ASSERT_EQUAL(60.0, call.timeout_sec);
        CPPUNIT_ASSERT(playwright::repl_call({{"code", ""}, {"reset", true}}).reset);
        CPPUNIT_ASSERT(refused_field([] { playwright::repl_call({{"code", ""}}); }).find("code") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] { playwright::repl_call(json::object()); }).find("code") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::repl_call({{"code", "x"}, {"reset", "yes"}});
                       }).find("reset") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::repl_call({{"code", "x"}, {"timeout_sec", 0}});
                       }).find("timeout_sec") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(2.0, playwright::repl_call({{"code", "x"}, {"timeout_sec", 2}}).timeout_sec);
    }

    void invokeCalls() {
        auto call = playwright::invoke_call({{"tool_ref", "t1"}, {"input", {{"a", 1}}}});
        CPPUNIT_ASSERT_EQUAL(std::string("t1"), call.tool_ref);
        CPPUNIT_ASSERT_EQUAL(1, call.input["a"].get<int>());
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::invoke_call({{"input", json::object()}});
                       }).find("tool_ref") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::invoke_call({{"tool_ref", "t1"}, {"input", json::array()}});
                       }).find("input") != std::string::npos);
        json big = {{"tool_ref", "t1"}, {"input", {{"s", std::string(1 << 20, 'x')}}}};
        CPPUNIT_ASSERT(refused_field([&] { playwright::invoke_call(big); }).find("input") != std::string::npos);
    }

    void customToolBodies() {
        playwright::check_custom_tools_body({{"namespace", "ns"}, {"source", "[]"}});
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::check_custom_tools_body({{"source", "[]"}});
                       }).find("namespace") != std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::check_custom_tools_body({{"namespace", "ns"}});
                       }).find("source") != std::string::npos);
        json huge = {{"namespace", "ns"}, {"source", std::string(8'000'001, ' ')}};
        CPPUNIT_ASSERT(refused_field([&] { playwright::check_custom_tools_body(huge); }).find("source") !=
                       std::string::npos);
        CPPUNIT_ASSERT(refused_field([] {
                           playwright::check_custom_tools_body(
                               {{"namespace", "ns"}, {"source", "[]"}, {"force_overwrite_namespace", 1}});
                       }).find("force_overwrite_namespace") != std::string::npos);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RuntimeModelTest);
