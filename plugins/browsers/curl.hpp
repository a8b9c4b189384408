// curl through Chromium over CDP (curl.cpp); the request and answer shapes are curl_model.hpp.
#pragma once

#include "curl_model.hpp"

#include <hangar/cdp.hpp>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace hangar::browsers {

// Makes requests from hidden tabs of the instance's Chromium. A tab that answered cleanly is kept
// for the next request (at most `keep` of them, each closed after `idle` without use), so a
// request to an origin a kept tab is already on costs one fetch(), not a tab and a navigation.
class BrowserCurl {
public:
    BrowserCurl(std::size_t keep, std::chrono::milliseconds idle);
    BrowserCurl(const BrowserCurl &) = delete;
    BrowserCurl &operator=(const BrowserCurl &) = delete;
    ~BrowserCurl();

    // Through the Chromium on `port` (browser target `browser_ws_path`; a kept tab of an earlier
    // Chromium is never used). Throws hangar::Error 502 (network failure, with Chromium's net
    // error) or 504 (timeout_ms passed).
    CurlResponse request(int port, const std::string &browser_ws_path, const CurlRequest &r);

private:
    struct Tab;
    std::unique_ptr<Tab> take(int port, const std::string &browser_ws_path, const std::string &origin);
    void give_back(std::unique_ptr<Tab> tab);
    void close_idle(const std::stop_token &stop);

    std::size_t keep_;
    std::chrono::milliseconds idle_;
    std::mutex mutex_;
    std::condition_variable_any wake_;
    std::vector<std::unique_ptr<Tab>> kept_;
    std::jthread closer_; // last: stops (and joins) before the tabs go
};

} // namespace hangar::browsers
