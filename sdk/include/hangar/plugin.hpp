// Header-only C++ helpers over the Hangar plugin ABI (plugin.h).
//
// Everything here compiles into the plugin itself, so nothing C++ crosses the boundary: handlers
// are std::function, errors are exceptions, JSON is nlohmann::json, and the trampolines below
// turn all of that back into C calls. A plugin derives from hangar::Plugin, overrides start(),
// and names itself with HANGAR_PLUGIN(...).
#pragma once

#include <hangar/plugin.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace hangar {

using json = nlohmann::json;

inline hangar_str str(std::string_view s) {
    return {s.data(), s.size()};
}
inline std::string_view view(hangar_str s) {
    return s.ptr ? std::string_view(s.ptr, s.len) : std::string_view();
}

// Percent-decoding as URLs use it; '+' means a space only in query strings. A '%' not followed
// by two hex digits stays as it is.
inline std::string url_decode(std::string_view s, bool plus_is_space = false) {
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        char c = s[i];
        if (c == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
            out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
            i += 2;
        } else if (c == '+' && plus_is_space) {
            out.push_back(' ');
        } else {
            out.push_back(c);
        }
    }
    return out;
}

// A raw query string's name=value pairs, decoded, in order; a repeated name repeats. Bracketed
// names such as tags[team] (sent percent-encoded by the SDK) come back as written.
inline std::vector<std::pair<std::string, std::string>> query_pairs(std::string_view raw) {
    std::vector<std::pair<std::string, std::string>> out;
    while (!raw.empty()) {
        auto amp = raw.find('&');
        std::string_view pair = raw.substr(0, amp);
        raw = amp == std::string_view::npos ? std::string_view() : raw.substr(amp + 1);
        if (pair.empty()) continue;
        auto eq = pair.find('=');
        out.emplace_back(url_decode(pair.substr(0, eq), true),
                         eq == std::string_view::npos ? std::string() : url_decode(pair.substr(eq + 1), true));
    }
    return out;
}

// An array query parameter as the SDKs send it: comma-joined (Python 0.131), repeated, or
// repeated as `name[]`; items trimmed of spaces, empty ones dropped, in order.
inline std::vector<std::string> query_list(const std::vector<std::pair<std::string, std::string>> &pairs,
                                           std::string_view name) {
    std::vector<std::string> out;
    for (const auto &[key, value] : pairs) {
        if (key != name && !(key.size() == name.size() + 2 && key.starts_with(name) && key.ends_with("[]"))) continue;
        std::string_view rest = value;
        while (!rest.empty()) {
            auto comma = rest.find(',');
            auto item = rest.substr(0, comma);
            while (!item.empty() && item.front() == ' ')
                item.remove_prefix(1);
            while (!item.empty() && item.back() == ' ')
                item.remove_suffix(1);
            if (!item.empty()) out.emplace_back(item);
            rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        }
    }
    return out;
}

// ASCII comparison without case, as header names are compared.
inline bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

// A failure that maps to the wire error body {code, message, details?}.
class Error : public std::runtime_error {
public:
    struct Detail {
        std::string code;
        std::string message;
    };

    Error(int status, std::string code, const std::string &message, std::vector<Detail> details = {})
        : std::runtime_error(message), status_(status), code_(std::move(code)), details_(std::move(details)) {}

    int status() const { return status_; }
    const std::string &code() const { return code_; }
    const std::vector<Detail> &details() const { return details_; }

    json details_json() const {
        json arr = json::array();
        for (const auto &d : details_)
            arr.push_back({{"code", d.code}, {"message", d.message}});
        return arr;
    }

    static Error bad_request(const std::string &message, std::vector<Detail> details = {}) {
        return {400, "bad_request", message, std::move(details)};
    }
    // One invalid field: 400 bad_request with a single invalid_input detail naming it.
    static Error invalid(const std::string &field, const std::string &problem) {
        return bad_request("invalid " + field + ": " + problem, {{"invalid_input", field + ": " + problem}});
    }
    static Error not_found(const std::string &message) { return {404, "not_found", message}; }
    static Error conflict(const std::string &message) { return {409, "conflict", message}; }
    static Error forbidden(const std::string &message) { return {403, "forbidden", message}; }
    static Error unauthorized(const std::string &message) { return {401, "unauthorized", message}; }
    static Error internal(const std::string &message) { return {500, "internal", message}; }
    static Error not_implemented(const std::string &message) { return {501, "not_implemented", message}; }
    // What the request needs runs on another node of the cluster: the host relays the request
    // to that node, at the URL its node table lists (see res_error in plugin.h: `url` is only
    // said in the message's details); the client never sees this status.
    static Error on_node(const std::string &node, const std::string &url, const std::string &message) {
        return {421, "wrong_node", message, {{"owner_node", node}, {"owner_url", url}}};
    }
    // The disk (or the instance folder's quota) is full: nothing was written.
    static Error insufficient_storage(const std::string &message) { return {507, "insufficient_storage", message}; }

private:
    int status_;
    std::string code_;
    std::vector<Detail> details_;
};

