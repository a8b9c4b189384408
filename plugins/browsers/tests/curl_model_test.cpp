// Unit tests of curl's request validation and answer rendering.
#include "curl_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::browsers;
using hangar::json;

class CurlModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CurlModelTest);
    CPPUNIT_TEST(request);
    CPPUNIT_TEST(rejections);
    CPPUNIT_TEST(origins);
    CPPUNIT_TEST(rendering);
    CPPUNIT_TEST(utf8);
    CPPUNIT_TEST_SUITE_END();

public:
    void request() {
        auto r = parse_curl_request({{"url", "https://example.com/a?b=1"},
                                     {"method", "POST"},
                                     {"headers", {{"X-A", "1"}}},
                                     {"body", "x"},
                                     {"response_encoding", "base64"},
                                     {"timeout_ms", 1500.5}});
        CPPUNIT_ASSERT_EQUAL(std::string("POST"), r.method);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), r.headers.size());
        CPPUNIT_ASSERT(r.body && *r.body == "x");
        CPPUNIT_ASSERT(r.base64_response);
        CPPUNIT_ASSERT_EQUAL(1501, r.timeout_ms);
        auto d = parse_curl_request({{"url", "http://x"}});
        CPPUNIT_ASSERT_EQUAL(std::string("GET"), d.method);
        CPPUNIT_ASSERT_EQUAL(kCurlDefaultTimeoutMs, d.timeout_ms);
    }

    static std::string first_problem(const json &body) {
        try {
            parse_curl_request(body);
        } catch (const hangar::Error &e) {
            return e.details().front().message;
        }
        return "";
    }

    void rejections() {
        CPPUNIT_ASSERT(first_problem(json::object()).rfind("url:", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "file:///etc/passwd"}}).rfind("url:", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://user@host/"}}).rfind("url:", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://x"}, {"method", "get"}}).rfind("method:", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://x"}, {"headers", {{"Bad Name", "v"}}}}).rfind("headers.", 0) ==
                       0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://x"}, {"headers", {{"X", "a\r\nb"}}}}).rfind("headers.X", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://x"}, {"body", "b"}}).rfind("body:", 0) == 0);
        CPPUNIT_ASSERT(first_problem({{"url", "http://x"}, {"timeout_ms", 300001}}).rfind("timeout_ms:", 0) == 0);
        CPPUNIT_ASSERT(
            first_problem({{"url", "http://x"}, {"response_encoding", "hex"}}).rfind("response_encoding:", 0) == 0);
    }

    void origins() {
        CPPUNIT_ASSERT_EQUAL(std::string("https://example.com:8443"), *http_origin("HTTPS://Example.com:8443/x?y#z"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://127.0.0.1:9"), *http_origin("http://127.0.0.1:9"));
        CPPUNIT_ASSERT(!http_origin("ftp://x/"));
        CPPUNIT_ASSERT(!http_origin("http:///path"));
    }

    void rendering() {
        CurlResponse r{200,
                       {{"set-cookie", "a=1"},
                        {"SET-COOKIE", "b=2"},
                        {"content-type", "text/plain"},
                        {"transfer-encoding", "chunked"}},
                       "hi",
                       12.34};
        json out = render_curl_response(r, false);
        CPPUNIT_ASSERT_EQUAL(json({"a=1", "b=2"}).dump(), out["headers"]["Set-Cookie"].dump());
        CPPUNIT_ASSERT(out["headers"].contains("Content-Type"));
        CPPUNIT_ASSERT(!out["headers"].contains("Transfer-Encoding"));
        CPPUNIT_ASSERT_EQUAL(std::string("hi"), out["body"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("aGk="), render_curl_response(r, true)["body"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("X-Forwarded-For"), hangar::canonical_header_name("x-FORWARDED-for"));
    }

    void utf8() {
        CPPUNIT_ASSERT_EQUAL(std::string("a\xC3\xA9"), valid_utf8("a\xC3\xA9"));
        CPPUNIT_ASSERT_EQUAL(std::string("a\xEF\xBF\xBD"
                                         "b"),
                             valid_utf8("a\xFF"
                                        "b"));
        CPPUNIT_ASSERT_EQUAL(std::string("\xEF\xBF\xBD\xEF\xBF\xBD"), valid_utf8("\xC0\xAF")); // overlong '/'
        CPPUNIT_ASSERT_EQUAL(std::string("\xEF\xBF\xBD\xEF\xBF\xBD"), valid_utf8("\xE2\x82")); // cut short: per byte
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CurlModelTest);
