#include "app.hpp"

#include "core.hpp"
#include "doctor.hpp"
#include "http.hpp"
#include "log_format.hpp"
#include "metrics.hpp"
#include "nodes.hpp"
#include "openapi.hpp"
#include "plugins.hpp"
#include "runtime.hpp"
#include "secrets.hpp"
#include "util.hpp"

#include <Poco/AutoPtr.h>
#include <Poco/ConsoleChannel.h>
#include <Poco/Crypto/OpenSSLInitializer.h>
#include <Poco/FormattingChannel.h>
#include <Poco/PatternFormatter.h>
#include <Poco/Util/ServerApplication.h>

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>

namespace fs = std::filesystem;
using nlohmann::json;

namespace hangar::host {

namespace {

// How long a start on a shared store tries its public URL (a pod's DNS name is published a
// moment after the pod starts) before it refuses it.
constexpr int kPublicUrlPatienceMs = 8000;

// An agent's wait for its sandbox's network, which the server links out (pasta, routes) while
// the agent loads its plugins: one byte when it is in place, end of file when that failed.
void wait_for_network(int fd) {
    constexpr int kNetworkPatienceMs = 60000; // the server gives up (and kills us) well before
    UniqueFd owned(fd);
    pollfd p{fd, POLLIN, 0};
    int ready;
    do {
        ready = ::poll(&p, 1, kNetworkPatienceMs);
    } while (ready < 0 && errno == EINTR);
    char byte = 0;
    if (ready != 1 || ::read(fd, &byte, 1) != 1) throw std::runtime_error("the sandbox's network was not set up");
}

struct Args {
    std::string command; // serve | agent | admin | version | help
    std::vector<std::string> positional;
    std::map<std::string, std::string> options; // --key=value or --key value
};

Args parse_args(int argc, char **argv) {
    Args a;
    std::vector<std::string> v(argv + 1, argv + argc);
    for (std::size_t i = 0; i < v.size(); ++i) {
        const auto &s = v[i];
        if (s.rfind("--", 0) == 0) {
            auto eq = s.find('=');
            if (eq != std::string::npos)
                a.options[s.substr(2, eq - 2)] = s.substr(eq + 1);
            else if (i + 1 < v.size() && v[i + 1].rfind("--", 0) != 0)
                a.options[s.substr(2)] = v[++i];
            else
                a.options[s.substr(2)] = "true";
        } else if (a.command.empty()) {
            a.command = s;
        } else {
            a.positional.push_back(s);
        }
    }
    if (a.command.empty()) a.command = "serve";
    return a;
}

void setup_logging(const std::string &level, const std::string &format) {
    Poco::AutoPtr<Poco::Formatter> fmt;
    if (format == "json")
        fmt = new JsonLogFormatter;
    else
        fmt = new Poco::PatternFormatter("%Y-%m-%d %H:%M:%S.%i %p %s: %t");
    Poco::AutoPtr<Poco::ConsoleChannel> console(new Poco::ConsoleChannel(std::cerr));
    Poco::AutoPtr<Poco::FormattingChannel> formatted(new Poco::FormattingChannel(fmt, console));
    Poco::AutoPtr<RedactingChannel> channel(new RedactingChannel(formatted));
    Poco::Logger::root().setChannel(channel);
    Poco::Logger::root().setLevel(level.empty() ? "information" : level);
    Poco::Logger::setLevel("", Poco::Logger::parseLevel(level.empty() ? "information" : level));
}

// Kernel API areas and the plugin that serves each, so a request to an area without its plugin
// gets "disabled" (404) or "not implemented" (501) instead of a bare "no route".
const std::vector<std::pair<std::string, std::string>> kAreas = {
    {"/browsers", "browsers"},
    {"/browser", "browsers"},
    {"/browsers/{id}/fs", "fs"},
    {"/browsers/{id}/process", "process"},
    {"/browsers/{id}/computer", "computer"},
    {"/browsers/{id}/logs", "logs"},
    {"/browsers/{id}/replays", "replays"},
    {"/browsers/{id}/playwright", "playwright"},
    {"/browsers/{id}/telemetry", "telemetry"},
    {"/browsers/{id}/extensions", "extensions"},
    {"/browsers/{id}/curl", "browsers"},
    {"/profiles", "profiles"},
    {"/extensions", "extensions"},
    {"/proxies", "proxies"},
    {"/browser_pools", "pools"},
    {"/credentials", "credentials"},
    {"/org/credential_providers", "credentials"},
    {"/auth/connections", "managed_auth"},
    {"/vaults", "vaults"},
    {"/vault-provider-configs", "vaults"},
    {"/deployments", "apps"},
    {"/apps", "apps"},
    {"/invocations", "apps"},
    {"/projects", "org"},
    {"/org", "org"},
    {"/audit-logs", "org"},
    {"/api_keys", "org"},
    {"/telemetry", "telemetry"},
    {"/search", "search"},
    // kernel-api-0131 §1D (plugins/config_registry).
    {"/config-registry", "config_registry"},
};

// `[features] extensions = off` (every project) and `[project.<id>] extensions = off` (one),
// read once at start, keyed by project id only: a project's own keys can rename it, so a switch
// that followed the name would be theirs to escape. A section named by a project's name binds,
// the first time a server reads it, to the project that has the name then, and the store keeps
// that binding: renaming the project later (or another project taking the name) moves nothing.
// A name that matches no project yet, or several (one per org), is skipped with a warning.
// Feature names are plugin names with '-' as '_'.
std::map<std::string, std::map<std::string, bool>> feature_switches(const Config &cfg, Store &store,
                                                                    Poco::Logger &log) {
    store.migrate("host_feature_switches",
                  {{1, "CREATE TABLE feature_switch_names (name TEXT PRIMARY KEY, project_id TEXT NOT NULL)"}});
    auto project_of = [&](const std::string &scope) -> std::optional<std::string> {
        if (!store.exec("SELECT id FROM projects WHERE id = ?", {scope}).empty()) return scope;
        std::string name = scope;
        std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
        auto bound = store.exec("SELECT project_id FROM feature_switch_names WHERE name = ?", {name});
        if (!bound.empty()) return bound[0].at("project_id").get<std::string>();
        auto named = store.exec("SELECT id FROM projects WHERE LOWER(name) = ? AND deleted_at IS NULL", {name});
        if (named.size() != 1) {
            log.warning("[project.%s]: %s; its switches apply to no project (name the project by its id)", scope,
                        std::string(named.empty() ? "no project has this id or name"
                                                  : "several projects (in different orgs) have this name"));
            return std::nullopt;
        }
        std::string id = named[0].at("id").get<std::string>();
        store.exec("INSERT INTO feature_switch_names (name, project_id) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
                   {name, id});
        id = store.exec("SELECT project_id FROM feature_switch_names WHERE name = ?", {name})[0]
                 .at("project_id")
                 .get<std::string>();
        log.information("[project.%s] is project %s from now on, whatever it is renamed to", scope, id);
        return id;
    };
    std::map<std::string, std::map<std::string, bool>> out;
    auto read = [&](const std::string &scope, const std::string &section) {
        for (const auto &feature : cfg.keys(section)) {
            std::string name = feature;
            std::replace(name.begin(), name.end(), '-', '_');
            std::string key = section;
            key += '.';
            key += feature;
            out[scope][name] = cfg.get_bool(key, true);
        }
    };
    read("", "features");
    for (const auto &project : cfg.keys("project"))
        if (auto id = project_of(project)) read(*id, "project." + project);
    return out;
}

// Routes the host itself serves, registered like a plugin's.
PluginRecord &host_record() {
    static PluginRecord rec = [] {
        PluginRecord r;
        r.name = "host";
        r.logger = &Poco::Logger::get("hangar");
        return r;
    }();
    return rec;
}

// The address this server reaches itself at, from the host part of `listen`: a wildcard
// listens on loopback too.
std::string self_address(std::string host) {
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
    if (host == "::") return "::1";
    return host;
}

void json_reply(hangar_response *res, int status, const json &body) {
    res->status = status;
    res->content_type = "application/json";
    res->body = body.dump();
}

// The document GET /openapi.json serves: the host's part and each started plugin's fragment, so
// it lists exactly the routes this server has.
std::string openapi_document(HostCore &core, const PluginManager &plugins) {
    std::vector<OpenApiFragment> fragments;
    for (const auto &p : plugins.plugins()) {
        if (!p->started) continue;
        auto fragment = read_openapi_fragment(p->file, p->name);
        if (fragment.empty())
            core.log.information("plugin %s has no %s.openapi.json beside it: its routes are not in /openapi.json",
                                 p->name, p->name);
        fragments.push_back({p->name, std::move(fragment)});
    }
    std::vector<std::string> conflicts;
    auto doc = merge_openapi(openapi_base(), fragments, conflicts);
    doc["info"]["version"] = HANGAR_VERSION;
    for (const auto &c : conflicts)
        core.log.warning("openapi: %s", c);
    return doc.dump();
}

// What /metrics reports of each plugin: started, failed to start, refused (wrong ABI) or
// switched off in its ini.
std::vector<Metrics::PluginState> plugin_states(const HostCore &core, const PluginManager &plugins) {
    std::vector<Metrics::PluginState> out;
    for (const auto &p : plugins.plugins())
        out.push_back({p->name, p->started ? "started" : "failed"});
    for (const auto &r : plugins.refused())
        out.push_back({r.name, "refused"});
    for (const auto &name : core.disabled_plugins)
        out.push_back({name, "disabled"});
    return out;
}

std::vector<std::string> plugin_dirs(const Config &cfg, const std::string &exe) {
    std::vector<std::string> dirs;
    auto extra = cfg.get("plugins.extra_dirs", "");
    for (auto &d : split(extra, ':'))
        if (!d.empty()) dirs.push_back(fs::absolute(d).lexically_normal().string());
    dirs.push_back(
        cfg.get("plugins.dir", (fs::path(exe).parent_path() / "../lib/hangar/plugins").lexically_normal().string()));
    return dirs;
}

// The plugins this node will start, with their versions, read before anything is written so a
// node that cannot join is refused first. A plugin the loader would refuse (wrong ABI) is left out.
PluginSet planned_plugins(HostCore &core, const std::vector<std::string> &dirs,
                          const std::vector<std::string> &enabled) {
    PluginManager probe(core);
    auto files = PluginManager::find_files(dirs);
    PluginSet out;
    for (const auto &name : enabled)
        if (auto it = files.find(name); it != files.end())
            if (auto seen = probe.inspect(it->second); seen.problem.empty()) out[name] = seen.version;
    return out;
}

// What the heartbeat reports. The host does not reach into a plugin: the instance count is the
// runtime's own, the warm spares come from the `browsers.metrics` service (the gauge /metrics
// shows), and free memory is the kernel's MemAvailable.
NodeStatus node_status(HostCore &core, const Runtime &runtime) {
    NodeStatus s;
    s.browsers = static_cast<std::int64_t>(runtime.running().size());
    std::string answer;
    if (core.services.call("browsers.metrics", "{}", answer) == 200) {
        auto doc = json::parse(answer, nullptr, false);
        if (doc.is_object() && doc["families"].is_array())
            for (const auto &f : doc["families"])
                if (f.value("name", "") == "hangar_warm_spares" && f.contains("samples") && f["samples"].is_array())
                    for (const auto &sample : f["samples"])
                        s.spares += static_cast<std::int64_t>(sample.value("value", 0.0));
    }
    try {
        s.mem_available_bytes = mem_available_bytes(read_file("/proc/meminfo"));
    } catch (const std::exception &) {
    }
    return s;
}

// Waits for SIGTERM/SIGINT/SIGQUIT or a programmatic stop; wait() returns the signal (0 for a
// programmatic stop).
class Termination {
public:
    void request(int sig = 0) {
        std::lock_guard lock(m_);
        if (!stop_) signal_ = sig;
        stop_ = true;
        cv_.notify_all();
    }
    int wait() {
        std::thread watcher([this] {
            sigset_t set;
            sigemptyset(&set);
            sigaddset(&set, SIGTERM);
            sigaddset(&set, SIGINT);
            sigaddset(&set, SIGQUIT);
            sigaddset(&set, SIGUSR2); // used to wake the watcher on a programmatic stop
            int sig = 0;
            sigwait(&set, &sig);
            request(sig == SIGUSR2 ? 0 : sig);
        });
        {
            std::unique_lock lock(m_);
            cv_.wait(lock, [this] { return stop_; });
        }
        ::pthread_kill(watcher.native_handle(), SIGUSR2);
        watcher.join();
        std::lock_guard lock(m_);
        return signal_;
    }
    // What must end in order has ended (an agent's plugins); the rest may be cut short.
    void finished() {
        std::lock_guard lock(m_);
        finished_ = true;
        cv_.notify_all();
    }
    bool wait_finished(std::chrono::milliseconds timeout) {
        std::unique_lock lock(m_);
        return cv_.wait_for(lock, timeout, [this] { return finished_; });
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    bool finished_ = false;
    int signal_ = 0;
};

class HangarApp : public Poco::Util::ServerApplication {
public:
    explicit HangarApp(Args args) : args_(std::move(args)) {}

protected:
    void defineOptions(Poco::Util::OptionSet &) override {} // options are parsed before Poco sees argv