// Collects per-field problems so a request can report all of them at once.
class Validation {
public:
    void fail(const std::string &field, const std::string &problem) {
        details_.push_back({"invalid_input", field + ": " + problem});
    }
    bool ok() const { return details_.empty(); }
    void throw_if_failed(const std::string &what = "invalid request") const {
        if (details_.empty()) return;
        std::string msg = what + ": " + details_.front().message;
        if (details_.size() > 1) msg += " (and " + std::to_string(details_.size() - 1) + " more)";
        throw Error::bad_request(msg, details_);
    }

private:
    std::vector<Error::Detail> details_;
};

// Owns one host-allocated buffer.
class Buf {
public:
    explicit Buf(const hangar_host_v1 *host) : host_(host) {}
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    ~Buf() { host_->buf_free(&buf_); }
    hangar_buf *get() { return &buf_; }
    std::string str() const { return buf_.ptr ? std::string(buf_.ptr, buf_.len) : std::string(); }

private:
    const hangar_host_v1 *host_;
    hangar_buf buf_{nullptr, 0};
};

// The answer to a request dispatched as the caller (Request::dispatch).
struct Dispatched {
    int status = 0;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;

    bool ok() const { return status >= 200 && status < 300; }
    // The first header of that name, compared without case.
    std::optional<std::string> header(std::string_view name) const {
        for (const auto &[k, v] : headers)
            if (iequals(k, name)) return v;
        return std::nullopt;
    }
};

class Request {
public:
    Request(const hangar_host_v1 *host, hangar_request *req) : host_(host), req_(req) {}

