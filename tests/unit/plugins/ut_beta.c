/* ut_beta: a plain C test plugin (plugin.h only) that ut_alpha depends on. It owns a migration
 * and offers the service "beta.echo", which answers {"echo": <input>}. */
#include <hangar/plugin.h>

#include <stdlib.h>
#include <string.h>

static const hangar_host_v1 *host;

static const hangar_migration migrations[] = {
    {1, "CREATE TABLE ut_beta_items (id INTEGER PRIMARY KEY, v TEXT)"},
};

static int echo(void *user, hangar_str in, hangar_buf *out) {
    static const char prefix[] = "{\"echo\":";
    size_t n = sizeof prefix - 1 + in.len + 1;
    char *text = malloc(n);
    (void)user;
    if (!text) return 500;
    memcpy(text, prefix, sizeof prefix - 1);
    if (in.len) memcpy(text + sizeof prefix - 1, in.ptr, in.len);
    text[n - 1] = '}';
    host->buf_alloc(out, text, n);
    free(text);
    return 200;
}

static int start(void *state, hangar_plugin_ctx *ctx) {
    static const char name[] = "beta.echo";
    hangar_str s = {name, sizeof name - 1};
    (void)state;
    return host->service_add(ctx, s, echo, NULL);
}

static void stop(void *state) {
    (void)state;
}

HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *h, hangar_plugin_v1 *out) {
    if (!h || h->abi_version != HANGAR_ABI_VERSION) return -1;
    host = h;
    memset(out, 0, sizeof *out);
    out->abi_version = HANGAR_ABI_VERSION;
    out->struct_size = (uint32_t)sizeof *out;
    out->name = "ut_beta";
    out->version = "0.0.1";
    out->migrations = migrations;
    out->migration_count = sizeof migrations / sizeof migrations[0];
    out->start = start;
    out->stop = stop;
    return 0;
}
