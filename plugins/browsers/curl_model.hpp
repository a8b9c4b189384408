// curl through the browser: what a request may ask for and how its answer is written, as pure
// logic (tests/curl_model_test.cpp). The CDP side is curl.cpp.
#pragma once

#include <hangar/plugin.hpp>
#include <hangar/text.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hangar::browsers {

inline constexpr int kCurlDefaultTimeoutMs = 30'000;
inline constexpr int kCurlMaxTimeoutMs = 300'000;

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct CurlRequest {
    std::string url;
    std::string method = "GET";
    HeaderList headers; // over the browser's own
    std::optional<std::string> body;
    bool base64_response = false;
    int timeout_ms = kCurlDefaultTimeoutMs;
};

// The JSON body of POST /browsers/{id}/curl. Throws a 400 naming each bad field.
CurlRequest parse_curl_request(const json &body);

// scheme://host[:port] of an http(s) URL, or nullopt when it is not one.
std::optional<std::string> http_origin(const std::string &url);

struct CurlResponse {
    int status = 0;
    HeaderList headers; // as received, repeated names repeated
    std::string body;   // bytes
    double duration_ms = 0;
    std::string final_url; // after redirects (the answered request's URL)
};

// {status, headers: {Name: [values...]}, body (UTF-8 with invalid bytes replaced, or base64), duration_ms}
json render_curl_response(const CurlResponse &r, bool base64);

// Bytes as valid UTF-8: every byte that does not start a well-formed sequence becomes U+FFFD.
std::string valid_utf8(std::string_view bytes);

} // namespace hangar::browsers
