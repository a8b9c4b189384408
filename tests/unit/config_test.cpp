// Config: hangar.ini, then plugins.d/*.ini, then HANGAR_* environment variables.
#include "config.hpp"
#include "test_support.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>

using hangar::host::Config;
using hangar::test::TempDir;
using hangar::test::write_text;

namespace {

bool contains(const std::vector<std::string> &v, const std::string &s) {
    return std::find(v.begin(), v.end(), s) != v.end();
}

} // namespace

class ConfigTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ConfigTest);
    CPPUNIT_TEST(testMainFileValues);
    CPPUNIT_TEST(testPluginsDirLayersOverMain);
    CPPUNIT_TEST(testLaterPluginFileWins);
    CPPUNIT_TEST(testEnvironmentOverrides);
    CPPUNIT_TEST(testUnknownEnvironmentIgnored);
    CPPUNIT_TEST(testEnabledAndDisabledPlugins);
    CPPUNIT_TEST(testPluginsEnableFromEnvironment);
    CPPUNIT_TEST(testNoMainFileMeansDefaults);
    CPPUNIT_TEST(testTypedGetters);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TempDir> dir_;
    std::string main_;

public:
    void setUp() override {
        dir_ = std::make_unique<TempDir>();
        main_ = *dir_ / "hangar.ini";
        write_text(main_, "[server]\n"
                          "listen = 127.0.0.1:8080\n"
                          "data_dir = /var/lib/hangar\n"
                          "threads = 48\n"
                          "[auth]\n"
                          "bootstrap_key =\n"
                          "[browsers]\n"
                          "warm_spares = 1\n"
                          "headless_default = false\n");
        write_text(*dir_ / "plugins.d/browsers.ini", "[browsers]\nenabled = true\nwarm_spares = 3\n");
        write_text(*dir_ / "plugins.d/profiles.ini", "[profiles]\nenabled = false\n");
        write_text(*dir_ / "plugins.d/hello.ini", "; not switched on at all\n[hello]\ngreeting = hi\n");
        write_text(*dir_ / "plugins.d/README.txt", "[browsers]\nenabled = false\n"); // not an .ini
    }
    void tearDown() override { dir_.reset(); }

    void testMainFileValues() {
        Config cfg(main_, {});
        CPPUNIT_ASSERT_EQUAL(main_, cfg.main_file());
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1:8080"), cfg.get("server.listen", "x"));
        CPPUNIT_ASSERT_EQUAL(std::string("/var/lib/hangar"), *cfg.get("server.data_dir"));
        CPPUNIT_ASSERT_EQUAL(48LL, cfg.get_int("server.threads", 1));
        // Present but empty: the optional form says "", the fallback form falls back.
        CPPUNIT_ASSERT(cfg.get("auth.bootstrap_key").has_value());
        CPPUNIT_ASSERT_EQUAL(std::string(), *cfg.get("auth.bootstrap_key"));
        CPPUNIT_ASSERT_EQUAL(std::string("fb"), cfg.get("auth.bootstrap_key", "fb"));
        CPPUNIT_ASSERT(!cfg.get("server.nope").has_value());
        CPPUNIT_ASSERT_EQUAL(std::string("hi"), cfg.get("hello.greeting", ""));
    }

    void testPluginsDirLayersOverMain() {
        Config cfg(main_, {});
        CPPUNIT_ASSERT_EQUAL(3LL, cfg.get_int("browsers.warm_spares", 0));            // plugins.d beats main
        CPPUNIT_ASSERT_EQUAL(false, cfg.get_bool("browsers.headless_default", true)); // only in main
        CPPUNIT_ASSERT_EQUAL(true, cfg.get_bool("browsers.enabled", false));          // not README.txt
    }

    void testLaterPluginFileWins() {
        write_text(*dir_ / "plugins.d/zz-local.ini", "[browsers]\nwarm_spares = 7\n");
        Config cfg(main_, {});
        CPPUNIT_ASSERT_EQUAL(7LL, cfg.get_int("browsers.warm_spares", 0));
    }

    void testEnvironmentOverrides() {
        std::map<std::string, std::string> env = {
            {"HANGAR_LISTEN", "0.0.0.0:9999"},
            {"HANGAR_DATA_DIR", "/tmp/hangar-data"},
            {"HANGAR_API_KEY", "sekrit"},
            {"HANGAR_PLUGIN_DIR", "/opt/a:/opt/b"},
            {"HANGAR_PUBLIC_URL", "https://h.example"},
            {"HANGAR_LOG_LEVEL", "debug"},
            {"HANGAR_WARM_SPARES", "0"},
            {"HANGAR_SANDBOX_USER", "nobody"},
            {"HANGAR_SECRETS_KEY_FILE", "/etc/hangar/secrets.key"},
            {"HANGAR_NODE_NAME", "node-7"},
            {"HANGAR_NODE_HEARTBEAT_SECONDS", "2"},
        };
        Config cfg(main_, env);
        CPPUNIT_ASSERT_EQUAL(std::string("0.0.0.0:9999"), cfg.get("server.listen", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("/tmp/hangar-data"), cfg.get("server.data_dir", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("sekrit"), cfg.get("auth.bootstrap_key", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("/opt/a:/opt/b"), cfg.get("plugins.extra_dirs", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("https://h.example"), cfg.get("server.public_url", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("debug"), cfg.get("logging.level", ""));
        // The environment beats plugins.d too (3 there).
        CPPUNIT_ASSERT_EQUAL(0LL, cfg.get_int("browsers.warm_spares", 5));
        CPPUNIT_ASSERT_EQUAL(std::string("nobody"), cfg.get("sandbox.user", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("/etc/hangar/secrets.key"), cfg.get("secrets.key_file", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("node-7"), cfg.get("node.name", ""));
        CPPUNIT_ASSERT_EQUAL(2LL, cfg.get_int("node.heartbeat_seconds", 5));
        // Keys nobody overrode keep their file values.
        CPPUNIT_ASSERT_EQUAL(48LL, cfg.get_int("server.threads", 1));
    }

    void testUnknownEnvironmentIgnored() {
        Config cfg(main_, {{"SERVER_LISTEN", "1.2.3.4:1"}, {"HANGAR_SERVER_LISTEN", "1.2.3.4:2"}, {"PATH", "/bin"}});
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1:8080"), cfg.get("server.listen", ""));
    }

    void testEnabledAndDisabledPlugins() {
        Config cfg(main_, {});
        auto enabled = cfg.enabled_plugins();
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), enabled.size());
        CPPUNIT_ASSERT_EQUAL(std::string("browsers"), enabled[0]);
        auto disabled = cfg.disabled_plugins();
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), disabled.size());
        CPPUNIT_ASSERT(contains(disabled, "profiles"));
        CPPUNIT_ASSERT(contains(disabled, "hello"));
        CPPUNIT_ASSERT(!contains(disabled, "browsers"));
    }

    void testPluginsEnableFromEnvironment() {
        Config cfg(main_, {{"HANGAR_PLUGINS_ENABLE", " hello, wrong_abi ,,browsers"}});
        auto enabled = cfg.enabled_plugins();
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), enabled.size()); // browsers once, not twice
        CPPUNIT_ASSERT(contains(enabled, "hello"));
        CPPUNIT_ASSERT(contains(enabled, "wrong_abi"));
        CPPUNIT_ASSERT(contains(enabled, "browsers"));
        auto disabled = cfg.disabled_plugins();
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), disabled.size());
        CPPUNIT_ASSERT_EQUAL(std::string("profiles"), disabled[0]);
    }

    void testNoMainFileMeansDefaults() {
        Config cfg("", {{"HANGAR_LISTEN", "127.0.0.1:0"}, {"HANGAR_PLUGINS_ENABLE", "x"}});
        CPPUNIT_ASSERT_EQUAL(std::string(), cfg.main_file());
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1:0"), cfg.get("server.listen", ""));
        CPPUNIT_ASSERT_EQUAL(std::string(".data"), cfg.get("server.data_dir", ".data"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), cfg.enabled_plugins().size());
        CPPUNIT_ASSERT(cfg.disabled_plugins().empty());
    }

    void testTypedGetters() {
        write_text(*dir_ / "plugins.d/types.ini", "[types]\n"
                                                  "yes1 = true\nyes2 = 1\nyes3 = yes\nyes4 = on\nyes5 =  true \n"
                                                  "no1 = false\nno2 = 0\nno3 = nonsense\n"
                                                  "n = -42\nbad = twelve\nempty =\n");
        Config cfg(main_, {});
        for (auto k : {"yes1", "yes2", "yes3", "yes4", "yes5"})
            CPPUNIT_ASSERT_MESSAGE(k, cfg.get_bool(std::string("types.") + k, false));
        for (auto k : {"no1", "no2", "no3"})
            CPPUNIT_ASSERT_MESSAGE(k, !cfg.get_bool(std::string("types.") + k, true));
        CPPUNIT_ASSERT(cfg.get_bool("types.missing", true));
        CPPUNIT_ASSERT(cfg.get_bool("types.empty", true));
        CPPUNIT_ASSERT_EQUAL(-42LL, cfg.get_int("types.n", 0));
        CPPUNIT_ASSERT_EQUAL(5LL, cfg.get_int("types.bad", 5));
        CPPUNIT_ASSERT_EQUAL(6LL, cfg.get_int("types.empty", 6));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ConfigTest);
