/*
 * Hangar plugin ABI, version 1.
 *
 * This is the only contract between the `hangar` host and a plugin shared library. It is plain C
 * so that a plugin built with another compiler or C++ standard library still loads: no C++ type,
 * no Poco type and no exception ever crosses it.
 *
 * Rules that hold for every function below:
 *  - Strings are pointer + length (`hangar_str`), UTF-8, not necessarily NUL-terminated.
 *  - JSON travels as UTF-8 text.
 *  - Sizes are `size_t`; integers that go on the wire are fixed-width. No `long`, `off_t`, `time_t`.
 *  - Every table starts with `abi_version` and `struct_size`.
 *  - "Borrowed" memory stays valid for the stated time and must not be freed by the plugin.
 *    "Owned" buffers (`hangar_buf`) are allocated by the host and released with `buf_free`.
 *  - Functions returning `int` return 0 on success and a negative value on failure; where a
 *    failure has a message it is written into the optional `hangar_buf *err` (owned by caller).
 *  - Unless stated otherwise, functions may be called from any thread.
 *
 * How the ABI grows (one rule, enforced):
 *  - Functions are only ever appended to `hangar_host_v1`, never reordered, removed or changed in
 *    meaning; each appended one says in which minor it arrived ("ABI 1.4"), and
 *    HANGAR_ABI_MINOR is the newest. A change that cannot be an append is a new major
 *    (HANGAR_ABI_VERSION, a new `hangar_host_v2`).
 *  - A plugin refuses to start on a host older than the header it was built with: HANGAR_PLUGIN's
 *    init returns -1 unless `struct_size >= sizeof(hangar_host_v1)`, and the host then names the
 *    plugin it could not load. So plugin code calls every function of its header without a
 *    check; a newer host runs older plugins unchanged (they never look past their own size).
 *    One gate at load rather than one per call: a call forgotten behind no gate would jump
 *    through whatever lies past an older host's table.
 */
#ifndef HANGAR_PLUGIN_H
#define HANGAR_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HANGAR_ABI_VERSION 1u
/* The newest minor of ABI 1: the functions marked "ABI 1.N" below arrived in minor N. */
#define HANGAR_ABI_MINOR 9u

#if defined(__GNUC__)
#define HANGAR_EXPORT __attribute__((visibility("default")))
#else
#define HANGAR_EXPORT
#endif

/* ---- plain data --------------------------------------------------------------------------- */

typedef struct hangar_str {
    const char *ptr; /* may be NULL when len == 0 */
    size_t len;
} hangar_str;

/* A buffer the host allocated for the plugin. Release with host->buf_free. */
typedef struct hangar_buf {
    char *ptr;
    size_t len;
} hangar_buf;

typedef enum hangar_role {
    HANGAR_ROLE_SERVER = 1,  /* `hangar serve`: the public API */
    HANGAR_ROLE_INSTANCE = 2 /* `hangar agent`: inside one browser instance's sandbox */
} hangar_role;

typedef enum hangar_log_level {
    HANGAR_LOG_DEBUG = 0,
    HANGAR_LOG_INFO = 1,
    HANGAR_LOG_WARN = 2,
    HANGAR_LOG_ERROR = 3
} hangar_log_level;

/* Route flags, OR-ed together. */
enum {
    /* No bearer key needed (the handler checks its own capability token, e.g. a CDP URL). */
    HANGAR_ROUTE_PUBLIC = 1u << 0,
    /* The handler may take over the connection: SSE (`sse_open`), WebSocket upgrade or a raw
     * relay (`relay_*`). The host then moves the socket to its event loop, so a long-lived
     * connection never holds a request thread. */
    HANGAR_ROUTE_STREAMING = 1u << 1,
    /* An API key is checked when one is given and accepted (the caller is set as usual); a
     * request whose key is missing or refused still reaches the handler with no caller, which
     * then checks its own token (managed auth's flow JWT on GET/submit of a connection). */
    HANGAR_ROUTE_OPTIONAL_AUTH = 1u << 2
};

/* ---- opaque handles ----------------------------------------------------------------------- */

