/* The members of the ABI v1 tables as first released, in order (X-macros over the frozen
 * include/hangar/plugin.h). layout.c compiles them against the frozen header and
 * tests/unit/abi_v1_test.cpp against today's; each member must sit at the same offset with the same
 * size in both. Generated once from the frozen header, never edited. */
#define HANGAR_ABI_V1_HOST_MEMBERS(X)                                                                                  \
    X(abi_version)                                                                                                     \
    X(struct_size)                                                                                                     \
    X(buf_free)                                                                                                        \
    X(buf_alloc)                                                                                                       \
    X(log)                                                                                                             \
    X(config_get)                                                                                                      \
    X(role)                                                                                                            \
    X(route_add)                                                                                                       \
    X(req_method)                                                                                                      \
    X(req_path)                                                                                                        \
    X(req_param)                                                                                                       \
    X(req_query)                                                                                                       \
    X(req_query_string)                                                                                                \
    X(req_header)                                                                                                      \
    X(req_body)                                                                                                        \
    X(req_caller)                                                                                                      \
    X(req_id)                                                                                                          \
    X(req_base_url)                                                                                                    \
    X(res_status)                                                                                                      \
    X(res_header)                                                                                                      \
    X(res_body)                                                                                                        \
    X(res_file)                                                                                                        \
    X(res_error)                                                                                                       \
    X(sse_open)                                                                                                        \
    X(stream_send)                                                                                                     \
    X(stream_is_open)                                                                                                  \
    X(stream_close)                                                                                                    \
    X(relay_unix)                                                                                                      \
    X(relay_tcp)                                                                                                       \
    X(ws_reject)                                                                                                       \
    X(store_exec)                                                                                                      \
    X(blob_put)                                                                                                        \
    X(blob_path)                                                                                                       \
    X(blob_delete)                                                                                                     \
    X(service_add)                                                                                                     \
    X(service_call)                                                                                                    \
    X(timer_start)                                                                                                     \
    X(timer_cancel)                                                                                                    \
    X(activity_begin)                                                                                                  \
    X(activity_end)                                                                                                    \
    X(activity_idle_ms)                                                                                                \
    X(token_sign)                                                                                                      \
    X(token_verify)                                                                                                    \
    X(instance_start)                                                                                                  \
    X(instance_stop)                                                                                                   \
    X(instance_call)                                                                                                   \
    X(instance_socket)                                                                                                 \
    X(instance_spec)

#define HANGAR_ABI_V1_PLUGIN_MEMBERS(X)                                                                                \
    X(abi_version)                                                                                                     \
    X(struct_size)                                                                                                     \
    X(name)                                                                                                            \
    X(version)                                                                                                         \
    X(depends)                                                                                                         \
    X(migrations)                                                                                                      \
    X(migration_count)                                                                                                 \
    X(state)                                                                                                           \
    X(start)                                                                                                           \
    X(stop)
