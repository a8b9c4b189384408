#include "metrics.hpp"

#include "core.hpp"
#include "http.hpp"
#include "runtime.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPRequestHandler.h>
#include <Poco/Net/HTTPServerParams.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/ThreadPool.h>

#include <nlohmann/json.hpp>

#include <array>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

namespace hangar::host {

using json = nlohmann::json;

namespace {

std::string number(double v) {
    if (v == static_cast<double>(static_cast<long long>(v)) && v < 9e15 && v > -9e15)
        return std::to_string(static_cast<long long>(v));
    std::array<char, 32> buf{};
    auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), v);
    return ec == std::errc() ? std::string(buf.data(), end) : std::string("NaN");
}

std::string escape_label(const std::string &v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\' || c == '"')
            out += '\\', out += c;
        else if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

bool valid_name(const std::string &s) {
    if (s.empty()) return false;
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
        if (!ok) return false;
    }
    return true;
}

// `{a="x",b="y"}` from a JSON object of string (or number) values, with `extra` appended.
std::string label_set(const json &labels, const std::string &extra = {}) {
    std::string out;
    if (labels.is_object())
        for (const auto &[k, v] : labels.items()) {
            if (!valid_name(k)) continue;
            out += out.empty() ? "" : ",";
            out += k + "=\"" + escape_label(v.is_string() ? v.get<std::string>() : v.dump()) + "\"";
        }
    if (!extra.empty()) out += (out.empty() ? "" : ",") + extra;
    return out.empty() ? std::string() : "{" + out + "}";
}

// Renders one family in the text format (version 0.0.4). Malformed parts are skipped: a plugin's
// mistake must not break the scrape.
void render_family(std::ostringstream &out, const json &f) {
    if (!f.is_object()) return;
    std::string name = f.value("name", "");
    std::string type = f.value("type", "");
    if (!valid_name(name) || name.rfind("hangar_", 0) != 0) return;
    if (type != "gauge" && type != "counter" && type != "histogram") return;
    out << "# HELP " << name << ' ' << f.value("help", name) << "\n# TYPE " << name << ' ' << type << '\n';
    auto samples = f.value("samples", json::array());
    if (!samples.is_array()) return;
    for (const auto &s : samples) {
        if (!s.is_object()) continue;
        json labels = s.value("labels", json::object());
        if (type == "histogram") {
            auto buckets = s.value("buckets", json::array());
            if (!buckets.is_array()) continue;
            for (const auto &b : buckets)
                if (b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number())
                    out << name << "_bucket" << label_set(labels, "le=\"" + number(b[0].get<double>()) + "\"") << ' '
                        << number(b[1].get<double>()) << '\n';
            double count = s.value("count", 0.0);
            out << name << "_bucket" << label_set(labels, "le=\"+Inf\"") << ' ' << number(count) << '\n';
            out << name << "_sum" << label_set(labels) << ' ' << number(s.value("sum", 0.0)) << '\n';
            out << name << "_count" << label_set(labels) << ' ' << number(count) << '\n';
        } else if (s.contains("value") && s["value"].is_number()) {
            out << name << label_set(labels) << ' ' << number(s["value"].get<double>()) << '\n';
        }
    }
}

std::string first_line(const std::string &path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// CPU seconds and memory bytes of one instance, from whichever cgroup files its hierarchy has
// (v2: cpu.stat, memory.current; v1: cpuacct.usage, memory.usage_in_bytes).
struct Usage {
    std::optional<double> cpu_seconds;
    std::optional<double> memory_bytes;
};
Usage cgroup_usage(const std::vector<std::string> &dirs) {
    Usage u;
    auto read_number = [](const std::string &path) -> std::optional<double> {
        auto line = first_line(path);
        if (line.empty()) return std::nullopt;
        try {
            return std::stod(line);
        } catch (const std::exception &) {
            return std::nullopt;
        }
    };
    for (const auto &dir : dirs) {
        if (!u.memory_bytes) u.memory_bytes = read_number(dir + "/memory.current");
        if (!u.memory_bytes) u.memory_bytes = read_number(dir + "/memory.usage_in_bytes");
        if (!u.cpu_seconds) {
            std::ifstream stat(dir + "/cpu.stat");
            std::string key;
            double value = 0;
            while (stat >> key >> value)
                if (key == "usage_usec") {
                    u.cpu_seconds = value / 1e6;
                    break;
                }
        }
        if (!u.cpu_seconds)
            if (auto ns = read_number(dir + "/cpuacct.usage")) u.cpu_seconds = *ns / 1e9;
    }
    // A v1 machine whose cpu hierarchy has no cpuacct files: the CPU time of the processes the
    // instance has now (/proc/<pid>/stat utime + stime), which misses only those already gone.
    if (!u.cpu_seconds && !dirs.empty()) {
        std::ifstream procs(dirs.front() + "/cgroup.procs");
        static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
        double total = 0;
        bool any = false;
        for (long pid = 0; procs >> pid;) {
            auto stat = first_line("/proc/" + std::to_string(pid) + "/stat");
            auto close = stat.rfind(')');
            if (close == std::string::npos) continue;
            std::istringstream fields(stat.substr(close + 2));
            std::string f;
            double utime = 0, stime = 0;
            // Fields after "pid (comm)": state is 3rd; utime and stime are the 14th and 15th.
            for (int i = 3; i <= 15 && fields >> f; ++i) {
                if (i == 14) utime = std::strtod(f.c_str(), nullptr);
                if (i == 15) stime = std::strtod(f.c_str(), nullptr);
            }
            total += (utime + stime) / ticks;
            any = true;
        }
        if (any) u.cpu_seconds = total;
    }
    return u;
}

void text_reply(hangar_response *res, int status, std::string body) {
    res->status = status;
    res->content_type = "text/plain; version=0.0.4; charset=utf-8";
    res->body = std::move(body);
}

} // namespace

