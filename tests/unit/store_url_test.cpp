// [store] url / HANGAR_STORE_URL: the forms accepted, and every refusal names the setting and
// never shows the password.
#include "config.hpp"
#include "store.hpp"
#include "store_url.hpp"

#include <cppunit/extensions/HelperMacros.h>

using hangar::host::parse_store_url;
using hangar::host::StoreError;
using hangar::host::StoreUrl;

namespace {
std::string refusal(const std::string &url) {
    try {
        parse_store_url(url, "/data");
    } catch (const StoreError &e) {
        return e.what();
    }
    return "";
}
} // namespace

class StoreUrlTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(StoreUrlTest);
    CPPUNIT_TEST(testDefaultIsTheSqliteFileInTheDataDir);
    CPPUNIT_TEST(testSqlitePaths);
    CPPUNIT_TEST(testPostgresqlUrl);
    CPPUNIT_TEST(testPostgresqlDefaultsAndIpv6);
    CPPUNIT_TEST(testConninfoQuotesAndTimesOut);
    CPPUNIT_TEST(testRefusalsNameTheSettingWithoutThePassword);
    CPPUNIT_TEST(testEnvironmentOverridesIni);
    CPPUNIT_TEST_SUITE_END();

public:
    void testDefaultIsTheSqliteFileInTheDataDir() {
        auto u = parse_store_url("", "/data");
        CPPUNIT_ASSERT(u.kind == StoreUrl::Kind::sqlite);
        CPPUNIT_ASSERT_EQUAL(std::string("/data/hangar.db"), u.path);
    }

    void testSqlitePaths() {
        CPPUNIT_ASSERT_EQUAL(std::string("/var/lib/h.db"), parse_store_url("sqlite:/var/lib/h.db", "/data").path);
        CPPUNIT_ASSERT_EQUAL(std::string("/var/lib/h.db"), parse_store_url("sqlite:///var/lib/h.db", "/data").path);
        CPPUNIT_ASSERT_EQUAL(std::string("/data/other.db"), parse_store_url("sqlite:other.db", "/data").path);
    }

    void testPostgresqlUrl() {
        auto u = parse_store_url("postgresql://hangar:p%40ss:w@db.example:6543/state?sslmode=require", "/data");
        CPPUNIT_ASSERT(u.kind == StoreUrl::Kind::postgresql);
        CPPUNIT_ASSERT_EQUAL(std::string("hangar"), u.user);
        CPPUNIT_ASSERT_EQUAL(std::string("p@ss:w"), u.password);
        CPPUNIT_ASSERT_EQUAL(std::string("db.example"), u.host);
        CPPUNIT_ASSERT_EQUAL(6543u, u.port);
        CPPUNIT_ASSERT_EQUAL(std::string("state"), u.dbname);
        CPPUNIT_ASSERT_EQUAL(std::string("require"), u.options.at("sslmode"));
        CPPUNIT_ASSERT_EQUAL(std::string("postgresql://hangar:***@db.example:6543/state?sslmode=require"),
                             u.redacted());
    }

    void testPostgresqlDefaultsAndIpv6() {
        auto u = parse_store_url("postgres://[::1]/db", "/data");
        CPPUNIT_ASSERT_EQUAL(std::string("::1"), u.host);
        CPPUNIT_ASSERT_EQUAL(5432u, u.port);
        CPPUNIT_ASSERT(u.user.empty() && u.password.empty());
        CPPUNIT_ASSERT_EQUAL(6432u, parse_store_url("postgresql://u@[::1]:6432/db", "/data").port);
    }

    void testConninfoQuotesAndTimesOut() {
        auto u = parse_store_url("postgresql://u:it's%5C@h:1/d", "/data");
        auto c = u.conninfo();
        CPPUNIT_ASSERT(c.find("password='it\\'s\\\\'") != std::string::npos);
        CPPUNIT_ASSERT(c.find("connect_timeout='5'") != std::string::npos);
        auto quick = parse_store_url("postgresql://u@h:1/d?connect_timeout=1", "/data").conninfo();
        CPPUNIT_ASSERT(quick.find("connect_timeout='1'") != std::string::npos);
        CPPUNIT_ASSERT(quick.find("connect_timeout='5'") == std::string::npos);
    }

    void testRefusalsNameTheSettingWithoutThePassword() {
        const std::string setting = "[store] url / HANGAR_STORE_URL";
        for (const char *url :
             {"mysql://u:sekret@h/d", "sekret", "sqlite:", "postgresql:sekret@h/d", "postgresql://u:sekret@/d",
              "postgresql://u:sekret@h:99999/d", "postgresql://u:sekret@h:5432/", "postgresql://u:sekret@h:x/d",
              "postgresql://u:sekret@h/d?password=other", "postgresql://u:sekret@h/d?sslmode",
              "postgresql://u:s%zzekret@h/d", "postgresql://u:sekret@[::1/d"}) {
            auto msg = refusal(url);
            CPPUNIT_ASSERT_MESSAGE(std::string(url) + " was accepted", !msg.empty());
            CPPUNIT_ASSERT_MESSAGE(msg, msg.find(setting) != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(msg, msg.find("sekret") == std::string::npos);
        }
        CPPUNIT_ASSERT(refusal("mysql://u:p@h/d").find("unknown store scheme") != std::string::npos);
        CPPUNIT_ASSERT(refusal("postgresql://u@h/d?password=x").find("unknown option 'password'") != std::string::npos);
    }

    void testEnvironmentOverridesIni() {
        hangar::host::Config cfg("", {{"HANGAR_STORE_URL", "sqlite:/x.db"}});
        CPPUNIT_ASSERT_EQUAL(std::string("sqlite:/x.db"), cfg.get("store.url", ""));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(StoreUrlTest);
