/* ut_orphan: depends on a plugin that does not exist (ut_nowhere); loading it must fail,
 * naming both. */
#include <hangar/plugin.h>

#include <string.h>

static int start(void *state, hangar_plugin_ctx *ctx) {
    (void)state;
    (void)ctx;
    return 0;
}

static void stop(void *state) {
    (void)state;
}

HANGAR_EXPORT int hangar_plugin_init(const hangar_host_v1 *host, hangar_plugin_v1 *out) {
    if (!host || host->abi_version != HANGAR_ABI_VERSION) return -1;
    memset(out, 0, sizeof *out);
    out->abi_version = HANGAR_ABI_VERSION;
    out->struct_size = (uint32_t)sizeof *out;
    out->name = "ut_orphan";
    out->version = "0.0.1";
    out->depends = "ut_beta, ut_nowhere";
    out->start = start;
    out->stop = stop;
    return 0;
}