void Metrics::observe_request(const std::string &method, const std::string *route, int status, double seconds) {
    std::string r = route ? *route : std::string("unmatched");
    std::string s = std::to_string(status);
    std::string key = method;
    key.append(1, '\n').append(r).append(1, '\n').append(s);
    std::lock_guard lock(mutex_);
    auto it = requests_.find(key);
    if (it == requests_.end())
        it = requests_.emplace(key, RequestSeries{method, r, s, hangar::metrics::Histogram()}).first;
    it->second.latency.observe(seconds);
}

void Metrics::observe_instance_start(double seconds, bool ok) {
    std::lock_guard lock(mutex_);
    instance_starts_[ok].observe(seconds);
}

void Metrics::connection_opened(const std::string &kind) {
    std::lock_guard lock(mutex_);
    ++connections_[kind];
}

void Metrics::connection_closed(const std::string &kind) {
    std::lock_guard lock(mutex_);
    --connections_[kind];
}

void Metrics::set_plugins(std::vector<PluginState> plugins) {
    std::lock_guard lock(mutex_);
    plugins_ = std::move(plugins);
}

std::string Metrics::render(HostCore &core) const {
    using hangar::metrics::family;
    using hangar::metrics::sample;
    std::vector<json> families;
    std::vector<PluginState> plugins;
    {
        std::lock_guard lock(mutex_);
        plugins = plugins_;
        json req = family("hangar_http_request_duration_seconds", "histogram",
                          "API request latency by method, route pattern and status");
        for (const auto &[_, s] : requests_)
            req["samples"].push_back(
                s.latency.sample({{"method", s.method}, {"route", s.route}, {"status", s.status}}));
        families.push_back(std::move(req));
        json starts = family("hangar_instance_start_seconds", "histogram",
                             "time from an instance start request to its agent reporting ready (cold starts)");
        for (const auto &[ok, h] : instance_starts_)
            starts["samples"].push_back(h.sample({{"result", ok ? "ok" : "error"}}));
        families.push_back(std::move(starts));
        json conns = family("hangar_connections_open", "gauge",
                            "long-lived connections (CDP, live view, SSE, WebDriver) open on the API port");
        for (const char *kind : {"cdp", "live_view", "sse", "webdriver", "websocket"})
            conns["samples"].push_back(
                sample({{"kind", kind}}, static_cast<double>(connections_.count(kind) ? connections_.at(kind) : 0)));
        families.push_back(std::move(conns));
    }
    families.push_back(family("hangar_event_loop_connections", "gauge",
                              "connections served by the event loop (splices and streams, agent links included)",
                              {sample(json::object(), static_cast<double>(core.loop.connection_count()))}));
    families.push_back(family("hangar_ready", "gauge", "1 once the server listens with its plugins started",
                              {sample(json::object(), ready.load() ? 1 : 0)}));
    families.push_back(
        family("hangar_build_info", "gauge", "the running Hangar version", {sample({{"version", HANGAR_VERSION}}, 1)}));

    json loaded = family("hangar_plugin_loaded", "gauge", "1 for each plugin in the state it is in");
    for (const auto &p : plugins)
        loaded["samples"].push_back(sample({{"plugin", p.name}, {"state", p.state}}, 1));
    families.push_back(std::move(loaded));

    if (core.runtime) {
        json cpu = family("hangar_instance_cpu_seconds_total", "counter",
                          "CPU time used by each running instance (its cgroup)");
        json mem =
            family("hangar_instance_memory_bytes", "gauge", "memory charged to each running instance (its cgroup)");
        auto cgroups = core.runtime->instance_cgroups();
        for (const auto &[id, dirs] : cgroups) {
            auto u = cgroup_usage(dirs);
            if (u.cpu_seconds) cpu["samples"].push_back(sample({{"instance_id", id}}, *u.cpu_seconds));
            if (u.memory_bytes) mem["samples"].push_back(sample({{"instance_id", id}}, *u.memory_bytes));
        }
        families.push_back(family("hangar_instances_running", "gauge", "browser instances (sandboxes) running",
                                  {sample(json::object(), static_cast<double>(cgroups.size()))}));
        families.push_back(std::move(cpu));
        families.push_back(std::move(mem));
    }

    std::ostringstream out;
    for (const auto &f : families)
        render_family(out, f);
    for (const auto &p : plugins) {
        if (p.state != "started") continue;
        std::string answer;
        if (core.services.call(p.name + ".metrics", "{}", answer) != 200) continue;
        auto doc = json::parse(answer, nullptr, false);
        if (doc.is_object() && doc.contains("families") && doc["families"].is_array())
            for (const auto &f : doc["families"])
                render_family(out, f);
    }
    return out.str();
}

