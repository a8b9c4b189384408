#include "collector.hpp"

#include <hangar/cdp.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <set>

namespace hangar::telemetry {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char *kBinding = "__hangarTelemetry";
constexpr auto kNetworkQuiet = 500ms; // network_idle: this long with nothing in flight
constexpr auto kLayoutQuiet = 1000ms; // layout_settled: this long after load without a shift
constexpr std::size_t kMaxArgText = 1000;

// A console argument as text: its value, or the description CDP gives objects.
std::string arg_text(const json &a) {
    std::string out;
    if (auto v = a.find("value"); v != a.end())
        out = v->is_string() ? v->get<std::string>() : v->dump();
    else if (auto d = a.find("description"); d != a.end() && d->is_string())
        out = d->get<std::string>();
    else if (auto u = a.find("unserializableValue"); u != a.end() && u->is_string())
        out = u->get<std::string>();
    else
        out = a.value("type", "undefined");
    if (out.size() > kMaxArgText) out.resize(kMaxArgText);
    return out;
}

struct InitFailure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Target {
    std::string target_id, url, frame_id, loader_id;
    int nav_seq = 0;
    // network
    std::set<std::string> in_flight;
    bool any_request = false, idle_sent = true;
    Clock::time_point quiet_since{};
    // page
    bool dcl_seen = false;
    std::optional<Clock::time_point> settle_at;
};

struct Request {
    std::string session, url, method, resource_type, frame_id, loader_id, mime, status_text;
    json headers;
    int status = 0;
};

class Run {
public:
    Run(cdp::Connection &c, const Selection &cats, const Collector::Emit &emit, const CollectorSettings &settings)
        : c_(c), cats_(cats), emit_(emit), settings_(settings) {}

    void setup() {
        step_ = "Target.getTargets";
        for (const auto &t : c_.call("Target.getTargets").value("targetInfos", json::array())) {
            known_.insert(t.value("targetId", ""));
            types_[t.value("targetId", "")] = t.value("type", "");
        }
        step_ = "Target.setDiscoverTargets";
        c_.call("Target.setDiscoverTargets", {{"discover", true}});
        step_ = "";
    }
    const std::string &step() const { return step_; }

    void handle(const json &msg) {
        if (msg.contains("id")) {
            auto it = pending_.find(msg.value("id", 0));
            if (it == pending_.end()) return;
            auto fn = std::move(it->second);
            pending_.erase(it);
            fn(msg.contains("error") ? json(nullptr) : msg.value("result", json::object())); // null: refused
            return;
        }
        const std::string method = msg.value("method", "");
        const json params = msg.value("params", json::object());
        const std::string sid = msg.value("sessionId", "");
        if (sid.empty())
            browser_event(method, params);
        else if (auto it = targets_.find(sid); it != targets_.end())
            target_event(sid, it->second, method, params);
    }

    // Time-based events: network idle, layout settled, screenshots.
    void tick() {
        auto now = Clock::now();
        for (auto &[sid, t] : targets_) {
            if (on("network") && t.any_request && !t.idle_sent && t.in_flight.empty() &&
                now - t.quiet_since >= kNetworkQuiet) {
                t.idle_sent = true;
                emit("network", "network_idle", "", ctx(sid, t));
            }
            if (on("page") && t.settle_at && now >= *t.settle_at) {
                t.settle_at.reset();
                emit("page", "page_layout_settled", "", ctx(sid, t));
                if (t.dcl_seen) emit("page", "page_navigation_settled", "", ctx(sid, t));
            }
        }
        if (on("screenshot") && !targets_.empty() && now >= next_shot_ && !shot_pending_) {
            next_shot_ = now + std::chrono::milliseconds(settings_.screenshot_interval_ms);
            shot_pending_ = true;
            send("Page.captureScreenshot", {{"format", "png"}}, targets_.begin()->first, [this](const json &r) {
                shot_pending_ = false;
                if (r.is_object())
                    emit("screenshot", "monitor_screenshot", "Page.captureScreenshot", {{"png", r.value("data", "")}});
            });
        }
    }

private:
    bool on(const char *cat) const { return cats_.count(cat) > 0; }

    void emit(const char *cat, const char *type, const std::string &cdp_event, json data, bool truncated = false) {
        emit_(make_event(cat, type, now_us(), "cdp", cdp_event, std::move(data), truncated));
    }

