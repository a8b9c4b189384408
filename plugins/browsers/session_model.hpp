// The browsers plugin's pure logic: request validation, ids, list queries, the BrowserSession wire
// object and the DevTools JSON rewrite. Nothing here talks to the host, so tests/unit links it
// without a running server (the only SDK piece used is the header-only hangar::Error).
#pragma once

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hangar::browsers {

using json = nlohmann::json;
using Tags = std::map<std::string, std::string>;

// ---- limits (contract §3.4 [14] and kernel-behaviour §2.2) ----------------------------------------
inline constexpr int kDefaultTimeoutSeconds = 60;
inline constexpr int kMinTimeoutSeconds = 10;
inline constexpr int kMaxTimeoutSeconds = 259200;
inline constexpr int kMinWidth = 320, kMaxWidth = 7680;
inline constexpr int kMinHeight = 240, kMaxHeight = 4320;
inline constexpr int kMaxRefreshRate = 240;
inline constexpr std::size_t kMaxTags = 50;
inline constexpr std::size_t kMaxTagKey = 255, kMaxTagValue = 1024;
inline constexpr std::size_t kMaxName = 255;
inline constexpr std::size_t kMaxStartUrl = 8192;
inline constexpr std::size_t kMaxPolicyBytes = std::size_t{5} * 1024 * 1024;
inline constexpr int kDefaultPageSize = 20, kMaxPageSize = 100;

struct Viewport {
    int width = 1920;
    int height = 1080;
    int refresh_rate = 25;
    bool operator==(const Viewport &) const = default;
};

// Kernel derives a missing rate from the resolution: bigger screens get lower rates.
int default_refresh_rate(int width, int height);

json viewport_json(const Viewport &v);

// ---- location, region, memory (kernel-api-0131 §2.1) ---------------------------------------------

// What a page sees without an override: the instance runs with TZ=UTC, and Chromium's own UI
// locale (Debian's chromium ships the en-US locale only).
inline constexpr const char *kDefaultTimezone = "UTC";
inline constexpr const char *kDefaultLocale = "en-US";
inline constexpr const char *kDefaultAcceptLanguages = "en-US,en"; // Chromium's own for en-US
inline constexpr const char *kZoneinfoDir = "/usr/share/zoneinfo";

// Session-only overrides; nullopt = the default.
struct Location {
    std::optional<std::string> timezone; // IANA name
    std::optional<std::string> locale;   // canonical BCP 47 tag
    bool operator==(const Location &) const = default;
};

// An IANA zone name with a TZif file under `zoneinfo` (what Chromium's ICU and the C library
// resolve TZ with); posix/, right/ and the link files that are no zone are refused.
bool known_timezone(std::string_view name, const std::string &zoneinfo = kZoneinfoDir);
// A BCP 47 language tag (language[-Script][-REGION][-variant...]) in its canonical case
// ("EN-us" -> "en-US"), or nullopt when malformed. Extensions and private use are refused.
std::optional<std::string> canonical_locale(std::string_view tag);

// BrowserLocation: the effective values and where each came from.
json location_json(const Location &l);

// BrowserMemory as the SDK names sizes: the largest of 1, 2, 4, 6, 8, 12, 16 GiB that `bytes`
// holds (at least 1GiB).
std::string memory_name(std::uint64_t bytes);
// A BrowserMemoryRequest ("1GiB" .. "16GiB") in bytes; nullopt for anything else.
std::optional<std::uint64_t> memory_request_bytes(std::string_view name);

// ---- requests ------------------------------------------------------------------------------------

// `profile: {id?, name?, save_changes?}` on create or update; id or name names it (the profiles
// plugin resolves it).
struct ProfileRef {
    std::optional<std::string> id;
    std::optional<std::string> name;
    bool save_changes = false;
};

// `proxy` (Python SDK 0.131's BrowserProxyConfig): exactly one of `mode` (direct: no proxy;
// default: the default for the browser's kind, which here is direct too, Hangar having no
// stealth proxy of its own), `id` or `name` of a project proxy.
struct ProxySelector {
    std::optional<std::string> mode;
    std::optional<std::string> id;
    std::optional<std::string> name;
};

struct CreateOptions {
    std::optional<std::string> name;
    std::optional<Tags> tags;
    int timeout_seconds = kDefaultTimeoutSeconds;
    bool headless = false;
    bool stealth = false;
    bool kiosk_mode = false;
    Viewport viewport;
    std::optional<std::string> start_url;
    std::optional<json> chrome_policy; // an object, already checked
    std::optional<ProfileRef> profile;
    // `extensions: [{id?|name?}]` as sent; the extensions plugin resolves them, except the
    // built-in `web-bot-auth` (request signing, the proxies plugin), which sets `sign`.
    json extensions = json::array();
    bool sign = false;
    // A proxy of the project (the proxies plugin checks it and routes the instance through it).
    std::optional<std::string> proxy_id;
    std::optional<std::string> invocation_id; // an app invocation it belongs to (ends with it)
    // `telemetry` as sent (its shape checked); the telemetry plugin applies the rules of §2.5.
    // `captures`: it would start capture, which needs that plugin.
    std::optional<json> telemetry;
    bool telemetry_captures = false;
    Location location;
    // As sent; the server holds them against what this node gives (its region, its instances'
    // memory limit) and refuses what it cannot honour.
    std::optional<std::string> region;
    std::optional<std::string> memory;
    // `network.allowed_hosts` as sent (an array; the proxies plugin judges its entries).
    std::optional<json> allowed_hosts;
    // `network.proxy_routes` as sent, its shape checked: [{hosts: [...], proxy: {id} | {name}}]
    // (the proxies plugin judges the hosts; the server resolves each proxy).
    std::optional<json> proxy_routes;
    // `network.private_hosts` as sent (an array, [] included; the proxies plugin judges it).
    std::optional<json> private_hosts;
    // `proxy`; the server turns an id or name into proxy_id (never sent together).
    std::optional<ProxySelector> proxy;
    // `vaults: [{id} | {name}]` as sent, its shape checked; the vaults plugin resolves them in the
    // project (kernel-api-0131 §2.2).
    std::optional<json> vaults;
};

// Validates a POST /browsers body. Throws Error 400 (every bad field in `details`) and, when the
// body is valid but asks for something no loaded plugin provides yet, Error 501.
CreateOptions parse_create(const json &body);

// The built-in library extension every project has: the browser signs its requests (Web Bot
// Auth, plugins/proxies). It is no extension folder, so nothing loads for it.
inline constexpr const char *kSigningExtension = "web-bot-auth";
bool is_signing_extension(const json &selector);

struct UpdateOptions {
    // Outer optional: the field was sent. Inner nullopt: clear it ("" or null).
    std::optional<std::optional<std::string>> name;
    std::optional<Tags> tags; // present = replace the whole set; empty clears
    std::optional<Viewport> viewport;
    bool force = false;
    std::optional<ProfileRef> profile;
    std::optional<std::string> proxy_id; // sent: swap to it live; "" = direct
    std::optional<ProxySelector> proxy;  // as on create; the server turns it into proxy_id
    std::optional<json> telemetry;       // as for create; omitted, null and {} change nothing
    bool telemetry_captures = false;
    // `location`: outer optional = the field was sent; inner nullopt = clear the override.
    std::optional<std::optional<std::string>> timezone;
    std::optional<std::optional<std::string>> locale;
    bool changes_location() const { return timezone.has_value() || locale.has_value(); }
    // `network`: the allowlist replaced (an array) or lifted (null), optionally only if it is
    // still at `expected_revision`; `mutation_id` makes a retry of the same change a no-op.
    struct NetworkUpdate {
        json allowed_hosts;
        std::optional<std::string> expected_revision;
        std::optional<std::string> mutation_id;
    };
    std::optional<NetworkUpdate> network;
    // Opened last, as on create (one tab, the others closed); "" or omitted: the tabs stay.
    std::optional<std::string> start_url;
};

// The routes the proxies plugin checked ([{hosts, proxy_id}]) as the wire shows them, each proxy
// by id: [{hosts, proxy: {id}}].
json proxy_routes_wire(const json &checked);

// BrowserNetworkConfig from the lists the proxies plugin checked (routes as the wire shows them),
// as a pool's config keeps it: no allowlist_state. Empty when there are none.
json network_config(const std::optional<json> &allowed_hosts, const std::optional<json> &proxy_routes_wire,
                    const std::optional<json> &private_hosts);

// A new browser's network: the same, with a fresh allowlist_state when it has an allowlist (a
// lessee's or a create's); none when empty.
std::optional<json> browser_network(const std::optional<json> &allowed_hosts,
                                    const std::optional<json> &proxy_routes_wire,
                                    const std::optional<json> &private_hosts);

// Validates a PATCH /browsers/{id_or_name} body (400, then 501 as for create).
UpdateOptions parse_update(const json &body);

// ---- sessions ------------------------------------------------------------------------------------

struct Session {
    std::string id;
    std::string org_id;
    std::string project_id;
    std::optional<std::string> name;
    std::int64_t created_ms = 0;
    std::optional<std::int64_t> deleted_ms;
    int timeout_seconds = kDefaultTimeoutSeconds;
    bool headless = false;
    bool stealth = false;
    bool kiosk_mode = false;
    Viewport viewport;
    std::optional<std::string> start_url;
    std::optional<Tags> tags;
    std::optional<json> chrome_policy;
    std::optional<std::string> profile_id;
    bool profile_save_changes = false;
    std::optional<std::string> pool_id;  // acquired from this browser pool
    std::optional<std::string> proxy_id; // the proxy its traffic goes through now (a swap changes it)
    std::optional<std::string> invocation_id;
    std::optional<std::string> node; // the node whose runtime holds its instance (nodes share a store)
    Location location;
    std::string region; // empty in rows older than regions: the node's region is shown
    std::string memory; // BrowserMemory of its instance's limit; empty in older rows
    // BrowserNetworkConfig as the wire shows it: {allowed_hosts?, allowlist_state?, proxy_routes?,
    // private_hosts?};
    // allowlist_state once the browser had an allowlist; none for a
    // browser created without an allowlist.
    std::optional<json> network;
    // The vaults attached at create, resolved: [{id, name}] (immutable after create).
    std::optional<json> vaults;

    bool active() const { return !deleted_ms.has_value(); }
};

// A row of browsers_sessions (as the store returns it) back into a Session.
Session session_from_row(const json &row);

struct Links {
    std::string cdp_ws_url;
    std::string webdriver_ws_url;
};

// The BrowserSession wire object (contract §2.1). `now_ms` feeds usage.uptime_ms of live sessions.
json render_session(const Session &s, const Links &links, std::int64_t now_ms);

// The overrides as the instance half reads them: {"timezone"?, "locale"?}.
json location_spec(const Location &l);

// The launch part of a session as the instance half needs it (what goes into the instance spec).
json make_instance_spec(const std::string &id, const CreateOptions &opts);

// ---- ids, names, time ----------------------------------------------------------------------------

inline std::string new_session_id() {
    return hangar::new_id();
}
inline bool looks_like_session_id(std::string_view s) {
    return hangar::looks_like_id(s);
}
using hangar::now_ms;
using hangar::rfc3339;

// ---- URLs ----------------------------------------------------------------------------------------

// "http://h:p" -> "ws://h:p", "https://h" -> "wss://h" (no trailing slash).
std::string ws_base(std::string_view http_base);
std::string cdp_ws_url(std::string_view ws_base, std::string_view token);
std::string webdriver_ws_url(std::string_view ws_base, std::string_view token);
// A page- or worker-level DevTools socket. The token travels in the path, not the query:
// Chromium answers 500 to /devtools/page/<id>?anything, and a relay keeps the client's query.
std::string target_ws_url(std::string_view ws_base, std::string_view token, std::string_view devtools_path);

// Rewrites Chromium's /json/version (object) or /json/list (array) so every webSocketDebuggerUrl
// comes back through Hangar; devtoolsFrontendUrl (Chromium's own port) is dropped.
json rewrite_devtools_json(const json &body, std::string_view ws_base, std::string_view token);

// ---- list queries --------------------------------------------------------------------------------

enum class StatusFilter { Active, Deleted, All };

struct ListQuery {
    StatusFilter status = StatusFilter::Active;
    std::optional<std::string> query;
    std::optional<std::string> region;
    std::vector<std::pair<std::string, std::string>> tags; // all must match exactly
    std::int64_t offset = 0;
    int limit = kDefaultPageSize;
};

using QueryLookup = hangar::QueryParam;

// `param` gives a decoded query parameter; `raw_query` is the still-encoded query string, needed
// for bracketed keys (the SDK sends tags%5Bteam%5D=backend).
ListQuery parse_list_query(const QueryLookup &param, std::string_view raw_query);

// Every tags[k]=v pair of a raw query string, decoded. Throws 400 on nested keys.
std::vector<std::pair<std::string, std::string>> parse_tag_filters(std::string_view raw_query);

// "true"/"1" -> true, "false"/"0"/"" -> false, anything else -> 400 naming `field`.
bool parse_bool_param(std::string_view field, const std::optional<std::string> &value, bool fallback);

// A LIKE pattern matching `text` anywhere, with %, _ and \ escaped (use with ESCAPE '\').
std::string like_contains(std::string_view text);

} // namespace hangar::browsers