    std::string_view method() const { return view(host_->req_method(req_)); }
    std::string_view path() const { return view(host_->req_path(req_)); }
    std::string param(std::string_view name) const {
        hangar_str out{};
        return host_->req_param(req_, str(name), &out) == 0 ? std::string(view(out)) : std::string();
    }
    std::optional<std::string> query(std::string_view name) const {
        hangar_str out{};
        if (host_->req_query(req_, str(name), &out) != 0) return std::nullopt;
        return std::string(view(out));
    }
    std::string_view query_string() const { return view(host_->req_query_string(req_)); }
    // An array parameter, comma-joined or repeated (see hangar::query_list).
    std::vector<std::string> query_list(std::string_view name) const {
        return hangar::query_list(query_pairs(query_string()), name);
    }
    std::optional<std::string> header(std::string_view name) const {
        hangar_str out{};
        if (host_->req_header(req_, str(name), &out) != 0) return std::nullopt;
        return std::string(view(out));
    }
    // Every header, in order (repeated names repeated).
    std::vector<std::pair<std::string, std::string>> headers() const {
        Buf out(host_);
        std::vector<std::pair<std::string, std::string>> all;
        if (host_->req_headers(req_, out.get()) != 0) return all;
        json parsed = json::parse(out.str(), nullptr, false);
        if (parsed.is_array())
            for (const auto &pair : parsed)
                if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
                    all.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
        return all;
    }
    std::string_view body() const {
        hangar_str out{};
        if (host_->req_body(req_, &out) != 0) throw Error::bad_request("the request body could not be read");
        return view(out);
    }
    // The body as JSON. An empty body or `null` gives an empty object when `optional`.
    json json_body(bool optional = false) const {
        auto text = body();
        if (text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
            if (optional) return json::object();
            throw Error::bad_request("a JSON body is required", {{"invalid_input", "body: required"}});
        }
        json parsed = json::parse(text, nullptr, false);
        if (parsed.is_discarded())
            throw Error::bad_request("malformed JSON body", {{"invalid_input", "body: not valid JSON"}});
        if (parsed.is_null() && optional) return json::object();
        if (!parsed.is_object())
            throw Error::bad_request("the JSON body must be an object", {{"invalid_input", "body: not an object"}});
        return parsed;
    }
    json caller() const {
        auto text = view(host_->req_caller(req_));
        return text.empty() ? json::object() : json::parse(text, nullptr, false);
    }
    std::string id() const { return std::string(view(host_->req_id(req_))); }
    // The project the caller acts in: every resource belongs to one. 401 when there is none
    // (public routes have no caller).
    std::string project() const {
        json c = caller();
        if (c.is_object())
            if (auto it = c.find("project_id");
                it != c.end() && it->is_string() && !it->get_ref<const std::string &>().empty())
                return it->get<std::string>();
        throw Error::unauthorized("no project for this caller");
    }
    // 403 forbidden when the administrator switched `feature` off for the caller's org or
    // project (`hangar admin entitlement ... off`).
    void require_entitlement(std::string_view feature) const {
        json ent = caller().value("entitlements", json::object());
        auto it = ent.find(std::string(feature));
        if (it != ent.end() && it->is_boolean() && !it->get<bool>())
            throw Error::forbidden("the " + std::string(feature) +
                                   " feature is turned off for this organisation or project by the administrator");
    }
    std::string base_url() const { return std::string(view(host_->req_base_url(req_))); }
    // Runs `method path` through the server's own router as this request's caller (host function
    // req_dispatch: auth, feature switches, the owning plugin, audit), for plugins that offer
    // another protocol over the same operations. Plain answers only. A non-2xx answer is
    // returned, not thrown; failing to reach the server is a 502.
    Dispatched dispatch(std::string_view method, std::string_view path, std::string_view body = {},
                        std::string_view content_type = {}, std::uint32_t timeout_ms = 0) const {
        Buf headers(host_), out(host_);
        int status = 0;
        Dispatched d;
        if (host_->req_dispatch(req_, str(method), str(path), str(content_type), str(body), timeout_ms, &status,
                                headers.get(), out.get()) != 0) {
            json e = json::parse(out.str(), nullptr, false);
            throw Error(502, "upstream_unavailable",
                        e.is_object() ? e.value("message", "dispatch failed") : std::string("dispatch failed"));
        }
        d.status = status;
        d.body = out.str();
        json parsed = json::parse(headers.str(), nullptr, false);
        if (parsed.is_array())
            for (const auto &pair : parsed)
                if (pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_string())
                    d.headers.emplace_back(pair[0].get<std::string>(), pair[1].get<std::string>());
        return d;
    }
    hangar_request *raw() const { return req_; }

private:
    const hangar_host_v1 *host_;
    hangar_request *req_;
};

class SseStream {
public:
    SseStream(const hangar_host_v1 *host, hangar_stream *s) : host_(host), s_(s) {}
    SseStream(const SseStream &) = delete;
    SseStream &operator=(const SseStream &) = delete;
    ~SseStream() {
        if (s_) host_->stream_close(s_);
    }
    bool send(const json &event) {
        auto text = event.dump();
        return host_->stream_send(s_, str(text)) == 0;
    }
    // With an `id:` line (for Last-Event-ID).
    bool send(const json &event, std::uint64_t id) {
        auto text = event.dump();
        auto id_text = std::to_string(id);
        return host_->stream_send_with_id(s_, str(id_text), str(text)) == 0;
    }
    // An id-only frame: the client's Last-Event-ID moves to `id` with no event.
    bool send_id(std::uint64_t id) {
        auto id_text = std::to_string(id);
        return host_->stream_send_id(s_, str(id_text)) == 0;
    }
    bool open() const { return host_->stream_is_open(s_) != 0; }

private:
    const hangar_host_v1 *host_;
    hangar_stream *s_;
};

class Response {
public:
    Response(const hangar_host_v1 *host, hangar_response *res) : host_(host), res_(res) {}

