// Unit tests of request signing's pure half: the RFC 7638 thumbprint (RFC 8037's Ed25519
// example), @authority, the exact signature base and headers, and a signature libsodium verifies.
#include "signing.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <sodium.h>

using namespace proxies;

namespace {

std::string from_base64url(const std::string &text) {
    std::string out(text.size(), '\0');
    std::size_t len = 0;
    if (sodium_base642bin(reinterpret_cast<unsigned char *>(out.data()), out.size(), text.data(), text.size(), nullptr,
                          &len, nullptr, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0)
        throw std::runtime_error("bad base64url");
    out.resize(len);
    return out;
}

} // namespace

class SigningTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SigningTest);
    CPPUNIT_TEST(thumbprintOfRfc8037Key);
    CPPUNIT_TEST(authorities);
    CPPUNIT_TEST(signatureBaseAndHeaders);
    CPPUNIT_TEST_SUITE_END();

public:
    void thumbprintOfRfc8037Key() {
        std::string x = from_base64url("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        CPPUNIT_ASSERT_EQUAL(std::string("kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"), signing::thumbprint(x));
        auto jwk = signing::public_jwk(x);
        CPPUNIT_ASSERT_EQUAL(std::string("OKP"), jwk.at("kty").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"),
                             jwk.at("x").get<std::string>());
    }

    void authorities() {
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), signing::authority("https://Example.COM/a?b"));
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), signing::authority("https://example.com:443/"));
        CPPUNIT_ASSERT_EQUAL(std::string("example.com:8443"), signing::authority("https://example.com:8443"));
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1:8080"), signing::authority("http://u:p@127.0.0.1:8080/x"));
        CPPUNIT_ASSERT_EQUAL(std::string("[::1]:81"), signing::authority("http://[::1]:81/"));
        CPPUNIT_ASSERT_EQUAL(std::string("[::1]"), signing::authority("http://[::1]/"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), signing::authority("data:text/plain,x"));
        CPPUNIT_ASSERT(signing::valid_agent("https://hangar.example"));
        CPPUNIT_ASSERT(!signing::valid_agent("https://a\"b"));
        CPPUNIT_ASSERT(!signing::valid_agent(""));
    }

    void signatureBaseAndHeaders() {
        auto key = signing::generate();
        signing::Params p;
        p.keyid = signing::thumbprint(key.public_key);
        p.agent = "https://hangar.example";
        p.created = 1700000000;
        p.expires = 1700000060;
        std::string params = "(\"@authority\" \"signature-agent\";key=\"sig1\");created=1700000000;expires=1700000060;"
                             "keyid=\"" +
                             p.keyid + "\";alg=\"ed25519\";tag=\"web-bot-auth\"";
        std::string base = signing::signature_base("example.com", p);
        CPPUNIT_ASSERT_EQUAL(
            "\"@authority\": example.com\n\"signature-agent\";key=\"sig1\": \"https://hangar.example\"\n"
            "\"@signature-params\": " +
                params,
            base);
        auto h = signing::sign(key.secret_key, "example.com", p);
        CPPUNIT_ASSERT_EQUAL(std::string("sig1=\"https://hangar.example\""), h.signature_agent);
        CPPUNIT_ASSERT_EQUAL("sig1=" + params, h.signature_input);
        CPPUNIT_ASSERT(h.signature.starts_with("sig1=:") && h.signature.ends_with(":"));
        std::string b64 = h.signature.substr(6, h.signature.size() - 7);
        std::string sig(crypto_sign_BYTES, '\0');
        std::size_t len = 0;
        CPPUNIT_ASSERT_EQUAL(0, sodium_base642bin(reinterpret_cast<unsigned char *>(sig.data()), sig.size(), b64.data(),
                                                  b64.size(), nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL));
        auto u8 = [](const std::string &s) { return reinterpret_cast<const unsigned char *>(s.data()); };
        CPPUNIT_ASSERT_EQUAL(0, crypto_sign_verify_detached(u8(sig), u8(base), base.size(), u8(key.public_key)));
        // Another authority does not verify.
        std::string other = signing::signature_base("example.org", p);
        CPPUNIT_ASSERT(crypto_sign_verify_detached(u8(sig), u8(other), other.size(), u8(key.public_key)) != 0);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SigningTest);