    void send(const std::string &method, const json &params, const std::string &session,
              std::function<void(const json &)> done = nullptr) {
        int id = c_.send(method, params, session);
        if (done) pending_[id] = std::move(done);
    }

    json ctx(const std::string &sid, const Target &t) const {
        json c = {{"session_id", sid}, {"target_id", t.target_id}, {"target_type", "page"}, {"nav_seq", t.nav_seq}};
        if (!t.frame_id.empty()) c["frame_id"] = t.frame_id;
        if (!t.loader_id.empty()) c["loader_id"] = t.loader_id;
        if (!t.url.empty()) c["url"] = t.url;
        return c;
    }

    void browser_event(const std::string &method, const json &p) {
        if (method == "Target.targetCreated") {
            const json info = p.value("targetInfo", json::object());
            types_[info.value("targetId", "")] = info.value("type", "");
            if (info.value("type", "") != "page") return;
            std::string id = info.value("targetId", "");
            if (!known_.count(id) && on("page")) {
                json data = {{"target_id", id},
                             {"target_type", "page"},
                             {"url", info.value("url", "")},
                             {"title", info.value("title", "")}};
                if (info.contains("openerId")) data["opener_id"] = info["openerId"];
                emit("page", "page_tab_opened", method, data);
            }
            known_.insert(id);
            send("Target.attachToTarget", {{"targetId", id}, {"flatten", true}}, "");
        } else if (method == "Target.attachedToTarget") {
            const json info = p.value("targetInfo", json::object());
            if (info.value("type", "") != "page") return;
            std::string sid = p.value("sessionId", "");
            Target &t = targets_[sid];
            t.target_id = info.value("targetId", "");
            t.url = info.value("url", "");
            enable(sid);
        } else if (method == "Target.detachedFromTarget") {
            targets_.erase(p.value("sessionId", ""));
        } else if (method == "Target.targetDestroyed") {
            known_.erase(p.value("targetId", ""));
            types_.erase(p.value("targetId", ""));
        } else if (method == "Target.targetCrashed") {
            // A renderer gone while Chromium lives (Chromium itself gone is service_crashed).
            if (!on("page")) return;
            const std::string id = p.value("targetId", "");
            auto type = types_.find(id);
            json data = {{"target_id", id},
                         {"target_type", type == types_.end() || type->second.empty() ? "page" : type->second},
                         {"url", ""},
                         {"status", p.value("status", "")},
                         {"error_code", p.value("errorCode", 0)}};
            for (const auto &[sid, t] : targets_)
                if (t.target_id == id) {
                    data["session_id"] = sid;
                    data["url"] = t.url;
                }
            emit("page", "page_crashed", method, data);
        }
    }

    void enable(const std::string &sid) {
        if (on("console") || on("interaction")) send("Runtime.enable", json::object(), sid);
        if (on("network")) send("Network.enable", {{"maxPostDataSize", 65536}}, sid);
        if (on("page") || on("screenshot") || on("interaction")) send("Page.enable", json::object(), sid);
        if (on("page"))
            send("PerformanceTimeline.enable", {{"eventTypes", {"layout-shift", "largest-contentful-paint"}}}, sid);
        if (on("interaction")) {
            std::string script = interaction_script(kBinding);
            send("Runtime.addBinding", {{"name", kBinding}}, sid);
            send("Page.addScriptToEvaluateOnNewDocument", {{"source", script}}, sid);
            send("Runtime.evaluate", {{"expression", script}}, sid);
        }
    }