    void status(int code) { host_->res_status(res_, code); }
    void header(std::string_view name, std::string_view value) { host_->res_header(res_, str(name), str(value)); }
    void body(std::string_view content_type, std::string_view bytes) {
        host_->res_body(res_, str(content_type), str(bytes));
    }
    void json(const hangar::json &value, int code = 200) {
        status(code);
        auto text = value.dump();
        body("application/json", text);
    }
    void no_content() { status(204); }
    void file(std::string_view content_type, std::string_view path) {
        host_->res_file(res_, str(content_type), str(path));
    }
    void error(const Error &e) {
        auto details = e.details().empty() ? std::string() : e.details_json().dump();
        host_->res_error(res_, e.status(), str(e.code()), str(e.what()), str(details));
    }
    // Offset pagination: a bare array plus X-Has-More / X-Next-Offset.
    void page(const hangar::json &items, std::int64_t offset, bool has_more) {
        header("X-Has-More", has_more ? "true" : "false");
        header("X-Next-Offset", std::to_string(has_more ? offset + static_cast<std::int64_t>(items.size()) : 0));
        json(items);
    }
    std::unique_ptr<SseStream> sse() {
        hangar_stream *s = host_->sse_open(res_);
        if (!s) throw Error::internal("could not open the event stream");
        return std::make_unique<SseStream>(host_, s);
    }
    // The connection itself, for a streaming route that serves or hands it on (see
    // hangar_host_v1::res_take_socket): the caller owns the descriptor. Throws when the host
    // cannot give it.
    int take_socket() {
        int fd = -1;
        if (host_->res_take_socket(res_, &fd) != 0) throw Error::internal("could not take the connection");
        return fd;
    }
    hangar_response *raw() const { return res_; }

private:
    const hangar_host_v1 *host_;
    hangar_response *res_;
};

using Handler = std::function<void(Request &, Response &)>;

// Base class of every C++ plugin. One instance per loaded library.
class Plugin {
public:
    virtual ~Plugin() = default;

    // Register routes, services and timers here. Throw to refuse to start. The same library
    // runs in `hangar serve` and in every browser's agent: by default start() registers the half
    // for this process's role, start_server() or start_instance(); stop() likewise.
    virtual void start() {
        if (role() == HANGAR_ROLE_INSTANCE)
            start_instance();
        else
            start_server();
    }
    // Release what start() acquired; timers are cancelled by the base class afterwards.
    virtual void stop() {
        if (role() == HANGAR_ROLE_INSTANCE)
            stop_instance();
        else
            stop_server();
    }
    virtual void start_server() {}
    virtual void start_instance() {}
    virtual void stop_server() {}
    virtual void stop_instance() {}

    // ---- used by HANGAR_PLUGIN; not for plugin code ----
    void bind(const hangar_host_v1 *host) { host_ = host; }
    int start_from_host(hangar_plugin_ctx *ctx) {
        ctx_ = ctx;
        try {
            start();
            return 0;
        } catch (const std::exception &e) {
            log(HANGAR_LOG_ERROR, std::string("failed to start: ") + e.what());
            return -1;
        }
    }
    void stop_from_host() {
        try {
            stop();
        } catch (const std::exception &e) {
            log(HANGAR_LOG_ERROR, std::string("error while stopping: ") + e.what());
        }
        for (auto *t : timers_)
            host_->timer_cancel(t);
        timers_.clear();
    }

protected:
    const hangar_host_v1 *host() const { return host_; }
    hangar_plugin_ctx *ctx() const { return ctx_; }
    hangar_role role() const { return host_->role(ctx_); }

    void log(hangar_log_level level, std::string_view message) const { host_->log(ctx_, level, str(message)); }
    void info(std::string_view m) const { log(HANGAR_LOG_INFO, m); }
    void warn(std::string_view m) const { log(HANGAR_LOG_WARN, m); }

    std::optional<std::string> config(std::string_view key) const {
        Buf out(host_);
        if (host_->config_get(ctx_, str(key), out.get()) != 0) return std::nullopt;
        return out.str();
    }
    std::string config(std::string_view key, std::string fallback) const {
        return config(key).value_or(std::move(fallback));
    }
    std::int64_t config_int(std::string_view key, std::int64_t fallback) const {
        auto v = config(key);
        if (!v || v->empty()) return fallback;
        try {
            return std::stoll(*v);
        } catch (const std::exception &) {
            warn("config " + std::string(key) + " is not a number: " + *v);
            return fallback;
        }
    }
    bool config_bool(std::string_view key, bool fallback) const {
        auto v = config(key);
        if (!v || v->empty()) return fallback;
        return *v == "true" || *v == "1" || *v == "yes" || *v == "on";
    }

    void route(std::string_view method, std::string_view pattern, Handler handler, std::uint32_t flags = 0) {
        auto &entry = routes_.emplace_back(RouteEntry{this, std::move(handler)});
        if (host_->route_add(ctx_, str(method), str(pattern), flags, &Plugin::trampoline, &entry) != 0)
            throw std::runtime_error("could not register route " + std::string(method) + " " + std::string(pattern));
    }

    // SQL on the host store; rows as an array of objects.
    json sql(std::string_view statement, const json &params = json::array()) const {
        auto p = params.dump();
        Buf out(host_), err(host_);
        if (host_->store_exec(ctx_, str(statement), str(p), out.get(), err.get()) != 0)
            throw Error::internal("store: " + err.str());
        auto text = out.str();
        return text.empty() ? json::array() : json::parse(text);
    }

