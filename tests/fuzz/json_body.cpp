// JSON request decoding: hangar::Request::json_body (every plugin's body parser), then the
// browsers plugin's typed decoders of that object (create, update, curl). Bad input must end as
// a 4xx hangar::Error (or 501 not_implemented for an option Hangar lacks, such as a proxy_id),
// never another exception or a crash.
#include "fake_request.hpp"

#include "curl_model.hpp"
#include "session_model.hpp"

#include <cstdint>
#include <cstdlib>

namespace {

template <typename F> void expect_4xx(F &&f) {
    try {
        f();
    } catch (const hangar::Error &e) {
        if ((e.status() < 400 || e.status() >= 500) && !(e.status() == 501 && e.code() == "not_implemented"))
            std::abort();
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    hangar_request raw{"application/json", std::string(reinterpret_cast<const char *>(data), size)};
    hangar::Request req(fuzz::host(), &raw);
    expect_4xx([&] {
        auto body = req.json_body(true);
        expect_4xx([&] { (void)hangar::browsers::parse_create(body); });
        expect_4xx([&] { (void)hangar::browsers::parse_update(body); });
        expect_4xx([&] { (void)hangar::browsers::parse_curl_request(body); });
    });
    return 0;
}
