// Router: literal vs capture precedence, rest captures, percent-decoding, methods.
// router.hpp uses std::variant without including <variant> (reported); include it first.
#include <variant>

#include "router.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>

using hangar::host::Router;

namespace {

using R = Router<int>;

// The target of a match, or -1 (no path) / -2 (wrong method).
int target(const R &r, const std::string &method, const std::string &path) {
    auto found = r.find(method, path);
    if (auto *m = std::get_if<R::Match>(&found)) return *m->target;
    return std::get<R::Miss>(found) == R::Miss::NoPath ? -1 : -2;
}

std::map<std::string, std::string> params(const R &r, const std::string &method, const std::string &path) {
    auto found = r.find(method, path);
    auto *m = std::get_if<R::Match>(&found);
    CPPUNIT_ASSERT_MESSAGE("expected a match for " + method + " " + path, m != nullptr);
    return m->params;
}

} // namespace

class RouterTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(RouterTest);
    CPPUNIT_TEST(testLiteralBeatsCaptureWhateverTheOrder);
    CPPUNIT_TEST(testCaptureParams);
    CPPUNIT_TEST(testRoutesSharingANodeKeepTheirOwnNames);
    CPPUNIT_TEST(testBacktracksFromLiteralToCapture);
    CPPUNIT_TEST(testRestCapture);
    CPPUNIT_TEST(testPercentDecodedParamsKeepEncodedSlash);
    CPPUNIT_TEST(testTrailingAndDoubleSlashesIgnored);
    CPPUNIT_TEST(testWrongMethod);
    CPPUNIT_TEST(testHeadFallsBackToGet);
    CPPUNIT_TEST(testDuplicateRouteRefused);
    CPPUNIT_TEST(testNoPath);
    CPPUNIT_TEST_SUITE_END();