    int main(const std::vector<std::string> &) override {
        try {
            if (args_.command == "serve") return serve();
            if (args_.command == "agent") return agent();
            if (args_.command == "admin") return admin();
            if (args_.command == "nodes") return nodes();
            if (args_.command == "drain") return drain();
            if (args_.command == "park") return park();
            if (args_.command == "doctor") {
                auto cfg = load_config();
                std::string exe = executable_path();
                return doctor(*cfg, exe, plugin_dirs(*cfg, exe),
                              cfg->get("browsers.chromium_path", "/usr/lib/chromium/chromium"));
            }
            if (args_.command == "version") {
                std::cout << "hangar " << HANGAR_VERSION << " (plugin ABI v" << HANGAR_ABI_VERSION << ")\n";
                return 0;
            }
            std::cerr << "usage: hangar [serve|agent|admin|doctor|nodes|version] [--config=FILE]\n"
                         "  hangar admin project create NAME\n"
                         "  hangar admin key create [--project PROJECT_ID] [--name NAME]\n"
                         "  hangar admin entitlement <org_id|project_id> <feature> on|off\n"
                         "  hangar admin rotate-secrets-key\n"
                         "  hangar doctor\n"
                         "  hangar nodes [--json]\n"
                         "  hangar drain [NAME] [--wait [--timeout SECONDS]]\n"
                         "  hangar park\n";
            return args_.command == "help" ? 0 : 64;
        } catch (const std::exception &e) {
            std::cerr << "hangar: " << e.what() << "\n";
            return 1;
        }
    }

private:
    std::string option(const std::string &name, const std::string &fallback = "") const {
        auto it = args_.options.find(name);
        return it == args_.options.end() ? fallback : it->second;
    }

