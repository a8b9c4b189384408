// Configuration: etc/hangar.ini, then etc/plugins.d/*.ini, then HANGAR_* environment variables.
#pragma once

#include <Poco/AutoPtr.h>
#include <Poco/Util/LayeredConfiguration.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hangar::host {

class Config {
public:
    // Loads `main_file` (may be empty: built-in defaults only) and the plugins.d folder beside it.
    // `env` is the process environment as name → value (passed in so tests can fake it).
    Config(const std::string &main_file, const std::map<std::string, std::string> &env);

    std::optional<std::string> get(const std::string &key) const;
    std::string get(const std::string &key, const std::string &fallback) const;
    long long get_int(const std::string &key, long long fallback) const;
    bool get_bool(const std::string &key, bool fallback) const;
    // The names directly under `prefix` ("project" → the [project.<name>] sections' names).
    std::vector<std::string> keys(const std::string &prefix) const;

    const std::string &main_file() const { return main_file_; }
    // Plugin names switched on ("<name>.enabled = true", or HANGAR_PLUGINS_ENABLE) and off.
    std::vector<std::string> enabled_plugins() const;
    std::vector<std::string> disabled_plugins() const;

    static std::map<std::string, std::string> process_environment();

private:
    std::string main_file_;
    Poco::AutoPtr<Poco::Util::LayeredConfiguration> layers_;
    std::vector<std::string> plugin_sections_;
    std::vector<std::string> env_enabled_;
};

} // namespace hangar::host
