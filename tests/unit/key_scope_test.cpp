// Statement-scoped API keys (kernel-api-0131 §2.8): the policy grammar (hangar/key_policy.hpp)
// and which action each route needs (key_scope.hpp). Pure logic, no server; the e2e side is
// tests/python/test_0131_key_policy.py.
#include "key_scope.hpp"

#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::host;
namespace kp = hangar::key_policy;
using json = nlohmann::json;

namespace {

std::vector<kp::Statement> statements(std::initializer_list<std::pair<const char *, const char *>> list) {
    std::vector<kp::Statement> out;
    for (const auto &[a, r] : list)
        out.push_back({a, r});
    return out;
}

std::string refusal(const std::vector<kp::Statement> &st, const std::string &method, const std::string &pattern,
                    const std::map<std::string, std::string> &params = {}, const json &body = nullptr) {
    auto r = scope_check(st, scope_need(method, pattern), method, pattern, params, body, "org_a", "proj_a");
    return r ? r->message : std::string();
}

} // namespace

class KeyScopeTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(KeyScopeTest);
    CPPUNIT_TEST(testParsesTheFourResourceForms);
    CPPUNIT_TEST(testRefusesBadPolicies);
    CPPUNIT_TEST(testMatchesOnlyWhatIsNamed);
    CPPUNIT_TEST(testRoutesNeedTheirAction);
    CPPUNIT_TEST(testUnnamedRoutesAreRefused);
    CPPUNIT_TEST(testBrowserAttachmentsNeedTheirOwnGrant);
    CPPUNIT_TEST(testListsAreCutToWhatIsGranted);
    CPPUNIT_TEST_SUITE_END();