    std::unique_ptr<Config> load_config() {
        std::string exe = executable_path();
        auto env = Config::process_environment();
        std::string explicit_path = option("config", env.count("HANGAR_CONFIG") ? env["HANGAR_CONFIG"] : "");
        auto cfg = std::make_unique<Config>(find_config_file(explicit_path, exe), env);
        setup_logging(cfg->get("logging.level", "information"), cfg->get("logging.format", "text"));
        return cfg;
    }

    static std::string configured_data_dir(const Config &cfg) {
        return fs::absolute(cfg.get("server.data_dir", ".data")).lexically_normal().string();
    }
    std::string data_dir(const Config &cfg) {
        auto dir = configured_data_dir(cfg);
        fs::create_directories(dir);
        // Others may traverse (instances run as an unprivileged user and need to reach their own
        // folder) but not list or read: the database and secrets inside are 0600.
        ::chmod(dir.c_str(), 0711);
        return dir;
    }

    // `[store] url`: the SQLite file by default, or a PostgreSQL server (issue 24: the whole e2e
    // suite passes on it, `make test-postgres`). Either is opened here, so a wrong path, host,
    // password or database stops the start with an error naming the setting.
    static std::unique_ptr<Store> open_store(const Config &cfg, const std::string &dir) {
        auto url = parse_store_url(cfg.get("store.url", ""), dir);
        auto store = std::make_unique<Store>(url);
        Poco::Logger::get("hangar").information("store %s", url.redacted());
        return store;
    }

