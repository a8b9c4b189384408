/* A plugin compiled against the plugin ABI v1 header as first released (../include).
 *
 * It must keep loading into every later v1 host and keep working: the host only appends to
 * hangar_host_v1, so each function this plugin's header knows stays where it was. It uses a
 * little of everything a plugin of that time could: a migration and the store, a route with the
 * caller, a service called through the registry, host-owned buffers, config and the log.
 *
 *   GET /abi-v1  ->  {"abi":1,"calls":N,"echo":{...},"caller":{...},"greeting":"..."}
 *
 * Plain C: no C++ runtime, no JSON library, nothing but the frozen header. */
#include <hangar/plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const hangar_host_v1 *host;
static hangar_plugin_ctx *ctx;

static const hangar_migration migrations[] = {
    {1, "CREATE TABLE abi_v1_calls (id INTEGER PRIMARY KEY, at TEXT NOT NULL)"},
};

static hangar_str s(const char *text) {
    hangar_str out = {text, strlen(text)};
    return out;
}

static int echo(void *user, hangar_str in, hangar_buf *out) {
    char prefix[] = "{\"echoed\":";
    size_t len = sizeof prefix - 1 + in.len + 1;
    char *text = malloc(len);
    (void)user;
    if (!text) return 500;
    memcpy(text, prefix, sizeof prefix - 1);
    memcpy(text + sizeof prefix - 1, in.ptr, in.len);
    text[len - 1] = '}';
    host->buf_alloc(out, text, len);
    free(text);
    return 200;
}

static void fail(hangar_response *res, const char *what, hangar_buf *err) {
    char message[512];
    snprintf(message, sizeof message, "%s: %.*s", what, err ? (int)err->len : 0, err && err->ptr ? err->ptr : "");
    host->res_error(res, 500, s("internal"), s(message), s(""));
}

static void handle(void *user, hangar_request *req, hangar_response *res) {
    hangar_buf rows = {NULL, 0}, err = {NULL, 0}, echoed = {NULL, 0}, greeting = {NULL, 0};
    hangar_str caller = host->req_caller(req);
    int status;
    (void)user;

    if (host->store_exec(ctx, s("INSERT INTO abi_v1_calls (at) VALUES (?)"), s("[\"now\"]"), &rows, &err) != 0) {
        fail(res, "insert", &err);
        goto out;
    }
    host->buf_free(&rows);
    if (host->store_exec(ctx, s("SELECT COUNT(*) AS n FROM abi_v1_calls"), s("[]"), &rows, &err) != 0) {
        fail(res, "select", &err);
        goto out;
    }
    status = host->service_call(ctx, s("abi_v1.echo"), s("{\"ping\":true}"), &echoed);
    if (status != 200) {
        fail(res, "service", &echoed);
        goto out;
    }
    if (host->config_get(ctx, s("greeting"), &greeting) != 0) host->buf_alloc(&greeting, "hello", 5);
    {
        /* rows is [{"n":N}]: pass the count through as it came. */
        size_t cap = rows.len + echoed.len + caller.len + greeting.len + 128;
        char *body = malloc(cap);
        int n;
        if (!body) goto out;
        n = snprintf(body, cap, "{\"abi\":%u,\"rows\":%.*s,\"echo\":%.*s,\"caller\":%.*s,\"greeting\":\"%.*s\"}",
                     HANGAR_ABI_VERSION, (int)rows.len, rows.ptr, (int)echoed.len, echoed.ptr, (int)caller.len,
                     caller.ptr ? caller.ptr : "", (int)greeting.len, greeting.ptr);
        host->res_status(res, 200);
        host->res_body(res, s("application/json"), (hangar_str){body, (size_t)n});
        free(body);
    }
out:
    host->buf_free(&rows);
    host->buf_free(&err);
    host->buf_free(&echoed);
    host->buf_free(&greeting);
}

static int start(void *state, hangar_plugin_ctx *c) {
    (void)state;
    ctx = c;
    if (host->role(ctx) != HANGAR_ROLE_SERVER) return 0;
    if (host->route_add(ctx, s("GET"), s("/abi-v1"), 0, handle, NULL) != 0) return -1;
    if (host->service_add(ctx, s("abi_v1.echo"), echo, NULL) != 0) return -1;
    host->log(ctx, HANGAR_LOG_INFO, s("abi_v1 plugin started"));
    return 0;
}

static void stop(void *state) {
    (void)state;
}

HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *h, hangar_plugin_v1 *out) {
    /* The check a v1 plugin makes: same ABI, and a table at least as long as the one it knows. */
    if (!h || h->abi_version != HANGAR_ABI_VERSION || h->struct_size < sizeof(hangar_host_v1)) return -1;
    host = h;
    memset(out, 0, sizeof *out);
    out->abi_version = HANGAR_ABI_VERSION;
    out->struct_size = (uint32_t)sizeof *out;
    out->name = "abi_v1";
    out->version = "1.0.0";
    out->migrations = migrations;
    out->migration_count = sizeof migrations / sizeof migrations[0];
    out->start = start;
    out->stop = stop;
    return 0;
}
