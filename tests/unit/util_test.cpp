// util: decoding, tokens, timestamps, atomic writes.
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <filesystem>
#include <regex>
#include <set>

using namespace hangar::host;
using hangar::test::TempDir;

class UtilTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(UtilTest);
    CPPUNIT_TEST(testUrlDecode);
    CPPUNIT_TEST(testUrlDecodePlusOnlyInQueryMode);
    CPPUNIT_TEST(testRandomToken);
    CPPUNIT_TEST(testSha256);
    CPPUNIT_TEST(testRfc3339);
    CPPUNIT_TEST(testSplitTrimIequals);
    CPPUNIT_TEST(testWriteFileAtomic);
    CPPUNIT_TEST(testWriteFileAtomicFailureLeavesNothing);
    CPPUNIT_TEST(testReadFileMissingThrows);
    CPPUNIT_TEST_SUITE_END();

public:
    void testUrlDecode() {
        CPPUNIT_ASSERT_EQUAL(std::string("a/b"), url_decode("a%2Fb"));
        CPPUNIT_ASSERT_EQUAL(std::string("a/b"), url_decode("a%2fb"));
        CPPUNIT_ASSERT_EQUAL(std::string("caf\xc3\xa9"), url_decode("caf%C3%A9"));
        CPPUNIT_ASSERT_EQUAL(std::string("100%"), url_decode("100%")); // dangling '%'
        CPPUNIT_ASSERT_EQUAL(std::string("%4"), url_decode("%4"));     // too short
        CPPUNIT_ASSERT_EQUAL(std::string("%zz1"), url_decode("%zz1")); // not hex
        CPPUNIT_ASSERT_EQUAL(std::string("A"), url_decode("%41"));     // exactly at the end
        CPPUNIT_ASSERT_EQUAL(std::string("%41"), url_decode("%2541")); // decoded once only
        CPPUNIT_ASSERT_EQUAL(std::string("a\0b", 3), url_decode("a%00b"));
        CPPUNIT_ASSERT_EQUAL(std::string(), url_decode(""));
    }

    void testUrlDecodePlusOnlyInQueryMode() {
        CPPUNIT_ASSERT_EQUAL(std::string("a+b"), url_decode("a+b"));
        CPPUNIT_ASSERT_EQUAL(std::string("a+b"), url_decode("a+b", false));
        CPPUNIT_ASSERT_EQUAL(std::string("a b"), url_decode("a+b", true));
        CPPUNIT_ASSERT_EQUAL(std::string("a+b c"), url_decode("a%2Bb+c", true));
    }

    void testRandomToken() {
        CPPUNIT_ASSERT_EQUAL(std::string(), random_token(0));
        const std::string alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
        std::set<char> seen;
        std::set<std::string> tokens;
        for (std::size_t len : {1u, 7u, 40u, 64u, 65u, 500u}) {
            for (int i = 0; i < 20; ++i) {
                auto t = random_token(len);
                CPPUNIT_ASSERT_EQUAL(len, t.size());
                for (char c : t) {
                    CPPUNIT_ASSERT_MESSAGE(std::string("unexpected character ") + c,
                                           alphabet.find(c) != std::string::npos);
                    seen.insert(c);
                }
                if (len >= 40) CPPUNIT_ASSERT_MESSAGE("token repeated", tokens.insert(t).second);
            }
        }
        // ~30 000 characters drawn: every letter and digit shows up.
        CPPUNIT_ASSERT_EQUAL(alphabet.size(), seen.size());
    }

    void testSha256() {
        CPPUNIT_ASSERT_EQUAL(std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
                             sha256_hex("abc"));
        CPPUNIT_ASSERT_EQUAL(std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
                             sha256_hex(""));
    }

    void testRfc3339() {
        CPPUNIT_ASSERT_EQUAL(std::string("1970-01-01T00:00:00.000Z"), rfc3339(0));
        CPPUNIT_ASSERT_EQUAL(std::string("2023-11-14T22:13:20.123Z"), rfc3339(1700000000123LL));
        CPPUNIT_ASSERT_EQUAL(std::string("2000-02-29T23:59:59.999Z"), rfc3339(951868799999LL));
        static const std::regex shape(R"(^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$)");
        auto now = rfc3339(now_ms());
        CPPUNIT_ASSERT_MESSAGE(now, std::regex_match(now, shape));
        CPPUNIT_ASSERT(now.rfind("20", 0) == 0);
        auto a = steady_ms();
        auto b = steady_ms();
        CPPUNIT_ASSERT(b >= a);
    }

    void testSplitTrimIequals() {
        auto parts = split("a,,b,", ',');
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), parts.size());
        CPPUNIT_ASSERT_EQUAL(std::string("a"), parts[0]);
        CPPUNIT_ASSERT_EQUAL(std::string(""), parts[1]);
        CPPUNIT_ASSERT_EQUAL(std::string("b"), parts[2]);
        CPPUNIT_ASSERT_EQUAL(std::string(""), parts[3]);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), split("", ',').size());
        CPPUNIT_ASSERT_EQUAL(std::string("x y"), trim(" \t x y\r\n"));
        CPPUNIT_ASSERT_EQUAL(std::string(), trim(" \t\r\n"));
        CPPUNIT_ASSERT(iequals("Bearer", "bEARER"));
        CPPUNIT_ASSERT(!iequals("Bearer", "Bearer "));
        CPPUNIT_ASSERT(!iequals("abc", "abd"));
    }

    void testWriteFileAtomic() {
        TempDir dir;
        auto file = dir / "secret";
        write_file_atomic(file, "first", 0600);
        CPPUNIT_ASSERT_EQUAL(std::string("first"), read_file(file));
        write_file_atomic(file, std::string("second\0x", 8), 0600);
        CPPUNIT_ASSERT_EQUAL(std::string("second\0x", 8), read_file(file));
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat(file.c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0600u, static_cast<unsigned>(st.st_mode & 0777));
        write_file_atomic(dir / "public", "", 0644);
        CPPUNIT_ASSERT_EQUAL(std::string(), read_file(dir / "public"));
        // Nothing but the two files: no temp files left behind.
        std::set<std::string> names;
        for (auto &e : std::filesystem::directory_iterator(dir.path()))
            names.insert(e.path().filename().string());
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), names.size());
        CPPUNIT_ASSERT(names.count("secret") && names.count("public"));
    }

    void testWriteFileAtomicFailureLeavesNothing() {
        TempDir dir;
        // The target is a directory: the rename fails, and the temp file must be removed.
        std::filesystem::create_directory(dir / "taken");
        std::filesystem::create_directory(dir / "taken/inside");
        CPPUNIT_ASSERT_THROW(write_file_atomic(dir / "taken", "x"), std::system_error);
        CPPUNIT_ASSERT_THROW(write_file_atomic(dir / "missing/folder/file", "x"), std::system_error);
        std::size_t n = 0;
        for (auto &e : std::filesystem::directory_iterator(dir.path())) {
            ++n;
            CPPUNIT_ASSERT_EQUAL(std::string("taken"), e.path().filename().string());
        }
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), n);
    }

    void testReadFileMissingThrows() {
        TempDir dir;
        CPPUNIT_ASSERT_THROW(read_file(dir / "nope"), std::runtime_error);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(UtilTest);
