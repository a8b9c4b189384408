#include "config.hpp"

#include "util.hpp"

#include <Poco/File.h>
#include <Poco/Path.h>
#include <Poco/Util/IniFileConfiguration.h>
#include <Poco/Util/MapConfiguration.h>

#include <algorithm>
#include <filesystem>

extern char **environ;

namespace hangar::host {

namespace {
// Environment variables the operator documentation promises, and the keys they override.
const std::map<std::string, std::string> kEnvKeys = {
    {"HANGAR_LISTEN", "server.listen"},
    {"HANGAR_DATA_DIR", "server.data_dir"},
    {"HANGAR_STORE_URL", "store.url"},
    {"HANGAR_BLOBS_DIR", "blobs.dir"},
    {"HANGAR_BLOBS_CACHE_MB", "blobs.cache_mb"},
    {"HANGAR_API_KEY", "auth.bootstrap_key"},
    {"HANGAR_PLUGIN_DIR", "plugins.extra_dirs"},
    {"HANGAR_PUBLIC_URL", "server.public_url"},
    {"HANGAR_REDIRECT_ORIGINS", "server.redirect_origins"},
    {"HANGAR_FETCH_ALLOW", "server.fetch_allow"},
    {"HANGAR_FETCH_ALLOW_PRIVATE_NETWORKS", "server.fetch_allow_private_networks"},
    {"HANGAR_MAX_LONG_REQUESTS_PER_PROJECT", "server.max_long_requests_per_project"},
    {"HANGAR_NODE_NAME", "node.name"},
    {"HANGAR_NODE_HEARTBEAT_SECONDS", "node.heartbeat_seconds"},
    {"HANGAR_NODE_MAX_BROWSERS", "node.max_browsers"},
    {"HANGAR_NODE_REGION", "node.region"},
    {"HANGAR_LOG_LEVEL", "logging.level"},
    {"HANGAR_LOG_FORMAT", "logging.format"},
    {"HANGAR_METRICS_LISTEN", "metrics.listen"},
    {"HANGAR_WARM_SPARES", "browsers.warm_spares"},
    {"HANGAR_WARM_SPARES_MAX", "browsers.warm_spares_max"},
    {"HANGAR_WARM_SPARES_WINDOW_SECONDS", "browsers.spares_window_seconds"},
    {"HANGAR_MAX_BROWSERS_PER_PROJECT", "browsers.max_browsers_per_project"},
    {"HANGAR_MAX_PARALLEL_STARTS", "browsers.max_parallel_starts"},
    {"HANGAR_SANDBOX_USER", "sandbox.user"},
    {"HANGAR_SANDBOX_ALLOW_HOST_PORTS", "sandbox.allow_host_ports"},
    {"HANGAR_SANDBOX_NETWORK", "sandbox.network"},
    {"HANGAR_SANDBOX_PIDS_MAX", "sandbox.pids_max"},
    {"HANGAR_SANDBOX_DISK_QUOTA_MB", "sandbox.disk_quota_mb"},
    {"HANGAR_SANDBOX_PREPARED", "sandbox.prepared"},
    {"HANGAR_KEEP_SESSIONS_ON_STOP", "runtime.keep_sessions_on_stop"},
    {"HANGAR_SANDBOX_MEMORY_LIMIT_MB", "sandbox.memory_limit_mb"},
    {"HANGAR_SANDBOX_MAX_BROWSER_MEMORY_MB", "sandbox.max_browser_memory_mb"},
    {"HANGAR_SECRETS_KEY_FILE", "secrets.key_file"},
    {"HANGAR_APPS_WARM_SANDBOXES", "apps.warm_sandboxes"},
    {"HANGAR_APPS_BUILD_TIMEOUT_SECONDS", "apps.build_timeout_seconds"},
    {"HANGAR_AUDIT", "audit.enabled"},
    {"HANGAR_AUDIT_RETENTION_DAYS", "audit.retention_days"},
};
} // namespace

Config::Config(const std::string &main_file, const std::map<std::string, std::string> &env)
    : main_file_(main_file), layers_(new Poco::Util::LayeredConfiguration) {
    // Lower priority value wins in LayeredConfiguration: env (-100) > plugins.d (-1..) > main (0).
    if (!main_file.empty()) {
        layers_->add(new Poco::Util::IniFileConfiguration(main_file), 0);
        std::filesystem::path dir = std::filesystem::path(main_file).parent_path() / "plugins.d";
        std::vector<std::filesystem::path> files;
        std::error_code ec;
        for (const auto &entry : std::filesystem::directory_iterator(dir, ec))
            if (entry.path().extension() == ".ini") files.push_back(entry.path());
        std::sort(files.begin(), files.end());
        int prio = -1;
        for (const auto &f : files) {
            layers_->add(new Poco::Util::IniFileConfiguration(f.string()), prio--);
            plugin_sections_.push_back(f.stem().string());
        }
    }
    Poco::AutoPtr<Poco::Util::MapConfiguration> envLayer(new Poco::Util::MapConfiguration);
    for (const auto &[name, key] : kEnvKeys) {
        auto it = env.find(name);
        if (it != env.end()) envLayer->setString(key, it->second);
    }
    if (auto it = env.find("HANGAR_PLUGINS_ENABLE"); it != env.end())
        for (auto &name : split(it->second, ','))
            if (auto t = trim(name); !t.empty()) env_enabled_.push_back(t);
    layers_->add(envLayer, -100);
}

std::optional<std::string> Config::get(const std::string &key) const {
    if (!layers_->hasProperty(key)) return std::nullopt;
    return layers_->getString(key);
}

std::string Config::get(const std::string &key, const std::string &fallback) const {
    auto v = get(key);
    return v && !v->empty() ? *v : fallback;
}

long long Config::get_int(const std::string &key, long long fallback) const {
    auto v = get(key);
    if (!v || v->empty()) return fallback;
    try {
        return std::stoll(*v);
    } catch (const std::exception &) {
        return fallback;
    }
}

bool Config::get_bool(const std::string &key, bool fallback) const {
    auto v = get(key);
    if (!v || v->empty()) return fallback;
    std::string s = trim(*v);
    return s == "true" || s == "1" || s == "yes" || s == "on";
}

std::vector<std::string> Config::keys(const std::string &prefix) const {
    Poco::Util::AbstractConfiguration::Keys out;
    layers_->keys(prefix, out);
    return out;
}

std::vector<std::string> Config::enabled_plugins() const {
    std::vector<std::string> out = env_enabled_;
    for (const auto &name : plugin_sections_)
        if (get_bool(name + ".enabled", false) && std::find(out.begin(), out.end(), name) == out.end())
            out.push_back(name);
    return out;
}

std::vector<std::string> Config::disabled_plugins() const {
    std::vector<std::string> out;
    auto enabled = enabled_plugins();
    for (const auto &name : plugin_sections_)
        if (std::find(enabled.begin(), enabled.end(), name) == enabled.end()) out.push_back(name);
    return out;
}

std::map<std::string, std::string> Config::process_environment() {
    std::map<std::string, std::string> env;
    for (char **e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        auto eq = kv.find('=');
        if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
    }
    return env;
}

} // namespace hangar::host