typedef struct hangar_plugin_ctx hangar_plugin_ctx; /* one per loaded plugin; lives until unload */
typedef struct hangar_request hangar_request;       /* valid during one handler call */
typedef struct hangar_response hangar_response;     /* valid during one handler call */
typedef struct hangar_stream hangar_stream;         /* an SSE stream; see sse_open */
typedef struct hangar_timer hangar_timer;
typedef struct hangar_activity hangar_activity;

/* A route handler. Runs on a host request thread. It fills `res`; a handler that sets nothing
 * answers 204. It must not unwind (C++ exceptions are caught by plugin.hpp). */
typedef void (*hangar_handler_fn)(void *user, hangar_request *req, hangar_response *res);

/* A service another plugin may call: JSON in, JSON out. Returns an HTTP-like status
 * (200 ok; 4xx/5xx with `out` holding a wire error object). `out` is filled with
 * host->buf_alloc-ed memory which the caller releases. */
typedef int (*hangar_service_fn)(void *user, hangar_str in_json, hangar_buf *out);

typedef void (*hangar_timer_fn)(void *user);

/* Relay observation (relay_observe, appended in ABI 1). */
typedef enum hangar_relay_event_kind {
    HANGAR_RELAY_OPENED = 1,  /* a relay started splicing (request thread) */
    HANGAR_RELAY_MESSAGE = 2, /* a client→upstream WebSocket text message naming a top-level "method" */
    HANGAR_RELAY_CLOSED = 3   /* both sides are closed */
} hangar_relay_event_kind;

/* What an observer answers to HANGAR_RELAY_OPENED, OR-ed; 0 = nothing more from this relay. */
enum {
    HANGAR_RELAY_WATCH_CLOSE = 1u << 0, /* HANGAR_RELAY_CLOSED with the reason and duration */
    /* Also read the WebSocket framing of an upgrade: HANGAR_RELAY_MESSAGE for every client text
     * message whose JSON object has a top-level "method" string (the value only: the rest of
     * the message is skipped, never parsed or kept), and message_count on close. Compressed
     * (permessage-deflate) messages are counted but not read. */
    HANGAR_RELAY_WATCH_MESSAGES = 1u << 1
};

typedef struct hangar_relay_event {
    uint32_t struct_size;    /* sizeof(hangar_relay_event) as the host knows it */
    uint32_t kind;           /* hangar_relay_event_kind */
    uint64_t relay_id;       /* unique per relay in this process, the same in all its events */
    hangar_str activity_key; /* as passed to relay_unix/relay_tcp (a session id), may be empty */
    hangar_str path;         /* the upstream path, with its query */
    hangar_str client_path;  /* the path the client asked for (may carry a capability token) */
    hangar_str method;       /* MESSAGE: the "method" value (at most 256 bytes, else not reported) */
    /* CLOSED: "client_close" (the client sent a WebSocket close or ended first), "upstream_close",
     * "client_error", "upstream_error" (a socket error on that side), "shutdown" (the host stops) */
    hangar_str reason;
    uint64_t message_count; /* CLOSED: WebSocket data messages relayed both ways (WATCH_MESSAGES) */
    uint64_t duration_ms;   /* CLOSED: since OPENED */
} hangar_relay_event;

/* Called on the request thread for OPENED and on the host's event loop for MESSAGE and CLOSED:
 * it must not block (queue and return). Borrowed strings live until it returns. The answer
 * counts for OPENED only (HANGAR_RELAY_WATCH_* flags). */
typedef uint32_t (*hangar_relay_fn)(void *user, const hangar_relay_event *event);

/* ---- what the host offers (passed to hangar_plugin_init; borrowed for the plugin's lifetime) */

