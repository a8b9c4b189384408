/* ut_badabi: claims plugin ABI 99, which the host does not speak; it must be refused. */
#include <hangar/plugin.h>

#include <string.h>

static int start(void *state, hangar_plugin_ctx *ctx) {
    (void)state;
    (void)ctx;
    return -1; /* never called */
}

static void stop(void *state) {
    (void)state;
}

HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *host, hangar_plugin_v1 *out) {
    (void)host;
    memset(out, 0, sizeof *out);
    out->abi_version = 99u;
    out->struct_size = (uint32_t)sizeof *out;
    out->name = "ut_badabi";
    out->version = "9.9.9";
    out->start = start;
    out->stop = stop;
    return 0;
}
