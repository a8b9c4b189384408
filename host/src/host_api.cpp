// The C function table handed to plugins (hangar_host_v1). Each function converts between the
// ABI's plain types and the host's C++ objects; nothing here may throw across the boundary.
#include "core.hpp"
#include "http.hpp"
#include "nodes.hpp"
#include "runtime.hpp"
#include "util.hpp"

#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/StreamCopier.h>
#include <Poco/Timer.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>

namespace fs = std::filesystem;
using nlohmann::json;

namespace hangar::host {

void ActivityTracker::begin(const std::string &key) {
    std::lock_guard lock(mutex_);
    entries_[key].active++;
}

void ActivityTracker::end(const std::string &key) {
    std::lock_guard lock(mutex_);
    auto &e = entries_[key];
    if (e.active > 0) e.active--;
    e.last_end = steady_ms();
}

std::int64_t ActivityTracker::idle_ms(const std::string &key) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return -1;
    if (it->second.active > 0) return 0;
    return std::max<std::int64_t>(1, steady_ms() - it->second.last_end);
}

bool Services::add(const std::string &name, const std::string &owner, hangar_service_fn fn, void *user) {
    std::lock_guard lock(mutex_);
    return services_.emplace(name, Entry{owner, fn, user}).second;
}

void Services::remove_owned_by(const std::string &owner) {
    std::lock_guard lock(mutex_);
    std::erase_if(services_, [&](const auto &kv) { return kv.second.owner == owner; });
}

void Services::offer(const std::string &name, std::function<std::string(std::string_view)> fn) {
    std::lock_guard lock(mutex_);
    host_services_[name] = std::move(fn);
}

int Services::call(const std::string &name, std::string_view in, std::string &out) const {
    std::pair<hangar_service_fn, void *> target;
    {
        std::unique_lock lock(mutex_);
        if (auto own = host_services_.find(name); own != host_services_.end()) {
            auto fn = own->second;
            lock.unlock();
            try {
                out = fn(in);
                return 200;
            } catch (const std::exception &e) {
                out = json{{"code", "store_unavailable"}, {"message", e.what()}}.dump();
                return 503;
            }
        }
        auto it = services_.find(name);
        if (it == services_.end()) {
            out = json{{"code", "not_found"}, {"message", "no plugin offers the service " + name}}.dump();
            return 404;
        }
        target = {it->second.fn, it->second.user};
    }
    hangar_buf buf{nullptr, 0};
    int status = target.first(target.second, {in.data(), in.size()}, &buf);
    out.assign(buf.ptr ? buf.ptr : "", buf.len);
    std::free(buf.ptr);
    return status;
}

const std::string *request_body(hangar_request &r) {
    if (r.body_failed) return nullptr;
    if (!r.body) {
        try {
            std::string body;
            auto &in = r.http.stream();
            std::size_t limit = r.body_limit ? r.body_limit : r.core->max_body_bytes;
            char buf[16384];
            while (in.read(buf, sizeof buf) || in.gcount() > 0) {
                body.append(buf, static_cast<std::size_t>(in.gcount()));
                if (body.size() > limit) {
                    r.body_failed = true;
                    r.body_too_large = true;
                    return nullptr;
                }
            }
            r.body = std::move(body);
        } catch (const std::exception &) {
            r.body_failed = true;
            return nullptr;
        }
    }
    return &*r.body;
}

} // namespace hangar::host

struct hangar_timer {
    std::unique_ptr<Poco::Timer> timer;
    hangar_timer_fn fn;
    void *user;
    void tick(Poco::Timer &) { fn(user); }
};

struct hangar_activity {
    hangar::host::HostCore *core;
    std::string key;
};