    void target_event(const std::string &sid, Target &t, const std::string &method, const json &p) {
        if (method == "Runtime.consoleAPICalled") {
            if (!on("console")) return;
            std::string level = p.value("type", "log");
            json args = json::array();
            std::string text;
            for (const auto &a : p.value("args", json::array())) {
                args.push_back(arg_text(a));
                text += (text.empty() ? "" : " ") + args.back().get<std::string>();
            }
            json data = ctx(sid, t);
            data["level"] = level;
            data["text"] = text;
            data["args"] = args;
            if (p.contains("stackTrace")) data["stack_trace"] = p["stackTrace"];
            emit("console", level == "error" ? "console_error" : "console_log", method, data);
        } else if (method == "Runtime.exceptionThrown") {
            if (!on("console")) return;
            const json d = p.value("exceptionDetails", json::object());
            json data = ctx(sid, t);
            std::string text = d.value("text", "Uncaught");
            if (auto ex = d.find("exception"); ex != d.end() && ex->contains("description"))
                text = (*ex)["description"].get<std::string>();
            data["text"] = text;
            data["line"] = d.value("lineNumber", 0);
            data["column"] = d.value("columnNumber", 0);
            if (d.contains("url")) data["source_url"] = d["url"];
            if (d.contains("stackTrace")) data["stack_trace"] = d["stackTrace"];
            emit("console", "console_error", method, data);
        } else if (method == "Runtime.bindingCalled") {
            if (p.value("name", "") == kBinding && on("interaction")) interaction(sid, t, p.value("payload", ""));
        } else if (method.starts_with("Network.")) {
            if (on("network")) network(sid, t, method, p);
        } else if (method == "Page.frameNavigated") {
            const json f = p.value("frame", json::object());
            bool top = !f.contains("parentId");
            if (top) {
                t.nav_seq++;
                t.frame_id = f.value("id", "");
                t.loader_id = f.value("loaderId", "");
                t.url = f.value("url", "");
                t.dcl_seen = false;
                t.settle_at.reset();
            }
            if (!on("page")) return;
            json data = {{"session_id", sid},
                         {"target_id", t.target_id},
                         {"target_type", "page"},
                         {"frame_id", f.value("id", "")},
                         {"loader_id", f.value("loaderId", "")},
                         {"url", f.value("url", "")}};
            if (!top) data["parent_frame_id"] = f["parentId"];
            emit("page", "page_navigation", method, data);
        } else if (method == "Page.domContentEventFired") {
            t.dcl_seen = true;
            if (!on("page")) return;
            json data = ctx(sid, t);
            data["cdp_timestamp"] = p.value("timestamp", 0.0);
            emit("page", "page_dom_content_loaded", method, data);
        } else if (method == "Page.loadEventFired") {
            if (!on("page")) return;
            json data = ctx(sid, t);
            data["cdp_timestamp"] = p.value("timestamp", 0.0);
            emit("page", "page_load", method, data);
            t.settle_at = Clock::now() + kLayoutQuiet;
        } else if (method == "PerformanceTimeline.timelineEventAdded") {
            if (!on("page")) return;
            const json e = p.value("event", json::object());
            json data = ctx(sid, t);
            data["source_frame_id"] = e.value("frameId", "");
            data["time"] = e.value("time", 0.0) * 1000.0;
            if (e.value("type", "") == "layout-shift") {
                const json d = e.value("layoutShiftDetails", json::object());
                data["duration"] = 0;
                data["layout_shift_details"] = {{"value", d.value("value", 0.0)},
                                                {"had_recent_input", d.value("hadRecentInput", false)}};
                emit("page", "page_layout_shift", method, data);
                if (t.settle_at) t.settle_at = Clock::now() + kLayoutQuiet; // each shift restarts the wait
            } else if (e.value("type", "") == "largest-contentful-paint") {
                const json d = e.value("lcpDetails", json::object());
                json lcp = {{"render_time", d.value("renderTime", 0.0)},
                            {"load_time", d.value("loadTime", 0.0)},
                            {"size", d.value("size", 0.0)}};
                for (const char *k : {"elementId", "url"})
                    if (d.contains(k)) lcp[std::string(k) == "url" ? "url" : "element_id"] = d[k];
                if (d.contains("nodeId")) lcp["node_id"] = d["nodeId"];
                data["lcp_details"] = lcp;
                emit("page", "page_lcp", method, data);
            }
        }
    }

