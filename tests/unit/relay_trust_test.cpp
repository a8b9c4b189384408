// What relays trust (issue 40): the node-relay proof, the per-project cap on long requests, and
// the redaction of capability tokens from log lines. Pure logic, no server.
#include "core.hpp"
#include "log_format.hpp"
#include "relay_proof.hpp"

#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::host;

namespace {

const std::string kJwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzaWQiOiJhYmMiLCJ0eXAiOiJjZHAifQ.c2lnbmF0dXJlLWJ5dGVz";

} // namespace

class RelayTrustTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RelayTrustTest);
    CPPUNIT_TEST(testProofAcceptsItsOwnRequest);
    CPPUNIT_TEST(testProofBindsEveryPart);
    CPPUNIT_TEST(testProofExpires);
    CPPUNIT_TEST(testProofRefusesGarbage);
    CPPUNIT_TEST(testProofKeyIsNotTheTokenKey);
    CPPUNIT_TEST(testLongRequestsCapPerProject);
    CPPUNIT_TEST(testRedactsTokensInPathsAndQueries);
    CPPUNIT_TEST(testRedactionLeavesOtherTextAlone);
    CPPUNIT_TEST_SUITE_END();

public:
    void testProofAcceptsItsOwnRequest() {
        const auto key = relay_proof_key("store-token-secret-0123456789abcdef");
        const auto proof = relay_proof(key, "a", "POST", "/browsers?x=1", "Bearer k", 1000);
        CPPUNIT_ASSERT(proof.starts_with("v1.1000."));
        CPPUNIT_ASSERT(relay_proof_valid(key, proof, "a", "POST", "/browsers?x=1", "Bearer k", 1000));
        CPPUNIT_ASSERT(relay_proof_valid(key, proof, "a", "POST", "/browsers?x=1", "Bearer k", 1000 + 59'000));
    }

    void testProofBindsEveryPart() {
        const auto key = relay_proof_key("store-token-secret-0123456789abcdef");
        const auto proof = relay_proof(key, "a", "POST", "/browsers", "Bearer k", 1000);
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "b", "POST", "/browsers", "Bearer k", 1000));
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "a", "GET", "/browsers", "Bearer k", 1000));
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "a", "POST", "/browsers/x", "Bearer k", 1000));
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "a", "POST", "/browsers", "Bearer other", 1000));
        CPPUNIT_ASSERT(!relay_proof_valid(relay_proof_key("another store's secret"), proof, "a", "POST", "/browsers",
                                          "Bearer k", 1000));
        // Parts are length-prefixed: moving a character from one part to the next changes the input.
        const auto split = relay_proof(key, "ab", "C", "/", "", 1000);
        CPPUNIT_ASSERT(!relay_proof_valid(key, split, "a", "bC", "/", "", 1000));
    }

    void testProofExpires() {
        const auto key = relay_proof_key("s");
        const auto proof = relay_proof(key, "a", "GET", "/", "", 100'000);
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "a", "GET", "/", "", 100'000 + kRelayProofWindowMs + 1));
        CPPUNIT_ASSERT(!relay_proof_valid(key, proof, "a", "GET", "/", "", 100'000 - kRelayProofWindowMs - 1));
    }

    void testProofRefusesGarbage() {
        const auto key = relay_proof_key("s");
        const auto good = relay_proof(key, "a", "GET", "/", "", 5000);
        for (const std::string &bad :
             {std::string(), std::string("v1"), std::string("v1.5000"), std::string("v1.5000."),
              std::string("v2") + good.substr(2), std::string("v1.x5000.") + good.substr(good.rfind('.') + 1),
              good.substr(0, good.size() - 1), good + "0"})
            CPPUNIT_ASSERT_MESSAGE(bad, !relay_proof_valid(key, bad, "a", "GET", "/", "", 5000));
    }

    void testProofKeyIsNotTheTokenKey() {
        const std::string secret = "store-token-secret-0123456789abcdef";
        CPPUNIT_ASSERT(relay_proof_key(secret) != secret);
        CPPUNIT_ASSERT_EQUAL(std::size_t{32}, relay_proof_key(secret).size());
    }

    void testLongRequestsCapPerProject() {
        LongRequests lr;
        lr.set_limit(2);
        auto a1 = lr.try_acquire("a");
        auto a2 = lr.try_acquire("a");
        CPPUNIT_ASSERT(a1 && a2);
        CPPUNIT_ASSERT(!lr.try_acquire("a"));
        auto b1 = lr.try_acquire("b"); // another project is not held up by a's
        CPPUNIT_ASSERT(b1);
        auto copy = a1; // a stream's close callback keeps a copy: the place stays taken
        a1.reset();
        CPPUNIT_ASSERT(!lr.try_acquire("a"));
        copy.reset();
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, lr.held("a"));
        CPPUNIT_ASSERT(lr.try_acquire("a"));
        LongRequests uncapped;
        std::vector<LongRequests::Slot> many;
        for (int i = 0; i < 1000; ++i)
            many.push_back(uncapped.try_acquire("a"));
        CPPUNIT_ASSERT(many.back());
        many.clear();
        CPPUNIT_ASSERT_EQUAL(std::size_t{0}, uncapped.held("a"));
    }

    void testRedactsTokensInPathsAndQueries() {
        CPPUNIT_ASSERT_EQUAL(std::string("GET /browser/live/[token] 200 3ms id=x"),
                             redact_tokens("GET /browser/live/" + kJwt + " 200 3ms id=x"));
        CPPUNIT_ASSERT_EQUAL(std::string("GET /browser/live/[token]/ws 101"),
                             redact_tokens("GET /browser/live/" + kJwt + "/ws 101"));
        CPPUNIT_ASSERT_EQUAL(std::string("GET /replays/view/[token]/video.mp4"),
                             redact_tokens("/replays/view/" + kJwt + "/video.mp4").insert(0, "GET "));
        CPPUNIT_ASSERT_EQUAL(std::string("ws://h/browser/cdp?jwt=[token]"),
                             redact_tokens("ws://h/browser/cdp?jwt=" + kJwt));
        CPPUNIT_ASSERT_EQUAL(std::string("/browser/vm/s/fs/read_file?path=/x&jwt=[token]&y=1"),
                             redact_tokens("/browser/vm/s/fs/read_file?path=/x&jwt=not-a-jwt-but-secret&y=1"));
        CPPUNIT_ASSERT_EQUAL(std::string("bearer [token] refused"), redact_tokens("bearer " + kJwt + " refused"));
        CPPUNIT_ASSERT_EQUAL(std::string("{\"url\":\"[token]\"}"), redact_tokens("{\"url\":\"" + kJwt + "\"}"));
    }

    void testRedactionLeavesOtherTextAlone() {
        for (const std::string &same :
             {std::string("GET /browsers/abc123/fs/read_file 200 1ms id=q"), std::string("eyJ alone"),
              std::string("eyJabc.def without a third part"), std::string("keyJabc.def.ghi inside a word"),
              std::string("nojwt=here"), std::string("")})
            CPPUNIT_ASSERT_EQUAL(same, redact_tokens(same));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RelayTrustTest);
