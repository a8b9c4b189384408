// sdk/include/hangar/web.hpp: which URLs a Hangar page may redirect a browser to, and the
// Content-Security-Policy every page gets.
#include <hangar/web.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <string>
#include <vector>

using hangar::web::origin_of;
using hangar::web::redirect_problem;

class SdkWebTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkWebTest);
    CPPUNIT_TEST(origins);
    CPPUNIT_TEST(redirects);
    CPPUNIT_TEST(originList);
    CPPUNIT_TEST(policy);
    CPPUNIT_TEST_SUITE_END();

public:
    void origins() {
        CPPUNIT_ASSERT_EQUAL(std::string("https://app.example"), *origin_of("HTTPS://App.Example:443/x?y#z"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://127.0.0.1:8080"), *origin_of("http://127.0.0.1:8080"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://[::1]:81"), *origin_of("http://[::1]:81/"));
        for (const char *bad :
             {"javascript:alert(1)", "JavaScript://%0aalert(1)", "data:text/html,x", "//evil.example/", "/relative",
              "ftp://x.example/", "http://user@evil.example/", "http://good.example\\@evil.example/",
              "http://good.example%2f@evil/", "http://%65vil.example/", "http://a b/", "java\tscript:alert(1)",
              "http:///x", "http://x.example:99999/", "http://x.example:0/", "http://x:80a/", "https://[::1/",
              "vbscript:x", ""})
            CPPUNIT_ASSERT_MESSAGE(bad, !origin_of(bad));
    }

    void redirects() {
        const std::string self = "http://127.0.0.1:8080";
        const std::vector<std::string> allowed = {"https://app.example"};
        CPPUNIT_ASSERT(!redirect_problem("http://127.0.0.1:8080/done?x=1", self, allowed));
        CPPUNIT_ASSERT(!redirect_problem("https://app.example/cb", self, allowed));
        CPPUNIT_ASSERT(redirect_problem("http://app.example/cb", self, allowed)); // another scheme, another origin
        CPPUNIT_ASSERT(redirect_problem("https://app.example.evil/cb", self, allowed));
        CPPUNIT_ASSERT(redirect_problem("http://127.0.0.1:8081/", self, allowed));
        CPPUNIT_ASSERT(redirect_problem("javascript:location='http://127.0.0.1:8080/'", self, allowed));
        CPPUNIT_ASSERT(redirect_problem("/done", self, allowed)); // relative: not guessed at
    }

    void originList() {
        std::vector<std::string> bad;
        auto list = hangar::web::origin_list("https://a.example, http://b.example:8080 javascript:x", &bad);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, list.size());
        CPPUNIT_ASSERT_EQUAL(std::string("http://b.example:8080"), list[1]);
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, bad.size());
    }

    void policy() {
        hangar::web::PagePolicy p;
        std::string csp = hangar::web::csp(p, "N0nce");
        CPPUNIT_ASSERT(csp.find("default-src 'none'") != std::string::npos);
        CPPUNIT_ASSERT(csp.find("script-src 'nonce-N0nce';") != std::string::npos);
        CPPUNIT_ASSERT(csp.find("frame-ancestors 'none'") != std::string::npos);
        CPPUNIT_ASSERT(csp.find("base-uri 'none'") != std::string::npos);
        CPPUNIT_ASSERT(csp.find("form-action 'self'") != std::string::npos);
        CPPUNIT_ASSERT(csp.find("unsafe") == std::string::npos);
        auto a = hangar::web::nonce(), b = hangar::web::nonce();
        CPPUNIT_ASSERT(a != b);
        CPPUNIT_ASSERT_EQUAL(std::size_t{24}, a.size());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkWebTest);