    void network(const std::string &sid, Target &t, const std::string &method, const json &p) {
        std::string rid = p.value("requestId", "");
        std::string key = sid + "\n" + rid;
        auto started = [&] {
            t.in_flight.insert(rid);
            t.any_request = true;
            t.idle_sent = false;
        };
        auto finished = [&] {
            t.in_flight.erase(rid);
            if (t.in_flight.empty()) t.quiet_since = Clock::now();
        };
        if (method == "Network.requestWillBeSent") {
            const json r = p.value("request", json::object());
            Request &req = requests_[key];
            json data = ctx(sid, t);
            bool redirect = p.contains("redirectResponse");
            if (redirect) data["redirect_url"] = req.url;
            req.session = sid;
            req.url = r.value("url", "");
            req.method = r.value("method", "GET");
            req.resource_type = p.value("type", "Other");
            req.frame_id = p.value("frameId", "");
            req.loader_id = p.value("loaderId", "");
            data["url"] = req.url;
            data["frame_id"] = req.frame_id;
            data["loader_id"] = req.loader_id;
            data["request_id"] = rid;
            data["method"] = req.method;
            data["headers"] = r.value("headers", json::object());
            data["resource_type"] = req.resource_type;
            data["document_url"] = p.value("documentURL", "");
            data["is_redirect"] = redirect;
            if (auto i = p.find("initiator"); i != p.end()) data["initiator_type"] = i->value("type", "");
            if (r.contains("postData")) data["post_data"] = r["postData"]; // forwarded verbatim
            started();
            emit("network", "network_request", method, data);
        } else if (method == "Network.responseReceived") {
            const json r = p.value("response", json::object());
            Request &req = requests_[key];
            req.status = r.value("status", 0);
            req.status_text = r.value("statusText", "");
            req.mime = r.value("mimeType", "");
            req.headers = r.value("headers", json::object());
            if (req.resource_type.empty()) req.resource_type = p.value("type", "Other");
            if (req.status >= 400)
                for (const auto &[name, value] : req.headers.items())
                    if (value.is_string() && hangar::iequals(name, "x-kernel-proxy-error")) {
                        proxy_error(sid, t, rid, req, value.get<std::string>(), req.status, method);
                        break;
                    }
        } else if (method == "Network.loadingFinished") {
            auto it = requests_.find(key);
            finished();
            if (it == requests_.end()) return;
            Request req = std::move(it->second);
            requests_.erase(it);
            json data = ctx(sid, t);
            data["url"] = req.url;
            data["frame_id"] = req.frame_id;
            data["loader_id"] = req.loader_id;
            data["request_id"] = rid;
            data["method"] = req.method;
            data["status"] = req.status;
            data["status_text"] = req.status_text;
            data["mime_type"] = req.mime;
            data["headers"] = req.headers;
            data["resource_type"] = req.resource_type;
            if (body_kind(req.mime) == BodyKind::Binary) {
                emit("network", "network_response", method, data);
                return;
            }
            // The body is asked for once it has all arrived; the event waits for the answer.
            int id = c_.send("Network.getResponseBody", {{"requestId", rid}}, sid);
            pending_[id] = [this, data, mime = req.mime](const json &r) mutable {
                if (!r.is_object()) { // no body kept (e.g. a redirect or an evicted resource)
                    emit("network", "network_response", "Network.loadingFinished", data);
                    return;
                }
                std::string body = r.value("body", "");
                if (r.value("base64Encoded", false)) body = cdp::base64_decode(body);
                bool cut = false;
                if (auto tb = truncate_body(mime, body)) {
                    data["body"] = tb->text;
                    cut = tb->truncated;
                }
                emit("network", "network_response", "Network.loadingFinished", data, cut);
            };
        } else if (method == "Network.loadingFailed") {
            auto it = requests_.find(key);
            finished();
            std::string error_text = p.value("errorText", "");
            if (it != requests_.end() && error_text == "net::ERR_TUNNEL_CONNECTION_FAILED")
                tunnel_failed(sid, t, rid, it->second, method);
            json data = ctx(sid, t);
            data["request_id"] = rid;
            data["error_text"] = error_text;
            data["canceled"] = p.value("canceled", false);
            data["resource_type"] = p.value("type", "Other");
            if (it != requests_.end()) {
                data["url"] = it->second.url;
                data["frame_id"] = it->second.frame_id;
                data["loader_id"] = it->second.loader_id;
                requests_.erase(it);
            }
            emit("network", "network_loading_failed", method, data);
        } else if (method == "Network.webSocketCreated") {
            // Remembered only to name a refused tunnel: a WebSocket's handshake never reaches
            // Fetch-level events, and its failure comes as a frame error.
            Request &req = requests_[key];
            req.session = sid;
            req.url = p.value("url", "");
            req.method = "GET";
            req.resource_type = "WebSocket";
        } else if (method == "Network.webSocketFrameError") {
            // Before the handshake answer, the socket's tunnel failed at the forwarder (an
            // allowlist's refusal, a proxy's failure): the forwarder remembers why.
            if (auto it = requests_.find(key); it != requests_.end()) {
                tunnel_failed(sid, t, rid, it->second, method);
                requests_.erase(it);
            }
        } else if (method == "Network.webSocketHandshakeResponseReceived" || method == "Network.webSocketClosed") {
            requests_.erase(key);
        }
    }