    int serve() {
        auto cfg = load_config();
        auto &log = Poco::Logger::get("hangar");
        std::string exe = executable_path();
        HostCore core(HANGAR_ROLE_SERVER, *cfg);
        core.data_dir = data_dir(*cfg);
        core.max_body_bytes = static_cast<std::size_t>(cfg->get_int("server.max_body_bytes", 64ll << 20));
        core.public_url = cfg->get("server.public_url", "");
        check_public_url(core.public_url); // before the store is opened (a new SQLite file)
        // On a shared store, other nodes relay to the public URL: it must lead here.
        if (parse_store_url(cfg->get("store.url", ""), core.data_dir).kind == StoreUrl::Kind::postgresql)
            probe_public_url(cfg->get("server.listen", "127.0.0.1:8080"), core.public_url,
                             std::chrono::milliseconds(kPublicUrlPatienceMs));
        core.area_prefixes = kAreas;
        core.store = open_store(*cfg, core.data_dir);
        auto dirs = plugin_dirs(*cfg, exe);
        auto enabled = cfg->enabled_plugins();
        // Before anything else is written: a node that may not join stops here (nodes.hpp).
        NodeSettings node_settings;
        node_settings.name = cfg->get("node.name", "");
        node_settings.public_url = core.public_url;
        node_settings.heartbeat_seconds = cfg->get_int("node.heartbeat_seconds", 3);
        node_settings.max_browsers = std::max<std::int64_t>(0, cfg->get_int("node.max_browsers", 0));
        node_settings.region = cfg->get("node.region", "us-east");
        node_settings.plugins = planned_plugins(core, dirs, enabled);
        // A node without the store's secrets key stops here too, before its claim: on a store that
        // has nodes both steps only read.
        migrate_secret_registry(*core.store);
        core.tokens = std::make_unique<Tokens>(
            Tokens::shared(*core.store, secrets_key_file(*cfg, core.data_dir), core.data_dir + "/token.secret"));
        NodeRegistration node(*core.store, std::move(node_settings));
        migrate_nodes(*core.store);
        node.claim();
        log.information("node %s (instance %s)", node.settings().name, node.instance_id());
        core.node_name = node.settings().name;
        core.node = &node;
        // Plugins that keep per-node state (browser sessions) learn which nodes are gone from here.
        core.services.offer("host.nodes", [&core](std::string_view) {
            const auto now = now_ms();
            auto nodes = list_nodes(*core.store, now);
            const bool judge = core.node && core.node->may_judge_others(nodes, now);
            return json{{"self", core.node_name}, {"nodes", std::move(nodes)}, {"may_judge_stale", judge}}.dump();
        });
        // A draining node's last session ended (the browsers plugin says so): it stops as on
        // SIGINT, ending what is left (spares, idle pool members), and its row reads stopped.
        Termination term;
        core.services.offer("host.drained", [&core, &term, &log](std::string_view) {
            if (!core.node || !core.node->draining()) throw std::runtime_error("this node is not draining");
            log.information("node %s drained: stopping", core.node_name);
            term.request(0);
            return std::string("{}");
        });
        core.auth = std::make_unique<Auth>(*core.store);
        Blobs::CacheLimits cache;
        cache.bytes = static_cast<std::uint64_t>(std::max<std::int64_t>(cfg->get_int("blobs.cache_mb", 10240), 0))
                      << 20;
        core.blobs = std::make_unique<Blobs>(*core.store, core.data_dir, cfg->get("blobs.dir", ""), cache);
        log.information("blobs in %s", core.blobs->kept_in_store()
                                           ? std::string("the store (cached under ") + core.blobs->root() + ")"
                                           : core.blobs->root());
        core.auth->set_org_session_limit(cfg->get_int("browsers.max_browsers_per_project", 50));
        if (cfg->get_bool("audit.enabled", true)) {
            AuditLog::Options audit;
            audit.retention_days = static_cast<int>(std::max(1LL, cfg->get_int("audit.retention_days", 365)));
            audit.queue_capacity = static_cast<std::size_t>(std::max(1LL, cfg->get_int("audit.queue_size", 10000)));
            core.audit = std::make_unique<AuditLog>(*core.store, log, audit);
        }
        core.feature_switches = feature_switches(*cfg, *core.store, log);
        std::string generated =
            core.auth->bootstrap(cfg->get("auth.bootstrap_key", ""), core.data_dir + "/bootstrap-api-key");
        if (!generated.empty())
            std::cout << "bootstrap API key (shown once; also in " << core.data_dir
                      << "/bootstrap-api-key): " << generated << std::endl;

        for (auto &d : cfg->disabled_plugins())
            core.disabled_plugins.insert(d);
        RuntimeOptions ropt;
        ropt.data_dir = core.data_dir;
        ropt.blob_root = core.blobs->root();
        ropt.exe = exe;
        ropt.config_file = cfg->main_file();
        ropt.plugin_dirs = dirs;
        ropt.enabled_plugins = enabled;
        ropt.sandbox_user = cfg->get("sandbox.user", "");
        ropt.memory_limit_bytes = static_cast<std::uint64_t>(cfg->get_int("sandbox.memory_limit_mb", 4096)) << 20;
        ropt.start_timeout_ms = static_cast<int>(cfg->get_int("sandbox.start_timeout_ms", 30000));
        ropt.use_bwrap = cfg->get_bool("sandbox.bwrap", true);
        ropt.isolated_network = cfg->get("sandbox.network", "isolated") != "host";
        ropt.allow_host_ports = cfg->get("sandbox.allow_host_ports", "");
        ropt.allow_private_networks = cfg->get_bool("sandbox.allow_private_networks", false);
        ropt.pids_max = static_cast<std::uint64_t>(cfg->get_int("sandbox.pids_max", 4096));
        ropt.cpu_weight = static_cast<std::uint64_t>(cfg->get_int("sandbox.cpu_weight", 100));
        ropt.disk_quota_bytes = static_cast<std::uint64_t>(cfg->get_int("sandbox.disk_quota_mb", 4096)) << 20;
        ropt.prepared = static_cast<int>(std::clamp<long long>(cfg->get_int("sandbox.prepared", 2), 0, 16));
        for (auto &p : split(cfg->get("sandbox.ro_paths", ""), ','))
            if (auto t = trim(p); !t.empty()) ropt.extra_ro_paths.push_back(t);
        Runtime runtime(ropt, log);
        runtime.adopt_or_clean_leftovers();
        core.runtime = &runtime;
        log.information("instance memory limit: cgroup %s", runtime.cgroup_mode());

        core.router.add("GET", "/healthz",
                        {&host_record(),
                         [](void *, hangar_request *, hangar_response *res) {
                             json_reply(res, 200, {{"status", "ok"}});
                         },
                         nullptr, HANGAR_ROUTE_PUBLIC});

        add_ops_routes(core, host_record());

        PluginManager plugins(core);
        plugins.load(dirs, enabled);
        // Plugins claimed the adopted instances they hold a session for; the rest go.
        runtime.stop_unclaimed();
        core.metrics.set_plugins(plugin_states(core, plugins));
        std::string openapi = openapi_document(core, plugins);
        core.router.add("GET", "/openapi.json",
                        {&host_record(),
                         [](void *doc, hangar_request *, hangar_response *res) {
                             res->status = 200;
                             res->content_type = "application/json";
                             res->body = *static_cast<const std::string *>(doc);
                         },
                         &openapi, HANGAR_ROUTE_PUBLIC});
        // One line per route at debug level: tests hold the document against this table.
        for (const auto &[method, pattern] : core.router.table())
            log.debug("route %s %s", method, pattern);
        // A switched-off plugin's paths answer 404 naming it: its own name as a path, plus any
        // `prefixes` its ini lists (third-party plugins are not in the table above).
        for (const auto &name : core.disabled_plugins) {
            core.area_prefixes.emplace_back("/" + name, name);
            for (auto &prefix : split(cfg->get(name + ".prefixes", ""), ','))
                if (auto t = trim(prefix); !t.empty()) core.area_prefixes.emplace_back(t, name);
        }

        std::uint16_t port = 0;
        auto server = make_tcp_server(core, cfg->get("server.listen", "127.0.0.1:8080"), port);
        auto listen = cfg->get("server.listen", "127.0.0.1:8080");
        std::string host = listen.substr(0, listen.rfind(':'));
        core.self_host = self_address(host);
        core.self_port = port;
        server->start();
        std::string listening =
            "http://" + (host == "0.0.0.0" ? std::string("127.0.0.1") : host) + ":" + std::to_string(port);
        node.publish(core.public_url.empty() ? listening : core.public_url);
        auto status = [&core, &runtime] { return node_status(core, runtime); };
        node.beat(status());
        std::optional<Heartbeat> heartbeat(std::in_place, node, status, log);
        std::cout << "hangar listening on " << listening << std::endl;
        std::uint16_t metrics_port = 0;
        auto metrics_server = make_metrics_server(core, cfg->get("metrics.listen", ""), metrics_port);
        if (metrics_server) {
            metrics_server->start();
            log.information("metrics (no key) on %s, port %s", cfg->get("metrics.listen", ""),
                            std::to_string(metrics_port));
            std::cout << "hangar metrics on port " << metrics_port << std::endl;
        }
        core.metrics.ready = true;

        int sig = term.wait();
        core.metrics.ready = false;
        heartbeat.reset(); // the row says stopped once everything below is done (~NodeRegistration)
        // SIGTERM (systemctl stop/restart, a package upgrade) is a planned restart: sessions stay
        // running for the next start to adopt, unless the operator said otherwise. SIGINT (Ctrl-C
        // at a terminal) and SIGQUIT end every session.
        const bool keep = sig == SIGTERM && cfg->get_bool("runtime.keep_sessions_on_stop", true) &&
                          runtime.instances_outlive_server();
        core.stopping_keeps_sessions = keep;
        log.information(keep ? "shutting down; sessions keep running for the next start"
                             : "shutting down; ending every session");
        if (metrics_server) metrics_server->stop();
        server->stop();
        core.loop.stop();
        core.bridges.stop();
        server->stopAll(true);
        runtime.close_starts();
        plugins.stop_all();
        if (keep)
            runtime.detach_all();
        else
            runtime.stop_all();
        log.information("stopped");
        return 0;
    }

