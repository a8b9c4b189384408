#include "plugins.hpp"

#include "util.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace fs = std::filesystem;

namespace hangar::host {

std::string PluginManager::abi_problem(const hangar_plugin_v1 &desc, const std::string &file_name) {
    if (desc.abi_version != HANGAR_ABI_VERSION)
        return "built for plugin ABI v" + std::to_string(desc.abi_version) + ", but this host supports ABI v" +
               std::to_string(HANGAR_ABI_VERSION);
    if (desc.struct_size < sizeof(hangar_plugin_v1))
        return "its descriptor is " + std::to_string(desc.struct_size) + " bytes, expected at least " +
               std::to_string(sizeof(hangar_plugin_v1));
    if (!desc.name || file_name != desc.name)
        return std::string("it calls itself '") + (desc.name ? desc.name : "") + "' but the file is " + file_name +
               ".so";
    if (!desc.start || !desc.stop) return "it has no start/stop functions";
    return {};
}

std::unique_ptr<PluginRecord> PluginManager::open(const std::string &file, const std::string &name) {
    auto rec = std::make_unique<PluginRecord>();
    rec->name = name;
    rec->file = file;
    rec->logger = &Poco::Logger::get("plugin." + name);
    // RTLD_LOCAL keeps each plugin's symbols (its own copy of nlohmann, say) to itself.
    rec->dl = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!rec->dl) {
        refused_.push_back({name, std::string("cannot be loaded: ") + ::dlerror()});
        return nullptr;
    }
    auto init = reinterpret_cast<hangar_plugin_init_fn>(::dlsym(rec->dl, HANGAR_PLUGIN_INIT_SYMBOL));
    std::string problem;
    if (!init) {
        problem = "it does not export " HANGAR_PLUGIN_INIT_SYMBOL;
    } else if (init(core_.api(), &rec->desc) != 0) {
        problem = rec->desc.abi_version && rec->desc.abi_version != HANGAR_ABI_VERSION
                      ? abi_problem(rec->desc, name)
                      : "its init function refused this host (plugin ABI " + std::to_string(HANGAR_ABI_VERSION) + "." +
                            std::to_string(HANGAR_ABI_MINOR) +
                            "): a plugin built against a newer ABI minor needs a "
                            "host at least that new";
    } else {
        problem = abi_problem(rec->desc, name);
    }
    if (!problem.empty()) {
        refused_.push_back({name, problem});
        ::dlclose(rec->dl);
        return nullptr;
    }
    rec->version = rec->desc.version ? rec->desc.version : "";
    if (rec->desc.depends)
        for (auto &d : split(rec->desc.depends, ','))
            if (auto t = trim(d); !t.empty()) {
                if (t.ends_with('?'))
                    rec->optional_depends.push_back(t.substr(0, t.size() - 1));
                else
                    rec->depends.push_back(t);
            }
    rec->ctx = std::make_unique<hangar_plugin_ctx>(hangar_plugin_ctx{&core_, rec.get()});
    return rec;
}

PluginManager::Inspection PluginManager::inspect(const std::string &file) {
    Inspection out;
    out.file = file;
    out.name = fs::path(file).stem().string();
    auto before = refused_.size();
    if (auto rec = open(file, out.name)) {
        out.version = rec->version;
        out.depends = rec->depends;
        for (const auto &d : rec->optional_depends)
            out.depends.push_back(d + "?");
        ::dlclose(rec->dl);
    } else if (refused_.size() > before) {
        out.problem = refused_.back().reason;
        refused_.pop_back();
    }
    return out;
}

std::map<std::string, std::string> PluginManager::find_files(const std::vector<std::string> &dirs) {
    std::map<std::string, std::string> found;
    for (const auto &dir : dirs) {
        std::error_code ec;
        for (const auto &entry : fs::directory_iterator(dir, ec)) {
            if (entry.path().extension() != ".so") continue;
            std::string name = entry.path().stem().string();
            found.emplace(name, entry.path().string());
        }
    }
    return found;
}

void PluginManager::load(const std::vector<std::string> &dirs, const std::vector<std::string> &enabled,
                         const std::function<void()> &before_start) {
    auto found = find_files(dirs);
    for (const auto &[name, _] : found)
        if (std::find(enabled.begin(), enabled.end(), name) == enabled.end()) core_.disabled_plugins.insert(name);

    std::map<std::string, std::unique_ptr<PluginRecord>> opened;
    for (const auto &name : enabled) {
        auto it = found.find(name);
        if (it == found.end()) {
            refused_.push_back({name, "is enabled but no " + name + ".so was found in the plugin folders"});
            continue;
        }
        if (auto rec = open(it->second, name)) opened.emplace(name, std::move(rec));
    }
    for (const auto &r : refused_)
        core_.log.error("plugin %s not loaded: %s", r.name, r.reason);

    // Dependencies first; a missing one stops the host, naming both plugins.
    std::set<std::string> placed, visiting;
    std::function<void(const std::string &)> place = [&](const std::string &name) {
        if (placed.count(name)) return;
        if (visiting.count(name)) throw PluginError("plugin dependency cycle through " + name);
        visiting.insert(name);
        auto &rec = opened.at(name);
        for (const auto &dep : rec->optional_depends)
            if (opened.count(dep)) place(dep);
        for (const auto &dep : rec->depends) {
            if (!opened.count(dep))
                throw PluginError(std::string("plugin ").append(name).append(" depends on ").append(dep) +
                                  ", which is not enabled or could not be loaded");
            place(dep);
        }
        visiting.erase(name);
        placed.insert(name);
        plugins_.push_back(std::move(rec));
    };
    for (const auto &name : enabled)
        if (opened.count(name)) place(name);

    if (before_start) before_start();
    for (auto &rec : plugins_) {
        if (core_.role == HANGAR_ROLE_SERVER && core_.store) {
            std::vector<Store::Migration> migrations;
            for (std::size_t i = 0; i < rec->desc.migration_count; ++i)
                migrations.push_back({rec->desc.migrations[i].version, rec->desc.migrations[i].sql});
            core_.store->migrate(rec->name, migrations);
        }
        if (rec->desc.start(rec->desc.state, rec->ctx.get()) != 0)
            throw PluginError(
                "plugin " + rec->name + " failed to start" +
                (rec->last_error.empty() ? std::string(" (see its log lines above)") : ": " + rec->last_error));
        rec->started = true;
        core_.started_plugins.push_back(rec->name);
        core_.log.information("plugin %s %s started", rec->name, rec->version);
    }
}

void PluginManager::stop_all() {
    for (auto it = plugins_.rbegin(); it != plugins_.rend(); ++it) {
        auto &rec = **it;
        if (rec.started) {
            core_.services.remove_owned_by(rec.name);
            core_.relay_observers.remove_owned_by(rec.name);
            auto began = std::chrono::steady_clock::now();
            rec.desc.stop(rec.desc.state);
            rec.started = false;
            // Per plugin, so a slow teardown names its owner (issue 42 looked for one).
            Poco::Logger::get("hangar").debug("plugin " + rec.name + " stopped in " +
                                              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 std::chrono::steady_clock::now() - began)
                                                                 .count()) +
                                              " ms");
        }
    }
    // Libraries stay mapped: a stray callback after stop must not jump into unmapped code.
}

} // namespace hangar::host