    // A tunnel (HTTPS, a WebSocket) that failed at the forwarder, which Chromium reports only as a
    // tunnel failure: the forwarder remembers why, and a proxy_error names it.
    void tunnel_failed(const std::string &sid, const Target &t, const std::string &rid, const Request &req,
                       const std::string &cdp_event) {
        if (!settings_.tunnel_failure) return;
        if (auto endpoint = url_endpoint(req.url))
            if (std::string code = settings_.tunnel_failure(endpoint->first, endpoint->second); !code.empty())
                proxy_error(sid, t, rid, req, code, 502, cdp_event);
    }

    // The proxy layer could not carry a request: Kernel's proxy_error, from the code the proxy
    // answered in X-Kernel-Proxy-Error.
    void proxy_error(const std::string &sid, const Target &t, const std::string &rid, const Request &req,
                     const std::string &header_value, int status, const std::string &cdp_event) {
        std::string raw;
        json data = ctx(sid, t);
        data["code"] = proxy_error_code(header_value, raw);
        if (!raw.empty()) data["raw_code"] = raw;
        data["request_id"] = rid;
        // Kernel's status: 403 for a policy refusal, 502 for the rest (a tunnel's answer is not
        // seen, so the code decides).
        data["status"] = data["code"] == "network_policy_denied" ? 403 : status;
        data["url"] = req.url;
        if (!req.frame_id.empty()) data["frame_id"] = req.frame_id;
        if (!req.loader_id.empty()) data["loader_id"] = req.loader_id;
        if (!req.method.empty()) data["method"] = req.method;
        if (!req.resource_type.empty()) data["resource_type"] = req.resource_type;
        emit("network", "proxy_error", cdp_event, data);
    }

    void interaction(const std::string &sid, const Target &t, const std::string &payload) {
        json in = json::parse(payload, nullptr, false);
        if (!in.is_object()) return;
        json data = ctx(sid, t);
        std::string kind = in.value("kind", "");
        auto copy = [&](std::initializer_list<const char *> keys) {
            for (const char *k : keys)
                if (in.contains(k)) data[k] = in[k];
        };
        if (kind == "click") {
            copy({"selector", "tag", "text", "x", "y"});
            emit("interaction", "interaction_click", "Runtime.bindingCalled", data);
        } else if (kind == "key") {
            copy({"key", "selector", "tag"});
            emit("interaction", "interaction_key", "Runtime.bindingCalled", data);
        } else if (kind == "scroll") {
            copy({"from_x", "from_y", "to_x", "to_y", "target_selector"});
            emit("interaction", "interaction_scroll_settled", "Runtime.bindingCalled", data);
        }
    }

    cdp::Connection &c_;
    const Selection &cats_;
    const Collector::Emit &emit_;
    const CollectorSettings &settings_;
    std::string step_;
    std::set<std::string> known_;
    std::map<std::string, std::string> types_; // targetId -> its type, for page_crashed
    std::map<std::string, Target> targets_;
    std::map<std::string, Request> requests_;
    std::map<int, std::function<void(const json &)>> pending_;
    Clock::time_point next_shot_{};
    bool shot_pending_ = false;
};

} // namespace