namespace {

std::string_view sv(hangar_str s) {
    return s.ptr ? std::string_view(s.ptr, s.len) : std::string_view();
}
std::string st(hangar_str s) {
    return std::string(sv(s));
}
hangar_str hs(const std::string &s) {
    return {s.data(), s.size()};
}

int fill(hangar_buf *out, std::string_view data) {
    if (!out) return 0;
    out->ptr = static_cast<char *>(std::malloc(data.size() + 1));
    if (!out->ptr) return -1;
    std::memcpy(out->ptr, data.data(), data.size());
    out->ptr[data.size()] = '\0';
    out->len = data.size();
    return 0;
}

template <typename Fn> int guarded(hangar_buf *err, Fn &&fn) {
    try {
        return fn();
    } catch (const std::exception &e) {
        fill(err, e.what());
        return -1;
    } catch (...) {
        fill(err, "unexpected failure");
        return -1;
    }
}

void buf_free(hangar_buf *buf) {
    if (!buf) return;
    std::free(buf->ptr);
    buf->ptr = nullptr;
    buf->len = 0;
}

int buf_alloc(hangar_buf *buf, const char *data, size_t len) {
    return fill(buf, std::string_view(data, len));
}

void log_fn(hangar_plugin_ctx *ctx, hangar_log_level level, hangar_str message) {
    auto &l = *ctx->plugin->logger;
    std::string m = st(message);
    switch (level) {
    case HANGAR_LOG_DEBUG:
        l.debug(m);
        break;
    case HANGAR_LOG_INFO:
        l.information(m);
        break;
    case HANGAR_LOG_WARN:
        l.warning(m);
        break;
    default:
        l.error(m);
        ctx->plugin->last_error = m;
        break;
    }
}

int config_get(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *out) {
    auto &cfg = ctx->core->config;
    std::string k = st(key);
    // The data dir as the host resolved it (absolute, default applied), for files such as the
    // secrets key that plugins keep there.
    if (k == "server.data_dir" && !ctx->core->data_dir.empty()) return fill(out, ctx->core->data_dir);
    // The name the node claimed (the host name when none was set).
    if (k == "node.name" && !ctx->core->node_name.empty()) return fill(out, ctx->core->node_name);
    // `hangar drain` asked this node to take no new browsers (nodes.hpp).
    if (k == "node.draining" && ctx->core->node) return fill(out, ctx->core->node->draining() ? "true" : "false");
    // Whether the server is stopping for a restart that adopts its instances (see app.cpp).
    if (k == "runtime.stopping_keeps_sessions") return fill(out, ctx->core->stopping_keeps_sessions ? "true" : "false");
    // The plugins this process started, comma-separated in start order (a plugin answering for
    // the whole installation, such as the org plugin's entitlements, reads what is served).
    if (k == "host.plugins") {
        std::string names;
        for (const auto &n : ctx->core->started_plugins)
            names += (names.empty() ? "" : ",") + n;
        return fill(out, names);
    }
    if (k == "server.bound_listen" && ctx->core->self_port != 0) {
        const auto &h = ctx->core->self_host;
        return fill(out, (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" +
                             std::to_string(ctx->core->self_port));
    }
    if (auto v = cfg.get(ctx->plugin->name + "." + k)) return fill(out, *v);
    if (auto v = cfg.get(k)) return fill(out, *v);
    return -1;
}

hangar_role role_fn(hangar_plugin_ctx *ctx) {
    return ctx->core->role;
}

int route_add(hangar_plugin_ctx *ctx, hangar_str method, hangar_str pattern, uint32_t flags, hangar_handler_fn fn,
              void *user) {
    std::lock_guard lock(ctx->core->router_mutex);
    std::string m = st(method);
    for (auto &c : m)
        c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    bool ok = ctx->core->router.add(m, st(pattern), {ctx->plugin, fn, user, flags});
    if (!ok) ctx->plugin->logger->error("route " + m + " " + st(pattern) + " is already taken");
    return ok ? 0 : -1;
}

hangar_str req_method(hangar_request *r) {
    return hs(r->method);
}
hangar_str req_path(hangar_request *r) {
    return hs(r->path);
}

int req_param(hangar_request *r, hangar_str name, hangar_str *out) {
    auto it = r->params.find(st(name));
    if (it == r->params.end()) return -1;
    *out = hs(it->second);
    return 0;
}

int req_query(hangar_request *r, hangar_str name, hangar_str *out) {
    auto n = sv(name);
    for (const auto &[k, v] : r->query)
        if (k == n) {
            *out = hs(v);
            return 0;
        }
    return -1;
}

hangar_str req_query_string(hangar_request *r) {
    return hs(r->query_string);
}

int req_header(hangar_request *r, hangar_str name, hangar_str *out) {
    std::string n = st(name);
    if (!r->http.has(n)) return -1;
    const std::string &v = r->http.get(n); // a reference into the request: lives as long as it
    *out = hs(v);
    return 0;
}

int req_headers(hangar_request *r, hangar_buf *out) {
    json all = json::array();
    for (const auto &[name, value] : r->http)
        all.push_back({name, value});
    return fill(out, all.dump());
}

int req_body(hangar_request *r, hangar_str *out) {
    const std::string *body = hangar::host::request_body(*r);
    if (!body) return -1;
    *out = hs(*body);
    return 0;
}

hangar_str req_caller(hangar_request *r) {
    return hs(r->caller_json);
}
hangar_str req_id(hangar_request *r) {
    return hs(r->request_id);
}
hangar_str req_base_url(hangar_request *r) {
    return hs(r->base_url);
}

void res_status(hangar_response *r, int status) {
    r->status = status;
}
void res_header(hangar_response *r, hangar_str name, hangar_str value) {
    r->headers.emplace_back(st(name), st(value));
}
void res_body(hangar_response *r, hangar_str content_type, hangar_str body) {
    r->content_type = st(content_type);
    r->body = st(body);
    r->file.reset();
}
void res_file(hangar_response *r, hangar_str content_type, hangar_str path) {
    r->content_type = st(content_type);
    r->file = st(path);
}
void res_error(hangar_response *r, int status, hangar_str code, hangar_str message, hangar_str details) {
    hangar::host::set_error(*r, status, st(code), st(message), st(details));
}

hangar_stream *sse_open(hangar_response *r) {
    if (!(r->req->route_flags & HANGAR_ROUTE_STREAMING) || r->taken_over) return nullptr;
    try {
        std::string buffered;
        auto fd = hangar::host::take_over(*r->req, *r, buffered);
        std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                           "Connection: close\r\nX-Accel-Buffering: no\r\n";
        for (const auto &[k, v] : r->headers)
            head.append(k).append(": ").append(v).append("\r\n");
        head += "\r\n";
        auto *core = r->core;
        core->metrics.connection_opened("sse");
        // The stream keeps its project's place among the long requests until it ends.
        auto conn = core->loop.add_sse(std::move(fd), std::move(head),
                                       [core, slot = r->req->long_slot] { core->metrics.connection_closed("sse"); });
        return new hangar_stream{conn};
    } catch (const std::exception &) {
        return nullptr;
    }
}

int res_take_socket(hangar_response *r, int *out_fd) {
    if (!(r->req->route_flags & HANGAR_ROUTE_STREAMING) || r->taken_over) return -1;
    try {
        std::string buffered;
        auto fd = hangar::host::take_over(*r->req, *r, buffered);
        if (!buffered.empty()) return -1;
        *out_fd = fd.release();
        return 0;
    } catch (const std::exception &) {
        return -1;
    }
}

int stream_send(hangar_stream *s, hangar_str json_text) {
    return s->conn->send_frame(st(json_text)) ? 0 : -1;
}
// An SSE id with a line break would end its `id:` line early and inject a field of its own.
std::optional<std::string> sse_id_line(hangar_str id) {
    std::string line(st(id));
    if (line.find_first_of("\r\n") != std::string::npos) return std::nullopt;
    return line;
}
int stream_send_with_id(hangar_stream *s, hangar_str id, hangar_str json_text) {
    auto line = sse_id_line(id);
    return line && s->conn->send_frame(*line, st(json_text)) ? 0 : -1;
}
int stream_send_id(hangar_stream *s, hangar_str id) {
    auto line = sse_id_line(id);
    return line && s->conn->send_id(*line) ? 0 : -1;
}
int stream_is_open(hangar_stream *s) {
    return s->conn->open() ? 1 : 0;
}
void stream_close(hangar_stream *s) {
    if (!s) return;
    s->conn->close();
    delete s;
}

int relay_unix(hangar_request *req, hangar_response *res, hangar_str socket, hangar_str path, hangar_str key) {
    try {
        return hangar::host::relay(*req, *res, {true, st(socket), 0}, st(path), st(key));
    } catch (const std::exception &) {
        return -1;
    }
}

int relay_tcp(hangar_request *req, hangar_response *res, hangar_str host, uint16_t port, hangar_str path,
              hangar_str key) {
    try {
        return hangar::host::relay(*req, *res, {false, st(host), port}, st(path), st(key));
    } catch (const std::exception &) {
        return -1;
    }
}

void ws_reject_fn(hangar_request *req, hangar_response *res, uint16_t code, hangar_str reason) {
    try {
        hangar::host::ws_reject(*req, *res, code, st(reason));
    } catch (const std::exception &) {
    }
}

int store_exec(hangar_plugin_ctx *ctx, hangar_str sql, hangar_str params, hangar_buf *out, hangar_buf *err) {
    return guarded(err, [&] {
        if (!ctx->core->store) throw std::runtime_error("the store is only available in the server role");
        json p = params.len ? json::parse(sv(params)) : json::array();
        auto rows = ctx->core->store->exec(st(sql), p);
        return fill(out, rows.dump());
    });
}

int store_exec_batch(hangar_plugin_ctx *ctx, hangar_str statements, hangar_buf *out, hangar_buf *err) {
    return guarded(err, [&] {
        auto &store = ctx->core->store;
        if (!store) throw std::runtime_error("the store is only available in the server role");
        json list = json::parse(sv(statements));
        if (!list.is_array()) throw std::runtime_error("statements must be a JSON array");
        json results = store->transaction([&] {
            json all = json::array();
            for (const auto &statement : list)
                all.push_back(
                    store->exec(statement.at("sql").get<std::string>(), statement.value("params", json::array())));
            return all;
        });
        return fill(out, results.dump());
    });
}

// Blob keys are relative paths of safe segments, confined to the plugin's own folder (blobs.hpp).
int blob_put(hangar_plugin_ctx *ctx, hangar_str key, hangar_str data, hangar_buf *err) {
    return guarded(err, [&] {
        if (!ctx->core->blobs) throw std::runtime_error("blobs are kept by the server only");
        ctx->core->blobs->put(ctx->plugin->name, st(key), sv(data));
        return 0;
    });
}

int blob_path(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *out) {
    if (!ctx->core->blobs) return -1;
    try {
        auto path = ctx->core->blobs->path(ctx->plugin->name, st(key));
        return path ? fill(out, *path) : -1;
    } catch (const std::exception &e) {
        ctx->core->log.error("blob %s/%s: %s", ctx->plugin->name, st(key), std::string(e.what()));
        return -1;
    }
}

int blob_delete(hangar_plugin_ctx *ctx, hangar_str key) {
    if (!ctx->core->blobs) return -1;
    try {
        return ctx->core->blobs->remove(ctx->plugin->name, st(key)) ? 0 : -1;
    } catch (const std::exception &e) {
        ctx->core->log.error("blob %s/%s: %s", ctx->plugin->name, st(key), std::string(e.what()));
        return -1;
    }
}

int blob_commit(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *err) {
    return guarded(err, [&] {
        if (!ctx->core->blobs) throw std::runtime_error("blobs are kept by the server only");
        ctx->core->blobs->commit(ctx->plugin->name, st(key));
        return 0;
    });
}

int service_add(hangar_plugin_ctx *ctx, hangar_str name, hangar_service_fn fn, void *user) {
    return ctx->core->services.add(st(name), ctx->plugin->name, fn, user) ? 0 : -1;
}

int service_call(hangar_plugin_ctx *ctx, hangar_str name, hangar_str in, hangar_buf *out) {
    std::string reply;
    int status = ctx->core->services.call(st(name), sv(in), reply);
    fill(out, reply);
    return status;
}

hangar_timer *timer_start(hangar_plugin_ctx *, uint32_t interval_ms, hangar_timer_fn fn, void *user) {
    try {
        auto t = std::make_unique<hangar_timer>();
        t->fn = fn;
        t->user = user;
        t->timer = std::make_unique<Poco::Timer>(interval_ms, interval_ms);
        t->timer->start(Poco::TimerCallback<hangar_timer>(*t, &hangar_timer::tick));
        return t.release(); // owned by the plugin until timer_cancel
    } catch (const std::exception &) {
        return nullptr;
    }
}

void timer_cancel(hangar_timer *t) {
    if (!t) return;
    t->timer->stop(); // waits for a running callback
    delete t;
}

hangar_activity *activity_begin(hangar_plugin_ctx *ctx, hangar_str key) {
    auto *a = new hangar_activity{ctx->core, st(key)};
    ctx->core->activity.begin(a->key);
    return a;
}

void activity_end(hangar_activity *a) {
    if (!a) return;
    a->core->activity.end(a->key);
    delete a;
}

int64_t activity_idle_ms(hangar_plugin_ctx *ctx, hangar_str key) {
    return ctx->core->activity.idle_ms(st(key));
}

int token_sign(hangar_plugin_ctx *ctx, hangar_str claims, uint32_t ttl, hangar_buf *out) {
    return guarded(nullptr, [&] {
        if (!ctx->core->tokens) throw std::runtime_error("no token signer in this role");
        return fill(out, ctx->core->tokens->sign(json::parse(sv(claims)), ttl));
    });
}

int token_verify(hangar_plugin_ctx *ctx, hangar_str token, hangar_buf *out) {
    return guarded(nullptr, [&] {
        if (!ctx->core->tokens) return -1;
        auto claims = ctx->core->tokens->verify(st(token));
        if (!claims) return -1;
        return fill(out, claims->dump());
    });
}

int instance_start(hangar_plugin_ctx *ctx, hangar_str spec, hangar_buf *out, hangar_buf *err) {
    return guarded(err, [&] {
        if (!ctx->core->runtime) throw std::runtime_error("instances can only be started by the server");
        auto started = std::chrono::steady_clock::now();
        auto seconds = [&] {
            return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        };
        try {
            auto answer = ctx->core->runtime->start(json::parse(sv(spec))).dump();
            ctx->core->metrics.observe_instance_start(seconds(), true);
            return fill(out, answer);
        } catch (...) {
            ctx->core->metrics.observe_instance_start(seconds(), false);
            throw;
        }
    });
}

int instance_stop(hangar_plugin_ctx *ctx, hangar_str id) {
    return guarded(nullptr, [&] {
        if (!ctx->core->runtime) return -1;
        ctx->core->runtime->stop(st(id));
        return 0;
    });
}

int instance_call(hangar_plugin_ctx *ctx, hangar_str id, hangar_str method, hangar_str path, hangar_str body,
                  uint32_t timeout_ms, int *out_status, hangar_buf *out) {
    *out_status = 502;
    if (!ctx->core->runtime) return -1;
    auto socket = ctx->core->runtime->socket_path(st(id));
    if (!socket) {
        fill(out, json{{"code", "not_found"}, {"message", "the browser instance is not running"}}.dump());
        *out_status = 404;
        return -1;
    }
    try {
        auto r = hangar::host::unix_http_call(*socket, st(method), st(path), st(body),
                                              timeout_ms ? static_cast<int>(timeout_ms) : 60000);
        // A 421 asks the host to relay a request to another node: routing an instance does not
        // decide (whatever runs in the sandbox may answer here).
        if (r.status == 421) {
            fill(out, json{{"code", "upstream_unavailable"},
                           {"message", "the browser instance answered 421, which it may not"}}
                          .dump());
            *out_status = 502;
            return -1;
        }
        *out_status = r.status;
        return fill(out, r.body);
    } catch (const std::exception &e) {
        fill(out, json{{"code", "upstream_unavailable"},
                       {"message", std::string("the browser instance did not answer: ") + e.what()}}
                      .dump());
        return -1;
    }
}

int instance_socket(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out) {
    if (!ctx->core->runtime) return -1;
    auto socket = ctx->core->runtime->socket_path(st(id));
    return socket ? fill(out, *socket) : -1;
}

int instance_dir(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out) {
    if (!ctx->core->runtime) return -1;
    auto dir = ctx->core->runtime->dir_path(st(id));
    return dir ? fill(out, *dir) : -1;
}

int ws_bridge_unix(hangar_request *req, hangar_response *res, hangar_str socket, hangar_str key) {
    try {
        return hangar::host::ws_bridge(*req, *res, st(socket), st(key));
    } catch (const std::exception &) {
        return -1;
    }
}

int relay_observe(hangar_plugin_ctx *ctx, hangar_str prefix, hangar_relay_fn fn, void *user) {
    if (!fn) return -1;
    return guarded(nullptr, [&] {
        ctx->core->relay_observers.add(ctx->plugin->name, st(prefix), fn, user);
        return 0;
    });
}

int instance_cgroup(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out) {
    if (!ctx->core->runtime) return -1;
    return guarded(nullptr, [&] {
        auto cg = ctx->core->runtime->memory_cgroup(st(id));
        if (!cg) return -1;
        return fill(out, json{{"path", cg->first}, {"version", cg->second}}.dump());
    });
}

int instance_spec(hangar_plugin_ctx *ctx, hangar_buf *out) {
    return guarded(nullptr, [&] {
        if (ctx->core->instance_dir.empty()) return -1;
        return fill(out, hangar::host::read_file(ctx->core->instance_dir + "/spec.json"));
    });
}

// Nested dispatches (a plugin dispatching to a route that dispatches again) stop at this depth,
// so a loop between two routes ends with an error instead of every request thread.
constexpr int kMaxDispatchDepth = 4;
constexpr const char *kDispatchDepthHeader = "X-Hangar-Dispatch-Depth";

int req_dispatch(hangar_request *req, hangar_str method, hangar_str path, hangar_str content_type, hangar_str body,
                 uint32_t timeout_ms, int *out_status, hangar_buf *out_headers, hangar_buf *out_body) {
    *out_status = 502;
    auto fail = [&](const std::string &message) {
        fill(out_body, json{{"code", "upstream_unavailable"}, {"message", message}}.dump());
        return -1;
    };
    auto &core = *req->core;
    if (core.role != HANGAR_ROLE_SERVER || core.self_port == 0) return fail("no API listener to dispatch to");
    int depth = 0;
    try {
        depth = std::stoi(req->http.get(kDispatchDepthHeader, "0"));
    } catch (const std::exception &) {
        depth = 0;
    }
    if (depth >= kMaxDispatchDepth) return fail("requests dispatched too deep (a loop between routes?)");
    std::string target = st(path);
    if (target.empty() || target.front() != '/') return fail("the path must start with /");
    try {
        // Through the listener rather than a call into the router: relays and file answers
        // write to a real connection, and every step of the middleware runs unchanged.
        Poco::Net::HTTPClientSession session(core.self_host, core.self_port);
        session.setTimeout(Poco::Timespan(static_cast<long>(timeout_ms ? timeout_ms : 60000) * 1000));
        Poco::Net::HTTPRequest inner(st(method), target, Poco::Net::HTTPMessage::HTTP_1_1);
        inner.setKeepAlive(false);
        for (const char *name : {"Authorization", "X-Kernel-Project-Id", "User-Agent"})
            if (req->http.has(name)) inner.set(name, req->http.get(name));
        inner.set(kDispatchDepthHeader, std::to_string(depth + 1));
        std::string payload = st(body);
        if (content_type.len) inner.setContentType(st(content_type));
        if (!payload.empty() || inner.getMethod() == "POST" || inner.getMethod() == "PUT" ||
            inner.getMethod() == "PATCH")
            inner.setContentLength64(static_cast<Poco::Int64>(payload.size()));
        session.sendRequest(inner) << payload;
        Poco::Net::HTTPResponse answer;
        auto &in = session.receiveResponse(answer);
        std::string bytes;
        Poco::StreamCopier::copyToString(in, bytes);
        json headers = json::array();
        for (const auto &[name, value] : answer)
            headers.push_back({name, value});
        *out_status = static_cast<int>(answer.getStatus());
        fill(out_headers, headers.dump());
        return fill(out_body, bytes);
    } catch (const std::exception &e) {
        return fail(std::string("the dispatched request failed: ") + e.what());
    }
}

const hangar_host_v1 kHostTable = {
    .abi_version = HANGAR_ABI_VERSION,
    .struct_size = sizeof(hangar_host_v1),
    .buf_free = buf_free,
    .buf_alloc = buf_alloc,
    .log = log_fn,
    .config_get = config_get,
    .role = role_fn,
    .route_add = route_add,
    .req_method = req_method,
    .req_path = req_path,
    .req_param = req_param,
    .req_query = req_query,
    .req_query_string = req_query_string,
    .req_header = req_header,
    .req_body = req_body,
    .req_caller = req_caller,
    .req_id = req_id,
    .req_base_url = req_base_url,
    .res_status = res_status,
    .res_header = res_header,
    .res_body = res_body,
    .res_file = res_file,
    .res_error = res_error,
    .sse_open = sse_open,
    .stream_send = stream_send,
    .stream_is_open = stream_is_open,
    .stream_close = stream_close,
    .relay_unix = relay_unix,
    .relay_tcp = relay_tcp,
    .ws_reject = ws_reject_fn,
    .store_exec = store_exec,
    .blob_put = blob_put,
    .blob_path = blob_path,
    .blob_delete = blob_delete,
    .service_add = service_add,
    .service_call = service_call,
    .timer_start = timer_start,
    .timer_cancel = timer_cancel,
    .activity_begin = activity_begin,
    .activity_end = activity_end,
    .activity_idle_ms = activity_idle_ms,
    .token_sign = token_sign,
    .token_verify = token_verify,
    .instance_start = instance_start,
    .instance_stop = instance_stop,
    .instance_call = instance_call,
    .instance_socket = instance_socket,
    .instance_spec = instance_spec,
    .ws_bridge_unix = ws_bridge_unix,
    .instance_dir = instance_dir,
    .req_headers = req_headers,
    .stream_send_with_id = stream_send_with_id,
    .relay_observe = relay_observe,
    .instance_cgroup = instance_cgroup,
    .req_dispatch = req_dispatch,
    .store_exec_batch = store_exec_batch,
    .blob_commit = blob_commit,
    .res_take_socket = res_take_socket,
    .stream_send_id = stream_send_id,
};

} // namespace

namespace hangar::host {

const hangar_host_v1 *HostCore::api() const {
    return &kHostTable;
}

HostCore::HostCore(hangar_role r, Config &c) : role(r), config(c), log(Poco::Logger::get("hangar")) {}
HostCore::~HostCore() {
    bridges.stop();
    loop.stop();
}

} // namespace hangar::host
