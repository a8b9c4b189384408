#include "nodes.hpp"

#include "store.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/Net/StreamSocket.h>
#include <Poco/URI.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <initializer_list>
#include <sstream>
#include <string_view>
#include <thread>

using nlohmann::json;

namespace hangar::host {

namespace {

const std::vector<Store::Migration> kNodesMigrations = {
    {1, "CREATE TABLE nodes (name TEXT PRIMARY KEY, public_url TEXT NOT NULL, instance_id TEXT NOT NULL,"
        " boot_id TEXT NOT NULL, pid INTEGER NOT NULL, hangar_version TEXT NOT NULL,"
        " abi_version INTEGER NOT NULL, plugins TEXT NOT NULL, started_at INTEGER NOT NULL,"
        " heartbeat_at INTEGER NOT NULL, heartbeat_seconds INTEGER NOT NULL, stopped_at INTEGER,"
        " browsers INTEGER NOT NULL DEFAULT 0, spares INTEGER NOT NULL DEFAULT 0,"
        " mem_available_bytes INTEGER NOT NULL DEFAULT -1)"},
    // `hangar drain`: set by the command, read by the node's heartbeat, cleared by its next claim.
    {2, "ALTER TABLE nodes ADD COLUMN draining_at INTEGER"},
    // `[node] max_browsers`: the placement of creates (browsers plugin) reads every node's cap here.
    {3, "ALTER TABLE nodes ADD COLUMN max_browsers INTEGER NOT NULL DEFAULT 0"},
    // `[node] region`: a create that names a region is placed on a node serving it.
    {4, "ALTER TABLE nodes ADD COLUMN region TEXT NOT NULL DEFAULT ''"},
};

const char *kNameSetting = "[node] name / HANGAR_NODE_NAME";
const char *kPluginSettings =
    "every node of a store runs the same plugins at the same versions: plugins.d/*.ini `enabled`, "
    "HANGAR_PLUGINS_ENABLE, HANGAR_PLUGIN_DIR";

std::string boot_id() {
    try {
        return trim(read_file("/proc/sys/kernel/random/boot_id"));
    } catch (const std::exception &) {
        return {};
    }
}

PluginSet parse_plugins(const std::string &text) {
    PluginSet out;
    auto j = json::parse(text, nullptr, false);
    if (j.is_object())
        for (const auto &[name, version] : j.items())
            out[name] = version.is_string() ? version.get<std::string>() : "";
    return out;
}

std::int64_t int_of(const json &row, const char *key, std::int64_t fallback = 0) {
    auto it = row.find(key);
    if (it == row.end() || it->is_null()) return fallback;
    if (it->is_number()) return it->get<std::int64_t>();
    if (it->is_string()) {
        try {
            return std::stoll(it->get<std::string>());
        } catch (const std::exception &) {
        }
    }
    return fallback;
}

bool stopped(const json &row) {
    auto it = row.find("stopped_at");
    return it != row.end() && !it->is_null();
}

std::string age_text(std::int64_t ms) {
    auto s = std::max<std::int64_t>(0, ms / 1000);
    if (s < 120) return std::to_string(s) + "s";
    if (s < 7200) return std::to_string(s / 60) + "m";
    return std::to_string(s / 3600) + "h";
}

std::string bytes_text(std::int64_t bytes) {
    if (bytes < 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

} // namespace

const char *to_string(NodeState state) {
    switch (state) {
    case NodeState::live:
        return "live";
    case NodeState::stale:
        return "stale";
    case NodeState::stopped:
        return "stopped";
    }
    return "stale";
}

std::int64_t stale_after_ms(std::int64_t heartbeat_seconds) {
    return std::max<std::int64_t>(1, heartbeat_seconds) * 1000 * kMissedHeartbeats;
}

NodeState node_state(bool stopped, std::int64_t heartbeat_at_ms, std::int64_t heartbeat_seconds, std::int64_t now) {
    if (stopped) return NodeState::stopped;
    // A clock a little behind another node's must not make a fresh row look old, nor one ahead
    // make it look fresher than its interval allows: only the age past the allowance counts.
    return now - heartbeat_at_ms > stale_after_ms(heartbeat_seconds) ? NodeState::stale : NodeState::live;
}

std::string plugin_set_difference(const PluginSet &mine, unsigned my_abi, const PluginSet &theirs, unsigned their_abi) {
    std::string out;
    auto part = [&out](std::initializer_list<std::string_view> words) {
        if (!out.empty()) out += "; ";
        for (auto w : words)
            out += w;
    };
    if (my_abi != their_abi)
        part({"plugin ABI v", std::to_string(my_abi), " here, v", std::to_string(their_abi), " there"});
    for (const auto &[name, version] : mine) {
        auto it = theirs.find(name);
        if (it == theirs.end())
            part({"plugin ", name, " ", version, " is enabled here, not there"});
        else if (it->second != version)
            part({"plugin ", name, " is ", version, " here, ", it->second, " there"});
    }
    for (const auto &[name, version] : theirs)
        if (!mine.count(name)) part({"plugin ", name, " ", version, " is enabled there, not here"});
    return out;
}

void check_public_url(const std::string &url) {
    if (url.empty()) return;
    auto bad = [&](const std::string &why) {
        throw NodeError(std::string("[server] public_url / HANGAR_PUBLIC_URL = \"") + url + "\" " + why +
                        ": give the http(s) URL clients and other nodes reach this node at, such as "
                        "http://10.0.0.5:8080, or leave it empty to use the listen address");
    };
    Poco::URI uri;
    try {
        uri = Poco::URI(url);
    } catch (const std::exception &) {
        bad("is not a URL");
    }
    if (uri.getScheme() != "http" && uri.getScheme() != "https") bad("is not an http(s) URL");
    if (uri.getHost().empty()) bad("has no host");
    if (!uri.getQuery().empty() || !uri.getFragment().empty()) bad("has a query or fragment");
}

void probe_public_url(const std::string &listen, const std::string &url, std::chrono::milliseconds patience) {
    if (url.empty()) return;
    const Poco::URI uri(url);
    if (uri.getScheme() != "http") return;
    Poco::Net::ServerSocket listener;
    try {
        const Poco::Net::SocketAddress address(listen);
        if (address.port() == 0) return; // a port picked at start cannot be in a URL given before
        listener.bind(address, true, false);
        listener.listen(16);
    } catch (const Poco::Exception &) {
        return; // the server's own bind says what is wrong with `listen`
    }
    const std::string nonce = random_token(24);
    std::atomic<bool> done{false};
    std::jthread answerer([&] {
        while (!done) {
            try {
                if (!listener.poll(Poco::Timespan(0, 200'000), Poco::Net::Socket::SELECT_READ)) continue;
                Poco::Net::StreamSocket peer = listener.acceptConnection();
                peer.setReceiveTimeout(Poco::Timespan(2, 0));
                std::string head;
                char buf[1024];
                while (head.find("\r\n\r\n") == std::string::npos && head.size() < 16384) {
                    int n = peer.receiveBytes(buf, sizeof buf);
                    if (n <= 0) break;
                    head.append(buf, static_cast<std::size_t>(n));
                }
                const std::string answer =
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(nonce.size()) +
                    "\r\nConnection: close\r\n\r\n" + nonce;
                peer.sendBytes(answer.data(), static_cast<int>(answer.size()));
            } catch (const Poco::Exception &) {
                // a client that went away: wait for the next
            }
        }
    });
    std::string why;
    const auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
        try {
            Poco::Net::HTTPClientSession session(uri.getHost(), uri.getPort());
            session.setTimeout(Poco::Timespan(2, 0));
            std::string path = uri.getPath();
            while (!path.empty() && path.back() == '/')
                path.pop_back();
            Poco::Net::HTTPRequest request(Poco::Net::HTTPRequest::HTTP_GET, path + "/healthz",
                                           Poco::Net::HTTPMessage::HTTP_1_1);
            session.sendRequest(request);
            Poco::Net::HTTPResponse response;
            std::ostringstream body;
            body << session.receiveResponse(response).rdbuf();
            if (body.str() == nonce) break;
            why = "another server answers there (HTTP " + std::to_string(static_cast<int>(response.getStatus())) + ")";
        } catch (const Poco::Exception &e) {
            why = e.displayText();
            if (std::chrono::steady_clock::now() < deadline) { // DNS not yet published, a port not yet routed
                std::this_thread::sleep_for(std::chrono::milliseconds(500));
                continue;
            }
        }
        done = true;
        std::string message = "[server] public_url / HANGAR_PUBLIC_URL = \"";
        message.append(url).append("\" does not reach this node (").append(why);
        message.append("): other nodes of the store relay requests for this node's browsers there. Give the http "
                       "URL this node is reached at from the other nodes, such as http://10.0.0.5:8080");
        throw NodeError(message);
    }
    done = true;
}

std::string host_name() {
    char buf[HOST_NAME_MAX + 1] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
    return buf;
}

std::int64_t mem_available_bytes(const std::string &meminfo) {
    std::istringstream in(meminfo);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("MemAvailable:", 0) != 0) continue;
        std::istringstream fields(line.substr(13));
        std::int64_t kib = -1;
        std::string unit;
        if (fields >> kib) return kib * 1024; // the kernel always writes kB
    }
    return -1;
}

void migrate_nodes(Store &store) {
    store.migrate("host.nodes", kNodesMigrations);
}

NodeRegistration::NodeRegistration(Store &store, NodeSettings settings)
    : store_(store), settings_(std::move(settings)), instance_id_(random_token(20)), boot_id_(boot_id()) {
    if (settings_.name.empty()) settings_.name = host_name();
    settings_.heartbeat_seconds = std::max<std::int64_t>(1, settings_.heartbeat_seconds);
    check_public_url(settings_.public_url);
}

NodeRegistration::~NodeRegistration() {
    try {
        mark_stopped();
    } catch (const std::exception &e) {
        Poco::Logger::get("hangar").warning("node %s: could not mark it stopped: %s", settings_.name,
                                            std::string(e.what()));
    }
}

void NodeRegistration::claim() {
    const auto &name = settings_.name;
    json plugins = json::object();
    for (const auto &[p, v] : settings_.plugins)
        plugins[p] = v;
    store_.transaction([&] {
        auto now = now_ms();
        auto rows =
            store_.exec("SELECT name, public_url, instance_id, boot_id, pid, abi_version, plugins, heartbeat_at,"
                        " heartbeat_seconds, stopped_at FROM nodes ORDER BY name");
        const json *own = nullptr;
        for (const auto &row : rows) {
            auto state =
                node_state(stopped(row), int_of(row, "heartbeat_at"), int_of(row, "heartbeat_seconds", 5), now);
            if (row.value("name", "") == name) {
                own = &row;
                // Live, but its process is gone from this very boot of this machine (kill -9, then
                // a restart sooner than the heartbeat allowance): nothing holds the name.
                bool gone = !boot_id_.empty() && row.value("boot_id", "") == boot_id_ &&
                            ::kill(static_cast<pid_t>(int_of(row, "pid", -1)), 0) != 0 && errno == ESRCH;
                if (state == NodeState::live && !gone)
                    throw NodeError(std::string(kNameSetting) + " = \"" + name + "\" is taken by a live node at " +
                                    row.value("public_url", "") + " (last heartbeat " +
                                    age_text(now - int_of(row, "heartbeat_at")) +
                                    " ago): give this node another name, or stop that node first");
                continue;
            }
            if (state != NodeState::live) continue;
            auto diff =
                plugin_set_difference(settings_.plugins, HANGAR_ABI_VERSION, parse_plugins(row.value("plugins", "")),
                                      static_cast<unsigned>(int_of(row, "abi_version")));
            if (!diff.empty()) {
                std::string why = "node \"" + name + "\" cannot join: its plugins differ from live node \"";
                why.append(row.value("name", "")).append("\" at ").append(row.value("public_url", ""));
                why.append(": ").append(diff).append(" (").append(kPluginSettings).append(")");
                throw NodeError(why);
            }
        }
        json params = {settings_.public_url,
                       instance_id_,
                       boot_id_,
                       static_cast<std::int64_t>(::getpid()),
                       HANGAR_VERSION,
                       HANGAR_ABI_VERSION,
                       plugins.dump(),
                       now,
                       now,
                       settings_.heartbeat_seconds,
                       settings_.max_browsers,
                       settings_.region};
        if (!own) {
            params.push_back(name);
            store_.exec(
                "INSERT INTO nodes (public_url, instance_id, boot_id, pid, hangar_version, abi_version, plugins,"
                " started_at, heartbeat_at, heartbeat_seconds, max_browsers, region, name)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                params);
        } else {
            // Taken over only if the row is still the one judged above (another start may race).
            params.push_back(name);
            params.push_back((*own)["instance_id"]);
            auto taken = store_.exec(
                "UPDATE nodes SET public_url = ?, instance_id = ?, boot_id = ?, pid = ?, hangar_version = ?,"
                " abi_version = ?, plugins = ?, started_at = ?, heartbeat_at = ?, heartbeat_seconds = ?,"
                " max_browsers = ?, region = ?, stopped_at = NULL, draining_at = NULL, browsers = 0, spares = 0,"
                " mem_available_bytes = -1"
                " WHERE name = ? AND instance_id = ? RETURNING name",
                params);
            if (taken.empty())
                throw NodeError(std::string(kNameSetting) + " = \"" + name +
                                "\" was claimed by another node starting at the same moment");
        }
        return 0;
    });
    claimed_ = true;
    beating_since_ = now_ms();
}

void NodeRegistration::publish(const std::string &public_url) {
    settings_.public_url = public_url;
    store_.exec("UPDATE nodes SET public_url = ? WHERE name = ? AND instance_id = ?",
                {public_url, settings_.name, instance_id_});
}

bool NodeRegistration::beat(const NodeStatus &status) {
    const auto now = now_ms();
    json rows;
    try {
        rows = store_.exec(
            "UPDATE nodes SET heartbeat_at = ?, browsers = ?, spares = ?, mem_available_bytes = ?"
            " WHERE name = ? AND instance_id = ? AND stopped_at IS NULL RETURNING draining_at",
            {now, status.browsers, status.spares, status.mem_available_bytes, settings_.name, instance_id_});
    } catch (...) {
        beating_since_ = -1;
        throw;
    }
    if (rows.empty()) {
        beating_since_ = -1;
        return false;
    }
    if (!rows[0].value("draining_at", json()).is_null()) draining_ = true;
    if (beating_since_ < 0) beating_since_ = now;
    return true;
}

bool NodeRegistration::may_judge_others(const json &nodes, std::int64_t now) const {
    const std::int64_t since = beating_since_;
    if (since < 0) return false;
    std::int64_t allowance = 0;
    for (const auto &n : nodes)
        allowance = std::max(allowance, stale_after_ms(n.value("heartbeat_seconds", std::int64_t{1})));
    return now - since > allowance;
}

std::int64_t request_drain(Store &store, const std::string &name, std::int64_t now) {
    auto rows =
        store.exec("SELECT heartbeat_at, heartbeat_seconds, stopped_at, draining_at FROM nodes WHERE name = ?", {name});
    if (rows.empty()) throw NodeError("no node is named \"" + name + "\" in this store (hangar nodes lists them)");
    const auto &row = rows[0];
    auto state = node_state(stopped(row), int_of(row, "heartbeat_at"), int_of(row, "heartbeat_seconds", 5), now);
    if (state != NodeState::live)
        throw NodeError("node \"" + name + "\" is " + to_string(state) + ": only a live node can be drained");
    if (auto since = int_of(row, "draining_at", -1); since >= 0) return since;
    store.exec("UPDATE nodes SET draining_at = ? WHERE name = ? AND draining_at IS NULL", {now, name});
    return now;
}

void NodeRegistration::mark_stopped() {
    if (!claimed_) return;
    claimed_ = false;
    auto now = now_ms();
    store_.exec("UPDATE nodes SET stopped_at = ?, heartbeat_at = ?, browsers = 0, spares = 0"
                " WHERE name = ? AND instance_id = ?",
                {now, now, settings_.name, instance_id_});
}

json list_nodes(Store &store, std::int64_t now) {
    json out = json::array();
    for (auto &row :
         store.exec("SELECT name, public_url, instance_id, hangar_version, abi_version, plugins, started_at,"
                    " heartbeat_at, heartbeat_seconds, stopped_at, browsers, spares, mem_available_bytes, draining_at,"
                    " max_browsers, region FROM nodes ORDER BY started_at, name")) {
        auto heartbeat = int_of(row, "heartbeat_at");
        auto state = node_state(stopped(row), heartbeat, int_of(row, "heartbeat_seconds", 5), now);
        // A live node told to drain takes no new browsers until it stops by itself.
        const bool draining = state == NodeState::live && int_of(row, "draining_at", -1) >= 0;
        json plugins = json::object();
        for (const auto &[p, v] : parse_plugins(row.value("plugins", "")))
            plugins[p] = v;
        out.push_back({{"name", row.value("name", "")},
                       {"public_url", row.value("public_url", "")},
                       {"state", draining ? "draining" : to_string(state)},
                       {"instance_id", row.value("instance_id", "")},
                       {"hangar_version", row.value("hangar_version", "")},
                       {"abi_version", int_of(row, "abi_version")},
                       {"plugins", plugins},
                       {"started_at", rfc3339(int_of(row, "started_at"))},
                       {"last_heartbeat_at", rfc3339(heartbeat)},
                       {"heartbeat_age_seconds", std::max<std::int64_t>(0, (now - heartbeat) / 1000)},
                       {"heartbeat_seconds", int_of(row, "heartbeat_seconds", 5)},
                       {"browsers", int_of(row, "browsers")},
                       {"spares", int_of(row, "spares")},
                       {"max_browsers", int_of(row, "max_browsers")},
                       {"region", row.value("region", "")},
                       {"mem_available_bytes", int_of(row, "mem_available_bytes", -1)}});
    }
    return out;
}

std::optional<std::string> serving_node_url(Store &store, const std::string &name, std::int64_t now) {
    auto rows =
        store.exec("SELECT public_url, heartbeat_at, heartbeat_seconds, stopped_at FROM nodes WHERE name = ?", {name});
    if (rows.empty()) return std::nullopt;
    const auto &row = rows[0];
    if (node_state(stopped(row), int_of(row, "heartbeat_at"), int_of(row, "heartbeat_seconds", 5), now) !=
        NodeState::live)
        return std::nullopt;
    auto url = row.value("public_url", "");
    if (url.empty()) return std::nullopt;
    return url;
}

std::string format_nodes(const json &nodes) {
    std::vector<std::vector<std::string>> table = {
        {"NAME", "STATE", "PUBLIC URL", "BROWSERS", "MAX", "SPARES", "MEM AVAILABLE", "LAST HEARTBEAT"}};
    for (const auto &n : nodes)
        table.push_back({n.value("name", ""), n.value("state", ""), n.value("public_url", ""),
                         std::to_string(n.value("browsers", 0)),
                         n.value("max_browsers", 0) > 0 ? std::to_string(n.value("max_browsers", 0)) : "-",
                         std::to_string(n.value("spares", 0)),
                         bytes_text(n.value("mem_available_bytes", std::int64_t{-1})),
                         age_text(n.value("heartbeat_age_seconds", std::int64_t{0}) * 1000) + " ago"});
    std::vector<std::size_t> width(table[0].size(), 0);
    for (const auto &row : table)
        for (std::size_t i = 0; i < row.size(); ++i)
            width[i] = std::max(width[i], row[i].size());
    std::string out;
    for (const auto &row : table) {
        std::string line;
        for (std::size_t i = 0; i < row.size(); ++i)
            line += row[i] + (i + 1 < row.size() ? std::string(width[i] - row[i].size() + 2, ' ') : "");
        out += line + "\n";
    }
    if (nodes.empty()) out += "(no node has registered in this store)\n";
    return out;
}

Heartbeat::Heartbeat(NodeRegistration &registration, std::function<NodeStatus()> status, Poco::Logger &log)
    : registration_(registration), status_(std::move(status)), log_(log), thread_([this] { run(); }) {}

Heartbeat::~Heartbeat() {
    {
        std::lock_guard lock(m_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Heartbeat::run() {
    const auto interval = std::chrono::seconds(registration_.settings().heartbeat_seconds);
    bool warned = false;
    for (;;) {
        {
            std::unique_lock lock(m_);
            if (cv_.wait_for(lock, interval, [this] { return stop_; })) return;
        }
        try {
            if (!registration_.beat(status_())) {
                if (!warned)
                    log_.error("node %s: another node has taken this name over (this node missed its heartbeats)",
                               registration_.settings().name);
                warned = true;
            } else {
                warned = false;
            }
        } catch (const std::exception &e) {
            log_.warning("node %s: heartbeat failed: %s", registration_.settings().name, std::string(e.what()));
        }
    }
}

} // namespace hangar::host