    // `hangar nodes [--json]`: every node of the store this config names, with its state by
    // heartbeat age.
    int nodes() {
        auto cfg = load_config();
        auto store = open_store(*cfg, data_dir(*cfg));
        migrate_nodes(*store);
        auto list = list_nodes(*store, now_ms());
        if (option("json") == "true")
            std::cout << list.dump(2) << std::endl;
        else
            std::cout << format_nodes(list);
        return 0;
    }

    // `hangar park`: the packaged unit's ExecStopPost. After a stop that kept sessions the server
    // parked them itself; after a crash nobody did, and systemd before 254 could not start the
    // next server while the unit's cgroup hands controllers down (cgroups.hpp). Only where the
    // last start recorded that layout; elsewhere it does nothing.
    int park() {
        auto cfg = load_config();
        std::string dir = configured_data_dir(*cfg); // read only: a park makes nothing
        if (recorded_cgroup_value(dir, "origin") != "delegated, no subgroup") return 0;
        std::string base = recorded_cgroup_value(dir, "base");
        if (base.empty()) return 0;
        auto failed = park_delegated_instances(base, base + "/instances");
        for (const auto &why : failed)
            std::cerr << "hangar park: " << why << "\n";
        return failed.empty() ? 0 : 1;
    }

    // `hangar drain [NAME] [--wait [--timeout SECONDS]]`: the node (this config's when no name is
    // given) takes no new browsers and stops once its sessions ended; --wait returns when it has
    // stopped, or fails after SECONDS (a pod's preStop must leave its grace period to SIGTERM).
    int drain() {
        std::int64_t timeout_s = 0;
        if (auto t = option("timeout"); !t.empty()) {
            std::size_t used = 0;
            try {
                timeout_s = std::stoll(t, &used);
            } catch (const std::exception &) {
                used = 0;
            }
            if (used != t.size() || timeout_s <= 0) {
                std::cerr << "hangar: --timeout needs a number of seconds above 0, not '" << t << "'" << std::endl;
                return 2;
            }
        }
        auto cfg = load_config();
        auto store = open_store(*cfg, data_dir(*cfg));
        migrate_nodes(*store);
        std::string name = args_.positional.empty() ? cfg->get("node.name", "") : args_.positional[0];
        // `--wait NAME` reads as --wait=NAME to the option parser.
        std::string wait = option("wait");
        if (!wait.empty() && wait != "true" && wait != "false") name = std::exchange(wait, "true");
        if (name.empty()) name = host_name();
        request_drain(*store, name, now_ms());
        std::cout << "node " << name << " is draining: it takes no new browsers and stops once its sessions ended"
                  << std::endl;
        if (wait != "true") return 0;
        const std::int64_t deadline = timeout_s > 0 ? now_ms() + timeout_s * 1000 : 0;
        std::int64_t shown = -1;
        for (;;) {
            std::this_thread::sleep_for(std::chrono::seconds(1));
            for (const auto &n : list_nodes(*store, now_ms())) {
                if (n.value("name", "") != name) continue;
                const auto state = n.value("state", "");
                if (state == "stopped") {
                    std::cout << "node " << name << " drained and stopped" << std::endl;
                    return 0;
                }
                if (state == "stale") {
                    std::cerr << "hangar: node " << name << " stopped heartbeating while draining" << std::endl;
                    return 1;
                }
                if (auto browsers = n.value("browsers", std::int64_t{0}); browsers != shown) {
                    shown = browsers;
                    std::cout << "node " << name << ": " << browsers << " browser(s) still running" << std::endl;
                }
            }
            if (deadline && now_ms() > deadline) {
                std::cerr << "hangar: node " << name << " is still draining after " << timeout_s << " s" << std::endl;
                return 1;
            }
        }
    }

