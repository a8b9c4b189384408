#include "http.hpp"

#include "direct_vm.hpp"
#include "key_scope.hpp"
#include "store.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPRequestHandler.h>
#include <Poco/Net/HTTPServerParams.h>
#include <Poco/Net/HTTPServerRequestImpl.h>
#include <Poco/Net/HTTPServerSession.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/Net/ServerSocketImpl.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/StreamCopier.h>
#include <Poco/String.h>
#include <Poco/ThreadPool.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>

namespace hangar::host {

using json = nlohmann::json;

void set_error(hangar_response &res, int status, const std::string &code, const std::string &message,
               const std::string &details_json) {
    json body = {{"code", code}, {"message", message}};
    if (!details_json.empty()) {
        auto d = json::parse(details_json, nullptr, false);
        if (d.is_array() && !d.empty()) body["details"] = d;
    }
    res.status = status;
    res.content_type = "application/json";
    res.body = body.dump();
    res.file.reset();
    res.owner_node.clear();
    if (status == 421 && code == "wrong_node" && body.contains("details"))
        for (const auto &d : body["details"])
            if (d.is_object() && d.value("code", "") == "owner_node") res.owner_node = d.value("message", "");
    // Retrying cannot fix these; tell the SDK so it does not resend (it retries 409/429/5xx).
    if (status == 409 || status == 501) res.headers.emplace_back("x-should-retry", "false");
    if (code == "store_unavailable") {
        std::erase_if(res.headers, [](const auto &h) { return Poco::icompare(h.first, "Retry-After") == 0; });
        res.headers.emplace_back("Retry-After", std::to_string(kStoreRetryAfterSeconds));
    }
}

LongRequests::Slot LongRequests::try_acquire(const std::string &project) {
    {
        std::lock_guard lock(mutex_);
        auto &n = held_[project];
        if (limit_ > 0 && n >= limit_) return nullptr;
        ++n;
    }
    // The deleter gives the place back; the pointer itself points at nothing of interest.
    return Slot(this, [project](LongRequests *self) { self->release(project); });
}

void LongRequests::release(const std::string &project) {
    std::lock_guard lock(mutex_);
    if (auto it = held_.find(project); it != held_.end() && --it->second == 0) held_.erase(it);
}

std::size_t LongRequests::held(const std::string &project) const {
    std::lock_guard lock(mutex_);
    auto it = held_.find(project);
    return it == held_.end() ? 0 : it->second;
}

bool take_long_slot(hangar_request &req, hangar_response &res) {
    auto &core = *req.core;
    if (core.role != HANGAR_ROLE_SERVER || !req.caller || req.long_slot) return true;
    const auto &who = req.caller->project_id.empty() ? req.caller->org_id : req.caller->project_id;
    req.long_slot = core.long_requests.try_acquire(who);
    if (req.long_slot) return true;
    set_error(res, 429, "rate_limited",
              "project " + (req.caller->project_name.empty() ? who : req.caller->project_name) + " has " +
                  std::to_string(core.long_requests.limit()) +
                  " long requests open (process runs, streams, pool acquires, instance answers), the most "
                  "[server] max_long_requests_per_project allows; retry when one has ended");
    res.headers.emplace_back("Retry-After", "1");
    return false;
}

namespace {

const std::string kNoScope;

// What a request without credentials may send: the routes anyone can reach read small JSON.
constexpr std::size_t kAnonymousBodyLimit = std::size_t{64} << 10;

// Routes whose handler waits on other work for as long as the caller asks (a long-poll), so they
// count as long requests although nothing is relayed. Listed here because the plugin ABI has no
// route flag for it yet (one would be appended to ABI 1 and set by the plugin instead).
bool long_poll(const std::string &method, const std::string *pattern) {
    return pattern && method == "POST" && *pattern == "/browser_pools/{id_or_name}/acquire";
}

// Finds which plugin owns a path the router does not know, for a helpful 404/501.
std::optional<std::string> owning_area(const HostCore &core, const std::string &path) {
    auto segs = path_segments(path);
    std::optional<std::string> best;
    std::size_t best_len = 0;
    for (const auto &[pattern, plugin] : core.area_prefixes) {
        auto p = path_segments(pattern);
        if (p.size() > segs.size() || p.size() < best_len) continue;
        bool ok = true;
        for (std::size_t i = 0; i < p.size() && ok; ++i)
            ok = (p[i].front() == '{') || p[i] == url_decode(segs[i]);
        if (ok) {
            best = plugin;
            best_len = p.size();
        }
    }
    return best;
}

// Serves a file with single-range support (video seeking, resumable downloads).
void send_file(hangar_response &res, Poco::Net::HTTPServerRequest &httpReq) {
    auto &http = res.http;
    std::ifstream in(*res.file, std::ios::binary);
    std::error_code ec;
    auto size = std::filesystem::file_size(*res.file, ec);
    if (!in || ec) {
        set_error(res, 404, "not_found", "file not found");
        return;
    }
    std::uint64_t first = 0, last = size ? size - 1 : 0;
    bool partial = false;
    if (httpReq.has("Range")) {
        std::string range = httpReq.get("Range");
        if (range.rfind("bytes=", 0) == 0 && range.find(',') == std::string::npos) {
            auto spec = range.substr(6);
            auto dash = spec.find('-');
            try {
                if (dash == 0) {
                    std::uint64_t n = std::stoull(spec.substr(1));
                    first = n >= size ? 0 : size - n;
                } else {
                    first = std::stoull(spec.substr(0, dash));
                    if (dash + 1 < spec.size())
                        last = std::min<std::uint64_t>(std::stoull(spec.substr(dash + 1)), last);
                }
                partial = true;
            } catch (const std::exception &) {
                partial = false;
            }
            if (partial && (first > last || first >= size)) {
                http.setStatusAndReason(Poco::Net::HTTPResponse::HTTP_REQUESTED_RANGE_NOT_SATISFIABLE);
                http.set("Content-Range", "bytes */" + std::to_string(size));
                http.setContentLength(0);
                http.send();
                res.sent = true;
                return;
            }
        }
    }
    http.set("Accept-Ranges", "bytes");
    http.setContentType(res.content_type.empty() ? "application/octet-stream" : res.content_type);
    if (partial) {
        http.setStatusAndReason(Poco::Net::HTTPResponse::HTTP_PARTIAL_CONTENT);
        http.set("Content-Range",
                 "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(size));
    } else {
        http.setStatusAndReason(static_cast<Poco::Net::HTTPResponse::HTTPStatus>(res.status ? res.status : 200));
    }
    std::uint64_t length = size ? last - first + 1 : 0;
    http.setContentLength64(static_cast<Poco::Int64>(length));
    auto &out = http.send();
    if (httpReq.getMethod() != "HEAD") {
        in.seekg(static_cast<std::streamoff>(first));
        std::vector<char> buf(std::size_t{64} * 1024);
        while (length > 0 && in) {
            auto want = static_cast<std::streamsize>(std::min<std::uint64_t>(buf.size(), length));
            in.read(buf.data(), want);
            auto got = in.gcount();
            if (got <= 0) break;
            out.write(buf.data(), got);
            length -= static_cast<std::uint64_t>(got);
        }
    }
    res.sent = true;
}

void finish(hangar_response &res, Poco::Net::HTTPServerRequest &httpReq) {
    if (res.taken_over || res.sent) return;
    auto &http = res.http;
    for (const auto &[k, v] : res.headers)
        http.add(k, v);
    if (res.file) return send_file(res, httpReq);
    int status = res.status;
    if (status == 0) status = res.body.empty() ? 204 : 200;
    http.setStatusAndReason(static_cast<Poco::Net::HTTPResponse::HTTPStatus>(status));
    if (status == 204 || status == 304) {
        http.send();
        return;
    }
    // An empty JSON body without Content-Length: 0 breaks the SDK's decoder; always say the size.
    if (!res.content_type.empty()) http.setContentType(res.content_type);
    http.setContentLength64(static_cast<Poco::Int64>(res.body.size()));
    if (httpReq.getMethod() == "HEAD") {
        http.send();
        return;
    }
    http.sendBuffer(res.body.data(), res.body.size());
}

// A response sent before its request body was read (an auth refusal, a 404) would leave that
// body on a keep-alive connection to be parsed as the next request. Read small bodies away;
// close the connection instead of reading a large one.
void drain_unread_body(hangar_request &req, hangar_response &res) {
    if (req.body || res.taken_over || res.sent) return;
    if (req.body_too_large) {
        res.http.setKeepAlive(false);
        return;
    }
    auto &http = req.http;
    if (!http.getChunkedTransferEncoding() && (!http.hasContentLength() || http.getContentLength64() == 0)) return;
    constexpr std::streamsize kDrainLimit = 1 << 20;
    if (http.hasContentLength() && http.getContentLength64() > kDrainLimit) {
        res.http.setKeepAlive(false);
        return;
    }
    try {
        char buf[8192];
        std::streamsize total = 0;
        auto &in = http.stream();
        while (in.read(buf, sizeof buf) || in.gcount() > 0) {
            total += in.gcount();
            if (total > kDrainLimit) {
                res.http.setKeepAlive(false);
                return;
            }
        }
    } catch (const std::exception &) {
        res.http.setKeepAlive(false);
    }
}

class Dispatcher : public Poco::Net::HTTPRequestHandler {
public:
    explicit Dispatcher(HostCore &core) : core_(core) {}

    void handleRequest(Poco::Net::HTTPServerRequest &http, Poco::Net::HTTPServerResponse &httpRes) override {
        auto started = steady_ms();
        auto started_precise = std::chrono::steady_clock::now();
        hangar_request req{&core_, http,  http.getMethod(), {}, {}, {}, {}, {}, "{}", random_token(16), {}, 0, {},
                           false,  false, nullptr,          {}};
        hangar_response res{&core_, &req, httpRes, 0, {}, {}, {}, {}, false, false, false, {}};
        req.body_limit = core_.max_body_bytes;
        const std::string &uri = http.getURI();
        auto q = uri.find('?');
        req.raw_path = uri.substr(0, q);
        req.path = url_decode(req.raw_path);
        if (q != std::string::npos) {
            req.query_string = uri.substr(q + 1);
            req.query = hangar::query_pairs(req.query_string);
        }
        // HTTP/1.0 clients (a load balancer's health check, say) may send no Host: the address
        // they reached stands in.
        const std::string host = http.has("Host") ? http.getHost() : http.serverAddress().toString();
        req.base_url = core_.public_url.empty() ? "http://" + host : core_.public_url;
        res.headers.emplace_back("X-Request-Id", req.request_id);

        Store::unavailable_seen(true); // a pooled thread's earlier request is not this one's
        try {
            dispatch(req, res);
        } catch (const StoreUnavailable &e) { // the host's own reads (the caller's key) during an outage
            core_.log.warning("request %s %s: %s", req.method, req.path, std::string(e.what()));
            if (!res.taken_over && !res.sent) set_error(res, 503, "store_unavailable", kStoreUnavailableMessage);
        } catch (const std::exception &e) {
            core_.log.error("request %s %s failed: %s", req.method, req.path, std::string(e.what()));
            if (!res.taken_over && !res.sent)
                set_error(res, 500, "internal", "internal error (request " + req.request_id + ")");
        } catch (...) {
            if (!res.taken_over && !res.sent)
                set_error(res, 500, "internal", "internal error (request " + req.request_id + ")");
        }
        // Only a plugin's own decision is a relay; a 421 copied from an instance (or anything
        // else a plugin passes on) is an upstream that misbehaved.
        if (res.status == 421 && !res.taken_over && !res.sent) {
            if (!res.owner_node.empty())
                relay_to_owner_node(req, res);
            else
                set_error(res, 502, "upstream_unavailable",
                          "the upstream of this request answered 421, which a "
                          "browser instance may not answer");
        }
        // A plugin whose SQL met a store outage answers 500 (its SDK sees one error code): the
        // outage is the answer, with the Retry-After a client backs off by.
        if (Store::unavailable_seen(true) && !res.taken_over && !res.sent && res.status >= 500 && res.status != 503)
            set_error(res, 503, "store_unavailable", kStoreUnavailableMessage);
        drain_unread_body(req, res);
        // An upgrade or event-stream request answered normally (an error, say) ends its
        // connection: it may be the far end of a relay splice, which carries one exchange only.
        if (!res.taken_over &&
            (http.has("Upgrade") ||
             (http.has("Accept") && http.get("Accept").find("text/event-stream") != std::string::npos)))
            httpRes.setKeepAlive(false);
        try {
            finish(res, http);
        } catch (const std::exception &e) {
            core_.log.debug("response for %s could not be written: %s", req.path, std::string(e.what()));
        }
        int status = res.taken_over ? 101 : (res.status ? res.status : (res.body.empty() ? 204 : 200));
        auto duration = steady_ms() - started;
        core_.metrics.observe_request(
            req.method, req.route, status,
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started_precise).count());
        if (core_.audit && req.caller && !res.relayed_to_node) audit(req, status, duration);
        if (!req.browser_session.empty()) report_api_call(req, status, duration);
        if (core_.log.information())
            core_.log.information("%s %s %d %dms id=%s", req.method, req.path, status, static_cast<int>(duration),
                                  req.request_id);
    }

private:
    // A per-browser API call, answered, is offered to `telemetry.api_call` (the telemetry plugin
    // records it as a `control` event, or a `platform` one when it came straight to the browser's
    // base_url, when the session captures them). The answer is already
    // sent, so the caller waits for none of this; without the plugin it is one map lookup.
    void report_api_call(const hangar_request &req, int status, std::int64_t duration_ms) {
        json in = {{"session_id", req.browser_session},
                   {"method", req.method},
                   {"path", req.path},
                   {"status", status},
                   {"duration_ms", duration_ms},
                   {"request_id", req.request_id},
                   {"direct_vm", req.direct_vm},
                   {"caller", json::parse(req.caller_json, nullptr, false)}};
        std::string out;
        core_.services.call("telemetry.api_call", in.dump(), out);
    }

    void dispatch(hangar_request &req, hangar_response &res) {
        // It steers placement (a create or acquire another node sent here stays here): only a
        // node of this store, proving it with the key they share, may send it.
        if (core_.role == HANGAR_ROLE_SERVER && req.http.has(kRelayedByHeader) && !genuine_node_relay(req))
            return set_error(res, 400, "bad_request",
                             std::string(kRelayedByHeader) +
                                 " is for relays between the nodes of a Hangar cluster, which prove it with " +
                                 kRelayProofHeader + "; this request's proof is missing, expired or wrong");
        // {base_url}/fs/... with the browser's token: the same route, the session's project as caller.
        if (direct_vm_request(core_, req, res)) {
            if (!req.caller) return; // refused
            apply_feature_config(*req.caller);
            req.caller_json = req.caller->to_json().dump();
        }
        auto found = core_.router.find(req.method, req.raw_path);
        if (auto *miss = std::get_if<Router<RouteTarget>::Miss>(&found)) {
            if (core_.role == HANGAR_ROLE_SERVER && !req.caller && !authenticate(req, res)) return;
            if (*miss == Router<RouteTarget>::Miss::WrongMethod) {
                std::string allowed;
                for (auto &m : core_.router.allowed_methods(req.raw_path))
                    allowed += (allowed.empty() ? "" : ", ") + m;
                res.headers.emplace_back("Allow", allowed);
                return set_error(res, 405, "method_not_allowed", req.method + " is not allowed on " + req.path);
            }
            if (auto area = owning_area(core_, req.raw_path)) {
                if (core_.disabled_plugins.count(*area))
                    return set_error(res, 404, "not_found",
                                     "the '" + *area +
                                         "' plugin is disabled on this server; enable it in etc/plugins.d/" + *area +
                                         ".ini");
                return set_error(res, 501, "not_implemented",
                                 req.method + " " + req.path +
                                     " is not implemented by this Hangar server yet (area: " + *area + ")");
            }
            return set_error(res, 404, "not_found", "no route for " + req.method + " " + req.path);
        }
        auto &match = std::get<Router<RouteTarget>::Match>(found);
        const RouteTarget &target = *match.target;
        req.params = std::move(match.params);
        req.route_flags = target.flags;
        req.route = match.pattern;

        if (core_.role == HANGAR_ROLE_SERVER && (target.flags & HANGAR_ROUTE_OPTIONAL_AUTH)) {
            if (!req.caller) authenticate_optional(req);
        } else if (core_.role == HANGAR_ROLE_SERVER && !(target.flags & HANGAR_ROUTE_PUBLIC) && !req.caller &&
                   !authenticate(req, res))
            return;
        if (req.caller && target.plugin) {
            // The operator's "insufficient permissions or plan": a feature area (a plugin) switched
            // off for this project or org answers 403 whatever the route.
            std::string feature = target.plugin->name;
            std::replace(feature.begin(), feature.end(), '-', '_');
            auto it = req.caller->entitlements.find(feature);
            if (it != req.caller->entitlements.end() && it->is_boolean() && !it->get<bool>())
                return set_error(res, 403, "forbidden",
                                 "the " + feature + " feature is turned off for project " + req.caller->project_name +
                                     " by the administrator (insufficient permissions or plan)");
        }
        // A statement-scoped key reaches only what its policy names (key_scope.hpp).
        std::optional<ScopeNeed> scoped;
        if (req.caller && req.caller->policy) {
            scoped = scope_need(req.method, *match.pattern);
            json body;
            if (scope_reads_body(req.method, *match.pattern))
                if (const std::string *text = request_body(req); text && !text->empty())
                    body = json::parse(*text, nullptr, false);
            if (auto refusal = scope_check(*req.caller->policy, *scoped, req.method, *match.pattern, req.params, body,
                                           req.caller->org_id, req.caller->project_id))
                return set_error(res, 403, "insufficient_scope", refusal->message);
        }
        if (core_.role == HANGAR_ROLE_SERVER && !req.caller && !carries_token(req))
            req.body_limit = std::min(req.body_limit, kAnonymousBodyLimit);
        if (req.http.hasContentLength() && req.http.getContentLength64() > static_cast<Poco::Int64>(req.body_limit))
            return set_error(res, 413, "payload_too_large",
                             "the request body is larger than the " + std::to_string(req.body_limit) + "-byte limit" +
                                 (req.body_limit < core_.max_body_bytes ? " for requests without an API key" : ""));
        const bool event_stream = (target.flags & HANGAR_ROUTE_STREAMING) && !req.http.has("Upgrade") &&
                                  req.http.get("Accept", "").find("text/event-stream") != std::string::npos;
        if ((event_stream || long_poll(req.method, match.pattern)) && !take_long_slot(req, res)) return;

        // A call on one browser's sub-resources counts as activity on that session while it runs.
        std::optional<std::string> activity_key;
        if (auto it = req.params.find("id"); it != req.params.end() && req.path.rfind("/browsers/", 0) == 0) {
            activity_key = it->second;
            req.browser_session = it->second;
            core_.activity.begin(*activity_key);
        }
        struct EndActivity {
            HostCore &core;
            std::optional<std::string> &key;
            ~EndActivity() {
                if (key) core.activity.end(*key);
            }
        } end_activity{core_, activity_key};

        target.fn(target.user, &req, &res);
        if (scoped && scoped->kind == ScopeNeed::Kind::list && (res.status == 0 || res.status == 200) &&
            !res.taken_over && !res.sent && !res.file)
            res.body =
                scope_filter_list(*req.caller->policy, *scoped, res.body, req.caller->org_id, req.caller->project_id);
        // The plugin saw only "body unreadable"; the host owes the caller the real reason.
        if (req.body_too_large && !res.taken_over && !res.sent)
            set_error(res, 413, "payload_too_large",
                      "the request body is larger than the " + std::to_string(req.body_limit) + "-byte limit");
    }

    // A capability token of ours (a cdp_ws_url's jwt, a live-view path, a flow token as the
    // bearer) stands in for the API key on public routes, and with it the usual body limit.
    bool carries_token(const hangar_request &req) const {
        if (!core_.tokens) return false;
        auto ours = [&](const std::string &t) { return t.rfind("eyJ", 0) == 0 && core_.tokens->verify(t); };
        for (const auto &[k, v] : req.query)
            if (k == "jwt" && ours(v)) return true;
        for (const auto &seg : path_segments(req.path))
            if (ours(seg)) return true;
        auto authz = req.http.get("Authorization", "");
        return authz.rfind("Bearer ", 0) == 0 && ours(authz.substr(7));
    }

    bool authenticate(hangar_request &req, hangar_response &res) {
        std::optional<std::string> authz, project;
        if (req.http.has("Authorization")) authz = req.http.get("Authorization");
        if (req.http.has("X-Kernel-Project-Id"))
            project = req.http.get("X-Kernel-Project-Id");
        else if (req.http.has("X-Kernel-Project"))
            project = req.http.get("X-Kernel-Project"); // the Python SDK's `project` (a name or an id)
        auto result = core_.auth->authenticate(authz, project);
        if (auto *fail = std::get_if<AuthFailure>(&result)) {
            set_error(res, fail->status, fail->code, fail->message);
            return false;
        }
        auto &caller = std::get<Caller>(result);
        apply_feature_config(caller);
        req.caller_json = caller.to_json().dump();
        req.caller = std::move(caller);
        return true;
    }

    // HANGAR_ROUTE_OPTIONAL_AUTH: the caller when the key is accepted, else none (the handler
    // checks its own token).
    void authenticate_optional(hangar_request &req) {
        std::optional<std::string> authz, project;
        if (req.http.has("Authorization")) authz = req.http.get("Authorization");
        if (req.http.has("X-Kernel-Project-Id")) project = req.http.get("X-Kernel-Project-Id");
        auto result = core_.auth->authenticate(authz, project);
        auto *caller = std::get_if<Caller>(&result);
        if (!caller) return;
        apply_feature_config(*caller);
        req.caller_json = caller->to_json().dump();
        req.caller = std::move(*caller);
    }

    // `[features] <name> = off` switches a feature off for every project, `[project.<id>]
    // <name> = off` for one (names resolved to ids at start, app.cpp); the configuration wins over
    // `hangar admin entitlement`.
    void apply_feature_config(Caller &caller) const {
        for (const std::string *scope : std::array<const std::string *, 2>{&kNoScope, &caller.project_id})
            if (auto it = core_.feature_switches.find(*scope); it != core_.feature_switches.end())
                for (const auto &[feature, on] : it->second)
                    caller.entitlements[feature] = on;
    }

    void audit(const hangar_request &req, int status, std::int64_t duration_ms) const {
        AuditEntry e;
        e.ts_ms = now_ms() - duration_ms;
        e.org_id = req.caller->org_id;
        e.project_id = req.caller->project_id;
        e.method = req.method;
        e.path = req.path;
        e.route = req.route ? *req.route : std::string();
        e.status = status;
        e.duration_ms = duration_ms;
        try {
            e.client_ip = req.http.clientAddress().host().toString();
        } catch (const std::exception &) {
            e.client_ip = "";
        }
        e.user_agent = req.http.get("User-Agent", "");
        e.domain = req.http.get("Host", "");
        e.auth_strategy = "api_key";
        e.user_id = req.caller->key_id;
        core_.audit->record(std::move(e));
    }

    HostCore &core_;
};

} // namespace

Poco::Net::HTTPRequestHandler *HandlerFactory::createRequestHandler(const Poco::Net::HTTPServerRequest &) {
    return new Dispatcher(core_); // Poco takes ownership of the handler
}

UniqueFd take_over(hangar_request &req, hangar_response &res, std::string &buffered) {
    auto &impl = static_cast<Poco::Net::HTTPServerRequestImpl &>(req.http);
    res.http.setKeepAlive(false);
    Poco::Buffer<char> pending(0);
    impl.session().drainBuffer(pending);
    buffered.assign(pending.begin(), pending.size());
    Poco::Net::StreamSocket sock = impl.detachSocket();
    UniqueFd fd = loop_fd(sock.impl()->sockfd());
    if (!fd) throw std::runtime_error("dup failed");
    res.taken_over = true;
    return fd;
}

namespace {

Poco::Net::HTTPServerParams::Ptr server_params(std::size_t threads) {
    Poco::Net::HTTPServerParams::Ptr params = new Poco::Net::HTTPServerParams;
    params->setMaxThreads(static_cast<int>(threads));
    params->setMaxQueued(256);
    params->setKeepAlive(true);
    params->setKeepAliveTimeout(Poco::Timespan(5, 0));
    params->setMaxKeepAliveRequests(200);
    params->setTimeout(Poco::Timespan(300, 0));
    params->setServerName("hangar");
    params->setSoftwareVersion("hangar");
    return params;
}

} // namespace

std::unique_ptr<Poco::Net::HTTPServer> make_tcp_server(HostCore &core, const std::string &listen, std::uint16_t &port) {
    Poco::Net::SocketAddress addr(listen);
    Poco::Net::ServerSocket socket;
    socket.bind(addr, true, false);
    socket.listen(256);
    port = socket.address().port();
    auto threads = static_cast<std::size_t>(core.config.get_int("server.threads", 256));
    // An eighth of the threads each: a tenant at its cap leaves the rest to the others.
    core.long_requests.set_limit(static_cast<std::size_t>(
        std::max(0LL, core.config.get_int("server.max_long_requests_per_project",
                                          static_cast<long long>(std::max<std::size_t>(threads / 8, 1))))));
    static Poco::ThreadPool pool("http", 4, static_cast<int>(threads), 10);
    return std::make_unique<Poco::Net::HTTPServer>(new HandlerFactory(core), pool, socket, server_params(threads));
}

namespace {
// A listening socket made by another process and inherited as a descriptor; Poco 1.11 opens a
// ServerSocket on an existing descriptor only from a subclass.
class InheritedServerSocketImpl : public Poco::Net::ServerSocketImpl {
public:
    explicit InheritedServerSocketImpl(int fd) { reset(fd); }
};
class InheritedServerSocket : public Poco::Net::ServerSocket {
public:
    explicit InheritedServerSocket(int fd) : ServerSocket(new InheritedServerSocketImpl(fd), true) {}
};
} // namespace

std::unique_ptr<Poco::Net::HTTPServer> make_unix_server(HostCore &core, int listening_fd) {
    ::fcntl(listening_fd, F_SETFD, FD_CLOEXEC); // not for what the agent starts (Chromium, executors)
    InheritedServerSocket socket(listening_fd);
    static Poco::ThreadPool pool("agent-http", 2, 32, 10);
    return std::make_unique<Poco::Net::HTTPServer>(new HandlerFactory(core), pool, socket, server_params(32));
}

} // namespace hangar::host
