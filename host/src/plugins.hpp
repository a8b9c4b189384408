// Finds, checks, orders, migrates and starts plugin libraries; stops them in reverse order.
#pragma once

#include "core.hpp"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hangar::host {

class PluginError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class PluginManager {
public:
    explicit PluginManager(HostCore &core) : core_(core) {}
    ~PluginManager() { stop_all(); }
    PluginManager(const PluginManager &) = delete;
    PluginManager &operator=(const PluginManager &) = delete;

    // Loads every enabled plugin found in `dirs` (first match wins). A plugin built for another
    // ABI is refused with a log line and skipped; a missing dependency is fatal (PluginError).
    // `before_start` runs once every plugin is opened and ordered, before the first one starts
    // (an agent waits there for its sandbox's network).
    void load(const std::vector<std::string> &dirs, const std::vector<std::string> &enabled,
              const std::function<void()> &before_start = {});
    // Every plugin library in `dirs`, name → file (the first folder holding a name wins).
    static std::map<std::string, std::string> find_files(const std::vector<std::string> &dirs);
    void stop_all();

    const std::vector<std::unique_ptr<PluginRecord>> &plugins() const { return plugins_; }
    struct Refusal {
        std::string name;
        std::string reason;
    };
    const std::vector<Refusal> &refused() const { return refused_; }

    // Reads a library's descriptor without starting it (for `hangar doctor`-style checks and tests).
    static std::string abi_problem(const hangar_plugin_v1 &desc, const std::string &file_name);

    // Opens one plugin library and reads its descriptor without starting it: its version and
    // dependencies, or why the host would refuse it.
    struct Inspection {
        std::string name, file, version, problem;
        std::vector<std::string> depends;
    };
    Inspection inspect(const std::string &file);

private:
    std::unique_ptr<PluginRecord> open(const std::string &file, const std::string &name);
    HostCore &core_;
    std::vector<std::unique_ptr<PluginRecord>> plugins_; // in start order
    std::vector<Refusal> refused_;
};

} // namespace hangar::host
