// hangar::parse_multipart (sdk/include/hangar/multipart.hpp). Input: a boundary line, then the
// body. Every part must lie inside the body, and a refusal must be a 4xx hangar::Error.
#include "fake_request.hpp"

#include <hangar/multipart.hpp>

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char *>(data), size);
    auto nl = in.find('\n');
    if (nl == std::string_view::npos) return 0;
    hangar_request raw{"multipart/form-data; boundary=" + std::string(in.substr(0, nl)),
                       std::string(in.substr(nl + 1))};
    hangar::Request req(fuzz::host(), &raw);
    try {
        auto parts = hangar::parse_multipart(req);
        const char *begin = raw.body.data(), *end = begin + raw.body.size();
        for (const auto &p : parts)
            if (p.data.data() < begin || p.data.data() + p.data.size() > end) std::abort();
        (void)hangar::find_part(parts, "file");
    } catch (const hangar::Error &e) {
        if (e.status() < 400 || e.status() >= 500) std::abort();
    }
    return 0;
}