std::string interaction_script(const std::string &binding) {
    // Runs in every document. Reports clicks, keys and settled scrolls; a key pressed in a
    // password field is never reported, nor is any field's value.
    return R"JS((() => {
  const b = window[")JS" +
           binding + R"JS("];
  if (typeof b !== 'function' || window.__hangarTelemetryOn) return;
  Object.defineProperty(window, '__hangarTelemetryOn', {value: true});
  const send = (o) => { try { b(JSON.stringify(o)); } catch (e) {} };
  const sel = (el) => {
    if (!el || !el.tagName) return 'document';
    if (el.id) return '#' + CSS.escape(el.id);
    let s = el.tagName.toLowerCase();
    if (el.classList && el.classList.length) s += '.' + Array.from(el.classList).slice(0, 2).map((c) => CSS.escape(c)).join('.');
    return s;
  };
  const secret = (el) => !!el && el.tagName === 'INPUT' && String(el.type).toLowerCase() === 'password';
  addEventListener('click', (e) => {
    const t = e.target;
    const text = secret(t) || !t || t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' ? '' : String(t.innerText || '').trim().slice(0, 100);
    send({kind: 'click', x: e.clientX, y: e.clientY, tag: (t && t.tagName) || '', selector: sel(t), text});
  }, true);
  addEventListener('keydown', (e) => {
    const t = e.target;
    if (secret(t)) return;
    send({kind: 'key', key: e.key, tag: (t && t.tagName) || '', selector: sel(t)});
  }, true);
  let last = {x: scrollX, y: scrollY}, timer = 0, target = null;
  addEventListener('scroll', (e) => {
    target = e.target;
    clearTimeout(timer);
    timer = setTimeout(() => {
      send({kind: 'scroll', from_x: last.x, from_y: last.y, to_x: scrollX, to_y: scrollY,
            target_selector: target === document ? 'document' : sel(target)});
      last = {x: scrollX, y: scrollY};
    }, 300);
  }, true);
})())JS";
}

Collector::Collector(Emit emit, Endpoint endpoint, CollectorSettings settings)
    : emit_(std::move(emit)), endpoint_(std::move(endpoint)), settings_(std::move(settings)),
      thread_([this](const std::stop_token &st) { run(st); }) {}

Collector::~Collector() {
    thread_.request_stop();
    cv_.notify_all();
}

void Collector::configure(const Selection &selection) {
    {
        std::lock_guard lock(mutex_);
        if (selection == selection_) return;
        selection_ = selection;
        ++generation_;
    }
    cv_.notify_all();
}

void Collector::run(const std::stop_token &stop) {
    auto monitor = [this](const char *type, json data) {
        emit_(make_event("monitor", type, now_us(), "local_process", {}, std::move(data)));
    };
    std::optional<Clock::time_point> lost_at; // set while the connection is being re-made
    int attempts = 0;
    while (!stop.stop_requested()) {
        Selection cats;
        std::uint64_t generation = 0;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, stop, [&] { return any_cdp(selection_); });
            if (stop.stop_requested()) return;
            cats = selection_;
            generation = generation_;
        }
        auto connected = [&] {
            if (lost_at) {
                auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *lost_at).count();
                monitor("monitor_reconnected", {{"reconnect_duration_ms", ms}});
            }
            lost_at.reset();
            attempts = 0;
        };
        auto wait_for_change = [&] {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, stop, [&] { return generation_ != generation; });
        };
        try {
            if (session(stop, cats, generation, connected)) continue; // reconfigured or stopping
        } catch (const InitFailure &e) {
            monitor("monitor_init_failed", {{"step", e.what()}});
            wait_for_change();
            continue;
        } catch (const std::exception &) {
            if (!lost_at) {
                lost_at = Clock::now();
                monitor("monitor_disconnected", {{"reason", "chrome_restarted"}});
            }
        }
        if (lost_at && ++attempts > settings_.reconnect_attempts) {
            monitor("monitor_reconnect_failed", {{"reason", "reconnect_exhausted"}});
            lost_at.reset();
            wait_for_change();
            continue;
        }
        std::unique_lock lock(mutex_);
        cv_.wait_for(lock, stop, 250ms, [&] { return generation_ != generation; });
    }
}

bool Collector::session(const std::stop_token &stop, const Selection &cats, std::uint64_t generation,
                        const std::function<void()> &connected) {
    auto [port, path] = endpoint_();
    cdp::Connection c(port, path, 5s);
    Run run(c, cats, emit_, settings_);
    try {
        run.setup();
    } catch (const cdp::Failure &f) {
        // Chromium refused or did not answer a step; a broken connection is a restart instead.
        bool refused = std::string_view(f.what()).find(run.step()) != std::string_view::npos;
        if (!f.timed_out() && !refused) throw;
        throw InitFailure(run.step());
    }
    connected();
    for (;;) {
        if (stop.stop_requested()) return true;
        {
            std::lock_guard lock(mutex_);
            if (generation_ != generation) return true;
        }
        try {
            run.handle(c.next(Clock::now() + 100ms));
        } catch (const cdp::Failure &f) {
            if (!f.timed_out()) throw;
        }
        run.tick();
    }
}

} // namespace hangar::telemetry