    // Several statements as one transaction: all apply or none does. Returns each one's rows.
    json sql_batch(const std::vector<std::pair<std::string, json>> &statements) const {
        json list = json::array();
        for (const auto &[statement, params] : statements)
            list.push_back({{"sql", statement}, {"params", params}});
        auto text = list.dump();
        Buf out(host_), err(host_);
        if (host_->store_exec_batch(ctx_, str(text), out.get(), err.get()) != 0)
            throw Error::internal("store: " + err.str());
        auto rows = out.str();
        return rows.empty() ? json::array() : json::parse(rows);
    }

    // Files private to this plugin that every node of the store reads (see blob_* in plugin.h).
    // `key`: relative path of [A-Za-z0-9._-] segments. blob_put replaces atomically.
    void blob_put(std::string_view key, std::string_view data) const {
        Buf err(host_);
        if (host_->blob_put(ctx_, str(key), str(data), err.get()) != 0) throw Error::internal("blob: " + err.str());
    }
    std::optional<std::string> blob_path(std::string_view key) const {
        Buf out(host_);
        if (host_->blob_path(ctx_, str(key), out.get()) != 0) return std::nullopt;
        return out.str();
    }
    bool blob_delete(std::string_view key) const { return host_->blob_delete(ctx_, str(key)) == 0; }
    // After writing the file at blob_path(key) directly: keep it as the blob's contents.
    void blob_commit(std::string_view key) const {
        Buf err(host_);
        if (host_->blob_commit(ctx_, str(key), err.get()) != 0) throw Error::internal("blob: " + err.str());
    }

    std::string token_sign(const json &claims, std::uint32_t ttl_seconds) const {
        auto c = claims.dump();
        Buf out(host_);
        if (host_->token_sign(ctx_, str(c), ttl_seconds, out.get()) != 0) throw Error::internal("could not sign token");
        return out.str();
    }
    std::optional<json> token_verify(std::string_view token) const {
        Buf out(host_);
        if (host_->token_verify(ctx_, str(token), out.get()) != 0) return std::nullopt;
        auto parsed = json::parse(out.str(), nullptr, false);
        if (parsed.is_discarded()) return std::nullopt;
        return parsed;
    }

    void every(std::uint32_t interval_ms, std::function<void()> fn) {
        auto &entry = timer_fns_.emplace_back(std::move(fn));
        auto *t = host_->timer_start(
            ctx_, interval_ms,
            [](void *user) {
                try {
                    (*static_cast<std::function<void()> *>(user))();
                } catch (...) {
                    // A timer must never unwind into the host; the next tick tries again.
                }
            },
            &entry);
        if (!t) throw std::runtime_error("could not start timer");
        timers_.push_back(t);
    }

    // One event of a relay this process splices (see hangar_relay_event). The views live while
    // the observer runs.
    struct RelayEvent {
        std::uint32_t kind; // HANGAR_RELAY_OPENED / _MESSAGE / _CLOSED
        std::uint64_t relay_id;
        std::string_view activity_key, path, client_path, method, reason;
        std::uint64_t message_count, duration_ms;
    };
    // Answers HANGAR_RELAY_WATCH_* flags to OPENED; runs on the event loop for the rest, so it
    // must not block. Register in start().
    using RelayObserver = std::function<std::uint32_t(const RelayEvent &)>;
    void observe_relays(std::string_view path_prefix, RelayObserver fn) {
        auto &entry = relay_observers_.emplace_back(std::move(fn));
        auto trampoline = [](void *user, const hangar_relay_event *e) -> std::uint32_t {
            try {
                RelayEvent ev{e->kind,         e->relay_id,          view(e->activity_key),
                              view(e->path),   view(e->client_path), view(e->method),
                              view(e->reason), e->message_count,     e->duration_ms};
                return (*static_cast<RelayObserver *>(user))(ev);
            } catch (...) {
                return 0; // an observer must never unwind into the host
            }
        };
        if (host_->relay_observe(ctx_, str(path_prefix), trampoline, &entry) != 0)
            throw std::runtime_error("could not observe relays under " + std::string(path_prefix));
    }