    int agent() {
        auto cfg = load_config();
        auto &log = Poco::Logger::get("hangar");
        int ready_fd = std::stoi(option("ready-fd", "-1"));
        // False when nobody reads it: the server that started us is gone.
        auto report = [&](const std::string &line) {
            if (ready_fd < 0) return true;
            std::string l = line + "\n";
            bool heard = ::write(ready_fd, l.data(), l.size()) == static_cast<ssize_t>(l.size());
            ::close(ready_fd);
            ready_fd = -1;
            return heard;
        };
        try {
            log.debug("agent starting");
            HostCore core(HANGAR_ROLE_INSTANCE, *cfg);
            core.instance_dir = option("instance-dir", "/run/hangar");
            core.max_body_bytes = static_cast<std::size_t>(cfg->get_int("server.max_body_bytes", 64ll << 20));
            Termination term;
            // Answered once the plugins have stopped (recordings closed, Chromium gone): the
            // server then kills the sandbox at once instead of waiting for this process to wind
            // down its HTTP server, which is a quarter second of Poco's accept poll. The server
            // waits 10 s in all (runtime.cpp, kill_instance), as long as it ever did.
            core.router.add("POST", "/_agent/shutdown",
                            {&host_record(),
                             [](void *user, hangar_request *, hangar_response *res) {
                                 auto *term = static_cast<Termination *>(user);
                                 term->request();
                                 res->status = term->wait_finished(std::chrono::seconds(10)) ? 204 : 503;
                             },
                             &term, 0});
            core.router.add("GET", "/_agent/health",
                            {&host_record(),
                             [](void *, hangar_request *, hangar_response *res) {
                                 json_reply(res, 200, {{"status", "ok"}});
                             },
                             nullptr, 0});
            std::vector<std::string> dirs, enabled;
            for (auto &d : split(option("plugin-dirs"), ':'))
                if (!d.empty()) dirs.push_back(d);
            for (auto &p : split(option("plugins"), ','))
                if (!p.empty()) enabled.push_back(p);
            PluginManager plugins(core);
            const int network_fd = std::stoi(option("network-fd", "-1"));
            plugins.load(dirs, enabled, [&] {
                if (network_fd >= 0) wait_for_network(network_fd);
            });
            // The server bound the socket in a folder of its own and handed it over (runtime.cpp).
            int listen_fd = std::stoi(option("listen-fd", "-1"));
            if (listen_fd < 0) throw std::runtime_error("no listening socket was handed to the agent (--listen-fd)");
            auto server = make_unix_server(core, listen_fd);
            server->start();
            if (report("ready")) {
                log.information("agent ready");
                term.wait();
            } else {
                // A server killed while this instance started: no one will ever use or stop it.
                log.warning("agent: the server is gone before it heard ready; stopping");
            }
            log.information("agent stopping");
            auto began = std::chrono::steady_clock::now();
            auto phase = [&](const char *what) {
                log.debug("agent stopping: " + std::string(what) + " after " +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - began)
                                             .count()) +
                          " ms");
            };
            plugins.stop_all();
            term.finished();
            phase("plugins stopped");
            server->stop();
            core.loop.stop();
            core.bridges.stop();
            server->stopAll(true);
            phase("server stopped");
            return 0;
        } catch (const std::exception &e) {
            log.error("agent failed: %s", std::string(e.what()));
            report(std::string("error: ") + e.what());
            return 1;
        }
    }

