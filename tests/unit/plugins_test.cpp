// Plugin loading through PluginManager into a real HostCore: ABI checks, dependency order,
// migrations, routes and services.
#include "host_fixture.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <filesystem>

using namespace hangar::host;
using hangar::test::TestHost;
using nlohmann::json;

namespace {

std::vector<std::string> loaded_names(const PluginManager &pm) {
    std::vector<std::string> out;
    for (const auto &p : pm.plugins())
        out.push_back(p->name);
    return out;
}

const PluginManager::Refusal *refusal(const PluginManager &pm, const std::string &name) {
    for (const auto &r : pm.refused())
        if (r.name == name) return &r;
    return nullptr;
}

bool table_exists(Store &s, const std::string &name) {
    return !s.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", {name}).empty();
}

hangar_plugin_v1 good_desc() {
    hangar_plugin_v1 d{};
    d.abi_version = HANGAR_ABI_VERSION;
    d.struct_size = sizeof d;
    d.name = "x";
    d.start = [](void *, hangar_plugin_ctx *) { return 0; };
    d.stop = [](void *) {};
    return d;
}

} // namespace

class PluginsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(PluginsTest);
    CPPUNIT_TEST(testTestPluginsWereBuilt);
    CPPUNIT_TEST(testLoadsInDependencyOrder);
    CPPUNIT_TEST(testMigrationsRanAndWereRecorded);
    CPPUNIT_TEST(testRoutesRegistered);
    CPPUNIT_TEST(testServicesAnswer);
    CPPUNIT_TEST(testWrongAbiRefused);
    CPPUNIT_TEST(testMissingDependencyThrowsNamingBoth);
    CPPUNIT_TEST(testDependencyNotEnabledThrows);
    CPPUNIT_TEST(testEnabledButAbsentIsRefused);
    CPPUNIT_TEST(testFoundButNotEnabledIsDisabled);
    CPPUNIT_TEST(testReloadSkipsAppliedMigrations);
    CPPUNIT_TEST(testStopAll);
    CPPUNIT_TEST(testAbiProblem);
    CPPUNIT_TEST_SUITE_END();