    using Service = std::function<json(const json &)>;
    void service(std::string_view name, Service fn) {
        auto &entry = services_.emplace_back(ServiceEntry{this, std::move(fn)});
        if (host_->service_add(ctx_, str(name), &Plugin::service_trampoline, &entry) != 0)
            throw std::runtime_error("could not register service " + std::string(name));
    }
    // Calls another plugin's service; a non-200 answer is rethrown as the same wire error.
    json call(std::string_view name, const json &input) const {
        auto in = input.dump();
        Buf out(host_);
        int status = host_->service_call(ctx_, str(name), str(in), out.get());
        auto parsed = json::parse(out.str(), nullptr, false);
        if (status != 200) {
            std::string code = parsed.is_object() ? parsed.value("code", "internal") : "internal";
            std::string msg = parsed.is_object() ? parsed.value("message", "service failed")
                                                 : "service " + std::string(name) + " unavailable";
            std::vector<Error::Detail> details;
            if (parsed.is_object() && parsed.contains("details") && parsed["details"].is_array())
                for (const auto &d : parsed["details"])
                    if (d.is_object()) details.push_back({d.value("code", ""), d.value("message", "")});
            throw Error(status, code, msg, std::move(details));
        }
        return parsed.is_discarded() ? json() : parsed;
    }

    // ---- nodes: several `hangar serve` sharing one store (host/README.md, "Nodes") ----
    // This node's name in the store.
    std::string node_name() const { return config("node.name", ""); }
    // The public URL of another node while it serves (live or draining), from the host's node
    // list; nullopt when it stopped or went stale, is unknown or this node, or the store is away.
    // For what one node keeps in memory (a running flow, a build): a request for it that reached
    // another node throws Error::on_node(name, *url, ...), and the host relays it there.
    std::optional<std::string> serving_node_url(const std::string &name) const {
        if (name.empty() || name == node_name()) return std::nullopt;
        json nodes;
        try {
            nodes = call("host.nodes", json::object()).value("nodes", json::array());
        } catch (const Error &) {
            return std::nullopt;
        }
        for (const auto &n : nodes) {
            if (n.value("name", "") != name) continue;
            const auto state = n.value("state", "");
            const auto url = n.value("public_url", "");
            if ((state == "live" || state == "draining") && !url.empty()) return url;
            return std::nullopt;
        }
        return std::nullopt;
    }

    // Whether other nodes still serve, each asked once: for a sweep over rows that name the same
    // few nodes. Valid for one sweep (a node may stop at any time).
    class ServingNodes {
    public:
        explicit ServingNodes(const Plugin &plugin) : plugin_(plugin) {}
        // False for this node, as serving_node_url is nullopt for it.
        bool other_serves(const std::string &name) {
            auto known = answers_.find(name);
            if (known == answers_.end())
                known = answers_.emplace(name, plugin_.serving_node_url(name).has_value()).first;
            return known->second;
        }

    private:
        const Plugin &plugin_;
        std::map<std::string, bool> answers_;
    };

    // When `name` is another node that serves, throws Error::on_node ("<what> is on node <name>"),
    // so that the host relays this request there; returns when it is this node, or gone (then
    // this node answers from what the store keeps).
    void relay_to_node(const std::string &name, const std::string &what) const {
        if (auto url = serving_node_url(name)) throw Error::on_node(name, *url, what + " is on node " + name);
    }

    // RAII activity marker for a session key.
    class Activity {
    public:
        Activity(const hangar_host_v1 *host, hangar_activity *a) : host_(host), a_(a) {}
        Activity(const Activity &) = delete;
        Activity &operator=(const Activity &) = delete;
        ~Activity() {
            if (a_) host_->activity_end(a_);
        }

    private:
        const hangar_host_v1 *host_;
        hangar_activity *a_;
    };
    std::unique_ptr<Activity> activity(std::string_view key) const {
        return std::make_unique<Activity>(host_, host_->activity_begin(ctx_, str(key)));
    }
    std::int64_t idle_ms(std::string_view key) const { return host_->activity_idle_ms(ctx_, str(key)); }

    // ---- the instance's folders (instance role) ----
    // The instance's folder as this agent sees it: /run/hangar inside the sandbox (inputs/,
    // logs/, what the server collects). An agent run without the sandbox (development) is told
    // through the "instance_run_dir" or "instance.dir" key.
    std::string instance_run_dir() const {
        return config("instance_run_dir").value_or(config("instance.dir", "/run/hangar"));
    }
    // The agent's own socket as code in the instance reaches it (the Playwright executor, the BiDi
    // mapper): the server made it in its folder of the instance, shown read-only at
    // /run/hangar-host, where nothing in the sandbox can replace it; <run dir>.host/ without one.
    std::string instance_agent_socket() const {
        std::string run = instance_run_dir();
        return (run == "/run/hangar" ? std::string("/run/hangar-host") : run + ".host") + "/agent.sock";
    }
    // The browser user's home: /home/kernel inside the sandbox (<instance dir>/home bound there),
    // <run dir>/home for an agent without one.
    std::string instance_home_dir() const {
        std::string run = instance_run_dir();
        return run == "/run/hangar" && ::access("/home/kernel", W_OK) == 0 ? "/home/kernel" : run + "/home";
    }