public:
    void testLiteralBeatsCaptureWhateverTheOrder() {
        R capture_first;
        CPPUNIT_ASSERT(capture_first.add("GET", "/extensions/{id_or_name}", 1));
        CPPUNIT_ASSERT(capture_first.add("GET", "/extensions/from_chrome_store", 2));
        R literal_first;
        CPPUNIT_ASSERT(literal_first.add("GET", "/extensions/from_chrome_store", 2));
        CPPUNIT_ASSERT(literal_first.add("GET", "/extensions/{id_or_name}", 1));
        for (const R *r : {&capture_first, &literal_first}) {
            CPPUNIT_ASSERT_EQUAL(2, target(*r, "GET", "/extensions/from_chrome_store"));
            CPPUNIT_ASSERT(params(*r, "GET", "/extensions/from_chrome_store").empty());
            CPPUNIT_ASSERT_EQUAL(1, target(*r, "GET", "/extensions/my-ext"));
            CPPUNIT_ASSERT_EQUAL(std::string("my-ext"), params(*r, "GET", "/extensions/my-ext").at("id_or_name"));
            // A literal segment may itself arrive percent-encoded.
            CPPUNIT_ASSERT_EQUAL(2, target(*r, "GET", "/extensions/from%5Fchrome%5Fstore"));
        }
    }

    void testCaptureParams() {
        R r;
        r.add("GET", "/browsers/{id}/replays/{replay_id}", 7);
        auto p = params(r, "GET", "/browsers/b123/replays/r9");
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), p.size());
        CPPUNIT_ASSERT_EQUAL(std::string("b123"), p.at("id"));
        CPPUNIT_ASSERT_EQUAL(std::string("r9"), p.at("replay_id"));
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/browsers/b123/replays"));
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/browsers/b123/replays/r9/extra"));
    }

    // Two plugins name the same position differently; a later registration must not rename the
    // earlier route's parameter.
    void testRoutesSharingANodeKeepTheirOwnNames() {
        R r;
        r.add("GET", "/browsers/{id_or_name}", 1);
        r.add("GET", "/browsers/{id}/fs/list_files", 2);
        r.add("GET", "/browsers/{id}/process/{process_id}/status", 3);
        CPPUNIT_ASSERT_EQUAL(std::string("b1"), params(r, "GET", "/browsers/b1").at("id_or_name"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), params(r, "GET", "/browsers/b1").size());
        CPPUNIT_ASSERT_EQUAL(std::string("b2"), params(r, "GET", "/browsers/b2/fs/list_files").at("id"));
        auto p = params(r, "GET", "/browsers/b3/process/p9/status");
        CPPUNIT_ASSERT_EQUAL(std::string("b3"), p.at("id"));
        CPPUNIT_ASSERT_EQUAL(std::string("p9"), p.at("process_id"));
    }

    void testBacktracksFromLiteralToCapture() {
        R r;
        r.add("GET", "/a/b/d", 1);
        r.add("GET", "/a/{x}/c", 2);
        CPPUNIT_ASSERT_EQUAL(1, target(r, "GET", "/a/b/d"));
        CPPUNIT_ASSERT_EQUAL(2, target(r, "GET", "/a/b/c"));
        auto p = params(r, "GET", "/a/b/c");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), p.size());
        CPPUNIT_ASSERT_EQUAL(std::string("b"), p.at("x"));
    }

    void testRestCapture() {
        R r;
        r.add("GET", "/browsers/{id}/fs/{path*}", 3);
        r.add("GET", "/browsers/{id}/fs/special", 4);
        auto p = params(r, "GET", "/browsers/b1/fs/home/kernel/a%20b.txt");
        CPPUNIT_ASSERT_EQUAL(3, target(r, "GET", "/browsers/b1/fs/home/kernel/a%20b.txt"));
        CPPUNIT_ASSERT_EQUAL(std::string("b1"), p.at("id"));
        CPPUNIT_ASSERT_EQUAL(std::string("home/kernel/a b.txt"), p.at("path"));
        CPPUNIT_ASSERT_EQUAL(std::string("x"), params(r, "GET", "/browsers/b1/fs/x").at("path"));
        // The literal still wins for exactly its path; longer paths fall to the rest capture.
        CPPUNIT_ASSERT_EQUAL(4, target(r, "GET", "/browsers/b1/fs/special"));
        CPPUNIT_ASSERT_EQUAL(3, target(r, "GET", "/browsers/b1/fs/special/more"));
        CPPUNIT_ASSERT_EQUAL(std::string("special/more"), params(r, "GET", "/browsers/b1/fs/special/more").at("path"));
    }

    void testPercentDecodedParamsKeepEncodedSlash() {
        R r;
        r.add("GET", "/profiles/{id_or_name}", 1);
        r.add("GET", "/profiles/{id_or_name}/x", 2);
        CPPUNIT_ASSERT_EQUAL(1, target(r, "GET", "/profiles/team%2Fmain"));
        CPPUNIT_ASSERT_EQUAL(std::string("team/main"), params(r, "GET", "/profiles/team%2Fmain").at("id_or_name"));
        CPPUNIT_ASSERT_EQUAL(2, target(r, "GET", "/profiles/team%2Fmain/x"));
        CPPUNIT_ASSERT_EQUAL(std::string("team/main"), params(r, "GET", "/profiles/team%2Fmain/x").at("id_or_name"));
        // Unencoded, the same text is two segments and is not that route.
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/profiles/team/main"));
        CPPUNIT_ASSERT_EQUAL(std::string("caf\xc3\xa9 & co"),
                             params(r, "GET", "/profiles/caf%C3%A9%20%26%20co").at("id_or_name"));
        // '+' is a literal plus in a path.
        CPPUNIT_ASSERT_EQUAL(std::string("a+b"), params(r, "GET", "/profiles/a+b").at("id_or_name"));
    }

    void testTrailingAndDoubleSlashesIgnored() {
        R r;
        r.add("GET", "/browsers/{id}", 1);
        r.add("GET", "/browsers", 2);
        CPPUNIT_ASSERT_EQUAL(2, target(r, "GET", "/browsers/"));
        CPPUNIT_ASSERT_EQUAL(1, target(r, "GET", "/browsers/abc/"));
        CPPUNIT_ASSERT_EQUAL(std::string("abc"), params(r, "GET", "/browsers/abc/").at("id"));
        CPPUNIT_ASSERT_EQUAL(1, target(r, "GET", "//browsers//abc"));
    }

    void testWrongMethod() {
        R r;
        r.add("GET", "/browsers/{id}", 1);
        r.add("DELETE", "/browsers/{id}", 2);
        CPPUNIT_ASSERT_EQUAL(2, target(r, "DELETE", "/browsers/x"));
        CPPUNIT_ASSERT_EQUAL(-2, target(r, "POST", "/browsers/x"));
        CPPUNIT_ASSERT_EQUAL(-2, target(r, "PATCH", "/browsers/x"));
        auto allowed = r.allowed_methods("/browsers/x");
        std::sort(allowed.begin(), allowed.end());
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), allowed.size());
        CPPUNIT_ASSERT_EQUAL(std::string("DELETE"), allowed[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("GET"), allowed[1]);
        CPPUNIT_ASSERT(r.allowed_methods("/nothing/here").empty());
    }

    void testHeadFallsBackToGet() {
        R r;
        r.add("GET", "/browsers", 1);
        r.add("GET", "/special", 2);
        r.add("HEAD", "/special", 3);
        r.add("POST", "/post-only", 4);
        CPPUNIT_ASSERT_EQUAL(1, target(r, "HEAD", "/browsers"));
        CPPUNIT_ASSERT_EQUAL(3, target(r, "HEAD", "/special"));
        CPPUNIT_ASSERT_EQUAL(-2, target(r, "HEAD", "/post-only"));
    }

    void testDuplicateRouteRefused() {
        R r;
        CPPUNIT_ASSERT(r.add("GET", "/x/{id}", 1));
        CPPUNIT_ASSERT(!r.add("GET", "/x/{id}", 2));
        CPPUNIT_ASSERT(r.add("POST", "/x/{id}", 3));
        CPPUNIT_ASSERT_EQUAL(1, target(r, "GET", "/x/y"));
    }

    void testNoPath() {
        R r;
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/"));
        r.add("GET", "/browsers", 1);
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/"));
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/browser"));
        CPPUNIT_ASSERT_EQUAL(-1, target(r, "GET", "/browsers/x"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(RouterTest);
