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
    CPPUNIT_TEST(sameHeadersAsKernelsExtension);
    CPPUNIT_TEST(agentForms);
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
        p.form = signing::AgentForm::dictionary;
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

    // The string form, byte for byte what Kernel's extension sends. Ed25519 is deterministic, so
    // with RFC 9421 §B.1.4's test key and a fixed nonce the whole Signature is pinned. The
    // expected headers were made by Cloudflare's signer (npm web-bot-auth 0.1.3,
    // signatureHeadersSync, the call Kernel's extension makes) for https://example.com:8443/path
    // with `Signature-Agent: "https://hangar.example"`.
    void sameHeadersAsKernelsExtension() {
        std::string seed = from_base64url("n4Ni-HpISpVObnQMW0wOhCKROaIKqKtW_2ZYb2p9KcU");
        std::string pk(crypto_sign_PUBLICKEYBYTES, '\0'), sk(crypto_sign_SECRETKEYBYTES, '\0');
        crypto_sign_seed_keypair(reinterpret_cast<unsigned char *>(pk.data()),
                                 reinterpret_cast<unsigned char *>(sk.data()),
                                 reinterpret_cast<const unsigned char *>(seed.data()));
        signing::Params p;
        p.keyid = signing::thumbprint(pk);
        CPPUNIT_ASSERT_EQUAL(std::string("poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U"), p.keyid);
        p.agent = "https://hangar.example";
        p.created = 1700000000;
        p.expires = 1700003600;
        p.nonce = signing::base64(std::string(64, '\x07'));
        auto h = signing::sign(sk, signing::authority("https://example.com:8443/path?q=1"), p);
        CPPUNIT_ASSERT_EQUAL(std::string("\"https://hangar.example\""), h.signature_agent);
        CPPUNIT_ASSERT_EQUAL(
            std::string("sig1=(\"@authority\" \"signature-agent\");created=1700000000;keyid=\"poqkLGiymh_"
                        "W0uP6PZFw-dvez3QJT5SolqXBCW38r0U\";alg=\"ed25519\";expires=1700003600;nonce=\"") +
                p.nonce + "\";tag=\"web-bot-auth\"",
            h.signature_input);
        CPPUNIT_ASSERT_EQUAL(std::string("sig1=:hF+FfEouybtkG1jKiOBFcbK57u42nzBJT4Tn+IF1E94x0tqtwg9/"
                                         "E6m71ERAq/i0QH+ST6yVjlao+E/ArhmaCg==:"),
                             h.signature);
    }

    void agentForms() {
        CPPUNIT_ASSERT(signing::parse_agent_form("string") == signing::AgentForm::string);
        CPPUNIT_ASSERT(signing::parse_agent_form("dictionary") == signing::AgentForm::dictionary);
        CPPUNIT_ASSERT(!signing::parse_agent_form("String"));
        CPPUNIT_ASSERT(!signing::parse_agent_form(""));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SigningTest);
