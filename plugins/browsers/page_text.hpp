// A page's readable text, fetched and extracted inside this instance's Chromium (instance role),
// for the search plugin's contents (`browsers.page_text`). See README.md ("Page text").
#pragma once

#include "curl.hpp"

#include <hangar/plugin.hpp>

#include <string>

namespace hangar::browsers {

inline constexpr const char *kPageTextExtractor = "innertext-1";
inline constexpr std::int64_t kPageTextMaxChars = 1 << 20; // the 1 MiB page read cap, in characters

struct PageTextRequest {
    std::string url;
    std::string mode = "render"; // render | curl
    std::string format = "markdown";
    int timeout_ms = 30'000;
    std::int64_t max_chars = kPageTextMaxChars;
};

// The JSON body of POST /chromium/page_text (and of the service). Throws a 400 naming the field.
PageTextRequest parse_page_text_request(const json &body);

// What the browser saw: {final_url?, http_status?, content_type?, net_error?, timed_out, text?,
// text_chars (before the cut), readable (an article/main element was found), extractor_version}.
// Never throws for what the page did (a refused host, a slow page): that is in the answer.
json page_text(int port, const std::string &ws_path, BrowserCurl &curl, const PageTextRequest &r);

} // namespace hangar::browsers
