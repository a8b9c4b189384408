// OTLP export's pure logic (kernel-api-0131.md §1E): the rules of a destination (name, endpoint,
// header map and its per-key merge), telemetry events as OTLP log records and their two OTLP/HTTP
// encodings (JSON, binary protobuf), the bounded queue that drops with a count instead of growing, and the retry rules.
// Nothing here talks to the host or the network, so tests/unit links it.
#pragma once

#include <hangar/plugin.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::telemetry::otlp {

using json = nlohmann::json;

// ---- destinations -------------------------------------------------------------------------------

// A destination's name: 1-255 characters, no control characters, not shaped like an id (a name
// stands in for the id in paths and in `telemetry.export.otlp.destination`).
std::string check_name(const json &value, const std::string &field);
// The collector's base URL: http or https, a host, no user info, query or fragment, and no
// signal path (`/v1/logs`, `/v1/traces`, `/v1/metrics`: Hangar appends it). Returned without a
// trailing slash. Whether its addresses may be dialled is the egress policy's question.
std::string check_endpoint(const json &value, const std::string &field);
// Where logs go: `<endpoint>/v1/logs`.
std::string logs_url(const std::string &endpoint);

// Header names as Kernel returns them (hangar::canonical_header_name: `x-api-key` → `X-Api-Key`).
using Headers = std::map<std::string, std::string>; // canonical name → value
// Headers on create (`map<str,str>`) or a PATCH's per-key merge onto `current` (a string sets,
// null deletes). Names must be HTTP tokens, values printable (no CR/LF), one name may not come
// twice in one request under two spellings, names the exporter sets itself (Content-Type,
// Content-Length, Host, ...) are refused, and names + values together stay within 8192 bytes.
Headers merge_headers(const Headers &current, const json &value, const std::string &field, bool patch);

// ---- events as OTLP log records -----------------------------------------------------------------

// A JSON value as an OTLP AnyValue (proto3 JSON mapping: 64-bit integers as strings).
json any_value(const json &value);
// One archived envelope {seq, event} as an OTLP LogRecord: timeUnixNano from the event's µs
// `ts`, eventName = the type, severity from the type, the event's `data` as the body, and the
// category, type, seq, source and truncation as attributes.
json log_record(const json &envelope);
// The resource of one session's records: service.name `hangar-browser`, the browser session id,
// the project id, and the node that exported them.
json resource(const std::string &session_id, const std::string &project_id, const std::string &node);

// A record waiting in a destination's queue.
struct Record {
    std::string session_id, project_id;
    json record; // an OTLP LogRecord
};
// An ExportLogsServiceRequest (OTLP/HTTP JSON) for `records`, one ResourceLogs per session in
// the order first seen.
json logs_request(const std::vector<Record> &records, const std::string &node);

// ---- OTLP/HTTP encodings (otlp_protobuf.cpp) ----------------------------------------------------

// How requests go on the wire: the operator's `export_encoding`. Binary protobuf is what the
// OpenTelemetry SDKs send by default (README, "Encodings").
enum class Encoding { protobuf, json };
// `protobuf` or `json`; nullopt for anything else.
std::optional<Encoding> parse_encoding(std::string_view text);
// `application/x-protobuf` or `application/json`, for the request and what the answer carries.
const char *content_type(Encoding encoding);
// The body of a request: logs_request's OTLP JSON as it is, or the same ExportLogsServiceRequest
// serialized as protobuf (that JSON set onto the message by proto3's JSON mapping: it has no
// trace or span ids, OTLP JSON's one departure). Text that is not UTF-8 becomes U+FFFD in both.
// Throws std::runtime_error when the JSON does not fit the schema (a bug, never tenant input).
std::string encode_request(const json &request, Encoding encoding);
// A protobuf ExportLogsServiceRequest back as OTLP JSON (enums as numbers, as logs_request has
// them); throws std::runtime_error when the bytes are not one. What a collector would read: tests.
json decode_protobuf_request(std::string_view bytes);
// A protobuf ExportLogsServiceResponse from OTLP JSON (tests: what a collector answers).
std::string encode_protobuf_response(const json &response);
// How many records a 2xx answer says the collector rejected (`partial_success`,
// ExportLogsServiceResponse in the request's encoding). An empty or undecodable body rejects none.
std::uint64_t rejected_records(std::string_view body, Encoding encoding);

// ---- the queue ----------------------------------------------------------------------------------

// A destination's queue, bounded in records. A push into a full queue drops the new record and
// counts it (per session too); the next record of that session admitted later is preceded by
// one `export_dropped {count}` record, so the collector sees where the gap is.
class Queue {
public:
    explicit Queue(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}
    // False when the record was dropped.
    bool push(Record r, std::int64_t now_us);
    // Up to `n` records from the front.
    std::vector<Record> take(std::size_t n);
    std::size_t size() const { return items_.size(); }
    std::size_t capacity() const { return capacity_; }
    std::uint64_t dropped() const { return dropped_; }
    // Empties the queue (its destination went away); returns how many records it held.
    std::size_t clear();

private:
    std::size_t capacity_;
    std::deque<Record> items_;
    std::map<std::string, std::uint64_t> pending_drops_; // session → records dropped, not told yet
    std::uint64_t dropped_ = 0;
};

// ---- retries ------------------------------------------------------------------------------------

// Whether an HTTP answer is worth sending the same batch again (OTLP/HTTP: 429, 502, 503, 504;
// Hangar also retries 408 and other 5xx, as a collector restarting behind a proxy answers them).
bool retryable_status(int status);
// The wait before attempt `attempt` (1 = the first retry): base·2^(attempt-1), capped, with up to
// a quarter less at random (`jitter` in [0,1)) so many sessions' exporters do not retry together.
// A server's Retry-After (seconds) wins when larger, up to the cap.
std::chrono::milliseconds backoff(int attempt, std::chrono::milliseconds base, std::chrono::milliseconds cap,
                                  double jitter, std::optional<int> retry_after_s = std::nullopt);
// The sanitized class of a failed delivery that a destination shows as `last_error`: never a
// response body, a URL or a header value.
std::string error_class_of_status(int status);

} // namespace hangar::telemetry::otlp