typedef struct hangar_host_v1 {
    uint32_t abi_version; /* HANGAR_ABI_VERSION of the host */
    uint32_t struct_size; /* sizeof(hangar_host_v1) as the host knows it */

    /* memory: buffers handed to the plugin are allocated here and must be freed here */
    void (*buf_free)(hangar_buf *buf);                               /* frees ptr, sets it to NULL */
    int (*buf_alloc)(hangar_buf *buf, const char *data, size_t len); /* copies data into buf */

    /* logging, config, identity */
    void (*log)(hangar_plugin_ctx *ctx, hangar_log_level level, hangar_str message);
    /* Looks `key` up as "<plugin>.<key>" (from etc/plugins.d/<plugin>.ini), then as `key`
     * itself (e.g. "server.public_url"). "server.data_dir" answers the data dir as the host
     * resolved it (absolute, default applied); "host.plugins" the plugins this process started,
     * comma-separated. Returns 0 and fills `out` when found, -1 otherwise. */
    int (*config_get)(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *out);
    hangar_role (*role)(hangar_plugin_ctx *ctx);

    /* routes: register during `start` only. `pattern` segments are literals or `{name}`; a final
     * `{name*}` captures the rest of the path. `user` is borrowed until the plugin stops. */
    int (*route_add)(hangar_plugin_ctx *ctx, hangar_str method, hangar_str pattern, uint32_t flags,
                     hangar_handler_fn fn, void *user);

    /* request (all returned strings are borrowed until the handler returns) */
    hangar_str (*req_method)(hangar_request *req);
    hangar_str (*req_path)(hangar_request *req); /* decoded path, no query */
    /* Path parameter by name, URL-decoded. Returns -1 when absent. */
    int (*req_param)(hangar_request *req, hangar_str name, hangar_str *out);
    /* Query parameter by name, URL-decoded (first occurrence). Returns -1 when absent. */
    int (*req_query)(hangar_request *req, hangar_str name, hangar_str *out);
    /* The whole raw query string (still percent-encoded), for bracketed keys like tags[k]. */
    hangar_str (*req_query_string)(hangar_request *req);
    int (*req_header)(hangar_request *req, hangar_str name, hangar_str *out);
    /* The request body, read in full (the host enforces its size limit and answers 413 itself).
     * Returns -1 if the body could not be read. */
    int (*req_body)(hangar_request *req, hangar_str *out);
    /* The authenticated caller as JSON: {"org_id","project_id","project_name","key_id",
     * "project_scoped","auth_strategy","max_concurrent_sessions" (the project's browser cap,
     * 0 = none),"entitlements"}. Empty object on public routes. */
    hangar_str (*req_caller)(hangar_request *req);
    hangar_str (*req_id)(hangar_request *req); /* the request id the host assigned */
    /* "scheme://host[:port]" the client used to reach us, for building URLs it can follow. */
    hangar_str (*req_base_url)(hangar_request *req);

    /* response */
    void (*res_status)(hangar_response *res, int status);
    void (*res_header)(hangar_response *res, hangar_str name, hangar_str value);      /* adds */
    void (*res_body)(hangar_response *res, hangar_str content_type, hangar_str body); /* copies */
    /* Serves a file's bytes (with Range support); `path` is copied. */
    void (*res_file)(hangar_response *res, hangar_str content_type, hangar_str path);
    /* Answers with the wire error body {code, message, details?}; `details_json` is a JSON
     * array of {code, message} or empty.
     * Status 421 with code "wrong_node" and a detail {"code": "owner_node", "message": NAME} is
     * not sent to the client: it asks the host to relay the request, as received and with its
     * credentials, to the Hangar node NAME (the node that runs what the request needs), at the
     * URL the store's node table lists for it; an "owner_url" detail is ignored. The client gets
     * that node's answer, or 502 when it is not a serving node or cannot be reached. A 421 that
     * an instance answers is never acted on. */
    void (*res_error)(hangar_response *res, int status, hangar_str code, hangar_str message, hangar_str details_json);

    /* streaming (routes flagged HANGAR_ROUTE_STREAMING only) */
    /* Sends the SSE response head and hands the connection to the event loop. The returned
     * stream is owned by the plugin and outlives the handler; close it with stream_close, from
     * any thread. Returns NULL on failure. */
    hangar_stream *(*sse_open)(hangar_response *res);
    /* Queues one frame `data: <json>\n\n`. Returns -1 once the client has gone away. */
    int (*stream_send)(hangar_stream *stream, hangar_str json);
    int (*stream_is_open)(hangar_stream *stream);
    void (*stream_close)(hangar_stream *stream); /* ends the response and frees the handle */

    /* Relays this request to a unix socket (an instance's agent) or to a TCP port on loopback.
     * Plain requests are forwarded and the answer copied back. Upgrades (WebSocket) and SSE
     * requests are spliced byte for byte in the event loop, without parsing frames. `path`
     * replaces the request path (query string kept unless `path` has its own).
     * `activity_key`, when not empty, counts as activity for as long as the relay lasts. */
    int (*relay_unix)(hangar_request *req, hangar_response *res, hangar_str socket_path, hangar_str path,
                      hangar_str activity_key);
    int (*relay_tcp)(hangar_request *req, hangar_response *res, hangar_str host, uint16_t port, hangar_str path,
                     hangar_str activity_key);
    /* Completes a WebSocket upgrade and closes it at once with `code` and `reason`. */
    void (*ws_reject)(hangar_request *req, hangar_response *res, uint16_t code, hangar_str reason);

    /* store: SQL on the host database (SQLite; keep to SQL that PostgreSQL also speaks).
     * `params_json` is a JSON array bound to `?` in order. Rows come back as a JSON array of
     * objects in `out` (owned). Returns -1 with a message in `err` on failure. */
    int (*store_exec)(hangar_plugin_ctx *ctx, hangar_str sql, hangar_str params_json, hangar_buf *out, hangar_buf *err);

    /* blobs: files a plugin keeps, where every node of the store can read them (the data dir's
     * blobs folder, the `[blobs] dir` all nodes share, or the PostgreSQL store itself, fetched into
     * a local copy on use). `key` is a relative path of [A-Za-z0-9._-/] segments. blob_path
     * returns the file's local path (it may not exist yet); blob_put replaces the contents
     * atomically. */
    int (*blob_put)(hangar_plugin_ctx *ctx, hangar_str key, hangar_str data, hangar_buf *err);
    int (*blob_path)(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *out_path);
    int (*blob_delete)(hangar_plugin_ctx *ctx, hangar_str key);

    /* services */
    int (*service_add)(hangar_plugin_ctx *ctx, hangar_str name, hangar_service_fn fn, void *user);
    /* Returns the service's status (see hangar_service_fn), or 404 when nobody offers `name`. */
    int (*service_call)(hangar_plugin_ctx *ctx, hangar_str name, hangar_str in_json, hangar_buf *out);

    /* timers: `fn` runs on a host timer thread every `interval_ms` until timer_cancel. */
    hangar_timer *(*timer_start)(hangar_plugin_ctx *ctx, uint32_t interval_ms, hangar_timer_fn fn, void *user);
    void (*timer_cancel)(hangar_timer *timer); /* waits for a running callback; frees */

    /* activity: the host counts open connections and in-flight calls per key (a session id). */
    hangar_activity *(*activity_begin)(hangar_plugin_ctx *ctx, hangar_str key);
    void (*activity_end)(hangar_activity *activity); /* frees */
    /* Milliseconds since the key was last active; 0 while anything holds it active; -1 when
     * the key has never been seen. */
    int64_t (*activity_idle_ms)(hangar_plugin_ctx *ctx, hangar_str key);

    /* capability tokens (HS256 JWT signed with the host's secret). `claims_json` is an object;
     * the host adds "exp" from ttl_seconds. verify checks signature and expiry and returns the
     * claims in `out`. */
    int (*token_sign)(hangar_plugin_ctx *ctx, hangar_str claims_json, uint32_t ttl_seconds, hangar_buf *out);
    int (*token_verify)(hangar_plugin_ctx *ctx, hangar_str token, hangar_buf *out_claims);

    /* instances (server role): one sandboxed `hangar agent` per instance.
     * instance_start: `spec_json` is {"id": "...", ...}; the host creates the instance dir,
     * writes the spec for the agent, starts it under the sandbox and returns once its socket
     * answers, with {"id","socket","dir","pid"} in `out`. An optional "inputs" object of
     * {"<name>": "<host file path>"} is copied into the instance, where the agent reads it as
     * /run/hangar/inputs/<name> (names: [A-Za-z0-9._-], not starting with a dot). */
    int (*instance_start)(hangar_plugin_ctx *ctx, hangar_str spec_json, hangar_buf *out, hangar_buf *err);
    /* Stops every process of the instance and removes its directory. Idempotent. */
    int (*instance_stop)(hangar_plugin_ctx *ctx, hangar_str id);
    /* A plain HTTP call to the instance's agent. `out_status` gets the HTTP status (or 502 when
     * the agent cannot be reached) and `out` its body. timeout_ms 0 = the host default. */
    int (*instance_call)(hangar_plugin_ctx *ctx, hangar_str id, hangar_str method, hangar_str path, hangar_str body,
                         uint32_t timeout_ms, int *out_status, hangar_buf *out);
    /* The unix socket path of a running instance's agent (for relay_unix). */
    int (*instance_socket)(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out);
    /* The instance's spec as written at start (instance role: this agent's own instance). */
    int (*instance_spec)(hangar_plugin_ctx *ctx, hangar_buf *out);

    /* ---- appended in ABI 1 without breaking older plugins: check struct_size before use ---- */

    /* Completes this WebSocket upgrade and bridges it to a plain byte stream on a unix socket:
     * the payload of every data message from the client is written to the socket, and bytes read
     * from the socket go back as binary messages (for stream protocols carried over WebSocket,
     * such as RFB for noVNC). Pings are answered; a close on either side ends both. The
     * "binary" subprotocol is accepted when offered. `activity_key` as for relays. Returns -1
     * when the socket cannot be reached (nothing was sent to the client then). */
    /* ABI 1.1 */
    int (*ws_bridge_unix)(hangar_request *req, hangar_response *res, hangar_str socket_path, hangar_str activity_key);
    /* The host path of a running instance's directory (server role): what the agent sees as
     * /run/hangar. Files an agent leaves there (recordings) can be moved out before
     * instance_stop removes it. */
    /* ABI 1.1 */
    int (*instance_dir)(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out);
    /* Every request header as a JSON array of [name, value] pairs, in order, repeated names
     * repeated (for requests passed on whole, such as curl/raw). `out` is owned by the caller. */
    /* ABI 1.2 */
    int (*req_headers)(hangar_request *req, hangar_buf *out);
    /* Queues one SSE frame with an `id:` line ("id: <id>\ndata: <json>\n\n"), for streams a
     * client resumes with Last-Event-ID. Returns -1 once the client has gone. */
    /* ABI 1.3 */
    int (*stream_send_with_id)(hangar_stream *stream, hangar_str id, hangar_str json);
    /* Watches the relays this process splices (relay_unix/relay_tcp upgrades and event streams)
     * whose upstream path starts with `path_prefix`, from any plugin: `fn` gets HANGAR_RELAY_OPENED
     * for each, and what its answer asks for afterwards (see hangar_relay_event). Register during
     * `start`; a stopped plugin is called no more. The relay stays a byte relay: with no watcher
     * asking for messages, nothing is read out of the bytes. */
    /* ABI 1.4 */
    int (*relay_observe)(hangar_plugin_ctx *ctx, hangar_str path_prefix, hangar_relay_fn fn, void *user);
    /* The directory of a running instance's memory cgroup (server role; v2: the instance's one
     * cgroup, v1: its memory-hierarchy cgroup) as JSON {"path","version":1|2}, for reading its
     * counters (memory.events / memory.oom_control, memory.current, cgroup.procs). Returns -1
     * when the instance is not running or the machine gives it no memory cgroup. */
    /* ABI 1.4 */
    int (*instance_cgroup)(hangar_plugin_ctx *ctx, hangar_str id, hangar_buf *out);
    /* Runs another request through this server's own front door as the caller of `req` (server
     * role): the host sends it to the address it listens on with `req`'s Authorization and
     * X-Kernel-Project-Id, so authentication, feature switches, body limit, activity, the owning
     * plugin's handler and the audit log all apply exactly as to a client's request. For plugins
     * that offer another protocol over the same operations (the MCP server), which then need
     * neither another plugin's services nor a second copy of its checks. `path` may carry a
     * query string (already encoded). Plain answers only: not for SSE or upgrade routes.
     * `out_status` gets the answer's status, `out_headers` a JSON array of [name, value] pairs
     * and `out_body` its bytes. Returns -1 when the request could not be made (`out_body` then
     * says why); timeout_ms 0 = 60 s. */
    /* ABI 1.5 */
    int (*req_dispatch)(hangar_request *req, hangar_str method, hangar_str path, hangar_str content_type,
                        hangar_str body, uint32_t timeout_ms, int *out_status, hangar_buf *out_headers,
                        hangar_buf *out_body);
    /* Runs several statements on the host database as one transaction: `statements_json` is a
     * JSON array of {"sql": "...", "params": [...]}. Either all apply or none does (a failure
     * rolls back and returns -1 with a message in `err`); `out` gets a JSON array of each
     * statement's rows, in order. For changes that another request, or another node of the
     * same store, must never see half-done. */
    /* ABI 1.6 */
    int (*store_exec_batch)(hangar_plugin_ctx *ctx, hangar_str statements_json, hangar_buf *out, hangar_buf *err);
    /* The plugin wrote the file at blob_path(key) itself (moved a recording in): keep it as the
     * blob's contents, so that other nodes read it too (on a PostgreSQL store it is streamed
     * there; elsewhere nothing more is needed). Returns -1 with a message in `err` on failure. */
    /* ABI 1.7 */
    int (*blob_commit)(hangar_plugin_ctx *ctx, hangar_str key, hangar_buf *err);
    /* Takes the request's connection out of the HTTP server (streaming routes, before anything
     * was answered): `out_fd` gets the socket, close-on-exec and non-blocking, owned by the
     * plugin from then on, which answers on it itself or hands it on. Returns -1 when the route is
     * not streaming or the connection was already taken; also when bytes beyond the request head
     * had been read (they would be lost), and the connection is then closed. */
    /* ABI 1.8 */
    int (*res_take_socket)(hangar_response *res, int *out_fd);
    /* Queues an id-only SSE frame ("id: <id>\n\n"): it moves the client's Last-Event-ID past
     * events a filter skipped, and clients dispatch no event for it. Returns -1 once the client
     * has gone. */
    /* ABI 1.9 */
    int (*stream_send_id)(hangar_stream *stream, hangar_str id);
} hangar_host_v1;

