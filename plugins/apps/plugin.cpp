// Apps, deployments and invocations (kernel-api.md §2.6–2.8, [1]–[13]; kernel-behaviour.md §19).
//
// Server half: the API, the store, builds (npm on the host with --ignore-scripts, pip into a venv
// with wheels only: no code of the app runs outside a sandbox) and one sandboxed instance per
// registry read and per invocation.
// Instance half (inside that sandbox, the agent loads only this plugin): runs the Node runner
// (runner/runner.mjs) or the Python one (runner/runner.py) once and answers with its result line.
#include <hangar/beneath.hpp>
#include <hangar/egress.hpp>
#include <hangar/multipart.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/zip.hpp>

#include <ftw.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

namespace hangar::apps {

namespace fs = std::filesystem;
using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

namespace {

constexpr const char *kRegion = "aws.us-east-1a";
constexpr std::size_t kMaxEvents = 20000;         // per deployment / invocation, kept for replay
constexpr std::size_t kMaxLogLine = 65536;        // §19.3: log lines truncated at 64 KiB
constexpr const char *kAppRoot = "/srv/app";      // where an invocation's sandbox sees the code
constexpr const char *kVenvRoot = "/srv/venv";    // and a Python app's virtual environment
constexpr const char *kBuildCache = "/srv/cache"; // a build's npm and pip cache (its project's)

const hangar_migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE apps_deployments (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL, org_id TEXT, app_name TEXT, version TEXT NOT NULL,
    status TEXT NOT NULL, status_reason TEXT, entrypoint_rel_path TEXT NOT NULL, env_vars TEXT,
    source_checksum TEXT, actions TEXT, app_version_id TEXT, key_id TEXT, api_key TEXT, force INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL, updated_at TEXT);
CREATE INDEX apps_deployments_project ON apps_deployments (project_id, app_name, version, status);
CREATE TABLE apps_invocations (
    id TEXT PRIMARY KEY, project_id TEXT NOT NULL, deployment_id TEXT NOT NULL, app_name TEXT NOT NULL,
    action_name TEXT NOT NULL, version TEXT NOT NULL, status TEXT NOT NULL, status_reason TEXT, payload TEXT,
    output TEXT, started_at TEXT NOT NULL, finished_at TEXT);
CREATE INDEX apps_invocations_project ON apps_invocations (project_id, started_at);
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES ('apps', 'apps_deployments', 'id', 'env_vars');
INSERT INTO secret_columns (owner, table_name, id_column, column_name) VALUES ('apps', 'apps_deployments', 'id', 'api_key');
)sql"},
    // Events outlive a restart: a follow after it replays the build log and the invocation's
    // events, not only the final state. Pruned with the in-memory replay (event_retention_seconds).
    {2, R"sql(
CREATE TABLE apps_events (
    resource TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, created_ms INTEGER NOT NULL,
    PRIMARY KEY (resource, seq));
CREATE INDEX apps_events_age ON apps_events (created_ms);
)sql"},
    // Nodes of one store: the node that builds a deployment (its tree, warm sandboxes and build
    // log live there) and the node that runs an invocation.
    {3, R"sql(
ALTER TABLE apps_deployments ADD COLUMN node TEXT;
ALTER TABLE apps_invocations ADD COLUMN node TEXT;
)sql"},
};

// RFC 3339 with nanoseconds (the Invocation's started_at is documented so).
std::string ts(std::int64_t ms) {
    auto text = rfc3339(ms);
    return text.substr(0, text.size() - 1) + "000000Z";
}

json text_or_null(const json &row, const char *key) {
    auto it = row.find(key);
    return it == row.end() || it->is_null() ? json(nullptr) : *it;
}

bool terminal_invocation(const std::string &s) {
    return s == "succeeded" || s == "failed";
}
bool terminal_deployment(const std::string &s) {
    return s == "running" || s == "failed" || s == "stopped";
}

// One resource's events, kept for late subscribers (a follow replays from the start) and sent
// live to the open streams; closed once the resource reached a terminal state.
class EventLog {
public:
    // `store` keeps each event (with its index) where a restart finds it again.
    explicit EventLog(std::function<void(std::size_t, const json &)> store = {}) : store_(std::move(store)) {}
    // What an earlier run stored, before anything is emitted or followed.
    void preload(std::vector<json> events) {
        std::lock_guard lock(m_);
        events_ = std::move(events);
    }
    json last() const {
        std::lock_guard lock(m_);
        return events_.empty() ? json(nullptr) : events_.back();
    }
    void emit(const json &event) {
        std::lock_guard lock(m_);
        if (events_.size() < kMaxEvents) {
            events_.push_back(event);
            if (store_) store_(events_.size(), event);
        }
        send_all(event);
    }
    void subscribe(std::unique_ptr<SseStream> stream, std::int64_t since_ms) {
        std::lock_guard lock(m_);
        for (const auto &e : events_) {
            if (e.value("event", "") == "log" && since_ms > 0) {
                auto t = parse_rfc3339_us(e.value("timestamp", ""));
                if (t && *t / 1000 < since_ms) continue;
            }
            if (!stream->send(e)) return;
        }
        if (!closed_) subs_.push_back(std::move(stream));
    }
    void heartbeat() {
        std::lock_guard lock(m_);
        if (!subs_.empty()) send_all({{"event", "sse_heartbeat"}, {"timestamp", rfc3339(now_ms())}});
    }
    void close() {
        std::lock_guard lock(m_);
        if (!closed_) closed_ms_ = now_ms();
        closed_ = true;
        subs_.clear(); // ends each response
    }
    // Closed for longer than `ms`: its replay may go (a later follow replays the final state).
    bool stale(std::int64_t ms) const {
        std::lock_guard lock(m_);
        return closed_ && now_ms() - closed_ms_ > ms;
    }
    bool closed() const {
        std::lock_guard lock(m_);
        return closed_;
    }

private:
    void send_all(const json &e) {
        std::erase_if(subs_, [&](auto &s) { return !s->send(e); });
    }
    mutable std::mutex m_;
    std::function<void(std::size_t, const json &)> store_;
    std::vector<json> events_;
    std::vector<std::unique_ptr<SseStream>> subs_;
    bool closed_ = false;
    std::int64_t closed_ms_ = 0;
};

// Serves connections on a unix socket in the server's own folder of an instance (read-only
// inside at /run/hangar-host), each on a thread of its own. RAII: the destructor stops
// accepting, shuts every connection down and joins the threads.
class UnixSocketServer {
public:
    using Serve = std::function<void(proc::Fd client)>;
    UnixSocketServer(const std::string &socket_path, Serve serve) : serve_(std::move(serve)) {
        listen_ = proc::Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (socket_path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long");
        std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
        ::unlink(socket_path.c_str());
        if (::bind(listen_.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
            ::listen(listen_.get(), 64) != 0)
            throw proc::detail::sys_error("cannot listen on " + socket_path);
        ::chmod(socket_path.c_str(), 0666); // the sandbox's unprivileged user connects
        accept_thread_ = std::thread([this] { accept_loop(); });
    }
    UnixSocketServer(const UnixSocketServer &) = delete;
    UnixSocketServer &operator=(const UnixSocketServer &) = delete;
    ~UnixSocketServer() {
        stop_ = true;
        if (accept_thread_.joinable()) accept_thread_.join();
        std::vector<std::thread> threads;
        {
            std::lock_guard lock(m_);
            for (int fd : open_fds_)
                ::shutdown(fd, SHUT_RDWR);
            threads.swap(threads_);
        }
        for (auto &t : threads)
            t.join();
    }

    // Copies bytes both ways until either side closes or the server stops.
    void relay(int a, int b) {
        {
            std::lock_guard lock(m_);
            open_fds_.insert(a);
            open_fds_.insert(b);
        }
        pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
        char buf[65536];
        bool done = false;
        while (!done && !stop_) {
            if (::poll(p, 2, 500) < 0 && errno != EINTR) break;
            for (int i = 0; i < 2 && !done; ++i) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
                ssize_t n = ::read(p[i].fd, buf, sizeof buf);
                done = n <= 0 || !write_all(p[1 - i].fd, std::string_view(buf, static_cast<std::size_t>(n)));
            }
        }
        std::lock_guard lock(m_);
        open_fds_.erase(a);
        open_fds_.erase(b);
    }

    static bool write_all(int fd, std::string_view data) {
        while (!data.empty()) {
            ssize_t w = ::write(fd, data.data(), data.size());
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return false;
            data.remove_prefix(static_cast<std::size_t>(w));
        }
        return true;
    }

private:
    void accept_loop() {
        while (!stop_) {
            if (!proc::wait_readable(listen_.get(), std::chrono::milliseconds(200))) continue;
            int c = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC);
            if (c < 0) continue;
            std::lock_guard lock(m_);
            threads_.emplace_back([this, c] { serve_(proc::Fd(c)); });
        }
    }

    Serve serve_;
    proc::Fd listen_;
    std::atomic<bool> stop_{false};
    std::thread accept_thread_;
    std::mutex m_;
    std::vector<std::thread> threads_;
    std::set<int> open_fds_;
};

// Splices connections from a unix socket in an instance folder to the server's own TCP address,
// so code in the sandbox (its own network namespace) reaches the API.
class ApiBridge {
public:
    ApiBridge(const std::string &socket_path, std::string upstream)
        : upstream_(std::move(upstream)), server_(socket_path, [this](proc::Fd client) {
              proc::Fd up(connect_upstream());
              if (up) server_.relay(client.get(), up.get());
          }) {}

private:
    int connect_upstream() const {
        auto colon = upstream_.rfind(':');
        std::string host = upstream_.substr(0, colon), port = upstream_.substr(colon + 1);
        addrinfo hints{}, *res = nullptr;
        hints.ai_socktype = SOCK_STREAM;
        if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0) return -1;
        int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
            ::close(fd);
            fd = -1;
        }
        ::freeaddrinfo(res);
        return fd;
    }

    std::string upstream_;
    UnixSocketServer server_; // last: its threads use upstream_
};

