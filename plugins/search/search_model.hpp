// Web search's pure decisions (kernel-api-0131.md §1C): what a request may say, which provider
// serves it (the strategy against what the operator configured), how the portable parameters map
// onto a SearXNG query (native, emulated, dropped with a warning, or refused under strict_params),
// how a SearXNG JSON answer becomes results, and what retained content a contents request gets.
// Nothing here talks to the host or the network, so tests/unit links it.
#pragma once

#include <hangar/plugin.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace hangar::search {

using json = nlohmann::json;

// The providers the SDK names (ProviderTarget slugs), and Hangar's own self-hosted one.
const std::vector<std::string> &sdk_slugs();
inline constexpr const char *kSearxng = "searxng";
bool known_slug(const std::string &slug);

// What the operator set in etc/plugins.d/search.ini.
struct Settings {
    std::vector<std::string> order; // `auto` tries the available ones in this order
    std::string searxng_url;        // empty: SearXNG is not configured
    int searxng_cap = 20;           // results a SearXNG query returns at most
    std::set<std::string> keyed;    // paid providers the operator gave an API key for
    std::int64_t retention_ms = 24LL * 3600 * 1000;
};

// Whether `slug` can serve on this server, and if not, why (said in listings and warnings).
struct Availability {
    bool available = false;
    std::string reason;
};
Availability availability(const std::string &slug, const Settings &s);

struct Target {
    std::string provider;
    json options = json::object();
};

struct ContentOptions {
    std::string source = "auto"; // auto | provider | browser
    std::string format = "markdown";
    std::optional<std::int64_t> max_chars, max_age_hours, timeout_ms;
    std::optional<std::string> browser_id, browser_mode;
};

struct Query {
    std::string query;
    std::string strategy = "auto"; // auto | pinned | fallback
    std::vector<Target> targets;   // pinned: one; fallback: ordered; auto: provider_options (may be empty)
    std::set<std::string> fallback_on = {"error", "timeout"};
    std::optional<std::int64_t> max_results;
    std::optional<std::string> country, language, recency, start_date, end_date, safe_search;
    std::vector<std::string> include_domains, exclude_domains;
    bool strict = false, include_raw = false;
    std::optional<ContentOptions> content; // inline retrieval asked for
    std::optional<std::int64_t> timeout_ms;
};

// The body of POST /search, checked field by field (400 naming the field).
Query parse_query(const json &body);
ContentOptions parse_content_options(const json &value, const std::string &field);

// A warning of the response: {code, message, param?, provider?, result_id?}.
json warning(const std::string &code, const std::string &message, const std::string &param = "",
             const std::string &provider = "");

// The providers a query tries, in order, and the warnings about those passed over. Throws 400
// when none can serve (a pinned provider without a key, a chain of only unconfigured ones).
struct Plan {
    std::vector<Target> attempts;
    json warnings = json::array();
};
Plan plan(const Query &q, const Settings &s);

// One SearXNG request: the query string (without '?'), the number of results to keep, the
// post-filters it needs, and the warnings the mapping gave. Throws 400 under strict_params for a
// parameter SearXNG cannot honour exactly.
struct SearxngCall {
    std::string query_string;
    std::size_t keep = 10;
    std::vector<std::string> include_domains, exclude_domains;
    json warnings = json::array();
};
SearxngCall searxng_call(const Query &q, const json &options, int cap);

// A result as the search keeps it: the wire object and the provider's content, if it gave one.
struct Parsed {
    json results = json::array();
    std::vector<std::optional<std::string>> content; // per result: SearXNG's `content` snippet
    std::optional<std::string> answer;
    json raw; // the answer object, when include_raw
};
// Parses a SearXNG JSON answer defensively: throws std::invalid_argument if it is not one;
// drops results without an http(s) URL; caps strings; applies the domain post-filters; keeps at
// most `call.keep`, ranked from 1. Result ids come from `make_id`; `raw` only with include_raw.
Parsed parse_searxng(const std::string &body, const SearxngCall &call, const std::function<std::string()> &make_id,
                     bool include_raw);

// Whether `host` (a result URL's host) is `domain` or under it.
bool host_matches(const std::string &host, const std::string &domain);
std::string url_host(const std::string &url);

// The `content` object of a result (or of a contents response entry) from retained provider text.
json provider_content(const std::optional<std::string> &text, std::int64_t fetched_at_ms, const ContentOptions &o);

// The `content` of a result fetched through a Hangar browser, from what the browsers plugin's
// `browsers.page_text` service saw ({final_url?, http_status?, content_type?, net_error?,
// timed_out, text?, text_chars, readable, extractor_version, extraction_error?}): ok, blocked (403,
// 429, a refused host), timeout, unsupported_type (neither HTML nor text), extraction_failed (no
// text) or error, each failure with {code, message, retryable}. `max_chars` is what was asked
// (the page cap when absent); `truncated` when the page's text was longer.
json browser_content(const json &seen, const std::string &mode, const ContentOptions &o, std::int64_t fetched_at_ms);

// A failure's `content` with no page seen (the deadline passed before the result's turn, ...).
json failed_content(const std::string &status, const std::string &code, const std::string &message, bool retryable);

// The body of POST /search/{id}/contents: the selected result ids, in response order (400 for an
// unknown id, for both or neither of result_ids/limit), and the options.
struct ContentsRequest {
    std::vector<std::string> result_ids;
    ContentOptions options;
    std::optional<std::int64_t> timeout_ms;
};
ContentsRequest parse_contents(const json &body, const json &search);

// Whether a result's retained content serves `o` (source provider, or auto within max_age_hours).
bool retained_serves(const ContentOptions &o, bool has_text, std::int64_t fetched_at_ms, std::int64_t now_ms);

// GET /search/providers entries.
json provider_entry(const std::string &slug, const Settings &s);

} // namespace hangar::search
