// Tokens: HS256 capability tokens for URLs (cdp_ws_url, live view).
#include "secrets.hpp"
#include "store.hpp"
#include "test_support.hpp"
#include "tokens.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <Poco/JWT/Signer.h>
#include <Poco/JWT/Token.h>

#include <sys/stat.h>

using hangar::host::Tokens;
using hangar::test::TempDir;
using nlohmann::json;

namespace {

const std::string kSecret = "0123456789abcdefghijklmnopqrstuvwxyz-test-secret";

std::string b64url(const std::string &in) {
    static const char *tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                     static_cast<unsigned char>(in[i + 2]);
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += tbl[(v >> 6) & 63];
        out += tbl[v & 63];
    }
    if (i + 1 == in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
    } else if (i + 2 == in.size()) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += tbl[(v >> 6) & 63];
    }
    return out;
}

std::vector<std::string> parts(const std::string &token) {
    return hangar::host::split(token, '.');
}

std::int64_t now_s() {
    return hangar::host::now_ms() / 1000;
}

} // namespace

class TokensTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TokensTest);
    CPPUNIT_TEST(testRoundTrip);
    CPPUNIT_TEST(testTamperedSignatureRefused);
    CPPUNIT_TEST(testTamperedPayloadRefused);
    CPPUNIT_TEST(testOtherSecretRefused);
    CPPUNIT_TEST(testExpiredRefused);
    CPPUNIT_TEST(testWithoutExpiryRefused);
    CPPUNIT_TEST(testAlgNoneRefused);
    CPPUNIT_TEST(testOtherAlgorithmRefused);
    CPPUNIT_TEST(testGarbageRefused);
    CPPUNIT_TEST(testSecretFile);
    CPPUNIT_TEST(testSharedThroughTheStore);
    CPPUNIT_TEST_SUITE_END();