// A build sandbox's one way out (it has no network of its own): HTTP CONNECT on a unix socket in
// the server's folder of the instance, to port 443 of the configured registry host names only
// ([apps] build_registries), and only when every address the name resolves to is one the server
// may dial for a tenant (hangar/egress.hpp: public, or listed in [server] fetch_allow), so a name
// pointed at an inner host through DNS reaches nothing. The connection goes to the very address
// that was checked. What it refuses is said in the build log through `note`.
class RegistryProxy {
public:
    RegistryProxy(const std::string &socket_path, std::set<std::string> hosts, hangar::egress::Policy policy,
                  std::function<void(const std::string &)> note)
        : hosts_(std::move(hosts)), policy_(std::move(policy)), note_(std::move(note)),
          server_(socket_path, [this](proc::Fd client) { serve(std::move(client)); }) {}

private:
    void serve(proc::Fd client) {
        std::string head;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (head.size() > 8192 || left.count() <= 0 || !proc::wait_readable(client.get(), left)) return;
            ssize_t n = ::read(client.get(), buf, sizeof buf);
            if (n <= 0) return;
            head.append(buf, static_cast<std::size_t>(n));
        }
        std::string rest = head.substr(head.find("\r\n\r\n") + 4);
        std::string line = head.substr(0, head.find("\r\n"));
        auto answer = [&](const std::string &status) {
            UnixSocketServer::write_all(client.get(),
                                        "HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        };
        static const std::regex connect_line(R"(^CONNECT ([A-Za-z0-9.-]{1,253}):(\d{1,5}) HTTP/1\.[01]$)");
        std::smatch m;
        std::string host;
        if (std::regex_match(line, m, connect_line)) {
            host = m[1].str();
            std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
        }
        if (host.empty() || m[2].str() != "443" || !hosts_.count(host)) {
            note_("the build reached for " + (host.empty() ? line.substr(0, 200) : host + ":" + m[2].str()) +
                  ", refused: a build reaches the package registries only (HTTPS to [apps] build_registries)");
            return answer("403 Forbidden");
        }
        std::vector<hangar::egress::Address> addresses;
        try {
            addresses = hangar::egress::resolve(host, 443, policy_);
        } catch (const hangar::egress::Refused &e) {
            note_(std::string("the registry ") + e.what() + "; refused");
            return answer("403 Forbidden");
        } catch (const hangar::egress::ResolveError &) {
            return answer("502 Bad Gateway");
        }
        proc::Fd up;
        for (auto it = addresses.begin(); it != addresses.end() && !up; ++it) {
            proc::Fd fd(::socket(it->family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
            timeval tv{10, 0}; // bounds connect() too
            ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            if (fd && ::connect(fd.get(), it->get(), it->length) == 0) up = std::move(fd);
        }
        if (!up) return answer("502 Bad Gateway");
        if (!UnixSocketServer::write_all(client.get(), "HTTP/1.1 200 Connection established\r\n\r\n")) return;
        if (!rest.empty() && !UnixSocketServer::write_all(up.get(), rest)) return;
        server_.relay(client.get(), up.get());
    }

    std::set<std::string> hosts_;
    hangar::egress::Policy policy_;
    std::function<void(const std::string &)> note_;
    UnixSocketServer server_; // last: its threads use the members above
};

struct Deployment {
    std::string id, project_id, org_id, version, status, entrypoint, created_at;
    std::optional<std::string> app_name;
};

struct RunningInvocation {
    explicit RunningInvocation(std::string instance_id) : instance_id_(std::move(instance_id)) {}
    // The sandbox it runs in: its own, or a warm one it took.
    std::string instance() {
        std::lock_guard lock(m);
        return instance_id_;
    }
    void set_instance(std::string id) {
        std::lock_guard lock(m);
        instance_id_ = std::move(id);
    }
    std::atomic<bool> cancelled{false};
    std::string cancel_reason;
    std::mutex m;
    std::condition_variable done_cv;
    bool done = false;
    std::atomic<bool> finished{false}; // its thread is about to return

private:
    std::string instance_id_;
};

// "a, b c" → {"a", "b", "c"}: a config list.
std::vector<std::string> split_list(const std::string &text) {
    std::vector<std::string> out;
    std::string item;
    for (char c : text + ",") {
        if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
            if (!item.empty()) out.push_back(std::exchange(item, {}));
        } else {
            item += c;
        }
    }
    return out;
}

bool valid_env_key(const std::string &k) {
    static const std::regex re("^[A-Za-z_][A-Za-z0-9_]*$");
    return std::regex_match(k, re);
}

} // namespace

class AppsPlugin : public Plugin {
public:
    using Plugin::Plugin;

    void start_server() override {
        secrets_ = std::make_unique<Secrets>(secrets::key_file(config("secrets.key_file"), config("server.data_dir")));
        max_archive_bytes_ = static_cast<std::size_t>(config_int("max_archive_bytes", 200ll << 20));
        max_unpacked_bytes_ = static_cast<std::uint64_t>(config_int("max_unpacked_bytes", 1ll << 30));
        max_payload_bytes_ = static_cast<std::size_t>(config_int("max_payload_bytes", 4718592));
        sync_timeout_ms_ = config_int("sync_timeout_seconds", 100) * 1000;
        build_timeout_ms_ = config_int("build_timeout_seconds", 600) * 1000;
        max_build_bytes_ = static_cast<std::uint64_t>(config_int("max_build_bytes", 2ll << 30));
        max_per_project_ = config_int("max_concurrent_invocations_per_project", 50);
        max_per_app_ = config_int("max_concurrent_invocations_per_app", 20);
        npm_ = config("npm", "/usr/bin/npm");
        python_ = config("python", "/usr/bin/python3");
        for (auto host :
             split_list(config("build_registries", "registry.npmjs.org, pypi.org, files.pythonhosted.org"))) {
            std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
            build_registries_.insert(host);
        }
        // What a registry name may resolve to: what the server may dial for a tenant anywhere.
        fetch_policy_ = hangar::egress::Policy::parse(config("server.fetch_allow", ""),
                                                      config_bool("server.fetch_allow_private_networks", false));
        build_ca_file_ = config("build_ca_file", "/etc/ssl/certs/ca-certificates.crt");
        if (!fs::exists(build_ca_file_)) build_ca_file_.clear();
        warm_per_deployment_ = std::clamp<std::int64_t>(config_int("warm_sandboxes", 1), 0, 16);
        // What a restart interrupted cannot go on: this node's builds and invocations end with a
        // reason (those of a node that is gone end in end_lost_work).
        sql("UPDATE apps_deployments SET status = 'failed', status_reason = 'the server restarted during the build', "
            "updated_at = ? WHERE status IN ('queued', 'in_progress') AND (node IS NULL OR node = ?)",
            {rfc3339(now_ms()), node_name()});
        sql("UPDATE apps_invocations SET status = 'failed', status_reason = 'the server restarted while it ran', "
            "finished_at = ? WHERE status IN ('queued', 'running') AND (node IS NULL OR node = ?)",
            {ts(now_ms()), node_name()});

        route("POST", "/deployments", [this](Request &q, Response &r) { create_deployment(q, r); });
        route("GET", "/deployments", [this](Request &q, Response &r) { list_deployments(q, r); });
        route("GET", "/deployments/{id}", [this](Request &q, Response &r) {
            r.json(render_deployment(require_deployment(q.project(), q.param("id"))));
        });
        route("DELETE", "/deployments/{id}", [this](Request &q, Response &r) { delete_deployment(q, r); });
        route(
            "GET", "/deployments/{id}/events",
            [this](Request &q, Response &r) {
                auto row = require_deployment(q.project(), q.param("id"));
                if (!terminal_deployment(row.value("status", ""))) relay_to_owner(row, "the build");
                follow(q, r, resource_log("deployment", row));
            },
            HANGAR_ROUTE_STREAMING);
        route("GET", "/apps", [this](Request &q, Response &r) { list_apps(q, r); });

        route("POST", "/invocations", [this](Request &q, Response &r) { create_invocation(q, r); });
        route("GET", "/invocations", [this](Request &q, Response &r) { list_invocations(q, r); });
        route("GET", "/invocations/{id}", [this](Request &q, Response &r) {
            r.json(render_invocation(require_invocation(q.project(), q.param("id"))));
        });
        route("PATCH", "/invocations/{id}", [this](Request &q, Response &r) { update_invocation(q, r); });
        route(
            "GET", "/invocations/{id}/events",
            [this](Request &q, Response &r) {
                auto row = require_invocation(q.project(), q.param("id"));
                if (!terminal_invocation(row.value("status", ""))) relay_to_owner(row, "the invocation");
                follow(q, r, resource_log("invocation", row));
            },
            HANGAR_ROUTE_STREAMING);
        route("GET", "/invocations/{id}/browsers", [this](Request &q, Response &r) {
            auto row = require_invocation(q.project(), q.param("id"));
            r.json(call("browsers.by_invocation",
                        {{"project_id", q.project()}, {"invocation_id", row.at("id")}, {"base_url", q.base_url()}}));
        });
        route("DELETE", "/invocations/{id}/browsers", [this](Request &q, Response &r) {
            auto row = require_invocation(q.project(), q.param("id"));
            delete_browsers(q.project(), row.at("id").get<std::string>());
            r.no_content();
        });

        // For browsers: may a browser be created in this invocation? 404 unless it is the
        // project's and not finished.
        service("apps.invocation_active", [this](const json &in) {
            auto row = require_invocation(in.value("project_id", ""), in.value("id", ""));
            if (terminal_invocation(row.value("status", "")))
                throw Error::conflict("invocation " + row.value("id", "") + " has finished");
            return json{{"id", row.at("id")}};
        });

        event_retention_ms_ = config_int("event_retention_seconds", 3600) * 1000;
        sql("DELETE FROM apps_events WHERE created_ms < ?", json::array({now_ms() - event_retention_ms_}));
        every(15000, [this] {
            end_lost_work();
            std::vector<std::string> gone;
            {
                std::lock_guard lock(logs_mutex_);
                std::erase_if(logs_, [&](const auto &kv) {
                    bool stale = kv.second->stale(event_retention_ms_);
                    if (stale) gone.push_back(kv.first);
                    return stale;
                });
                for (auto &[_, log] : logs_)
                    log->heartbeat();
            }
            for (const auto &key : gone)
                sql("DELETE FROM apps_events WHERE resource = ?", {key});
        });
        builder_ = std::thread([this] { build_loop(); });
        warmer_ = std::thread([this] { warm_loop(); });
    }

