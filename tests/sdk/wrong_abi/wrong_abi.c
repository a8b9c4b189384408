/* A plugin that claims a plugin ABI the host does not speak (99).
 *
 * The host must refuse it with a log line naming the plugin and the ABI, and carry on starting.
 * Plain C and only the SDK's C header, so it also shows the ABI needs no C++ at all. */
#include <hangar/plugin.h>

#include <string.h>

static int never_start(void *state, hangar_plugin_ctx *ctx) {
    (void)state;
    (void)ctx;
    return -1; /* must never be called: the host refuses us before start */
}

static void never_stop(void *state) {
    (void)state;
}

HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *host, hangar_plugin_v1 *out) {
    (void)host;
    memset(out, 0, sizeof *out);
    out->abi_version = 99u;
    out->struct_size = (uint32_t)sizeof *out;
    out->name = "wrong_abi";
    out->version = "0.0.1";
    out->start = never_start;
    out->stop = never_stop;
    return 0;
}
