// Unit tests of the credentials plugin's model: TOTP against RFC 6238's test vectors (SHA-1,
// SHA-256, SHA-512), otpauth URIs, base32 normalisation, the domain rule, host matching and
// 1Password items as login values.
#include "model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace credentials;

class CredentialsModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CredentialsModelTest);
    CPPUNIT_TEST(rfc6238Vectors);
    CPPUNIT_TEST(parameters);
    CPPUNIT_TEST(otpauthUris);
    CPPUNIT_TEST(sixDigitsAndExpiry);
    CPPUNIT_TEST(base32);
    CPPUNIT_TEST(domains);
    CPPUNIT_TEST(hosts);
    CPPUNIT_TEST(items);
    CPPUNIT_TEST_SUITE_END();

public:
    // RFC 6238 appendix B: every row, 8 digits, the ASCII keys of the RFC for each HMAC.
    void rfc6238Vectors() {
        const std::string sha1 = "12345678901234567890";
        const std::string sha256 = sha1 + "123456789012";
        const std::string sha512 = sha1 + sha1 + sha1 + "1234";
        struct Row {
            std::int64_t t;
            const char *sha1, *sha256, *sha512;
        };
        const Row rows[] = {
            {59, "94287082", "46119246", "90693936"},         {1111111109, "07081804", "68084774", "25091201"},
            {1111111111, "14050471", "67062674", "99943326"}, {1234567890, "89005924", "91819424", "93441116"},
            {2000000000, "69279037", "90698825", "38618901"}, {20000000000, "65353130", "77737706", "47863826"},
        };
        for (const auto &r : rows) {
            auto at = "T=" + std::to_string(r.t);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, std::string(r.sha1), totp(sha1, r.t, {"SHA1", 8, 30}));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, std::string(r.sha256), totp(sha256, r.t, {"SHA256", 8, 30}));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, std::string(r.sha512), totp(sha512, r.t, {"SHA512", 8, 30}));
        }
        // A 60 s step is the 30 s step's code at half the time.
        CPPUNIT_ASSERT_EQUAL(totp(sha1, 1111111109 / 2, {"SHA1", 8, 30}), totp(sha1, 1111111109, {"SHA1", 8, 60}));
    }

    void parameters() {
        CPPUNIT_ASSERT(!totp_params_problem({}));
        CPPUNIT_ASSERT(totp_params_problem({"MD5", 6, 30})->find("totp_algorithm") == 0);
        CPPUNIT_ASSERT(totp_params_problem({"SHA1", 9, 30})->find("totp_digits") == 0);
        CPPUNIT_ASSERT(totp_params_problem({"SHA1", 5, 30})->find("totp_digits") == 0);
        CPPUNIT_ASSERT(totp_params_problem({"SHA1", 6, 0})->find("totp_period") == 0);
        CPPUNIT_ASSERT(totp_params_problem({"SHA1", 6, 301})->find("totp_period") == 0);
        // The window ends with the step.
        auto secret = normalize_base32("GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
        CPPUNIT_ASSERT_EQUAL(std::int64_t(120'000), totp_now(*secret, 61'000, {"SHA1", 6, 60}).expires_at_ms);
    }

    void otpauthUris() {
        auto plain = parse_otp("jbsw y3dp ehpk 3pxp");
        CPPUNIT_ASSERT(plain && plain->secret == "JBSWY3DPEHPK3PXP" && !plain->algorithm && !plain->digits);
        CPPUNIT_ASSERT(!plain->from_uri);
        auto uri = parse_otp("otpauth://totp/Shop:ann@example.com?secret=JBSWY3DPEHPK3PXP&issuer=Shop&algorithm=sha256"
                             "&digits=8&period=60");
        CPPUNIT_ASSERT(uri);
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), uri->secret);
        CPPUNIT_ASSERT(uri->from_uri);
        auto p = uri->over({});
        CPPUNIT_ASSERT_EQUAL(std::string("SHA256"), p.algorithm);
        CPPUNIT_ASSERT_EQUAL(8U, p.digits);
        CPPUNIT_ASSERT_EQUAL(60U, p.period);
        // What the URI does not name stays as it was.
        auto base = parse_otp("otpauth://totp/x?digits=7&secret=JBSWY3DPEHPK3PXP")->over({"SHA512", 6, 45});
        CPPUNIT_ASSERT_EQUAL(std::string("SHA512"), base.algorithm);
        CPPUNIT_ASSERT_EQUAL(7U, base.digits);
        CPPUNIT_ASSERT_EQUAL(45U, base.period);
        CPPUNIT_ASSERT(!parse_otp("otpauth://totp/x?issuer=y"));
        CPPUNIT_ASSERT(!parse_otp("not base32!"));
        CPPUNIT_ASSERT_THROW(parse_otp("otpauth://hotp/x?secret=JBSWY3DPEHPK3PXP&counter=1"), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_otp("otpauth://totp/x?secret=JBSWY3DPEHPK3PXP&algorithm=MD5"),
                             std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_otp("otpauth://totp/x?secret=JBSWY3DPEHPK3PXP&digits=10"), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_otp("otpauth://totp/x?secret=JBSWY3DPEHPK3PXP&period=x"), std::invalid_argument);
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
        CPPUNIT_ASSERT(login.totp);
        CPPUNIT_ASSERT_EQUAL(std::string("JBSWY3DPEHPK3PXP"), login.totp->secret);
        CPPUNIT_ASSERT(login_from_item(json::object()).values.empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CredentialsModelTest);
