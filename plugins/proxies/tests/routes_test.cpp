// Unit tests of network.proxy_routes (routes.hpp): the hosts' grammar, one route per pattern, and
// which way a destination takes (exact over wildcard, longer suffix over shorter, the proxies'
// bypass lists, the browser's own proxy for the rest).
#include "routes.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <functional>

using namespace proxies;
using hangar::json;

namespace {

Upstream proxy(const std::string &host) {
    Upstream u;
    u.scheme = "http";
    u.host = host;
    u.port = 3128;
    return u;
}

void expect_invalid(const json &routes, const std::string &field) {
    try {
        parse_route_hosts(routes);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT_MESSAGE(std::string(e.what()) + " names " + field,
                               e.details_json().dump().find(field) != std::string::npos);
        return;
    }
    CPPUNIT_FAIL("expected 400 naming " + field);
}

} // namespace

class RoutesTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RoutesTest);
    CPPUNIT_TEST(hostsAreCheckedAndLowerCased);
    CPPUNIT_TEST(aPatternIsInOneRouteOnly);
    CPPUNIT_TEST(exactBeatsWildcardLongerBeatsShorter);
    CPPUNIT_TEST(theRestTakesTheBrowsersOwnWay);
    CPPUNIT_TEST_SUITE_END();

public:
    void hostsAreCheckedAndLowerCased() {
        auto hosts = parse_route_hosts(
            json::parse(R"([{"hosts":["API.Example.com","*.cdn.example"]},{"hosts":["203.0.113.7"]}])"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, hosts.size());
        CPPUNIT_ASSERT_EQUAL(std::string("api.example.com"), hosts[0][0]);
        CPPUNIT_ASSERT_EQUAL(std::string("*.cdn.example"), hosts[0][1]);
        expect_invalid(json::parse(R"([{"hosts":["*.com"]}])"), "network.proxy_routes[0].hosts[0]");
        expect_invalid(json::parse(R"([{"hosts":["a.example"]},{"hosts":["b.example","https://c.example"]}])"),
                       "network.proxy_routes[1].hosts[1]");
        expect_invalid(json::parse(R"([{"hosts":["203.0.113.0/24"]}])"), "network.proxy_routes[0].hosts[0]");
        expect_invalid(json::parse(R"([{"hosts":["10.0.0.1"]}])"), "network.proxy_routes[0].hosts[0]");
    }

    void aPatternIsInOneRouteOnly() {
        expect_invalid(json::parse(R"([{"hosts":["a.example"]},{"hosts":["b.example","A.example"]}])"),
                       "network.proxy_routes[1].hosts[1]");
        // Twice in one route is only redundant.
        parse_route_hosts(json::parse(R"([{"hosts":["a.example","a.example"]}])"));
    }

    void exactBeatsWildcardLongerBeatsShorter() {
        std::vector<HostRoute> routes = {{{"*.example.com"}, proxy("wide"), {}},
                                         {{"*.eu.example.com"}, proxy("eu"), {}},
                                         {{"login.eu.example.com", "[2001:db8::1]"}, proxy("exact"), {}}};
        auto via = [&](const char *host) {
            const HostRoute *r = route_for(routes, host);
            return r ? r->upstream.host : std::string("none");
        };
        CPPUNIT_ASSERT_EQUAL(std::string("exact"), via("login.eu.example.com"));
        CPPUNIT_ASSERT_EQUAL(std::string("exact"), via("LOGIN.eu.example.com."));
        CPPUNIT_ASSERT_EQUAL(std::string("exact"), via("2001:db8::1"));
        CPPUNIT_ASSERT_EQUAL(std::string("eu"), via("shop.eu.example.com"));
        CPPUNIT_ASSERT_EQUAL(std::string("wide"), via("www.example.com"));
        // A wildcard covers subdomains only.
        CPPUNIT_ASSERT_EQUAL(std::string("none"), via("example.com"));
        CPPUNIT_ASSERT_EQUAL(std::string("none"), via("badexample.com"));
    }

    void theRestTakesTheBrowsersOwnWay() {
        Route route;
        route.upstream = proxy("own");
        route.bypass_hosts = {"direct.example"};
        route.host_routes = {{{"*.routed.example"}, proxy("routed"), {"skip.routed.example"}}};
        CPPUNIT_ASSERT_EQUAL(std::string("routed"), upstream_for(route, "a.routed.example")->host);
        // The route's proxy bypasses this one: direct, not the browser's own proxy.
        CPPUNIT_ASSERT(upstream_for(route, "skip.routed.example") == nullptr);
        CPPUNIT_ASSERT_EQUAL(std::string("own"), upstream_for(route, "elsewhere.example")->host);
        CPPUNIT_ASSERT(upstream_for(route, "direct.example") == nullptr);
        route.upstream.reset();
        CPPUNIT_ASSERT(upstream_for(route, "elsewhere.example") == nullptr);
        CPPUNIT_ASSERT_EQUAL(std::string("routed"), upstream_for(route, "b.routed.example")->host);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RoutesTest);