public:
    void testParsesTheFourResourceForms() {
        using Scope = kp::Resource::Scope;
        CPPUNIT_ASSERT(kp::parse_resource("organizations/org_a/*")->scope == Scope::organization);
        CPPUNIT_ASSERT(kp::parse_resource("projects/proj_a/*")->scope == Scope::project);
        CPPUNIT_ASSERT(kp::parse_resource("projects/*/*")->owner == "*");
        CPPUNIT_ASSERT(kp::parse_resource("projects/proj_a/vaults/*")->scope == Scope::kind);
        auto one = kp::parse_resource("projects/proj_a/browsers/abc123");
        CPPUNIT_ASSERT(one->scope == Scope::object && one->kind == "browsers" && one->object == "abc123");
        for (const char *bad :
             {"", "projects", "projects/proj_a", "projects/proj_a/apps/x", "projects/a b/*", "organizations/org_a",
              "projects/proj_a/browsers/x/y", "projects//*", "projects/proj_a/browsers/../x"})
            CPPUNIT_ASSERT_MESSAGE(bad, !kp::parse_resource(bad));
    }

    void testRefusesBadPolicies() {
        auto problems = [](const json &p) { return kp::parse(p).problems.size(); };
        CPPUNIT_ASSERT_EQUAL(std::size_t{0},
                             problems({{"statements", {{{"action", "browsers:use"}, {"resource", "projects/p/*"}}}}}));
        CPPUNIT_ASSERT(problems(json::object()) > 0);
        CPPUNIT_ASSERT(problems({{"statements", json::array()}}) > 0);
        CPPUNIT_ASSERT(problems({{"statements", {{{"action", "browsers:read"}, {"resource", "projects/p/*"}}}}}) > 0);
        CPPUNIT_ASSERT(problems({{"statements", {{{"action", "apps:use"}, {"resource", "projects/p/*"}}}}}) > 0);
        CPPUNIT_ASSERT(problems({{"statements", {{{"action", "profiles:use"}, {"resource", "projects/p/vaults/v"}}}}}) >
                       0);
        CPPUNIT_ASSERT(
            problems({{"statements", {{{"action", "browsers:create"}, {"resource", "projects/p/browsers/*"}}}}}) > 0);
        CPPUNIT_ASSERT(problems({{"statements", {{{"action", "browsers:use"}}}}}) > 0);
        CPPUNIT_ASSERT(
            problems({{"statements", {{{"action", "browsers:use"}, {"resource", "projects/p/*"}, {"x", 1}}}}}) > 0);
        json many = json::array();
        for (int i = 0; i < 101; ++i)
            many.push_back({{"action", "browsers:use"}, {"resource", "projects/p/*"}});
        CPPUNIT_ASSERT(problems({{"statements", many}}) > 0);
    }

    void testMatchesOnlyWhatIsNamed() {
        auto st = statements({{"browsers:use", "projects/proj_a/browsers/b1"},
                              {"profiles:read", "projects/proj_a/profiles/*"},
                              {"vaults:use", "organizations/org_a/*"}});
        CPPUNIT_ASSERT(kp::allows(st, "browsers:use", "org_a", "proj_a", "b1"));
        CPPUNIT_ASSERT(!kp::allows(st, "browsers:use", "org_a", "proj_a", "b2"));
        CPPUNIT_ASSERT(!kp::allows(st, "browsers:use", "org_a", "proj_b", "b1"));
        CPPUNIT_ASSERT(!kp::allows(st, "browsers:delete", "org_a", "proj_a", "b1"));
        CPPUNIT_ASSERT(!kp::allows(st, "browsers:use", "org_a", "proj_a", ""));
        CPPUNIT_ASSERT(kp::allows(st, "profiles:read", "org_a", "proj_a", "any-name"));
        CPPUNIT_ASSERT(!kp::allows(st, "profiles:use", "org_a", "proj_a", "any-name"));
        CPPUNIT_ASSERT(kp::allows(st, "vaults:use", "org_a", "proj_z", "v"));
        CPPUNIT_ASSERT(!kp::allows(st, "vaults:use", "org_b", "proj_z", "v"));
        CPPUNIT_ASSERT(kp::grants_any(st, "browsers:use", "org_a", "proj_a"));
        CPPUNIT_ASSERT(!kp::grants_any(st, "browsers:use", "org_a", "proj_b"));
        CPPUNIT_ASSERT(!kp::grants_any(st, "proxies:read", "org_a", "proj_a"));
    }

    void testRoutesNeedTheirAction() {
        auto st = statements({{"browsers:create", "projects/proj_a/*"},
                              {"browsers:use", "projects/proj_a/browsers/b1"},
                              {"vaults:read", "projects/proj_a/vaults/v1"},
                              {"profiles:use", "projects/proj_a/profiles/p1"}});
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "POST", "/browsers"));
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "GET", "/browsers"));
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "GET", "/browsers/{id_or_name}", {{"id_or_name", "b1"}}));
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "POST", "/browsers/{id}/process/exec", {{"id", "b1"}}));
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers/{id}/process/exec", {{"id", "b2"}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "DELETE", "/browsers/{id_or_name}", {{"id_or_name", "b1"}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "PATCH", "/browsers/{id_or_name}", {{"id_or_name", "b1"}}).empty());
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "GET", "/vaults/{id_or_name}/items/{key}",
                                                    {{"id_or_name", "v1"}, {"key", "k"}}));
        CPPUNIT_ASSERT(
            !refusal(st, "PUT", "/vaults/{id_or_name}/items/{key}", {{"id_or_name", "v1"}, {"key", "k"}}).empty());
        CPPUNIT_ASSERT(
            !refusal(st, "POST", "/vaults/{id_or_name}/items/{key}/operations", {{"id_or_name", "v1"}, {"key", "k"}})
                 .empty());
        CPPUNIT_ASSERT_EQUAL(std::string(),
                             refusal(st, "GET", "/profiles/{id_or_name}/download", {{"id_or_name", "p1"}}));
        CPPUNIT_ASSERT(!refusal(st, "GET", "/profiles/{id_or_name}", {{"id_or_name", "p1"}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "POST", "/profiles").empty());
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "GET", "/auth/context"));
    }

    void testUnnamedRoutesAreRefused() {
        auto all =
            statements({{"browsers:use", "organizations/org_a/*"}, {"browsers:create", "organizations/org_a/*"}});
        for (const auto &[method, pattern] :
             std::vector<std::pair<std::string, std::string>>{{"GET", "/org/api_keys"},
                                                              {"POST", "/org/api_keys"},
                                                              {"GET", "/projects"},
                                                              {"GET", "/org/limits"},
                                                              {"POST", "/browser_pools"},
                                                              {"GET", "/credentials"},
                                                              {"POST", "/deployments"},
                                                              {"GET", "/audit-logs"},
                                                              {"DELETE", "/browsers"},
                                                              {"PUT", "/vaults/fill"},
                                                              {"POST", "/browsers/{id}/extensions"}})
            CPPUNIT_ASSERT_MESSAGE(method + " " + pattern, !refusal(all, method, pattern, {{"id", "b1"}}).empty());
    }

    void testBrowserAttachmentsNeedTheirOwnGrant() {
        auto st = statements({{"browsers:create", "projects/proj_a/*"},
                              {"profiles:use", "projects/proj_a/profiles/p1"},
                              {"proxies:use", "projects/proj_a/proxies/*"}});
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "POST", "/browsers", {}, {{"profile", {{"id", "p1"}}}}));
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"profile", {{"id", "p2"}}}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"profile", {{"name", "p1-name"}}}}).empty());
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal(st, "POST", "/browsers", {}, {{"proxy_id", "x"}}));
        CPPUNIT_ASSERT_EQUAL(
            std::string(),
            refusal(st, "POST", "/browsers", {},
                    {{"network", {{"proxy_routes", {{{"hosts", {"a"}}, {"proxy", {{"name", "n"}}}}}}}}}));
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"vaults", {{{"id", "v1"}}}}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"extensions", {{{"name", "e"}}}}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"telemetry", {{"export", json::object()}}}}).empty());
        CPPUNIT_ASSERT(!refusal(st, "POST", "/browsers", {}, {{"invocation_id", "inv"}}).empty());
    }

    void testListsAreCutToWhatIsGranted() {
        auto st = statements({{"browsers:use", "projects/proj_a/browsers/b1"}});
        auto need = scope_need("GET", "/browsers");
        json list = json::array({{{"session_id", "b1"}}, {{"session_id", "b2"}}, 7});
        json kept = json::parse(scope_filter_list(st, need, list.dump(), "org_a", "proj_a"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, kept.size());
        CPPUNIT_ASSERT_EQUAL(std::string("b1"), kept[0]["session_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("{\"x\":1}"), scope_filter_list(st, need, "{\"x\":1}", "org_a", "proj_a"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(KeyScopeTest);