    int admin() {
        auto cfg = load_config();
        auto store_ptr = open_store(*cfg, data_dir(*cfg));
        Store &store = *store_ptr;
        Auth auth(store);
        auth.bootstrap(cfg->get("auth.bootstrap_key", ""), data_dir(*cfg) + "/bootstrap-api-key");
        auto &p = args_.positional;
        if (p.size() >= 3 && p[0] == "project" && p[1] == "create") {
            std::cout << auth.create_project(p[2]) << std::endl;
            return 0;
        }
        if (p.size() >= 2 && p[0] == "key" && p[1] == "create") {
            std::cout << auth.create_key(option("name", "admin-created"), option("project", "")) << std::endl;
            return 0;
        }
        if (p.size() >= 4 && p[0] == "entitlement" && (p[3] == "on" || p[3] == "off")) {
            // hangar admin entitlement <org_... | proj_...> <feature> on|off
            auth.set_entitlement(p[1], p[2], p[3] == "on");
            std::cout << p[2] << " " << p[3] << " for " << p[1] << std::endl;
            return 0;
        }
        if (p.size() == 1 && p[0] == "rotate-secrets-key") {
            migrate_secret_registry(store);
            auto r = rotate_secrets_key(store, secrets_key_file(*cfg, data_dir(*cfg)));
            std::cout << "re-sealed " << r.values << " secret values under key " << r.key_id << std::endl;
            return 0;
        }
        std::cerr << "usage: hangar admin project create NAME | hangar admin key create [--project ID] [--name NAME]\n"
                     "       hangar admin entitlement <org_id|project_id> <feature> on|off\n"
                     "       hangar admin rotate-secrets-key\n";
        return 64;
    }

