// A server-role HostCore set up the way `hangar serve` does it (app.cpp), minus the runtime:
// temp data dir, Store, Auth (bootstrapped with a known key), Tokens, and a PluginManager.
#pragma once

#include "core.hpp"
#include "plugins.hpp"
#include "test_support.hpp"

#include <map>
#include <memory>
#include <string>

#ifndef HANGAR_TEST_PLUGIN_DIR
#error "HANGAR_TEST_PLUGIN_DIR must name the folder the test plugins are built into"
#endif

namespace hangar::test {

inline const std::string kBootstrapKey = "unit-test-bootstrap-key-0123456789";

struct TestHost {
    explicit TestHost(const std::map<std::string, std::string> &env = {})
        : config("", env), core(HANGAR_ROLE_SERVER, config) {
        core.data_dir = dir.path();
        core.store = std::make_unique<host::Store>(core.data_dir + "/hangar.db");
        core.auth = std::make_unique<host::Auth>(*core.store);
        core.tokens = std::make_unique<host::Tokens>(core.data_dir + "/token.secret");
        core.auth->bootstrap(kBootstrapKey, core.data_dir + "/bootstrap-api-key");
        plugins = std::make_unique<host::PluginManager>(core);
    }
    ~TestHost() { plugins.reset(); }

    void load(const std::vector<std::string> &enabled) { plugins->load({HANGAR_TEST_PLUGIN_DIR}, enabled); }

    std::string default_project() const {
        return core.store->exec("SELECT id FROM projects WHERE is_default = 1")[0]["id"].get<std::string>();
    }

    TempDir dir;
    host::Config config;
    host::HostCore core;
    std::unique_ptr<host::PluginManager> plugins;
};

} // namespace hangar::test