public:
    void testTestPluginsWereBuilt() {
        for (auto name : {"ut_alpha", "ut_beta", "wrong_abi", "ut_orphan"})
            CPPUNIT_ASSERT_MESSAGE(name,
                                   std::filesystem::exists(std::string(HANGAR_TEST_PLUGIN_DIR) + "/" + name + ".so"));
    }

    void testLoadsInDependencyOrder() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"}); // the dependent first: the host must reorder
        auto names = loaded_names(*h.plugins);
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), names.size());
        CPPUNIT_ASSERT_EQUAL(std::string("ut_beta"), names[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("ut_alpha"), names[1]);
        for (const auto &p : h.plugins->plugins())
            CPPUNIT_ASSERT_MESSAGE(p->name, p->started);
        const auto &alpha = *h.plugins->plugins()[1];
        CPPUNIT_ASSERT_EQUAL(std::string("1.2.3"), alpha.version);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), alpha.depends.size());
        CPPUNIT_ASSERT_EQUAL(std::string("ut_beta"), alpha.depends[0]);
        CPPUNIT_ASSERT(alpha.optional_depends == std::vector<std::string>{"ut_absent"});
        CPPUNIT_ASSERT(h.plugins->refused().empty());
        // ut_alpha's start() called ut_beta's service and stored the answer: proof beta ran first.
        auto rows = h.core.store->exec("SELECT text FROM ut_alpha_notes WHERE source = 'start'");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size());
        CPPUNIT_ASSERT_EQUAL(json({{"echo", {{"from", "ut_alpha.start"}}}}),
                             json::parse(rows[0]["text"].get<std::string>()));
    }

    void testMigrationsRanAndWereRecorded() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"});
        auto &store = *h.core.store;
        CPPUNIT_ASSERT(table_exists(store, "ut_alpha_notes"));
        CPPUNIT_ASSERT(table_exists(store, "ut_beta_items"));
        CPPUNIT_ASSERT_EQUAL(2u, store.schema_version("ut_alpha"));
        CPPUNIT_ASSERT_EQUAL(1u, store.schema_version("ut_beta"));
        auto seeded = store.exec("SELECT text, source FROM ut_alpha_notes WHERE source = 'migration'");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), seeded.size());
        CPPUNIT_ASSERT_EQUAL(std::string("seeded by migration 2"), seeded[0]["text"].get<std::string>());
    }

    void testRoutesRegistered() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"});
        auto found = h.core.router.find("GET", "/ut/alpha/hello/world");
        auto *m = std::get_if<Router<RouteTarget>::Match>(&found);
        CPPUNIT_ASSERT(m != nullptr);
        CPPUNIT_ASSERT_EQUAL(std::string("world"), m->params.at("name"));
        CPPUNIT_ASSERT_EQUAL(std::string("ut_alpha"), m->target->plugin->name);
        CPPUNIT_ASSERT_EQUAL(0u, m->target->flags);
        auto events = h.core.router.find("GET", "/ut/alpha/events");
        CPPUNIT_ASSERT(std::get<Router<RouteTarget>::Match>(events).target->flags & HANGAR_ROUTE_STREAMING);
        auto pub = h.core.router.find("GET", "/ut/alpha/public");
        CPPUNIT_ASSERT(std::get<Router<RouteTarget>::Match>(pub).target->flags & HANGAR_ROUTE_PUBLIC);
        CPPUNIT_ASSERT(
            std::holds_alternative<Router<RouteTarget>::Miss>(h.core.router.find("DELETE", "/ut/alpha/hello/x")));
    }

    void testServicesAnswer() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"});
        std::string out;
        CPPUNIT_ASSERT_EQUAL(200, h.core.services.call("alpha.hello", R"({"name":"bob"})", out));
        auto reply = json::parse(out);
        CPPUNIT_ASSERT_EQUAL(std::string("bob"), reply["hello"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(json({{"echo", {{"name", "bob"}}}}), reply["beta"]);
        // A C plugin's service, called directly.
        CPPUNIT_ASSERT_EQUAL(200, h.core.services.call("beta.echo", "[1,2]", out));
        CPPUNIT_ASSERT_EQUAL(std::string(R"({"echo":[1,2]})"), out);
        // A service's own wire error comes back with its status.
        CPPUNIT_ASSERT_EQUAL(400, h.core.services.call("alpha.hello", "{}", out));
        CPPUNIT_ASSERT_EQUAL(std::string("bad_request"), json::parse(out)["code"].get<std::string>());
        // Nobody offers this one.
        CPPUNIT_ASSERT_EQUAL(404, h.core.services.call("nobody.home", "{}", out));
        auto err = json::parse(out);
        CPPUNIT_ASSERT_EQUAL(std::string("not_found"), err["code"].get<std::string>());
        CPPUNIT_ASSERT(err["message"].get<std::string>().find("nobody.home") != std::string::npos);
    }

    void testWrongAbiRefused() {
        TestHost h;
        h.load({"ut_alpha", "wrong_abi", "ut_beta"});
        auto names = loaded_names(*h.plugins);
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), names.size()); // the others still load
        const auto *r = refusal(*h.plugins, "wrong_abi");
        CPPUNIT_ASSERT(r != nullptr);
        CPPUNIT_ASSERT_MESSAGE(r->reason, r->reason.find("ABI") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(r->reason, r->reason.find("99") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(r->reason,
                               r->reason.find("v" + std::to_string(HANGAR_ABI_VERSION)) != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), h.plugins->refused().size());
        CPPUNIT_ASSERT_EQUAL(0u, h.core.store->schema_version("wrong_abi"));
    }

    void testMissingDependencyThrowsNamingBoth() {
        TestHost h;
        bool threw = false;
        try {
            h.load({"ut_orphan", "ut_beta"});
        } catch (const PluginError &e) {
            threw = true;
            std::string what = e.what();
            CPPUNIT_ASSERT_MESSAGE(what, what.find("ut_orphan") != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(what, what.find("ut_nowhere") != std::string::npos);
        }
        CPPUNIT_ASSERT_MESSAGE("load did not throw PluginError", threw);
        for (const auto &p : h.plugins->plugins())
            CPPUNIT_ASSERT_MESSAGE(p->name + " started", !p->started);
    }

    void testDependencyNotEnabledThrows() {
        TestHost h;
        bool threw = false;
        try {
            h.load({"ut_alpha"});
        } catch (const PluginError &e) {
            threw = true;
            std::string what = e.what();
            CPPUNIT_ASSERT_MESSAGE(what, what.find("ut_alpha") != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(what, what.find("ut_beta") != std::string::npos);
        }
        CPPUNIT_ASSERT(threw);
        CPPUNIT_ASSERT(!table_exists(*h.core.store, "ut_alpha_notes"));
    }

    void testEnabledButAbsentIsRefused() {
        TestHost h;
        h.load({"ut_beta", "ut_ghost"});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), h.plugins->plugins().size());
        const auto *r = refusal(*h.plugins, "ut_ghost");
        CPPUNIT_ASSERT(r != nullptr);
        CPPUNIT_ASSERT_MESSAGE(r->reason, r->reason.find("ut_ghost.so") != std::string::npos);
    }

    void testFoundButNotEnabledIsDisabled() {
        TestHost h;
        h.load({"ut_beta"});
        for (auto name : {"ut_alpha", "wrong_abi", "ut_orphan"})
            CPPUNIT_ASSERT_MESSAGE(name, h.core.disabled_plugins.count(name) == 1);
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), h.core.disabled_plugins.count("ut_beta"));
    }

    void testReloadSkipsAppliedMigrations() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"});
        h.plugins->stop_all();
        // A restarted host on the same database: the migrations must not run again (their
        // CREATE TABLE would fail and the seed row would double); start() runs again.
        HostCore core(HANGAR_ROLE_SERVER, h.config);
        core.data_dir = h.dir.path();
        core.store = std::make_unique<Store>(core.data_dir + "/hangar.db");
        {
            PluginManager again(core);
            again.load({HANGAR_TEST_PLUGIN_DIR}, {"ut_alpha", "ut_beta"});
            CPPUNIT_ASSERT_EQUAL(std::size_t(2), again.plugins().size());
            CPPUNIT_ASSERT(again.refused().empty());
        }
        CPPUNIT_ASSERT_EQUAL(2u, core.store->schema_version("ut_alpha"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1),
                             core.store->exec("SELECT id FROM ut_alpha_notes WHERE source = 'migration'").size());
        CPPUNIT_ASSERT_EQUAL(std::size_t(2),
                             core.store->exec("SELECT id FROM ut_alpha_notes WHERE source = 'start'").size());
    }

    void testStopAll() {
        TestHost h;
        h.load({"ut_alpha", "ut_beta"});
        h.plugins->stop_all();
        for (const auto &p : h.plugins->plugins())
            CPPUNIT_ASSERT_MESSAGE(p->name, !p->started);
        // A stopped plugin's object is gone: its services must not be reachable any more.
        std::string out;
        CPPUNIT_ASSERT_EQUAL(404, h.core.services.call("alpha.hello", R"({"name":"bob"})", out));
        h.plugins->stop_all(); // idempotent
    }

    void testAbiProblem() {
        auto d = good_desc();
        CPPUNIT_ASSERT_EQUAL(std::string(), PluginManager::abi_problem(d, "x"));
        auto wrong = d;
        wrong.abi_version = 2;
        CPPUNIT_ASSERT(PluginManager::abi_problem(wrong, "x").find("ABI v2") != std::string::npos);
        auto small = d;
        small.struct_size = 8;
        CPPUNIT_ASSERT(!PluginManager::abi_problem(small, "x").empty());
        CPPUNIT_ASSERT(PluginManager::abi_problem(d, "y").find("'x'") != std::string::npos);
        auto unnamed = d;
        unnamed.name = nullptr;
        CPPUNIT_ASSERT(!PluginManager::abi_problem(unnamed, "x").empty());
        auto nostart = d;
        nostart.start = nullptr;
        CPPUNIT_ASSERT(!PluginManager::abi_problem(nostart, "x").empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(PluginsTest);
