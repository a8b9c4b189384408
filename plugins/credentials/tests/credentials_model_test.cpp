// Unit tests of the credentials plugin's model: TOTP against RFC 6238's SHA-1 test vectors,
// base32 normalisation, the domain rule, host matching and 1Password items as login values.
#include "model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace credentials;

class CredentialsModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CredentialsModelTest);
    CPPUNIT_TEST(rfc6238Vectors);
    CPPUNIT_TEST(sixDigitsAndExpiry);
    CPPUNIT_TEST(base32);
    CPPUNIT_TEST(domains);
    CPPUNIT_TEST(hosts);
    CPPUNIT_TEST(items);
    CPPUNIT_TEST_SUITE_END();

public:
    // RFC 6238 appendix B, SHA-1 rows: the ASCII key "12345678901234567890", 8 digits.
    void rfc6238Vectors() {
        const std::string key = "12345678901234567890";
        const std::pair<std::int64_t, const char *> vectors[] = {
            {59, "94287082"},         {1111111109, "07081804"}, {1111111111, "14050471"},
            {1234567890, "89005924"}, {2000000000, "69279037"}, {20000000000, "65353130"},
        };
        for (const auto &[t, code] : vectors)
            CPPUNIT_ASSERT_EQUAL_MESSAGE("T=" + std::to_string(t), std::string(code), totp(key, t, 8));
    }

    void sixDigitsAndExpiry() {
        // The same key in base32; six digits are the last six of the eight.
        auto secret = normalize_base32("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
        CPPUNIT_ASSERT(secret);
        auto code = totp_now(*secret, 59'000);
        CPPUNIT_ASSERT_EQUAL(std::string("287082"), code.code);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(60'000), code.expires_at_ms);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(90'000), totp_now(*secret, 60'000).expires_at_ms);
    }

    void base32() {
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), *normalize_base32("jbsw y3dp-ehpk 3pxp"));
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), *normalize_base32("JBSWY3DPEHPK3PXP===="));
        CPPUNIT_ASSERT(!normalize_base32(""));
        CPPUNIT_ASSERT(!normalize_base32("   "));
        CPPUNIT_ASSERT(!normalize_base32("not base32!"));
        CPPUNIT_ASSERT(!normalize_base32("JBSW1")); // 1 is not in the alphabet
        CPPUNIT_ASSERT(!normalize_base32("A"));     // decodes to nothing
        CPPUNIT_ASSERT_EQUAL(std::string("Hello!\xde\xad\xbe\xef"), base32_decode("JBSWY3DPEHPK3PXP"));
    }

    void domains() {
        for (const char *ok : {"example.com", "login.example.co.uk", "localhost", "127.0.0.1", "*.example.com",
                               "example.com:8443", "my_host.internal"})
            CPPUNIT_ASSERT_MESSAGE(ok, !domain_problem(ok));
        CPPUNIT_ASSERT(domain_problem(""));
        CPPUNIT_ASSERT(domain_problem("https://example.com")->find("scheme") != std::string::npos);
        CPPUNIT_ASSERT(domain_problem("example.com/login")->find("path") != std::string::npos);
        CPPUNIT_ASSERT(domain_problem("example.com?x=1"));
        CPPUNIT_ASSERT(domain_problem("exa mple.com"));
        CPPUNIT_ASSERT(domain_problem(".example.com"));
        CPPUNIT_ASSERT(domain_problem("example.com:http"));
    }

    void hosts() {
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), url_host("https://user:pw@Example.COM:8443/login?x#y"));
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), url_host("example.com/login"));
        CPPUNIT_ASSERT_EQUAL(std::string("*.example.com"), url_host("https://*.example.com"));
        CPPUNIT_ASSERT(host_matches("example.com", "EXAMPLE.com"));
        CPPUNIT_ASSERT(!host_matches("example.com", "login.example.com"));
        CPPUNIT_ASSERT(host_matches("*.example.com", "login.example.com"));
        CPPUNIT_ASSERT(host_matches("*.example.com", "a.b.example.com"));
        CPPUNIT_ASSERT(host_matches("*.example.com", "example.com"));
        CPPUNIT_ASSERT(!host_matches("*.example.com", "badexample.com"));
        CPPUNIT_ASSERT(!host_matches("*.example.com", "example.com.evil.net"));
        CPPUNIT_ASSERT(!host_matches("", "example.com"));
    }

    void items() {
        json item = {{"id", "i1"},
                     {"title", "Example"},
                     {"category", "LOGIN"},
                     {"fields",
                      {{{"id", "username"}, {"type", "STRING"}, {"purpose", "USERNAME"}, {"value", "ann"}},
                       {{"id", "password"}, {"type", "CONCEALED"}, {"purpose", "PASSWORD"}, {"value", "s3cret"}},
                       {{"id", "notes"}, {"type", "STRING"}, {"purpose", "NOTES"}, {"value", "not a login value"}},
                       {{"id", "x"}, {"type", "STRING"}, {"label", "account id"}, {"value", "42"}},
                       {{"id", "e"}, {"type", "STRING"}, {"label", "empty"}, {"value", ""}},
                       {{"id", "otp"},
                        {"type", "OTP"},
                        {"label", "one-time password"},
                        {"value", "otpauth://totp/Example:ann?secret=jbswy3dpehpk3pxp&issuer=Example"},
                        {"totp", "123456"}}}}};
        auto login = login_from_item(item);
        CPPUNIT_ASSERT_EQUAL(std::string("ann"), login.values.at("username").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("s3cret"), login.values.at("password").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("42"), login.values.at("account id").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), login.values.size());
        CPPUNIT_ASSERT(login.totp_secret);
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), *login.totp_secret);
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), *otp_secret("JBSW Y3DP EHPK 3PXP"));
        CPPUNIT_ASSERT(!otp_secret("otpauth://totp/x?issuer=y"));
        CPPUNIT_ASSERT(login_from_item(json::object()).values.empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CredentialsModelTest);