    void stop_server() override {
        {
            std::lock_guard lock(build_mutex_);
            stopping_ = true;
        }
        build_cv_.notify_all();
        if (builder_.joinable()) builder_.join();
        {
            std::lock_guard lock(warm_mutex_);
            warm_stopping_ = true;
        }
        warm_cv_.notify_all();
        if (warmer_.joinable()) warmer_.join();
        decltype(warm_) warm;
        {
            std::lock_guard lock(warm_mutex_);
            warm.swap(warm_);
        }
        warm.clear(); // each stops its instance
        std::vector<std::shared_ptr<RunningInvocation>> running;
        {
            std::lock_guard lock(runs_mutex_);
            for (auto &[_, r] : runs_)
                running.push_back(r);
        }
        for (auto &r : running) {
            r->cancel_reason = "the server is stopping";
            r->cancelled = true;
            instance_stop(r->instance());
        }
        decltype(workers_) workers;
        {
            std::lock_guard lock(runs_mutex_);
            workers.swap(workers_);
        }
        for (auto &[_, t] : workers)
            if (t.joinable()) t.join();
        std::lock_guard lock(logs_mutex_);
        for (auto &[_, log] : logs_)
            log->close();
    }

    // ---- instance half --------------------------------------------------------------------------

    void start_instance() override {
        route("POST", "/apps/prepare", [this](Request &q, Response &r) {
            std::lock_guard lock(runner_mutex_);
            if (runner_) throw Error(409, "conflict", "a runner is already waiting here");
            runner_ = start_runner(q.json_body(false));
            r.json({{"ok", true}});
        });
        route("POST", "/apps/run", [this](Request &q, Response &r) {
            json body = q.json_body(false);
            std::unique_ptr<Runner> runner;
            {
                std::lock_guard lock(runner_mutex_);
                runner = std::move(runner_);
            }
            if (body.value("prepared", false)) {
                if (!runner) throw Error(409, "conflict", "no runner waits here");
                // The waiting runner reads its job to the end of this pipe.
                std::string job = body.at("job").dump();
                if (::write(runner->job.get(), job.data(), job.size()) != static_cast<ssize_t>(job.size()))
                    throw Error(502, "upstream_unavailable", "the waiting runner is gone");
                runner->job.reset();
            } else {
                runner = start_runner(body);
            }
            r.json(wait_result(*runner, body.value("timeout_ms", 900000)));
        });
    }

private:
    // The app's runner process in this sandbox: `result` is its fd 3 (the one result line), `job`
    // its fd 4 when it waits for a job (prepared ahead).
    struct Runner {
        proc::Child child;
        proc::Fd result;
        proc::Fd job;
    };
    std::mutex runner_mutex_;
    std::unique_ptr<Runner> runner_; // a prepared runner waiting for its job

    std::unique_ptr<Runner> start_runner(const json &body) {
        std::string run_dir = instance_run_dir();
        std::string job_file = run_dir + "/job.json";
        {
            std::ofstream out(job_file, std::ios::trunc);
            out << body.at("job").dump();
        }
        std::string runner = body.value("runner_dir", "");
        std::vector<std::string> env = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + instance_home_dir(),
                                        "LANG=C.UTF-8", "NODE_ENV=production", "TMPDIR=/tmp",
                                        // Logs as they are printed; no bytecode in the read-only code.
                                        "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1"};
        const json vars = body.value("env", json::object()); // kept alive for items()
        for (const auto &[k, v] : vars.items())
            env.push_back(k + "=" + v.get<std::string>());
        auto log = proc::open_log(run_dir + "/logs/app.log");
        auto result = proc::make_pipe();
        auto job = proc::make_pipe();
        proc::Child::Spec command;
        if (body.at("job").value("mode", "") == "build") {
            command.path = body.value("node", "/usr/bin/node");
            command.args = {runner + "/build.mjs", job_file};
        } else if (body.contains("python")) {
            command.path = body.value("python", "");
            command.args = {runner + "/runner.py", job_file};
        } else {
            command.path = body.value("node", "/usr/bin/node");
            command.args = {"--import", "file://" + runner + "/node_modules/tsx/dist/loader.mjs",
                            runner + "/runner.mjs", job_file};
        }
        command.env = env;
        command.stdout_fd = log.get();
        command.stderr_fd = log.get();
        command.extra_fds = {{result.write.get(), 3}, {job.read.get(), 4}};
        auto out = std::make_unique<Runner>();
        out->child = proc::Child::spawn(command);
        result.write.reset();
        job.read.reset();
        out->result = std::move(result.read);
        out->job = std::move(job.write);
        return out;
    }

    json wait_result(Runner &runner, std::int64_t timeout_ms) {
        runner.job.reset(); // a runner that was not prepared never reads it
        std::string line;
        auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
        char buf[65536];
        while (true) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return {{"ok", false}, {"timeout", true}, {"error", "timed out"}};
            if (!proc::wait_readable(runner.result.get(), left)) continue;
            ssize_t n = ::read(runner.result.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            line.append(buf, static_cast<std::size_t>(n));
            if (line.find('\n') != std::string::npos) break; // the one result line; no need to wait for the exit
        }
        runner.child.stop(std::chrono::milliseconds(2000));
        json parsed = json::parse(line, nullptr, false);
        if (parsed.is_object()) return parsed;
        return {{"ok", false},
                {"error", "the app process ended (" + runner.child.exit_description() + ") without a result"}};
    }

    // ---- events ---------------------------------------------------------------------------------

    std::shared_ptr<EventLog> log_for(const std::string &key, bool *created = nullptr) {
        std::lock_guard lock(logs_mutex_);
        auto &slot = logs_[key];
        if (created) *created = !slot;
        if (!slot) {
            slot = std::make_shared<EventLog>([this, key](std::size_t seq, const json &event) {
                try {
                    sql("INSERT INTO apps_events (resource, seq, event, created_ms) VALUES (?, ?, ?, ?) ON CONFLICT "
                        "(resource, seq) DO UPDATE SET event = excluded.event, created_ms = excluded.created_ms",
                        {key, static_cast<std::int64_t>(seq), event.dump(), now_ms()});
                } catch (const std::exception &e) {
                    warn("an event of " + key + " was not stored: " + e.what()); // the live stream has it
                }
            });
            std::vector<json> stored;
            for (const auto &row : sql("SELECT event FROM apps_events WHERE resource = ? ORDER BY seq", {key}))
                stored.push_back(json::parse(row.at("event").get<std::string>(), nullptr, false));
            slot->preload(std::move(stored));
        }
        return slot;
    }

    // A resource seen after a restart (or evicted) has no events left: its state stands for them.
    // `kind` is "deployment" or "invocation".
    std::shared_ptr<EventLog> resource_log(const std::string &kind, const json &row) {
        bool created = false;
        bool deployment = kind == "deployment";
        auto log = log_for((deployment ? "d/" : "i/") + row.at("id").get<std::string>(), &created);
        std::string status = row.value("status", "");
        if (created && (deployment ? terminal_deployment(status) : terminal_invocation(status))) {
            // Its stored events end with this state already, unless the restart ended it (or
            // nothing was stored): then the state is said once more.
            json last = log->last();
            bool said = last.is_object() && last.value("event", "") == kind + "_state" &&
                        last.value(kind, json::object()).value("status", "") == status;
            if (!said)
                log->emit({{"event", kind + "_state"},
                           {kind, deployment ? render_deployment(row) : render_invocation(row)},
                           {"timestamp", rfc3339(now_ms())}});
            log->close();
        }
        return log;
    }

    void follow(Request &req, Response &res, const std::shared_ptr<EventLog> &log) {
        std::int64_t since = 0;
        if (auto s = req.query("since"); s && !s->empty()) {
            auto t = parse_time_bound(*s, now_ms() * 1000);
            if (!t) throw Error::invalid("since", "must be an RFC 3339 time or a duration such as 5m");
            since = *t / 1000;
        }
        log->subscribe(res.sse(), since);
    }

    static json log_event(std::string message) {
        if (message.size() > kMaxLogLine) message.resize(kMaxLogLine);
        return {{"event", "log"}, {"message", std::move(message)}, {"timestamp", rfc3339(now_ms())}};
    }

    // ---- deployments ----------------------------------------------------------------------------

    json redacted(const json &row) const {
        json env = json::object();
        if (auto sealed = row.find("env_vars"); sealed != row.end() && sealed->is_string()) {
            json vars = json::parse(secrets_->open(sealed->get<std::string>()), nullptr, false);
            if (vars.is_object())
                for (auto &[k, _] : vars.items())
                    env[k] = ""; // API-key callers see the keys only (§2.6)
        }
        return env;
    }

    json render_deployment(const json &row) const {
        json out = {{"id", row.at("id")},
                    {"created_at", row.at("created_at")},
                    {"region", kRegion},
                    {"status", row.at("status")},
                    {"entrypoint_rel_path", row.at("entrypoint_rel_path")},
                    {"env_vars", redacted(row)},
                    {"source_type", "file"},
                    {"updated_at", text_or_null(row, "updated_at")}};
        if (auto c = text_or_null(row, "source_checksum"); !c.is_null()) out["source_checksum"] = c;
        if (auto s = text_or_null(row, "status_reason"); !s.is_null()) out["status_reason"] = s;
        return out;
    }

    json require_deployment(const std::string &project, const std::string &id) const {
        auto rows = sql("SELECT * FROM apps_deployments WHERE id = ? AND project_id = ?", {id, project});
        if (rows.empty()) throw Error::not_found("deployment not found: " + id);
        return rows[0];
    }

