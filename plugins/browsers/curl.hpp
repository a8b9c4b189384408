// curl through Chromium over CDP (curl.cpp); the request and answer shapes are curl_model.hpp.
#pragma once

#include "curl_model.hpp"

#include <string>

namespace hangar::browsers {

// Makes the request from a hidden tab of the Chromium on `port` (browser target `browser_ws_path`).
// Throws hangar::Error 502 (network failure, with Chromium's net error) or 504 (timeout_ms passed).
CurlResponse curl_through_chromium(int port, const std::string &browser_ws_path, const CurlRequest &r);

} // namespace hangar::browsers