public:
    void testRoundTrip() {
        Tokens t(kSecret, 0);
        json claims = {{"sub", "browser_abc"}, {"scope", "cdp"}, {"n", 42}, {"nested", {{"a", true}}}};
        auto token = t.sign(claims, 300);
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), parts(token).size());
        auto back = t.verify(token);
        CPPUNIT_ASSERT(back.has_value());
        CPPUNIT_ASSERT_EQUAL(std::string("browser_abc"), (*back)["sub"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("cdp"), (*back)["scope"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(42, (*back)["n"].get<int>());
        CPPUNIT_ASSERT_EQUAL(true, (*back)["nested"]["a"].get<bool>());
        CPPUNIT_ASSERT(back->contains("exp"));
        auto exp = (*back)["exp"].get<std::int64_t>();
        CPPUNIT_ASSERT_MESSAGE(std::to_string(exp), exp >= now_s() + 298 && exp <= now_s() + 301);
        // The header says HS256.
        Poco::JWT::Token parsed(token);
        CPPUNIT_ASSERT_EQUAL(std::string("HS256"), parsed.getAlgorithm());
    }

    void testTamperedSignatureRefused() {
        Tokens t(kSecret, 0);
        auto token = t.sign({{"sub", "x"}}, 300);
        auto p = parts(token);
        std::string sig = p[2];
        // Flip characters in the middle of the signature (the last one may only carry padding bits).
        for (std::size_t pos : {std::size_t(0), sig.size() / 2, sig.size() - 2}) {
            std::string bad = sig;
            bad[pos] = bad[pos] == 'A' ? 'B' : 'A';
            CPPUNIT_ASSERT(!t.verify(p[0] + "." + p[1] + "." + bad).has_value());
        }
        CPPUNIT_ASSERT(!t.verify(p[0] + "." + p[1] + ".").has_value());
        CPPUNIT_ASSERT(!t.verify(p[0] + "." + p[1]).has_value());
    }

    void testTamperedPayloadRefused() {
        Tokens t(kSecret, 0);
        auto token = t.sign({{"sub", "browser_a"}}, 300);
        auto p = parts(token);
        json forged = {{"sub", "browser_b"}, {"exp", now_s() + 300}};
        CPPUNIT_ASSERT(!t.verify(p[0] + "." + b64url(forged.dump()) + "." + p[2]).has_value());
    }

    void testOtherSecretRefused() {
        Tokens a(kSecret, 0), b("another-secret-that-is-long-enough-0123456789", 0);
        auto token = a.sign({{"sub", "x"}}, 300);
        CPPUNIT_ASSERT(a.verify(token).has_value());
        CPPUNIT_ASSERT(!b.verify(token).has_value());
    }

    void testExpiredRefused() {
        Tokens t(kSecret, 0);
        Poco::JWT::Token token;
        token.setType("JWT");
        token.payload().set("sub", std::string("x"));
        token.setExpiration(Poco::Timestamp() - Poco::Timespan(5, 0));
        auto text = Poco::JWT::Signer(kSecret).sign(token, Poco::JWT::Signer::ALGO_HS256);
        CPPUNIT_ASSERT(!t.verify(text).has_value());
        // The same, still valid, is accepted: the refusal above is about expiry alone.
        Poco::JWT::Token fresh;
        fresh.setType("JWT");
        fresh.payload().set("sub", std::string("x"));
        fresh.setExpiration(Poco::Timestamp() + Poco::Timespan(60, 0));
        CPPUNIT_ASSERT(t.verify(Poco::JWT::Signer(kSecret).sign(fresh, Poco::JWT::Signer::ALGO_HS256)).has_value());
    }

    void testWithoutExpiryRefused() {
        Tokens t(kSecret, 0);
        Poco::JWT::Token token;
        token.setType("JWT");
        token.payload().set("sub", std::string("forever"));
        auto text = Poco::JWT::Signer(kSecret).sign(token, Poco::JWT::Signer::ALGO_HS256);
        CPPUNIT_ASSERT(!t.verify(text).has_value());
    }

    void testAlgNoneRefused() {
        Tokens t(kSecret, 0);
        json payload = {{"sub", "x"}, {"exp", now_s() + 300}};
        for (const char *alg : {"none", "None", "NONE"}) {
            std::string head = b64url(json{{"alg", alg}, {"typ", "JWT"}}.dump());
            std::string body = b64url(payload.dump());
            CPPUNIT_ASSERT_MESSAGE(alg, !t.verify(head + "." + body + ".").has_value());
            CPPUNIT_ASSERT_MESSAGE(alg, !t.verify(head + "." + body).has_value());
            // Even carrying a genuine HS256 signature of the same payload under another header.
            auto real = parts(t.sign({{"sub", "x"}}, 300));
            CPPUNIT_ASSERT_MESSAGE(alg, !t.verify(head + "." + real[1] + "." + real[2]).has_value());
        }
    }

    void testOtherAlgorithmRefused() {
        Tokens t(kSecret, 0);
        Poco::JWT::Token token;
        token.setType("JWT");
        token.payload().set("sub", std::string("x"));
        token.setExpiration(Poco::Timestamp() + Poco::Timespan(300, 0));
        Poco::JWT::Signer signer(kSecret);
        signer.addAlgorithm(Poco::JWT::Signer::ALGO_HS512);
        auto text = signer.sign(token, Poco::JWT::Signer::ALGO_HS512);
        CPPUNIT_ASSERT(!t.verify(text).has_value());
    }

    void testGarbageRefused() {
        Tokens t(kSecret, 0);
        for (const char *g : {"", ".", "..", "a.b.c", "not a token", "eyJhbGciOiJIUzI1NiJ9.%%%.abc"})
            CPPUNIT_ASSERT_MESSAGE(g, !t.verify(g).has_value());
    }

    void testSecretFile() {
        TempDir dir;
        auto file = dir / "token.secret";
        std::string token;
        {
            Tokens t(file);
            token = t.sign({{"sub", "x"}}, 60);
        }
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat(file.c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0600u, static_cast<unsigned>(st.st_mode & 0777));
        CPPUNIT_ASSERT(hangar::host::trim(hangar::host::read_file(file)).size() >= 32);
        // A restart reads the same secret: earlier tokens stay valid.
        Tokens again(file);
        CPPUNIT_ASSERT(again.verify(token).has_value());
        // A too-short secret file is replaced with a strong one.
        hangar::test::write_text(dir / "weak.secret", "short\n");
        Tokens weak(dir / "weak.secret");
        CPPUNIT_ASSERT(hangar::host::trim(hangar::host::read_file(dir / "weak.secret")).size() >= 32);
        CPPUNIT_ASSERT(!weak.verify(token).has_value());
    }

    // Two nodes of one store (two data dirs, one secrets key): a token either signs verifies on
    // the other. The first keeps its old per-data-dir secret, so earlier URLs stay valid; the
    // store holds the secret sealed, never as text.
    void testSharedThroughTheStore() {
        TempDir dir;
        hangar::host::Store store(dir / "db.sqlite");
        hangar::host::migrate_secret_registry(store);
        const std::string key = dir / "secrets.key";
        hangar::test::write_text(dir / "a.secret", kSecret + "\n");
        std::string earlier = Tokens(kSecret, 0).sign({{"sub", "before"}}, 60);

        Tokens a = Tokens::shared(store, key, dir / "a.secret");
        Tokens b = Tokens::shared(store, key, dir / "b.secret"); // no file of its own
        CPPUNIT_ASSERT(a.verify(earlier).has_value());
        CPPUNIT_ASSERT(b.verify(earlier).has_value());
        CPPUNIT_ASSERT(b.verify(a.sign({{"sub", "x"}}, 60)).has_value());
        CPPUNIT_ASSERT(!std::filesystem::exists(dir / "b.secret"));

        auto rows = store.exec("SELECT sealed FROM host_keys");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size());
        const std::string sealed = rows[0].at("sealed").get<std::string>();
        CPPUNIT_ASSERT(sealed.rfind("hs1:", 0) == 0);
        CPPUNIT_ASSERT(sealed.find(kSecret) == std::string::npos);
        // Declared, so `hangar admin rotate-secrets-key` re-seals it.
        CPPUNIT_ASSERT_EQUAL(std::size_t(1),
                             store.exec("SELECT 1 FROM secret_columns WHERE table_name = 'host_keys'").size());
        auto rotation = hangar::host::rotate_secrets_key(store, key);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rotation.values);
        CPPUNIT_ASSERT(Tokens::shared(store, key, dir / "c.secret").verify(earlier).has_value());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TokensTest);