    void create_deployment(Request &req, Response &res) {
        std::string project = req.project();
        auto parts = parse_multipart(req);
        if (find_part(parts, "source"))
            throw Error::bad_request(
                "source_type github is not available: this server fetches no code from outside; upload a zip as "
                "`file` (kernel deploy <entrypoint>)",
                {{"invalid_input", "source: GitHub deployments are not supported by this server"}});
        Validation v;
        const auto *file = find_part(parts, "file");
        std::string entrypoint, version = "latest";
        bool force = false;
        if (!file || file->data.empty()) v.fail("file", "required: a zip of the app's folder");
        if (auto *e = find_part(parts, "entrypoint_rel_path")) entrypoint = std::string(e->data);
        fs::path ep = fs::path(entrypoint).lexically_normal();
        if (entrypoint.empty())
            v.fail("entrypoint_rel_path", "required: the entrypoint's path inside the archive");
        else if (ep.is_absolute() || *ep.begin() == "..")
            v.fail("entrypoint_rel_path", "must be a relative path inside the archive");
        if (auto *p = find_part(parts, "version"); p && !p->data.empty()) version = std::string(p->data);
        if (version.size() > 255) v.fail("version", "at most 255 characters");
        if (auto *p = find_part(parts, "force")) force = p->data == "true" || p->data == "1";
        if (auto *p = find_part(parts, "region"); p && !p->data.empty() && p->data != kRegion)
            v.fail("region", std::string("must be ") + kRegion);
        json env = json::object();
        for (const auto &p : parts) {
            // env_vars[KEY] as the TypeScript and Python SDKs send it, env_vars.KEY as the Go SDK
            // (and so the Kernel CLI) does.
            std::string key;
            if (p.name.starts_with("env_vars[") && p.name.ends_with("]"))
                key = p.name.substr(9, p.name.size() - 10);
            else if (p.name.starts_with("env_vars."))
                key = p.name.substr(9);
            else
                continue;
            if (!valid_env_key(key)) {
                v.fail(p.name, "an environment variable name is letters, digits and _ (not starting with a digit)");
                continue;
            }
            if (key == "KERNEL_API_KEY" || key == "KERNEL_BASE_URL" || key == "ENTRYPOINT_RELPATH")
                continue; // reserved
            env[key] = std::string(p.data);
        }
        v.throw_if_failed("invalid deployment");
        if (file->data.size() > max_archive_bytes_)
            throw Error(413, "payload_too_large",
                        "the archive is larger than " + std::to_string(max_archive_bytes_) +
                            " bytes (max_archive_bytes)");
        // Checked now (names, links, size, entry count), so a bad archive is a 400, not a build.
        walk_zip(file->data, {100000, max_unpacked_bytes_, true}, nullptr, "file");

        std::string id = "dep_" + new_id(20);
        auto dir = blob_path("deployments/" + id + "/source.zip");
        if (!dir) throw Error(500, "internal", "no blob storage");
        blob_put("deployments/" + id + "/source.zip", file->data);
        auto now = rfc3339(now_ms());
        sql("INSERT INTO apps_deployments (id, project_id, org_id, version, status, entrypoint_rel_path, env_vars, "
            "source_checksum, force, created_at, updated_at, node) VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
            {id, project, req.caller().value("org_id", ""), version, ep.string(), secrets_->seal(env.dump()),
             secrets::sha256_hex(file->data), force ? 1 : 0, now, now, node_name()});
        auto row = require_deployment(project, id);
        auto log = log_for("d/" + id);
        log->emit({{"event", "deployment_state"}, {"deployment", render_deployment(row)}, {"timestamp", now}});
        {
            std::lock_guard lock(build_mutex_);
            build_queue_.push_back({id, req.base_url()});
        }
        build_cv_.notify_one();
        res.json(render_deployment(row));
    }

