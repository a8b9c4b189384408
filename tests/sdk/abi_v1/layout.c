/* The layout of the ABI v1 tables as first released: compiled against the frozen header
 * (include/hangar/plugin.h) only, and compared with today's header by tests/unit/abi_v1_test.cpp. */
#include "members.h"

#include <hangar/plugin.h>

#include <stddef.h>

#define HANGAR_OFFSET_OF_HOST(name) offsetof(hangar_host_v1, name),
#define HANGAR_SIZE_OF_HOST(name) sizeof(((hangar_host_v1 *)0)->name),
#define HANGAR_OFFSET_OF_PLUGIN(name) offsetof(hangar_plugin_v1, name),
#define HANGAR_SIZE_OF_PLUGIN(name) sizeof(((hangar_plugin_v1 *)0)->name),

const size_t hangar_abi_v1_host_offsets[] = {HANGAR_ABI_V1_HOST_MEMBERS(HANGAR_OFFSET_OF_HOST)};
const size_t hangar_abi_v1_host_sizes[] = {HANGAR_ABI_V1_HOST_MEMBERS(HANGAR_SIZE_OF_HOST)};
const size_t hangar_abi_v1_plugin_offsets[] = {HANGAR_ABI_V1_PLUGIN_MEMBERS(HANGAR_OFFSET_OF_PLUGIN)};
const size_t hangar_abi_v1_plugin_sizes[] = {HANGAR_ABI_V1_PLUGIN_MEMBERS(HANGAR_SIZE_OF_PLUGIN)};
const size_t hangar_abi_v1_host_size = sizeof(hangar_host_v1);
const size_t hangar_abi_v1_plugin_size = sizeof(hangar_plugin_v1);
/* Values a compiled plugin carries inside it. */
const unsigned hangar_abi_v1_constants[] = {HANGAR_ABI_VERSION, HANGAR_ROLE_SERVER,  HANGAR_ROLE_INSTANCE,
                                            HANGAR_LOG_DEBUG,   HANGAR_LOG_INFO,     HANGAR_LOG_WARN,
                                            HANGAR_LOG_ERROR,   HANGAR_ROUTE_PUBLIC, HANGAR_ROUTE_STREAMING,
                                            sizeof(hangar_str), sizeof(hangar_buf),  sizeof(hangar_migration)};
