// A hangar::Request over bytes, for the fuzz targets: a host function table that answers only
// the header and body calls the decoders make. A test double of the host's C ABI, because the
// real host (Poco's HTTP server) cannot sit under libFuzzer's in-process loop.
#pragma once

#include <hangar/plugin.hpp>

#include <string>
#include <string_view>

struct hangar_request {
    std::string content_type;
    std::string body;
};

namespace fuzz {

inline hangar_str as_str(const std::string &s) {
    return {s.data(), s.size()};
}

inline int req_header(hangar_request *req, hangar_str name, hangar_str *out) {
    std::string_view n(name.ptr, name.len);
    if (n != "Content-Type" || req->content_type.empty()) return -1;
    *out = as_str(req->content_type);
    return 0;
}

inline int req_body(hangar_request *req, hangar_str *out) {
    *out = as_str(req->body);
    return 0;
}

inline const hangar_host_v1 *host() {
    static const hangar_host_v1 table = [] {
        hangar_host_v1 t{};
        t.abi_version = HANGAR_ABI_VERSION;
        t.struct_size = sizeof(hangar_host_v1);
        t.req_header = req_header;
        t.req_body = req_body;
        return t;
    }();
    return &table;
}

} // namespace fuzz