    // ---- instances (server role) ----
    json instance_start(const json &spec) const {
        auto s = spec.dump();
        Buf out(host_), err(host_);
        if (host_->instance_start(ctx_, str(s), out.get(), err.get()) != 0)
            throw Error::internal("could not start the browser instance: " + err.str());
        return json::parse(out.str());
    }
    void instance_stop(std::string_view id) const { host_->instance_stop(ctx_, str(id)); }
    struct CallResult {
        int status;
        std::string body;
    };
    CallResult instance_call(std::string_view id, std::string_view method, std::string_view path,
                             std::string_view body = {}, std::uint32_t timeout_ms = 0) const {
        Buf out(host_);
        int status = 0;
        host_->instance_call(ctx_, str(id), str(method), str(path), str(body), timeout_ms, &status, out.get());
        return {status, out.str()};
    }
    std::optional<std::string> instance_socket(std::string_view id) const {
        Buf out(host_);
        if (host_->instance_socket(ctx_, str(id), out.get()) != 0) return std::nullopt;
        return out.str();
    }
    // The agent socket of a session whose instance runs; 404 "browser session … is not running"
    // when there is none.
    std::string agent_socket(std::string_view id) const {
        auto socket = instance_socket(id);
        if (!socket) throw Error::not_found("browser session " + std::string(id) + " is not running");
        return *socket;
    }
    std::optional<std::string> instance_dir(std::string_view id) const {
        Buf out(host_);
        if (host_->instance_dir(ctx_, str(id), out.get()) != 0) return std::nullopt;
        return out.str();
    }
    // {"path","version"} of a running instance's memory cgroup (hangar_host_v1::instance_cgroup).
    std::optional<json> instance_cgroup(std::string_view id) const {
        Buf out(host_);
        if (host_->instance_cgroup(ctx_, str(id), out.get()) != 0) return std::nullopt;
        auto parsed = json::parse(out.str(), nullptr, false);
        if (parsed.is_discarded()) return std::nullopt;
        return parsed;
    }
    json instance_spec() const {
        Buf out(host_);
        if (host_->instance_spec(ctx_, out.get()) != 0) return json::object();
        return json::parse(out.str(), nullptr, false);
    }

    // ---- relays ----
    void relay_unix(Request &req, Response &res, std::string_view socket_path, std::string_view path,
                    std::string_view activity_key = {}) const {
        if (host_->relay_unix(req.raw(), res.raw(), str(socket_path), str(path), str(activity_key)) != 0)
            throw Error(502, "upstream_unavailable", "the browser instance did not answer");
    }
    void relay_tcp(Request &req, Response &res, std::string_view tcp_host, std::uint16_t port, std::string_view path,
                   std::string_view activity_key = {}) const {
        if (host_->relay_tcp(req.raw(), res.raw(), str(tcp_host), port, str(path), str(activity_key)) != 0)
            throw Error(502, "upstream_unavailable", "the upstream did not answer");
    }
    // For plugins whose routes live under /browsers/{id}/...: looks the caller's active session
    // up through the browsers plugin (404 when it is not theirs or has ended) and relays this
    // request to that instance's agent at `agent_path`, counting it as activity on the session.
    // Needs the plugin to depend on "browsers" and, for SSE or upgrades, a STREAMING route.
    json relay_to_session(Request &req, Response &res, std::string_view agent_path) const {
        json caller = req.caller();
        json session =
            call("browsers.session", {{"project_id", caller.value("project_id", "")}, {"id", req.param("id")}});
        std::string sid = session.value("session_id", "");
        relay_unix(req, res, agent_socket(sid), agent_path, sid);
        return session;
    }

    // A WebSocket carrying a byte stream to a unix socket (see hangar_host_v1::ws_bridge_unix).
    void ws_bridge_unix(Request &req, Response &res, std::string_view socket_path,
                        std::string_view activity_key = {}) const {
        if (host_->ws_bridge_unix(req.raw(), res.raw(), str(socket_path), str(activity_key)) != 0)
            throw Error(502, "upstream_unavailable", "the stream behind this WebSocket is not available");
    }

