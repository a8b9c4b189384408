// Unit tests of request signing's pure half: the RFC 7638 thumbprint (RFC 8037's Ed25519
// example), @authority, the exact signature base and headers, and a signature libsodium verifies.
#include "signer_extension.hpp"
#include "signing.hpp"

#include <hangar/zip.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <sodium.h>

#include <map>

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
    CPPUNIT_TEST(templateFilledIsWhatSignSigns);
    CPPUNIT_TEST(extensionIdAsChromiumDerivesIt);
    CPPUNIT_TEST(extensionZipAndCrx);
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

    // The signer extension fills the template in (sw.js: replaceAll of each placeholder); the
    // result must be the base and headers sign() makes for the same values, in both forms.
    void templateFilledIsWhatSignSigns() {
        auto key = signing::generate();
        for (auto form : {signing::AgentForm::string, signing::AgentForm::dictionary}) {
            signing::Params p;
            p.form = form;
            p.keyid = signing::thumbprint(key.public_key);
            p.agent = "https://hangar.example";
            p.created = 1700000000;
            p.expires = 1700003600;
            p.nonce = "bm9uY2U=";
            auto t = signing::signing_template(p);
            auto fill = [](std::string text) {
                for (auto [from, to] : {std::pair<std::string, std::string>{"{authority}", "example.com:8443"},
                                        {"{created}", "1700000000"},
                                        {"{expires}", "1700003600"},
                                        {"{nonce}", "bm9uY2U="}})
                    for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
                        text.replace(at, from.size(), to);
                return text;
            };
            CPPUNIT_ASSERT_EQUAL(signing::signature_base("example.com:8443", p), fill(t.base));
            auto h = signing::sign(key.secret_key, "example.com:8443", p);
            CPPUNIT_ASSERT_EQUAL(h.signature_agent, t.signature_agent);
            CPPUNIT_ASSERT_EQUAL(h.signature_input, fill(t.signature_input));
            CPPUNIT_ASSERT(h.signature.starts_with(t.signature_prefix));
        }
    }

    // An RSA key Chromium 156 packed an extension with (--pack-extension), and the id Chromium
    // installed that extension under (its folder in the profile's Extensions/).
    void extensionIdAsChromiumDerivesIt() {
        std::string der(1024, '\0');
        std::string b64 =
            "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAvTkGWkCICNs1ZJpdCAP4W6e1DW/"
            "QWLGuLUxhyiDQQ9chXFSvGEfmm1J8ZQu5tP1g+"
            "BJP0Fzq3DAut78rj3Fft+p2j1TvMi7KwPbWtxOZvuLRKt4KUExcB7Lyi1Fin17wJm4Hb/"
            "ASOPRKzBFQBgkkvmtcyrR4dKo1DziSHk8f6DLV6"
            "USEyXbc4SEIlk35LAAYH1YNZ2eL1h4apuRGvEJcBYNoNbcrKB1gHCUUAiK++AIMjKMK+9jBuRxc2nuHJS+Nrli+AzJ2G+iKLw3m//"
            "VCUDCX7t8P5TCCDJv9YrIQlTc9cGo0k3te5Eb8wnKQmsWNgpX+z4kMdb7RJbc0VC2n8wIDAQAB";
        std::size_t len = 0;
        CPPUNIT_ASSERT_EQUAL(0, sodium_base642bin(reinterpret_cast<unsigned char *>(der.data()), der.size(), b64.data(),
                                                  b64.size(), nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL));
        der.resize(len);
        CPPUNIT_ASSERT_EQUAL(std::string("alnmigejoiceiebapjpgaingdlmbeohd"), extension::id_of(der));
    }

    // The zip reads back whole (the e2e test has Chromium install the CRX itself); the CRX is
    // framed as CRX3 and each pack is a new key, so a new id.
    void extensionZipAndCrx() {
        const auto &files = extension::files();
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), files.size());
        std::string bytes = extension::zip(files);
        std::map<std::string, std::string> read;
        hangar::read_zip(bytes, hangar::ZipLimits{}, [&](hangar::ZipItem &&item) { read[item.rel] = item.data; });
        for (const auto &[name, content] : files)
            CPPUNIT_ASSERT_EQUAL(content, read[name]);
        CPPUNIT_ASSERT(read["manifest.json"].find("webRequestBlocking") != std::string::npos);
        auto a = extension::pack(bytes);
        auto b = extension::pack(bytes);
        CPPUNIT_ASSERT_EQUAL(std::string("Cr24\x03\0\0\0", 8), a.crx.substr(0, 8));
        CPPUNIT_ASSERT(a.crx.ends_with(bytes));
        CPPUNIT_ASSERT_EQUAL(std::size_t(32), a.id.size());
        CPPUNIT_ASSERT(a.id != b.id);
        CPPUNIT_ASSERT(extension::update_manifest(a.id, "file:///x.crx").find("appid='" + a.id + "'") !=
                       std::string::npos);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SigningTest);