std::string connection_kind(const hangar_request &req) {
    const std::string route = req.route ? *req.route : req.path;
    if (req.http.has("Upgrade")) {
        if (route.rfind("/browser/cdp", 0) == 0) return "cdp";
        if (route.rfind("/browser/live", 0) == 0) return "live_view";
        if (route.rfind("/browser/webdriver", 0) == 0) return "webdriver";
        return "websocket";
    }
    return "sse";
}

void add_ops_routes(HostCore &core, PluginRecord &owner) {
    core.router.add("GET", "/metrics",
                    {&owner,
                     [](void *user, hangar_request *req, hangar_response *res) {
                         auto &c = *static_cast<HostCore *>(user);
                         // Metrics describe every tenant's sessions: only the operator's org-wide keys.
                         if (req->caller && req->caller->project_scoped)
                             return set_error(*res, 403, "forbidden",
                                              "/metrics needs an org-wide API key; this key is scoped to project " +
                                                  req->caller->project_name);
                         text_reply(res, 200, c.metrics.render(c));
                     },
                     &core, 0});
    core.router.add("GET", "/readyz",
                    {&owner,
                     [](void *user, hangar_request *, hangar_response *res) {
                         auto &c = *static_cast<HostCore *>(user);
                         std::string problem;
                         if (!c.metrics.ready.load()) problem = "starting or stopping";
                         if (problem.empty()) try {
                                 c.store->exec("SELECT 1");
                             } catch (const std::exception &) {
                                 problem = "the database does not answer";
                             }
                         res->content_type = "application/json";
                         res->status = problem.empty() ? 200 : 503;
                         res->body = problem.empty() ? json{{"status", "ready"}}.dump()
                                                     : json{{"status", "unavailable"}, {"reason", problem}}.dump();
                     },
                     &core, HANGAR_ROUTE_PUBLIC});
}

namespace {

// The metrics listener: only /metrics and /healthz, no key (bind it to a private address).
class MetricsHandler : public Poco::Net::HTTPRequestHandler {
public:
    explicit MetricsHandler(HostCore &core) : core_(core) {}
    void handleRequest(Poco::Net::HTTPServerRequest &req, Poco::Net::HTTPServerResponse &res) override {
        std::string path = req.getURI().substr(0, req.getURI().find('?'));
        std::string body;
        if (req.getMethod() != "GET" && req.getMethod() != "HEAD") {
            res.setStatusAndReason(Poco::Net::HTTPResponse::HTTP_METHOD_NOT_ALLOWED);
            res.setContentType("application/json");
            body = R"({"code":"method_not_allowed","message":"only GET is served here"})";
        } else if (path == "/metrics") {
            res.setContentType("text/plain; version=0.0.4; charset=utf-8");
            body = core_.metrics.render(core_);
        } else if (path == "/healthz") {
            res.setContentType("application/json");
            body = R"({"status":"ok"})";
        } else {
            res.setStatusAndReason(Poco::Net::HTTPResponse::HTTP_NOT_FOUND);
            res.setContentType("application/json");
            body = R"({"code":"not_found","message":"the metrics listener serves /metrics and /healthz only"})";
        }
        res.setContentLength64(static_cast<Poco::Int64>(body.size()));
        if (req.getMethod() == "HEAD")
            res.send();
        else
            res.sendBuffer(body.data(), body.size());
    }

private:
    HostCore &core_;
};

class MetricsFactory : public Poco::Net::HTTPRequestHandlerFactory {
public:
    explicit MetricsFactory(HostCore &core) : core_(core) {}
    Poco::Net::HTTPRequestHandler *createRequestHandler(const Poco::Net::HTTPServerRequest &) override {
        return new MetricsHandler(core_); // Poco takes ownership of the handler
    }

private:
    HostCore &core_;
};

} // namespace

std::unique_ptr<Poco::Net::HTTPServer> make_metrics_server(HostCore &core, const std::string &listen,
                                                           std::uint16_t &port) {
    if (listen.empty()) return nullptr;
    Poco::Net::ServerSocket socket;
    socket.bind(Poco::Net::SocketAddress(listen), true, false);
    socket.listen(16);
    port = socket.address().port();
    Poco::Net::HTTPServerParams::Ptr params = new Poco::Net::HTTPServerParams;
    params->setMaxThreads(2);
    params->setKeepAlive(true);
    static Poco::ThreadPool pool("metrics", 1, 2, 10);
    return std::make_unique<Poco::Net::HTTPServer>(new MetricsFactory(core), pool, socket, params);
}

} // namespace hangar::host