    Args args_;
};

} // namespace

std::string executable_path() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("hangar") : p.string();
}

std::string find_config_file(const std::string &explicit_path, const std::string &exe) {
    if (!explicit_path.empty()) {
        if (!fs::exists(explicit_path)) throw std::runtime_error("config file not found: " + explicit_path);
        return fs::absolute(explicit_path).string();
    }
    for (const auto &candidate :
         {fs::path(exe).parent_path() / "../../etc/hangar.ini",
          fs::path(exe).parent_path() / "../../etc/hangar/hangar.ini", fs::path("/etc/hangar/hangar.ini")})
        if (fs::exists(candidate)) return fs::absolute(candidate).lexically_normal().string();
    return {};
}

int run_main(int argc, char **argv) {
    // Block termination signals before any thread exists so they reach only the waiting thread;
    // a write to a closed socket must fail with EPIPE, never kill the process.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGQUIT);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
    // Poco::Crypto objects (the JWT signer's HMAC digest among them) initialise OpenSSL when they
    // are made and tear it down when the last one goes. Made and dropped per request on many
    // threads, that set-up and tear-down raced and crashed the server under load. One reference
    // held for the life of the process makes every later one a counter bump.
    Poco::Crypto::OpenSSLInitializer crypto_for_the_process;
    HangarApp app(parse_args(argc, argv));
    char *poco_argv[] = {argv[0], nullptr};
    return app.run(1, poco_argv);
}

} // namespace hangar::host