/* ---- what the plugin declares (filled by hangar_plugin_init) ------------------------------- */

typedef struct hangar_migration {
    uint32_t version; /* 1, 2, 3 ... applied in order, each once per database */
    const char *sql;  /* NUL-terminated; may hold several statements separated by ';' */
} hangar_migration;

typedef struct hangar_plugin_v1 {
    uint32_t abi_version; /* must be HANGAR_ABI_VERSION the plugin was built against */
    uint32_t struct_size; /* sizeof(hangar_plugin_v1) */
    const char *name;     /* [a-z0-9_-]+, matches etc/plugins.d/<name>.ini; static storage */
    const char *version;  /* free-form, static storage */
    /* Comma-separated plugin names started before this one (and stopped after it), or NULL;
     * static storage. A missing dependency stops the host; "name?" is optional: ordered when
     * that plugin is enabled, ignored when not. */
    const char *depends;
    const hangar_migration *migrations; /* static storage */
    size_t migration_count;
    void *state; /* the plugin's own pointer, handed back to start/stop */
    /* Called once migrations ran, in dependency order. Register routes, services, timers here.
     * Return 0, or -1 to refuse to start (with a log line saying why). */
    int (*start)(void *state, hangar_plugin_ctx *ctx);
    /* Called in reverse order at shutdown; must stop timers and close streams it owns. */
    void (*stop)(void *state);
} hangar_plugin_v1;

/* The one exported symbol. Fill `out` and return 0; the host keeps `host` valid until stop. */
typedef int (*hangar_plugin_init_fn)(const hangar_host_v1 *host, hangar_plugin_v1 *out);
#define HANGAR_PLUGIN_INIT_SYMBOL "hangar_plugin_init"

#ifdef __cplusplus
}
#endif

#endif /* HANGAR_PLUGIN_H */
