// The telemetry plugin's pure logic: the configuration rules of kernel-api.md §2.5, the time
// bounds of the events query, body truncation, the bounded event ring and the event envelope.
// Nothing here talks to the host, so tests/unit links it without a server or a browser.
#pragma once

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::telemetry {

using json = nlohmann::json;

// Every configurable category (the order is the order of the rendered config).
const std::vector<std::string> &categories();
// Categories a CDP session collects; any of them on also makes `monitor` events flow.
bool is_cdp_category(std::string_view category);
// Every value of the events filter: the configurable ones and `monitor`.
bool is_filter_category(std::string_view category);

// The events filter of a query string: `category` and (0.131) `type`, each comma-separated or
// repeated (`x[]` too); the two are ANDed by the caller. A type is a name (lower-case letters
// and _); one no event has matches nothing. Bad values fail `v` naming the parameter. Without
// `categories`, a `category` parameter is ignored (the stream filters by type only).
void parse_event_filter(const std::vector<std::pair<std::string, std::string>> &query, hangar::Validation &v,
                        std::set<std::string> *categories, std::set<std::string> &types);

// The categories being captured; empty means capture is off.
using Selection = std::set<std::string>;
const Selection &default_selection();

// 0.131's `export.otlp` as sent: `{destination?: {id?|name?}, enabled?}`.
struct OtlpRequest {
    std::optional<bool> enabled;
    std::string destination_id, destination_name; // at most one set
    bool names_destination() const { return !destination_id.empty() || !destination_name.empty(); }
};

// A telemetry request object as sent (`{enabled?, browser?: {<category>: {enabled?}},
// export?: {otlp?}, storage?: {enabled?}}`).
struct ConfigRequest {
    std::optional<bool> enabled;
    std::vector<std::pair<std::string, bool>> categories; // as given, in order
    std::optional<OtlpRequest> otlp;                      // `export.otlp` given (not null)
    std::optional<bool> storage;                          // `storage.enabled` given
    // omitted, null or {}: "leave unchanged" on update, "no capture" on create. (Export and
    // storage alone leave the categories unchanged too.)
    bool empty() const { return !enabled && categories.empty(); }
};

// Validates a request object (null allowed). `field` names it in errors ("telemetry").
// Throws Error 400 naming the bad field: not an object, a non-boolean `enabled`, an unknown
// category, a category that is not {enabled?: boolean}, `enabled: false` with categories,
// an `export.otlp.destination` that is not {id} or {name}, `export.otlp.enabled: false` with a
// destination, a `storage` that is not {enabled?: boolean}.
ConfigRequest parse_request(const json &value, const std::string &field = "telemetry");

// Where a session's telemetry goes besides the live ring: an OTLP destination (by id; empty =
// none) and the archive (`storage`, default on).
struct ExportState {
    std::string destination;
    bool storage = true;
    bool operator==(const ExportState &) const = default;
};
// The export state after a create (`current` = {}) or an update, given the categories that will
// be captured and `resolved`, the id of the destination the request names (empty when it names
// none). Throws Error 400 naming the field: export without capture, `storage.enabled: false`
// without a destination, `storage` changed after create. Capture switched off ends export.
ExportState apply_export(const ExportState &current, const ConfigRequest &r, const Selection &capture, bool create,
                         const std::string &resolved, const std::string &field = "telemetry");

// Create (browser or pool lease baseline): layered onto the defaults.
Selection apply_create(const ConfigRequest &r);
// Update (browser PATCH, acquire override onto the pool baseline): merged onto `current`
// (or onto the defaults when nothing is captured); `enabled: true` rebuilds from the defaults.
Selection apply_update(const Selection &current, const ConfigRequest &r);

// The session's `telemetry` field: {browser: {<category>: {enabled}}} for every category, or
// null when nothing is captured.
// With `x`: `export: {otlp: {destination, enabled: true}}` while exporting and `storage:
// {enabled}` whenever either is not the default.
json render(const Selection &s, const ExportState &x = {});
Selection selection_from_json(const json &rendered);
ExportState export_from_json(const json &rendered);

// Unix microseconds now (event timestamps).
std::int64_t now_us();
// Whether a selection has a category the CDP collector serves.
bool any_cdp(const Selection &s);

// ---- the events query ---------------------------------------------------------------------------

// RFC 3339 ("2026-05-01T10:00:00Z", fractions and offsets allowed) or a Go-style duration
// before `now_us` ("5m", "1h30m", "90s", "250ms"). Returns Unix microseconds; nullopt if neither.
using hangar::parse_time_bound;

// ---- network bodies -----------------------------------------------------------------------------

inline constexpr std::size_t kStructuredBodyLimit = std::size_t{8} * 1024;
inline constexpr std::size_t kTextBodyLimit = std::size_t{4} * 1024;

enum class BodyKind { Structured, Text, Binary };
BodyKind body_kind(std::string_view mime_type);

struct Truncated {
    std::string text;
    bool truncated = false;
};
// Cuts `body` to the limit of its kind on a UTF-8 character boundary; nullopt for binaries.
std::optional<Truncated> truncate_body(std::string_view mime_type, std::string_view body);

// ---- connection and system events -----------------------------------------------------------

// A stable 16-hex-digit digest (FNV-1a 64): a live-view session id from its link, which is a
// capability and is never shown itself.
std::string digest_hex(std::string_view text);
// The host's relay close reason as cdp_disconnect's `reason` (client_close | upstream_changed |
// upstream_error | context_cancelled).
std::string disconnect_reason(std::string_view host_reason);
// An X-Kernel-Proxy-Error header value as proxy_error's `code`: one of the published codes, or
// "unknown" with `raw_code` set to the value lower-cased, [a-z0-9_] only, at most 64 characters
// (a hostile origin can send the header too, so what it says is bounded).
std::string proxy_error_code(std::string_view header_value, std::string &raw_code);
// The host and port a request URL's connection goes to (https/wss 443, http/ws 80 by default),
// IPv6 literals without brackets; nullopt for other schemes.
std::optional<std::pair<std::string, int>> url_endpoint(std::string_view url);

// The `oom_kill` counter of a cgroup's memory.events (v2) or memory.oom_control (v1) text.
std::optional<std::uint64_t> oom_kill_count(std::string_view text);
// What the kernel log says about one OOM kill: the "oom-kill:" summary line (constraint, the
// victim's cgroup, task and pid) and the "Killed process" line (pid, name, RSS).
struct KernelOomKill {
    long pid = 0;
    std::string name;
    std::string constraint; // none | memcg | cpuset | memory_policy
    std::string task_memcg; // the victim's cgroup as the kernel names it ("/hangar/<id>")
    long rss_kb = -1;       // anon + file + shmem, -1 until the "Killed process" line
};
// Folds one /dev/kmsg record into `kills` (keyed by pid); false when it is not about an OOM kill.
bool parse_kernel_oom_line(std::string_view record, std::map<long, KernelOomKill> &kills);

// ---- events -------------------------------------------------------------------------------------

// {category, type, ts, source{kind, event?}, data?, truncated?}
json make_event(std::string_view category, std::string_view type, std::int64_t ts_us, std::string_view source_kind,
                std::string_view source_event = {}, json data = nullptr, bool truncated = false);

// A bounded buffer of envelopes {seq, event}, seq counting from 1. Pushing into a full ring drops
// the oldest; events dropped before anyone took them (`ack`) are counted, and the next push
// after such a loss is preceded by one `monitor_dropped` event with the count.
class Ring {
public:
    explicit Ring(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

    // Returns the seq given to `event`.
    std::uint64_t push(json event, std::int64_t now_us);
    // Envelopes with seq > after, oldest first, at most `limit`.
    std::vector<json> after(std::uint64_t after, std::size_t limit) const;
    // Everything up to `seq` reached its destination: losing it later is not a drop.
    void ack(std::uint64_t seq) {
        if (seq > acked_) acked_ = seq;
    }
    std::uint64_t last_seq() const { return next_seq_ - 1; }
    std::uint64_t oldest_seq() const {
        return items_.empty() ? next_seq_ : items_.front().at("seq").get<std::uint64_t>();
    }
    std::size_t size() const { return items_.size(); }
    std::uint64_t dropped_total() const { return dropped_total_; }

private:
    void append(json event);
    std::size_t capacity_;
    std::deque<json> items_;
    std::uint64_t next_seq_ = 1;
    std::uint64_t acked_ = 0;
    std::uint64_t pending_drops_ = 0;
    std::uint64_t dropped_total_ = 0;
};

// ---- the archive --------------------------------------------------------------------------------

// One stored batch's category set, as a bit mask over filter categories (monitor included), so
// the query can skip batches without decoding them.
std::int64_t category_mask(const std::set<std::string> &categories);
std::int64_t category_bit(std::string_view category);

} // namespace hangar::telemetry