    void list_deployments(Request &req, Response &res) {
        Validation v;
        auto paging = parse_paging(req, v);
        auto app = req.query("app_name"), ver = req.query("app_version"), query = req.query("query");
        if (ver && !ver->empty() && (!app || app->empty())) v.fail("app_version", "only together with app_name");
        v.throw_if_failed("invalid deployment query");
        std::string q = "SELECT * FROM apps_deployments WHERE project_id = ?";
        json params = json::array({req.project()});
        if (app && !app->empty()) {
            q += " AND app_name = ?";
            params.push_back(*app);
        }
        if (ver && !ver->empty()) {
            q += " AND version = ?";
            params.push_back(*ver);
        }
        if (query && !query->empty()) {
            q += " AND (id = ? OR app_name LIKE ?)";
            params.push_back(*query);
            params.push_back("%" + *query + "%");
        }
        q += " ORDER BY created_at DESC, id LIMIT ? OFFSET ?";
        params.push_back(paging.limit + 1);
        params.push_back(paging.offset);
        auto rows = sql(q, params);
        bool more = rows.size() > static_cast<std::size_t>(paging.limit);
        json out = json::array();
        for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(paging.limit); ++i)
            out.push_back(render_deployment(rows[i]));
        res.page(out, paging.offset, more);
    }

    void delete_deployment(Request &req, Response &res) {
        auto row = require_deployment(req.project(), req.param("id"));
        relay_to_owner(row, "deployment " + row.value("id", "")); // its build and warm sandboxes stop there
        std::string id = row.at("id");
        std::string status = row.value("status", "");
        if (status != "failed" && status != "stopped") {
            set_deployment(id, "stopped", "deleted");
            fail_invocations_of(id, "deployment " + id + " was deleted");
        }
        release_key(id);
        res.no_content();
    }

    void set_deployment(const std::string &id, const std::string &status, const std::string &reason) {
        sql("UPDATE apps_deployments SET status = ?, status_reason = ?, updated_at = ? WHERE id = ?",
            {status, reason.empty() ? json(nullptr) : json(reason), rfc3339(now_ms()), id});
        auto rows = sql("SELECT * FROM apps_deployments WHERE id = ?", json::array({id}));
        if (rows.empty()) return;
        auto log = log_for("d/" + id);
        log->emit({{"event", "deployment_state"},
                   {"deployment", render_deployment(rows[0])},
                   {"timestamp", rfc3339(now_ms())}});
        if (terminal_deployment(status)) log->close();
        if (status != "running") drop_warm(id);
    }

    // Keys of deployments that ended are refused once none of their invocations runs.
    void release_key(const std::string &deployment_id) {
        auto rows = sql("SELECT key_id, status FROM apps_deployments WHERE id = ?", json::array({deployment_id}));
        if (rows.empty() || rows[0].at("key_id").is_null() || rows[0].value("status", "") == "running") return;
        auto busy = sql("SELECT id FROM apps_invocations WHERE deployment_id = ? AND status IN ('queued', 'running')",
                        json::array({deployment_id}));
        if (!busy.empty()) return;
        sql("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            {rfc3339(now_ms()), rows[0].at("key_id")});
    }

    // ---- builds ---------------------------------------------------------------------------------

    struct BuildJob {
        std::string id, base_url;
    };

    void build_loop() {
        while (true) {
            BuildJob job;
            {
                std::unique_lock lock(build_mutex_);
                build_cv_.wait(lock, [&] { return stopping_ || !build_queue_.empty(); });
                if (stopping_) return;
                job = build_queue_.front();
                build_queue_.pop_front();
            }
            std::string reason;
            try {
                reason = build(job);
            } catch (const std::exception &e) {
                reason = std::string("the build failed: ") + e.what();
            }
            auto rows = sql("SELECT status FROM apps_deployments WHERE id = ?", json::array({job.id}));
            if (rows.empty() || rows[0].value("status", "") == "stopped") continue; // deleted meanwhile
            if (!reason.empty()) {
                auto log = log_for("d/" + job.id);
                log->emit(log_event(reason));
                log->emit({{"event", "error"},
                           {"error", {{"code", "deployment_failed"}, {"message", reason}}},
                           {"timestamp", rfc3339(now_ms())}});
                set_deployment(job.id, "failed", reason);
                release_key(job.id);
            }
        }
    }

    std::string build(const BuildJob &job) {
        auto row = sql("SELECT * FROM apps_deployments WHERE id = ?", json::array({job.id}));
        if (row.empty() || row[0].value("status", "") != "queued") return "";
        json dep = row[0];
        set_deployment(job.id, "in_progress", "");
        auto log = log_for("d/" + job.id);
        std::string base = *blob_path("deployments/" + job.id + "/source.zip");
        std::string ddir = fs::path(base).parent_path().string();
        std::string src = ddir + "/src", venv = ddir + "/venv";
        // A build again (another node took the deployment over) starts from the bundle alone; no
        // sandbox writes these trees any more (remove_all does not follow links).
        std::error_code ec;
        fs::remove_all(src, ec);
        fs::remove_all(venv, ec);
        std::string zip;
        {
            std::ifstream in(base, std::ios::binary);
            zip.assign(std::istreambuf_iterator<char>(in), {});
        }
        unzip_to(zip, src, {100000, max_unpacked_bytes_, true}, "file");
        fs::remove(base);
        // Until the build sandbox starts, `src` is only what the server unpacked: these checks and
        // removals read no file the app's code wrote.
        std::string entry = dep.value("entrypoint_rel_path", "");
        if (!fs::is_regular_file(src + "/" + entry))
            return "the entrypoint " + entry +
                   " is not in the archive (entrypoint_rel_path is relative to the zip's root)";
        std::string ext = fs::path(entry).extension().string();
        bool python = ext == ".py";
        if (!python && ext != ".ts" && ext != ".mts" && ext != ".js" && ext != ".mjs" && ext != ".cjs" && ext != ".cts")
            return "the entrypoint " + entry +
                   " is not TypeScript, JavaScript or Python (.ts, .mts, .cts, .js, .mjs, .cjs, .py)";
        if (python && !fs::exists(src + "/requirements.txt") && !fs::exists(src + "/pyproject.toml"))
            return "no requirements.txt or pyproject.toml at the root of the archive (a Python app lists its "
                   "dependencies there, the kernel package among them)";
        if (!python && !fs::exists(src + "/package.json"))
            return "no package.json at the root of the archive (a TypeScript/JavaScript app needs one, with a "
                   "package-lock.json)";
        strip_client_config(src, *log);
        // The sandbox's unprivileged user reaches the code (and the venv): folders traversable up to it.
        for (fs::path p = ddir; p.string().size() > config("server.data_dir", "").size(); p = p.parent_path())
            ::chmod(p.c_str(), 0755);
        if (python) fs::create_directory(venv);
        std::string why;
        try {
            why = build_in_sandbox(job.id, ddir, dep.value("project_id", ""), python);
        } catch (const std::exception &e) {
            why = std::string("the build's sandbox failed: ") + e.what();
        }
        if (!why.empty()) {
            // Nothing half-built stays (the build's sandbox has ended).
            fs::remove_all(src, ec);
            fs::remove_all(venv, ec);
            return why;
        }

        // The deployment's own key (§19.2): scoped to the project, minted before the entrypoint
        // first runs (its `new Kernel()` needs one), refused once the deployment has ended and
        // nothing runs on it.
        std::string project = dep.value("project_id", "");
        std::string plaintext = "hgr_" + new_id(40), key_id = "key_" + new_id(20);
        sql("INSERT INTO api_keys (id, org_id, project_id, name, key_hash, created_at, masked_key) VALUES (?, ?, ?, ?, "
            "?, ?, ?)",
            {key_id, dep.value("org_id", ""), project, "deployment " + job.id, secrets::sha256_hex(plaintext),
             rfc3339(now_ms()), "hgr_****" + plaintext.substr(plaintext.size() - 4)});
        sql("UPDATE apps_deployments SET key_id = ?, api_key = ? WHERE id = ?",
            {key_id, secrets_->seal(plaintext), job.id});

        log->emit(log_event("reading the app registry from " + entry));
        json env = app_env(dep, plaintext, job.base_url);
        json result;
        try {
            auto sb = open_sandbox("reg-" + new_id(16), dep, env, job.base_url, false);
            result = run_sandbox(*sb, {{"mode", "describe"}}, env, 120000,
                                 [&](const std::string &line) { log->emit(log_event(line)); });
        } catch (const std::exception &e) {
            result = {{"ok", false}, {"error", e.what()}};
        }
        if (!result.value("ok", false))
            return "importing the entrypoint failed: " + result.value("error", std::string("unknown error"));
        auto apps = result.value("apps", json::array());
        if (apps.empty() || !apps[0].is_object())
            return "the entrypoint registers no app: call kernel.app('<name>') and .action('<name>', handler) from "
                   "@onkernel/sdk";
        if (apps.size() > 1)
            log->emit(
                log_event("the entrypoint registers more than one app; " + apps[0].value("name", "") + " is deployed"));
        std::string app_name = apps[0].value("name", "");
        json actions = json::array();
        for (const auto &a : apps[0].value("actions", json::array()))
            actions.push_back({{"name", a.value("name", "")}, {"input_schema", nullptr}, {"output_schema", nullptr}});

        std::string version = dep.value("version", "latest");
        auto existing = sql("SELECT id FROM apps_deployments WHERE project_id = ? AND app_name = ? AND version = ? "
                            "AND status = 'running' AND id <> ?",
                            {project, app_name, version, job.id});
        if (!existing.empty() && version != "latest" && dep.value("force", 0) == 0)
            return "version " + version + " of app " + app_name + " already exists: deploy with force to overwrite it";

        std::string version_id = "appv_" + new_id(20);
        sql("UPDATE apps_deployments SET app_name = ?, actions = ?, app_version_id = ? WHERE id = ?",
            {app_name, actions.dump(), version_id, job.id});
        for (const auto &old : existing) {
            std::string oid = old.at("id");
            set_deployment(oid, "stopped", "superseded by deployment " + job.id);
            release_key(oid);
        }
        log->emit({{"event", "app_version_summary"},
                   {"id", version_id},
                   {"app_name", app_name},
                   {"version", version},
                   {"region", kRegion},
                   {"actions", actions},
                   {"timestamp", rfc3339(now_ms())}});
        set_deployment(job.id, "running", "");
        want_warm(job.id, job.base_url);
        return "";
    }

    // The archive's own client configuration would steer the build (an .npmrc's `git`,
    // `registry`, `script-shell`, `node-options`): removed before it, whatever it is (a link is
    // removed, not followed). The build gets its settings from build.mjs instead. npm reads a
    // project's .npmrc only at its root and pip none in the project, so the root is enough.
    static void strip_client_config(const std::string &src, EventLog &log) {
        for (const char *name : {".npmrc", ".yarnrc", ".yarnrc.yml", "pip.conf", "pip.ini", ".pypirc"}) {
            std::error_code ec;
            if (fs::remove_all(fs::path(src) / name, ec) > 0)
                log.emit(log_event(std::string("ignoring the archive's ") + name +
                                   ": a build uses the server's registry settings"));
        }
    }

    // The build (npm, or the venv and pip) in a sandbox of its own, like an invocation's, as the
    // sandbox user, with no network but the registry proxy. It writes the code's folder (npm's
    // node_modules) or the venv, bound writable at the paths invocations see them at; the host
    // never reads what it wrote. The sandbox, and whatever the build left running, is gone when
    // this returns. "" or why it failed.
    std::string build_in_sandbox(const std::string &id, const std::string &ddir, const std::string &project,
                                 bool python) {
        auto log = log_for("d/" + id);
        json binds = json::array({{{"source", ddir + "/src"}, {"target", kAppRoot}, {"writable", !python}}});
        if (python) binds.push_back({{"source", ddir + "/venv"}, {"target", kVenvRoot}, {"writable", true}});
        // npm's and pip's download cache, one per project: a later build of the same project
        // skips the downloads, and what one build leaves there reaches only that project's builds
        // (builds run one at a time, so no two share it at once).
        static const std::regex project_id("^[A-Za-z0-9_-]{1,64}$");
        std::string caches = fs::path(ddir).parent_path().parent_path().string() + "/build-cache";
        std::string cache = caches + "/" + project;
        bool cached = std::regex_match(project, project_id);
        if (cached) {
            fs::create_directories(cache);
            ::chmod(caches.c_str(), 0755); // the server's own folder, traversed by the sandbox user
            binds.push_back({{"source", cache}, {"target", kBuildCache}, {"writable", true}});
        }
        auto sb = std::make_unique<Sandbox>();
        sb->instance_id = "build-" + new_id(16);
        sb->deployment_id = id;
        sb->plugin = this; // from here on the instance is stopped with the object
        json started = instance_start(
            {{"id", sb->instance_id}, {"plugins", json::array({"apps"})}, {"binds", binds}, {"network", "none"}});
        auto dir = instance_dir(sb->instance_id);
        if (!dir) return "the build's sandbox ended before the build started";
        sb->dir = *dir;
        sb->proxy = std::make_unique<RegistryProxy>(started.at("host_dir").get<std::string>() + "/proxy.sock",
                                                    build_registries_, fetch_policy_,
                                                    [log](const std::string &m) { log->emit(log_event(m)); });
        json job = {{"mode", "build"},
                    {"kind", python ? "python" : "node"},
                    {"app_dir", kAppRoot},
                    {"venv", kVenvRoot},
                    {"proxy_socket", "/run/hangar-host/proxy.sock"},
                    {"npm", npm_},
                    {"python", python_},
                    {"runner_dir", runner_dir()}};
        if (cached) job["cache_dir"] = kBuildCache;
        if (!build_ca_file_.empty()) job["ca_file"] = build_ca_file_;
        json result = run_sandbox(*sb, job, json::object(), build_timeout_ms_,
                                  [&](const std::string &line) { log->emit(log_event(line)); });
        sb.reset();
        // Bounded between builds: a cache grown past max_build_bytes starts again empty.
        std::error_code ec;
        if (cached && tree_bytes(cache) > max_build_bytes_) fs::remove_all(cache, ec);
        if (result.value("timeout", false))
            return "the build took longer than " + std::to_string(build_timeout_ms_ / 1000) +
                   " s (build_timeout_seconds)";
        if (!result.value("ok", false)) return result.value("error", std::string("the build failed"));
        if (auto bytes = tree_bytes(ddir + "/src") + tree_bytes(ddir + "/venv"); bytes > max_build_bytes_)
            return "the build wrote " + std::to_string(bytes >> 20) + " MiB, more than max_build_bytes (" +
                   std::to_string(max_build_bytes_ >> 20) + " MiB)";
        return "";
    }

    // Bytes on disk under `root`, by a walk that follows no link (FTW_PHYS) and stays on its file
    // system, run once the build's sandbox is gone: nothing changes the tree while it is read.
    static std::uint64_t tree_bytes(const std::string &root) {
        static thread_local std::uint64_t total;
        total = 0;
        ::nftw(
            root.c_str(),
            [](const char *, const struct stat *st, int, FTW *) {
                total += static_cast<std::uint64_t>(st->st_blocks) * 512;
                return 0;
            },
            32, FTW_PHYS | FTW_MOUNT);
        return total;
    }

    // A running app sandbox: the instance, the bridge its API socket is served on, and whether its
    // runner already imported the entrypoint and waits for a job (a warm one). Stopped when
    // destroyed (a cancel may stop it first: a run then fails and `cancelled` says why).
    struct Sandbox {
        const AppsPlugin *plugin = nullptr;
        std::string instance_id, deployment_id, base_url, dir;
        bool python = false, prepared = false;
        std::optional<ApiBridge> bridge;
        std::unique_ptr<RegistryProxy> proxy; // a build's way to the registries
        json job;                             // app_dir, entrypoint, api_socket, api_port
        Sandbox() = default;
        Sandbox(const Sandbox &) = delete;
        Sandbox &operator=(const Sandbox &) = delete;
        ~Sandbox() {
            if (plugin) plugin->instance_stop(instance_id);
        }
    };

    // Starts an app sandbox for `deployment_id`; with `prepare`, its runner imports the
    // entrypoint now and waits for the job a later run_sandbox() hands it.
    std::unique_ptr<Sandbox> open_sandbox(const std::string &instance_id, const json &dep, const json &env,
                                          const std::string &base_url, bool prepare) {
        auto sb = std::make_unique<Sandbox>();
        sb->instance_id = instance_id;
        sb->deployment_id = dep.value("id", "");
        sb->base_url = base_url;
        std::string entry = dep.value("entrypoint_rel_path", "");
        std::string ddir =
            fs::path(*blob_path("deployments/" + sb->deployment_id + "/source.zip")).parent_path().string();
        json binds = json::array({{{"source", ddir + "/src"}, {"target", kAppRoot}}});
        sb->python = fs::path(entry).extension() == ".py";
        if (sb->python) binds.push_back({{"source", ddir + "/venv"}, {"target", kVenvRoot}});
        json spec = {{"id", instance_id}, {"plugins", json::array({"apps"})}, {"binds", binds}};
        sb->plugin = this; // from here on the instance is stopped with the object
        json started = instance_start(spec);
        auto dir = instance_dir(instance_id);
        if (!dir) throw std::runtime_error("the sandbox ended before the app started");
        sb->dir = *dir;
        auto upstream = config("server.bound_listen", "");
        std::uint16_t port = 0;
        if (!upstream.empty()) {
            // In the server's own folder of the instance (read-only inside, at /run/hangar-host):
            // binding in the instance folder would follow whatever the app put at that path.
            sb->bridge.emplace(started.at("host_dir").get<std::string>() + "/api.sock", upstream);
            port = static_cast<std::uint16_t>(std::stoi(upstream.substr(upstream.rfind(':') + 1)));
        }
        sb->job = {{"entrypoint", entry}, {"app_dir", kAppRoot}, {"api_socket", "/run/hangar-host/api.sock"}};
        // Inside, the runner listens on the port the URLs name (the base URL the client used, so
        // cdp_ws_url and KERNEL_BASE_URL agree) and forwards to the bridge.
        auto url_port = [&]() -> std::uint16_t {
            static const std::regex re(R"(^https?://(127\.0\.0\.1|localhost|\[::1\]):(\d+))");
            std::smatch m;
            if (std::regex_search(base_url, m, re)) return static_cast<std::uint16_t>(std::stoi(m[2].str()));
            return port;
        }();
        if (url_port) sb->job["api_port"] = url_port;
        if (prepare) {
            json job = sb->job;
            job["mode"] = "wait";
            auto r = instance_call(instance_id, "POST", "/apps/prepare", runner_body(*sb, job, env, 0).dump(), 30000);
            if (r.status != 200)
                throw std::runtime_error("the runner did not start (" + std::to_string(r.status) + ")");
            sb->prepared = true;
        }
        return sb;
    }

    json runner_body(const Sandbox &sb, const json &job, const json &env, std::int64_t timeout_ms) const {
        json body = {{"job", job},
                     {"env", env},
                     {"timeout_ms", timeout_ms},
                     {"runner_dir", runner_dir()},
                     {"node", config("node", "/usr/bin/node")}};
        if (sb.python) body["python"] = std::string(kVenvRoot) + "/bin/python";
        return body;
    }

    // Runs one job (describe or invoke) in the sandbox: its result line, the app's log lines to
    // `on_log` as they are written.
    json run_sandbox(Sandbox &sb, json job, const json &env, std::int64_t timeout_ms,
                     const std::function<void(const std::string &)> &on_log = {}) {
        for (const auto &[k, v] : sb.job.items())
            job[k] = v;
        // The log file, read from the host side as the app writes it: the app's sandbox can replace
        // it at any time, so it is opened beneath the instance folder (no symlink, a plain file).
        std::mutex tail_mutex;
        std::condition_variable tail_cv;
        bool tail_stop = false;
        std::thread tail;
        if (on_log)
            tail = std::thread([&, dir = sb.dir] {
                std::string pending;
                proc::Fd in;
                char buf[8192];
                while (true) {
                    bool last = false;
                    {
                        std::unique_lock lock(tail_mutex);
                        last = tail_stop;
                    }
                    if (!in) in = hangar::beneath::open_plain_file(dir, "logs/app.log");
                    for (ssize_t n; in && (n = ::read(in.get(), buf, sizeof buf)) > 0;) {
                        pending.append(buf, static_cast<std::size_t>(n));
                        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
                            on_log(pending.substr(0, nl));
                            pending.erase(0, nl + 1);
                        }
                        if (pending.size() > kMaxLogLine) {
                            on_log(pending);
                            pending.clear();
                        }
                    }
                    if (last) break;
                    std::unique_lock lock(tail_mutex);
                    tail_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return tail_stop; });
                }
                if (!pending.empty()) on_log(pending);
            });
        json body = runner_body(sb, job, env, timeout_ms);
        body["prepared"] = sb.prepared;
        auto r = instance_call(sb.instance_id, "POST", "/apps/run", body.dump(),
                               static_cast<std::uint32_t>(timeout_ms + 10000));
        {
            std::lock_guard lock(tail_mutex);
            tail_stop = true;
        }
        tail_cv.notify_all();
        if (tail.joinable()) tail.join();
        json parsed = r.status == 200 ? json::parse(r.body, nullptr, false) : json(nullptr);
        if (!parsed.is_object()) {
            json agent = json::parse(r.body, nullptr, false);
            std::string why = agent.is_object() ? agent.value("message", r.body) : r.body;
            return {{"ok", false},
                    {"error", "the app's sandbox stopped (" + std::to_string(r.status) + (why.empty() ? "" : ": ") +
                                  why.substr(0, 500) + ")"}};
        }
        return parsed;
    }

    // What an app's process gets in its environment: the deployment's variables and its key, and
    // the base URL the client reached Hangar at.
    json app_env(const json &dep, const std::string &key, const std::string &base_url) const {
        json env = json::parse(secrets_->open(dep.value("env_vars", std::string())), nullptr, false);
        if (!env.is_object()) env = json::object();
        env["KERNEL_API_KEY"] = key;
        env["KERNEL_BASE_URL"] = base_url;
        env["ENTRYPOINT_RELPATH"] = dep.value("entrypoint_rel_path", "");
        return env;
    }

    // ---- warm sandboxes -------------------------------------------------------------------------
    // Each running deployment keeps `warm_sandboxes` sandboxes whose runner has imported the
    // entrypoint, so an invocation starts its action without paying for a sandbox, Node or Python
    // and the app's imports (measured: ~2.2 s of a 2.25 s trivial invoke). Each still serves one
    // invocation only, and is replaced at once. A sandbox is kept for the base URL it was made
    // with (KERNEL_BASE_URL); an invocation through another address starts a fresh one.

    void want_warm(const std::string &deployment_id, const std::string &base_url) {
        if (warm_per_deployment_ <= 0) return;
        {
            std::lock_guard lock(warm_mutex_);
            warm_queue_.emplace_back(deployment_id, base_url);
        }
        warm_cv_.notify_all();
    }

    std::unique_ptr<Sandbox> take_warm(const std::string &deployment_id, const std::string &base_url) {
        std::lock_guard lock(warm_mutex_);
        auto &list = warm_[deployment_id];
        for (auto it = list.begin(); it != list.end(); ++it)
            if ((*it)->base_url == base_url) {
                auto sb = std::move(*it);
                list.erase(it);
                return sb;
            }
        return nullptr;
    }

    void drop_warm(const std::string &deployment_id) {
        std::vector<std::unique_ptr<Sandbox>> gone;
        {
            std::lock_guard lock(warm_mutex_);
            if (auto it = warm_.find(deployment_id); it != warm_.end()) {
                gone = std::move(it->second);
                warm_.erase(it);
            }
        }
        // destroyed here, outside the lock: stopping an instance takes a moment
    }

    void warm_loop() {
        while (true) {
            std::pair<std::string, std::string> want;
            {
                std::unique_lock lock(warm_mutex_);
                warm_cv_.wait(lock, [&] { return warm_stopping_ || !warm_queue_.empty(); });
                if (warm_stopping_) return;
                want = warm_queue_.front();
                warm_queue_.pop_front();
                std::size_t have = 0;
                for (const auto &sb : warm_[want.first])
                    have += sb->base_url == want.second;
                if (have >= static_cast<std::size_t>(warm_per_deployment_)) continue;
            }
            auto rows =
                sql("SELECT * FROM apps_deployments WHERE id = ? AND status = 'running'", json::array({want.first}));
            if (rows.empty()) continue;
            const json &dep = rows[0];
            try {
                auto sb = open_sandbox("warm-" + new_id(16), dep,
                                       app_env(dep, secrets_->open(dep.value("api_key", std::string())), want.second),
                                       want.second, true);
                std::lock_guard lock(warm_mutex_);
                if (warm_stopping_) continue; // stopped as it goes out of scope
                auto again = sql("SELECT status FROM apps_deployments WHERE id = ?", json::array({want.first}));
                if (again.empty() || again[0].value("status", "") != "running") continue;
                warm_[want.first].push_back(std::move(sb));
            } catch (const std::exception &e) {
                warn("no warm sandbox for deployment " + want.first + ": " + e.what());
            }
        }
    }

    std::string runner_dir() const {
        if (auto configured = config("runner_dir"); configured && !configured->empty()) return *configured;
        std::error_code ec;
        auto exe = fs::read_symlink("/proc/self/exe", ec);
        if (!ec) {
            auto installed = exe.parent_path().parent_path() / "share/hangar/apps-runner";
            if (fs::exists(installed / "runner.mjs")) return installed.string();
        }
        return HANGAR_APPS_RUNNER_SOURCE_DIR;
    }

    // ---- apps -----------------------------------------------------------------------------------

    void list_apps(Request &req, Response &res) {
        Validation v;
        auto paging = parse_paging(req, v);
        v.throw_if_failed("invalid app query");
        std::string q = "SELECT * FROM apps_deployments WHERE project_id = ? AND status = 'running'";
        json params = json::array({req.project()});
        for (auto [param, column] : {std::pair{"app_name", "app_name"}, std::pair{"version", "version"}})
            if (auto val = req.query(param); val && !val->empty()) {
                q += std::string(" AND ") + column + " = ?";
                params.push_back(*val);
            }
        if (auto query = req.query("query"); query && !query->empty()) {
            q += " AND app_name LIKE ?";
            params.push_back("%" + *query + "%");
        }
        q += " ORDER BY app_name, version LIMIT ? OFFSET ?";
        params.push_back(paging.limit + 1);
        params.push_back(paging.offset);
        auto rows = sql(q, params);
        bool more = rows.size() > static_cast<std::size_t>(paging.limit);
        json out = json::array();
        for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(paging.limit); ++i) {
            const auto &r = rows[i];
            out.push_back({{"id", r.at("app_version_id")},
                           {"app_name", r.at("app_name")},
                           {"version", r.at("version")},
                           {"region", kRegion},
                           {"deployment", r.at("id")},
                           {"actions", json::parse(r.value("actions", std::string("[]")))},
                           {"env_vars", redacted(r)}});
        }
        res.page(out, paging.offset, more);
    }

    // ---- invocations ----------------------------------------------------------------------------

    json render_invocation(const json &row) const {
        json out = {{"id", row.at("id")},
                    {"action_name", row.at("action_name")},
                    {"app_name", row.at("app_name")},
                    {"version", row.at("version")},
                    {"status", row.at("status")},
                    {"started_at", row.at("started_at")},
                    {"finished_at", text_or_null(row, "finished_at")}};
        for (const char *k : {"payload", "output", "status_reason"})
            if (auto val = text_or_null(row, k); !val.is_null()) out[k] = val;
        return out;
    }

    json require_invocation(const std::string &project, const std::string &id) const {
        auto rows = sql("SELECT * FROM apps_invocations WHERE id = ? AND project_id = ?", {id, project});
        if (rows.empty()) throw Error::not_found("invocation not found: " + id);
        return rows[0];
    }

    void create_invocation(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body(false);
        Validation v;
        auto str = [&](const char *k, bool required) -> std::string {
            auto it = body.find(k);
            if (it == body.end() || it->is_null()) {
                if (required) v.fail(k, "required");
                return "";
            }
            if (!it->is_string() || it->get_ref<const std::string &>().empty()) {
                v.fail(k, "must be a non-empty string");
                return "";
            }
            return it->get<std::string>();
        };
        std::string app = str("app_name", true), action = str("action_name", true), version = str("version", false);
        if (version.empty()) version = "latest";
        bool async = false;
        if (auto it = body.find("async"); it != body.end() && !it->is_null()) {
            if (!it->is_boolean())
                v.fail("async", "must be a boolean");
            else
                async = it->get<bool>();
        }
        std::int64_t timeout_s = 900;
        if (auto it = body.find("async_timeout_seconds"); it != body.end() && !it->is_null()) {
            if (!it->is_number())
                v.fail("async_timeout_seconds", "must be a number");
            else if (!async)
                v.fail("async_timeout_seconds", "only with async: true");
            else {
                double t = it->get<double>();
                if (t < 10 || t > 3600)
                    v.fail("async_timeout_seconds", "must be between 10 and 3600");
                else
                    timeout_s = static_cast<std::int64_t>(t);
            }
        }
        json payload = nullptr;
        if (auto it = body.find("payload"); it != body.end() && !it->is_null()) {
            if (!it->is_string()) {
                v.fail("payload", "must be a string holding JSON");
            } else {
                const auto &text = it->get_ref<const std::string &>();
                if (text.size() > max_payload_bytes_)
                    throw Error(413, "payload_too_large",
                                "payload is larger than " + std::to_string(max_payload_bytes_) + " bytes");
                if (!text.empty() && json::parse(text, nullptr, false).is_discarded())
                    v.fail("payload", "is not valid JSON");
                payload = text;
            }
        }
        v.throw_if_failed("invalid invocation");

        auto deps = sql("SELECT * FROM apps_deployments WHERE project_id = ? AND app_name = ? AND version = ? AND "
                        "status = 'running' ORDER BY created_at DESC LIMIT 1",
                        {project, app, version});
        if (deps.empty()) {
            // Taken over from a node that is gone and being built again: retry, not 404. (A build
            // names its app when it finishes, so a queued or building row with this app's name is
            // one that ran before.)
            if (!sql("SELECT id FROM apps_deployments WHERE project_id = ? AND app_name = ? AND version = ? AND status "
                     "IN ('queued', 'in_progress')",
                     {project, app, version})
                     .empty()) {
                res.header("Retry-After", "15");
                throw Error(503, "deployment_rebuilding",
                            "app " + app + " version " + version + " is being built again (its node is gone); " +
                                "retry once it runs");
            }
            throw Error::not_found("app " + app + " version " + version + " not found");
        }
        json dep = deps[0];
        bool known = false;
        for (const auto &a : json::parse(dep.value("actions", std::string("[]"))))
            known = known || a.value("name", "") == action;
        if (!known) throw Error::not_found("action " + action + " not found in app " + app + " version " + version);
        run_here_or_relay(dep, res, req.base_url());

        std::string id = new_id(24);
        auto run = std::make_shared<RunningInvocation>("inv-" + id);
        {
            // The caps (config; the project's max_concurrent_invocations when set): over → 429 now.
            std::lock_guard lock(runs_mutex_);
            auto count = [&](const std::string &where, const json &params) {
                return sql("SELECT COUNT(*) AS n FROM apps_invocations WHERE status IN ('queued', 'running') AND " +
                               where,
                           params)[0]
                    .value("n", 0);
            };
            std::int64_t project_cap = max_per_project_;
            auto p = sql("SELECT max_concurrent_invocations AS m FROM projects WHERE id = ?", json::array({project}));
            if (!p.empty() && p[0].at("m").is_number() && p[0].at("m").get<std::int64_t>() > 0)
                project_cap = p[0].at("m").get<std::int64_t>();
            std::string over;
            if (project_cap > 0 && count("project_id = ?", json::array({project})) >= project_cap)
                over = "the project runs " + std::to_string(project_cap) + " invocations already (its limit)";
            else if (max_per_app_ > 0 && count("project_id = ? AND app_name = ?", {project, app}) >= max_per_app_)
                over = "app " + app + " runs " + std::to_string(max_per_app_) + " invocations already (its limit)";
            if (!over.empty()) {
                res.header("Retry-After", "5");
                res.header("x-should-retry", "false");
                res.json({{"code", "rate_limited"}, {"message", over}}, 429);
                return;
            }
            sql("INSERT INTO apps_invocations (id, project_id, deployment_id, app_name, action_name, version, status, "
                "payload, started_at, node) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                {id, project, dep.at("id"), app, action, version, payload, ts(now_ms()), node_name()});
            runs_[id] = run;
        }
        auto log = log_for("i/" + id);
        log->emit({{"event", "invocation_state"},
                   {"invocation", render_invocation(require_invocation(project, id))},
                   {"timestamp", rfc3339(now_ms())}});
        std::int64_t limit_ms = async ? std::int64_t{timeout_s} * 1000 : std::int64_t{3600} * 1000;
        {
            // Threads of finished invocations are joined here (they hold their stacks until then).
            std::lock_guard lock(runs_mutex_);
            for (auto &[r, t] : workers_)
                if (r->finished && t.joinable()) t.join();
            std::erase_if(workers_, [](const auto &w) { return !w.second.joinable(); });
            workers_.emplace_back(run, std::thread([this, id, project, dep, run, limit_ms, base = req.base_url()] {
                                      invoke(id, project, dep, run, limit_ms, base);
                                  }));
        }
        if (async) {
            res.json({{"id", id}, {"action_name", action}, {"status", "queued"}}, 202);
            return;
        }
        {
            std::unique_lock lock(run->m);
            run->done_cv.wait_for(lock, std::chrono::milliseconds(sync_timeout_ms_), [&] { return run->done; });
        }
        auto row = require_invocation(project, id);
        json out = {{"id", id}, {"action_name", action}, {"status", row.at("status")}};
        if (auto o = text_or_null(row, "output"); !o.is_null()) out["output"] = o;
        if (auto s = text_or_null(row, "status_reason"); !s.is_null())
            out["status_reason"] = s;
        else if (!terminal_invocation(row.value("status", "")))
            out["status_reason"] = "still running after " + std::to_string(sync_timeout_ms_ / 1000) +
                                   " s; follow GET /invocations/" + id + "/events";
        res.json(out);
    }

    void invoke(const std::string &id, const std::string &project, const json &dep,
                const std::shared_ptr<RunningInvocation> &run, std::int64_t limit_ms, const std::string &base_url) {
        auto log = log_for("i/" + id);
        std::string status = "failed", reason, output;
        bool has_output = false;
        // Stopped after the answer: the result is in, and tearing a sandbox down takes a while.
        std::unique_ptr<Sandbox> sb;
        try {
            sql("UPDATE apps_invocations SET status = 'running' WHERE id = ? AND status = 'queued'", json::array({id}));
            auto row = require_invocation(project, id);
            if (row.value("status", "") == "running") {
                log->emit({{"event", "invocation_state"},
                           {"invocation", render_invocation(row)},
                           {"timestamp", rfc3339(now_ms())}});
                json env = app_env(dep, secrets_->open(dep.value("api_key", std::string())), base_url);
                json job = {{"mode", "invoke"},
                            {"app_name", row.at("app_name")},
                            {"action_name", row.at("action_name")},
                            {"invocation_id", id}};
                if (auto p = text_or_null(row, "payload"); !p.is_null()) job["payload"] = p;
                std::string dep_id = dep.at("id");
                sb = take_warm(dep_id, base_url);
                want_warm(dep_id, base_url); // the next invocation's, started now
                if (sb) {
                    run->set_instance(sb->instance_id);
                    if (run->cancelled) throw std::runtime_error("cancelled"); // before it took the sandbox
                } else {
                    sb = open_sandbox(run->instance(), dep, env, base_url, false);
                }
                json result =
                    run_sandbox(*sb, job, env, limit_ms, [&](const std::string &line) { log->emit(log_event(line)); });
                if (run->cancelled) {
                    reason = run->cancel_reason;
                } else if (result.value("ok", false)) {
                    status = "succeeded";
                    output = result.value("output", "null");
                    has_output = true;
                } else if (result.value("timeout", false)) {
                    reason = "timed out after " + std::to_string(limit_ms / 1000) + " s (async_timeout_seconds)";
                } else {
                    reason = result.value("error", std::string("the action failed"));
                }
            }
        } catch (const std::exception &e) {
            reason = run->cancelled ? run->cancel_reason : std::string("the invocation could not run: ") + e.what();
        }
        // A PATCH may have finished it already; the first terminal state stays.
        sql("UPDATE apps_invocations SET status = ?, status_reason = ?, output = ?, finished_at = ? WHERE id = ? AND "
            "status IN ('queued', 'running')",
            {status, reason.empty() ? json(nullptr) : json(reason), has_output ? json(output) : json(nullptr),
             ts(now_ms()), id});
        finish(id, project);
        {
            std::lock_guard lock(run->m);
            run->done = true;
        }
        run->done_cv.notify_all();
        sb.reset();
        std::lock_guard lock(runs_mutex_);
        runs_.erase(id);
        run->finished = true;
    }

    // After an invocation reached its terminal state: its browsers go, its events close.
    void finish(const std::string &id, const std::string &project) {
        delete_browsers(project, id);
        auto row = require_invocation(project, id);
        auto log = log_for("i/" + id);
        if (!log->closed()) {
            if (row.value("status", "") == "failed" && row.contains("status_reason") &&
                row["status_reason"].is_string())
                log->emit({{"event", "error"},
                           {"error", {{"code", "invocation_failed"}, {"message", row["status_reason"]}}},
                           {"timestamp", rfc3339(now_ms())}});
            log->emit({{"event", "invocation_state"},
                       {"invocation", render_invocation(row)},
                       {"timestamp", rfc3339(now_ms())}});
            log->close();
        }
        release_key(row.value("deployment_id", ""));
    }

    void delete_browsers(const std::string &project, const std::string &id) {
        try {
            call("browsers.by_invocation", {{"project_id", project}, {"invocation_id", id}, {"delete", true}});
        } catch (const Error &e) {
            if (e.status() != 404) throw; // no browsers plugin: nothing to delete
        }
    }

    void update_invocation(Request &req, Response &res) {
        std::string project = req.project();
        json body = req.json_body(false);
        auto row = require_invocation(project, req.param("id"));
        if (!terminal_invocation(row.value("status", ""))) relay_to_owner(row, "the invocation"); // its sandbox
        std::string id = row.at("id");
        Validation v;
        std::string status = body.value("status", json()).is_string() ? body["status"].get<std::string>() : "";
        if (status != "succeeded" && status != "failed") v.fail("status", "must be succeeded or failed");
        json output = nullptr;
        if (auto it = body.find("output"); it != body.end() && !it->is_null()) {
            if (!it->is_string() || json::parse(it->get<std::string>(), nullptr, false).is_discarded())
                v.fail("output", "must be a string holding JSON");
            else
                output = *it;
        }
        v.throw_if_failed("invalid invocation update");
        if (!terminal_invocation(row.value("status", ""))) {
            std::string reason = status == "failed" ? "cancelled" : "";
            sql("UPDATE apps_invocations SET status = ?, status_reason = ?, output = COALESCE(?, output), finished_at "
                "= ? "
                "WHERE id = ? AND status IN ('queued', 'running')",
                {status, reason.empty() ? json(nullptr) : json(reason), output, ts(now_ms()), id});
            stop_run(id, status == "failed" ? "cancelled" : "finished by PATCH");
            finish(id, project);
        }
        res.json(render_invocation(require_invocation(project, id)));
    }

    void stop_run(const std::string &id, const std::string &reason) {
        std::shared_ptr<RunningInvocation> run;
        {
            std::lock_guard lock(runs_mutex_);
            if (auto it = runs_.find(id); it != runs_.end()) run = it->second;
        }
        if (!run) return;
        run->cancel_reason = reason;
        run->cancelled = true;
        instance_stop(run->instance());
    }

    // ---- nodes of one store ------------------------------------------------------------------------
    // A build tree, its warm sandboxes, a running invocation and their live events are on the
    // node that made them: a request for them that reached another node is relayed there.
    void relay_to_owner(const json &row, const std::string &what) const {
        const json node = row.value("node", json());
        if (node.is_string()) relay_to_node(node.get<std::string>(), what);
    }

    // An invocation runs where its deployment was built. When that node is gone, the deployment
    // is built again here from its bundle (kept in the store) and the caller is asked to retry.
    void run_here_or_relay(const json &dep, Response &res, const std::string &base_url) {
        const json node = dep.value("node", json());
        if (!node.is_string() || node.get<std::string>() == node_name()) return;
        relay_to_owner(dep, "deployment " + dep.value("id", ""));
        const auto id = dep.at("id").get<std::string>();
        const auto reason = "rebuilt on node " + node_name() + ": its node " + node.get<std::string>() + " is gone";
        // One node takes it over: the one whose UPDATE still finds the old node.
        if (!sql("UPDATE apps_deployments SET node = ?, status = 'queued', status_reason = ?, updated_at = ? "
                 "WHERE id = ? AND node = ? AND status = 'running' RETURNING id",
                 {node_name(), reason, rfc3339(now_ms()), id, node})
                 .empty()) {
            info("deployment " + id + " " + reason);
            {
                std::lock_guard lock(build_mutex_);
                build_queue_.push_back({id, base_url});
            }
            build_cv_.notify_one();
        }
        res.header("Retry-After", "15");
        throw Error(503, "deployment_rebuilding",
                    "deployment " + id + " is being built again (" + reason + "); retry once it runs");
    }

    // Builds and invocations of a node that stopped heartbeating end with a reason, as a restart
    // ends this node's own.
    void end_lost_work() {
        ServingNodes nodes(*this);
        auto gone = [&](const json &row) {
            const json node = row.value("node", json());
            if (!node.is_string() || node.get<std::string>() == node_name()) return false;
            return !nodes.other_serves(node.get<std::string>());
        };
        for (const auto &row :
             sql("SELECT id, node FROM apps_deployments WHERE status IN ('queued', 'in_progress') AND node <> ?",
                 {node_name()}))
            if (gone(row))
                sql("UPDATE apps_deployments SET status = 'failed', status_reason = ?, updated_at = ? WHERE id = ? AND "
                    "status IN ('queued', 'in_progress')",
                    {"its node " + row.at("node").get<std::string>() + " stopped during the build", rfc3339(now_ms()),
                     row.at("id")});
        for (const auto &row :
             sql("SELECT id, node FROM apps_invocations WHERE status IN ('queued', 'running') AND node <> ?",
                 {node_name()}))
            if (gone(row))
                sql("UPDATE apps_invocations SET status = 'failed', status_reason = ?, finished_at = ? WHERE id = ? "
                    "AND "
                    "status IN ('queued', 'running')",
                    {"its node " + row.at("node").get<std::string>() + " stopped while it ran", ts(now_ms()),
                     row.at("id")});
    }

    void fail_invocations_of(const std::string &deployment_id, const std::string &reason) {
        auto rows = sql("SELECT id, project_id FROM apps_invocations WHERE deployment_id = ? AND status IN ('queued', "
                        "'running')",
                        json::array({deployment_id}));
        for (const auto &r : rows) {
            std::string id = r.at("id");
            sql("UPDATE apps_invocations SET status = 'failed', status_reason = ?, finished_at = ? WHERE id = ? AND "
                "status IN ('queued', 'running')",
                {reason, ts(now_ms()), id});
            stop_run(id, reason);
            finish(id, r.at("project_id"));
        }
    }

    void list_invocations(Request &req, Response &res) {
        Validation v;
        auto paging = parse_paging(req, v);
        std::string q = "SELECT * FROM apps_invocations WHERE project_id = ?";
        json params = json::array({req.project()});
        for (auto [param, column] : {std::pair{"app_name", "app_name"}, std::pair{"action_name", "action_name"},
                                     std::pair{"version", "version"}, std::pair{"deployment_id", "deployment_id"},
                                     std::pair{"status", "status"}})
            if (auto val = req.query(param); val && !val->empty()) {
                q += std::string(" AND ") + column + " = ?";
                params.push_back(*val);
            }
        if (auto s = req.query("status");
            s && !s->empty() && *s != "queued" && *s != "running" && *s != "succeeded" && *s != "failed")
            v.fail("status", "must be queued, running, succeeded or failed");
        if (auto s = req.query("since"); s && !s->empty()) {
            auto t = parse_time_bound(*s, now_ms() * 1000);
            if (!t)
                v.fail("since", "must be an RFC 3339 time or a duration such as 5m");
            else {
                q += " AND started_at >= ?";
                params.push_back(ts(*t / 1000));
            }
        }
        if (auto query = req.query("query"); query && !query->empty()) {
            q += " AND (id = ? OR app_name LIKE ? OR action_name LIKE ?)";
            params.push_back(*query);
            params.push_back("%" + *query + "%");
            params.push_back("%" + *query + "%");
        }
        v.throw_if_failed("invalid invocation query");
        q += " ORDER BY started_at DESC, id LIMIT ? OFFSET ?";
        params.push_back(paging.limit + 1);
        params.push_back(paging.offset);
        auto rows = sql(q, params);
        bool more = rows.size() > static_cast<std::size_t>(paging.limit);
        json out = json::array();
        for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(paging.limit); ++i)
            out.push_back(render_invocation(rows[i]));
        res.page(out, paging.offset, more);
    }

    std::unique_ptr<Secrets> secrets_;
    std::size_t max_archive_bytes_ = 0, max_payload_bytes_ = 0;
    std::uint64_t max_unpacked_bytes_ = 0;
    std::int64_t event_retention_ms_ = 3600000;
    std::int64_t sync_timeout_ms_ = 100000, build_timeout_ms_ = 600000, max_per_project_ = 50, max_per_app_ = 20;
    std::string npm_;
    std::string python_;
    std::uint64_t max_build_bytes_ = 2ull << 30;
    std::set<std::string> build_registries_;
    hangar::egress::Policy fetch_policy_;
    std::string build_ca_file_; // the trust store a build's npm and pip use (the system's)

    std::mutex logs_mutex_;
    std::map<std::string, std::shared_ptr<EventLog>> logs_;

    std::mutex build_mutex_;
    std::condition_variable build_cv_;
    std::deque<BuildJob> build_queue_;
    bool stopping_ = false;
    std::thread builder_;

    std::int64_t warm_per_deployment_ = 1;
    std::mutex warm_mutex_;
    std::condition_variable warm_cv_;
    std::deque<std::pair<std::string, std::string>> warm_queue_; // (deployment, base URL)
    std::map<std::string, std::vector<std::unique_ptr<Sandbox>>> warm_;
    bool warm_stopping_ = false;
    std::thread warmer_;

    std::mutex runs_mutex_;
    std::map<std::string, std::shared_ptr<RunningInvocation>> runs_;
    std::vector<std::pair<std::shared_ptr<RunningInvocation>, std::thread>> workers_;
};

} // namespace hangar::apps

HANGAR_PLUGIN(hangar::apps::AppsPlugin, "apps", "0.1.0", "browsers?", hangar::apps::kMigrations,
              sizeof(hangar::apps::kMigrations) / sizeof(hangar::apps::kMigrations[0]))