    void ws_reject(Request &req, Response &res, std::uint16_t code, std::string_view reason) const {
        host_->ws_reject(req.raw(), res.raw(), code, str(reason));
    }

private:
    struct RouteEntry {
        Plugin *self;
        Handler handler;
    };
    struct ServiceEntry {
        Plugin *self;
        Service fn;
    };

    static void trampoline(void *user, hangar_request *raw_req, hangar_response *raw_res) {
        auto *entry = static_cast<RouteEntry *>(user);
        const hangar_host_v1 *host = entry->self->host_;
        Request req(host, raw_req);
        Response res(host, raw_res);
        try {
            entry->handler(req, res);
        } catch (const Error &e) {
            res.error(e);
        } catch (const json::exception &e) {
            res.error(Error::bad_request(std::string("invalid JSON value: ") + e.what()));
        } catch (const std::system_error &e) {
            if (e.code() == std::errc::no_space_on_device || e.code().value() == EDQUOT)
                res.error(Error::insufficient_storage(e.what()));
            else
                res.error(Error::internal(e.what()));
        } catch (const std::exception &e) {
            res.error(Error::internal(e.what()));
        } catch (...) {
            res.error(Error::internal("unexpected failure"));
        }
    }

    static int service_trampoline(void *user, hangar_str in, hangar_buf *out) {
        auto *entry = static_cast<ServiceEntry *>(user);
        const hangar_host_v1 *host = entry->self->host_;
        auto reply = [&](int status, const json &body) {
            auto text = body.dump();
            host->buf_alloc(out, text.data(), text.size());
            return status;
        };
        try {
            json input = json::parse(view(in), nullptr, false);
            return reply(200, entry->fn(input));
        } catch (const Error &e) {
            json body = {{"code", e.code()}, {"message", e.what()}};
            if (!e.details().empty()) body["details"] = e.details_json();
            return reply(e.status(), body);
        } catch (const std::exception &e) {
            return reply(500, {{"code", "internal"}, {"message", e.what()}});
        }
    }

    const hangar_host_v1 *host_ = nullptr;
    hangar_plugin_ctx *ctx_ = nullptr;
    std::list<RouteEntry> routes_;
    std::list<ServiceEntry> services_;
    std::list<std::function<void()>> timer_fns_;
    std::vector<hangar_timer *> timers_;
    std::list<RelayObserver> relay_observers_;
};

namespace detail {
template <typename T> T *&instance() {
    static T *ptr = nullptr;
    return ptr;
}
} // namespace detail

} // namespace hangar

// Declares the exported entry point for a hangar::Plugin subclass.
//   HANGAR_PLUGIN(MyPlugin, "name", "1.0.0", "dep1,dep2" or nullptr, migrations array or nullptr, count)
// NOLINTBEGIN(bugprone-macro-parentheses): Class is a type name and cannot be parenthesised.
#define HANGAR_PLUGIN(Class, Name, Version, Depends, Migrations, MigrationCount)                                       \
    namespace {                                                                                                        \
    std::unique_ptr<Class> hangar_plugin_singleton;                                                                    \
    }                                                                                                                  \
    extern "C" HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *host, hangar_plugin_v1 *out) {               \
        if (!host || host->abi_version != HANGAR_ABI_VERSION || host->struct_size < sizeof(hangar_host_v1)) return -1; \
        hangar_plugin_singleton = std::make_unique<Class>();                                                           \
        hangar_plugin_singleton->bind(host);                                                                           \
        out->abi_version = HANGAR_ABI_VERSION;                                                                         \
        out->struct_size = sizeof(hangar_plugin_v1);                                                                   \
        out->name = Name;                                                                                              \
        out->version = Version;                                                                                        \
        out->depends = Depends;                                                                                        \
        out->migrations = Migrations;                                                                                  \
        out->migration_count = MigrationCount;                                                                         \
        out->state = hangar_plugin_singleton.get();                                                                    \
        out->start = [](void *state, hangar_plugin_ctx *ctx) {                                                         \
            return static_cast<Class *>(state)->start_from_host(ctx);                                                  \
        };                                                                                                             \
        out->stop = [](void *state) {                                                                                  \
            static_cast<Class *>(state)->stop_from_host();                                                             \
            hangar_plugin_singleton.reset();                                                                           \
        };                                                                                                             \
        return 0;                                                                                                      \
    }
// NOLINTEND(bugprone-macro-parentheses)
