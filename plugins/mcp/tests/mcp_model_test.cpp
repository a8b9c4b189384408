// Unit tests of the MCP server's model: JSON-RPC handling (version negotiation, notifications,
// errors) and how tools turn into API requests and results. The Api here is a recorder that
// answers what each test tells it to: the e2e test (tests/e2e/mcp.test.mjs) runs the real one.
#include "mcp.hpp"

#include <hangar/cdp.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <deque>
#include <set>

using namespace hangar::mcp;

namespace {

struct Recorded {
    std::string method;
    std::string path;
    json body;
};

class FakeApi : public Api {
public:
    std::vector<Recorded> calls;
    std::deque<ApiAnswer> answers;

    ApiAnswer call(std::string_view method, const std::string &path, const json *body, std::uint32_t) override {
        calls.push_back({std::string(method), path, body ? *body : json()});
        return next();
    }
    ApiAnswer call_raw(std::string_view method, const std::string &path, std::string_view, std::string_view body,
                       std::uint32_t) override {
        calls.push_back({std::string(method), path, json(std::string(body))});
        return next();
    }
    void answer(int status, const std::string &body, std::vector<std::pair<std::string, std::string>> headers = {}) {
        answers.push_back({status, std::move(headers), body});
    }

private:
    ApiAnswer next() {
        if (answers.empty()) return {204, {}, ""};
        auto a = answers.front();
        answers.pop_front();
        return a;
    }
};

json request(int id, const std::string &method, json params = json::object()) {
    return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

json call(FakeApi &api, const std::string &tool, json arguments) {
    auto h = handle_message(api, request(7, "tools/call", {{"name", tool}, {"arguments", std::move(arguments)}}));
    CPPUNIT_ASSERT(h.reply);
    return *h.reply;
}

} // namespace

class McpModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(McpModelTest);
    CPPUNIT_TEST(negotiatesVersions);
    CPPUNIT_TEST(notificationsAndResponsesNeedNoAnswer);
    CPPUNIT_TEST(malformedMessages);
    CPPUNIT_TEST(listsTools);
    CPPUNIT_TEST(createsBrowsersWithKernelArguments);
    CPPUNIT_TEST(batchesActionsAndReturnsTheScreenshotAsAnImage);
    CPPUNIT_TEST(apiFailuresAreToolErrors);
    CPPUNIT_TEST(badArgumentsAreProtocolErrors);
    CPPUNIT_TEST(playwrightWithoutASessionCleansUp);
    CPPUNIT_TEST(pathsAreEncoded);
    CPPUNIT_TEST_SUITE_END();

public:
    void negotiatesVersions() {
        FakeApi api;
        auto h = handle_message(api, request(1, "initialize", {{"protocolVersion", "2025-06-18"}}));
        CPPUNIT_ASSERT(h.open);
        CPPUNIT_ASSERT_EQUAL(std::string("2025-06-18"), h.reply->at("result").at("protocolVersion").get<std::string>());
        CPPUNIT_ASSERT(h.reply->at("result").at("capabilities").contains("tools"));
        // An older revision we speak is kept; one we do not is answered with ours.
        h = handle_message(api, request(2, "initialize", {{"protocolVersion", "2025-03-26"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("2025-03-26"), *h.open);
        h = handle_message(api, request(3, "initialize", {{"protocolVersion", "2099-01-01"}}));
        CPPUNIT_ASSERT_EQUAL(std::string(kProtocolVersion), *h.open);
        CPPUNIT_ASSERT_EQUAL(3, h.reply->at("id").get<int>());
    }

    void notificationsAndResponsesNeedNoAnswer() {
        FakeApi api;
        CPPUNIT_ASSERT(!handle_message(api, {{"jsonrpc", "2.0"}, {"method", "notifications/initialized"}}).reply);
        CPPUNIT_ASSERT(!handle_message(api, {{"jsonrpc", "2.0"}, {"id", 4}, {"result", json::object()}}).reply);
        auto ping = handle_message(api, request(5, "ping"));
        CPPUNIT_ASSERT(ping.reply->at("result").is_object());
        CPPUNIT_ASSERT(api.calls.empty());
    }

    void malformedMessages() {
        FakeApi api;
        auto h = handle_message(api, json{{"id", 1}, {"method", "ping"}});
        CPPUNIT_ASSERT_EQUAL(kInvalidRequest, h.reply->at("error").at("code").get<int>());
        // A "jsonrpc" of another type is the same invalid request (it threw once, found by schemathesis).
        for (const json &version : {json(nullptr), json(2), json(false), json::object(), json::array()}) {
            h = handle_message(api, json{{"jsonrpc", version}, {"id", 1}, {"method", "ping"}});
            CPPUNIT_ASSERT_EQUAL(kInvalidRequest, h.reply->at("error").at("code").get<int>());
        }
        h = handle_message(api, request(1, "resources/list"));
        CPPUNIT_ASSERT_EQUAL(kMethodNotFound, h.reply->at("error").at("code").get<int>());
        h = handle_message(api, {{"jsonrpc", "2.0"}, {"id", json::array()}, {"method", "ping"}});
        CPPUNIT_ASSERT_EQUAL(kInvalidRequest, h.reply->at("error").at("code").get<int>());
        h = handle_message(api, request(1, "tools/call", {{"name", "no_such_tool"}}));
        CPPUNIT_ASSERT_EQUAL(kInvalidParams, h.reply->at("error").at("code").get<int>());
    }

    void listsTools() {
        FakeApi api;
        auto h = handle_message(api, request(1, "tools/list"));
        std::set<std::string> names;
        for (const auto &t : h.reply->at("result").at("tools")) {
            names.insert(t.at("name").get<std::string>());
            CPPUNIT_ASSERT_EQUAL(std::string("object"), t.at("inputSchema").at("type").get<std::string>());
            CPPUNIT_ASSERT(!t.at("description").get<std::string>().empty());
        }
        for (const char *n : {"manage_browsers", "computer_action", "execute_playwright_code", "exec_command",
                              "manage_browser_pools", "manage_profiles", "manage_proxies", "manage_extensions",
                              "manage_replays", "browser_curl", "manage_credentials"})
            CPPUNIT_ASSERT_MESSAGE(n, names.count(n));
    }

    void createsBrowsersWithKernelArguments() {
        FakeApi api;
        api.answer(200, R"({"session_id":"s1"})");
        auto r = call(api, "manage_browsers",
                      {{"action", "create"},
                       {"headless", true},
                       {"profile_name", "p"},
                       {"save_profile_changes", true},
                       {"viewport_width", 800},
                       {"viewport_height", 600},
                       {"extension_name", "ext"}});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), api.calls.size());
        const auto &c = api.calls[0];
        CPPUNIT_ASSERT_EQUAL(std::string("POST /browsers"), c.method + " " + c.path);
        CPPUNIT_ASSERT_EQUAL(json({{"name", "p"}, {"save_changes", true}}), c.body.at("profile"));
        CPPUNIT_ASSERT_EQUAL(800, c.body.at("viewport").at("width").get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("ext"), c.body.at("extensions").at(0).at("name").get<std::string>());
        CPPUNIT_ASSERT(r.at("result").at("content").at(0).at("text").get<std::string>().find("s1") !=
                       std::string::npos);
    }

    void batchesActionsAndReturnsTheScreenshotAsAnImage() {
        FakeApi api;
        api.answer(200, "");                                                              // batch
        api.answer(200, "\x89PNG-bytes", {{"Content-Type", "image/png"}});                // screenshot
        api.answer(200, R"({"session_id":"s1","viewport":{"width":1024,"height":768}})"); // get
        auto r = call(api, "computer_action",
                      {{"session_id", "s1"},
                       {"actions",
                        {{{"type", "click_mouse"}, {"click_mouse", {{"x", 1}, {"y", 2}}}},
                         {{"type", "type_text"}, {"type_text", {{"text", "hi"}}}},
                         {{"type", "screenshot"}}}}});
        CPPUNIT_ASSERT_EQUAL(std::string("/browsers/s1/computer/batch"), api.calls.at(0).path);
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), api.calls.at(0).body.at("actions").size());
        CPPUNIT_ASSERT_EQUAL(std::string("/browsers/s1/computer/screenshot"), api.calls.at(1).path);
        const auto &content = r.at("result").at("content");
        const auto &image = content.back();
        CPPUNIT_ASSERT_EQUAL(std::string("image"), image.at("type").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("image/png"), image.at("mimeType").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("\x89PNG-bytes"),
                             hangar::cdp::base64_decode(image.at("data").get<std::string>()));
        CPPUNIT_ASSERT(content.dump().find("1024x768") != std::string::npos);
    }

    void apiFailuresAreToolErrors() {
        FakeApi api;
        api.answer(404, R"({"code":"not_found","message":"browser session not found"})");
        auto r = call(api, "manage_browsers", {{"action", "get"}, {"session_id", "nope"}});
        CPPUNIT_ASSERT(r.at("result").at("isError").get<bool>());
        auto text = r.at("result").at("content").at(0).at("text").get<std::string>();
        CPPUNIT_ASSERT(text.find("404 not_found: browser session not found") != std::string::npos);
    }

    void badArgumentsAreProtocolErrors() {
        FakeApi api;
        auto r = call(api, "manage_browsers", {{"action", "explode"}});
        CPPUNIT_ASSERT_EQUAL(kInvalidParams, r.at("error").at("code").get<int>());
        r = call(api, "computer_action",
                 {{"session_id", "s"}, {"actions", {{{"type", "screenshot"}}, {{"type", "sleep"}}}}});
        CPPUNIT_ASSERT_EQUAL(kInvalidParams, r.at("error").at("code").get<int>());
        r = call(api, "exec_command", {{"session_id", "s"}});
        CPPUNIT_ASSERT_EQUAL(kInvalidParams, r.at("error").at("code").get<int>());
        CPPUNIT_ASSERT(api.calls.empty());
    }

    void playwrightWithoutASessionCleansUp() {
        FakeApi api;
        api.answer(200, R"({"session_id":"tmp"})");
        api.answer(500, R"({"code":"internal","message":"boom"})");
        api.answer(204, "");
        auto r = call(api, "execute_playwright_code", {{"code", "return 1"}});
        CPPUNIT_ASSERT(r.at("result").at("isError").get<bool>());
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), api.calls.size());
        CPPUNIT_ASSERT_EQUAL(std::string("DELETE /browsers/tmp"), api.calls.at(2).method + " " + api.calls.at(2).path);
    }

    void pathsAreEncoded() {
        CPPUNIT_ASSERT_EQUAL(std::string("a%2Fb%3Fc%20d"), path_segment("a/b?c d"));
        FakeApi api;
        api.answer(200, "[]", {{"X-Has-More", "false"}});
        call(api, "manage_profiles", {{"action", "list"}, {"query", "a&b"}});
        CPPUNIT_ASSERT_EQUAL(std::string("/profiles?query=a%26b"), api.calls.at(0).path);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(McpModelTest);
