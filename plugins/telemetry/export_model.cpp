#include "export_model.hpp"

#include <hangar/resource.hpp>
#include <hangar/text.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>

namespace hangar::telemetry::otlp {

namespace {

// RFC 9110 tchar.
bool token(std::string_view s) {
    if (s.empty()) return false;
    return std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string::npos;
    });
}

// Visible ASCII, space and tab, and any UTF-8 byte: what a field value may hold (no CR/LF/NUL).
bool field_value(std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); });
}

} // namespace

std::string check_name(const json &value, const std::string &field) {
    if (!value.is_string()) throw Error::invalid(field, "must be a string");
    const auto &s = value.get_ref<const std::string &>();
    if (s.empty() || s.size() > 255) throw Error::invalid(field, "must be 1 to 255 characters");
    if (!field_value(s) || s.find('\t') != std::string::npos)
        throw Error::invalid(field, "must not contain control characters");
    if (hangar::looks_like_id(s))
        throw Error::invalid(field, "must not look like an id (24 lower-case letters/digits)");
    return s;
}

std::string check_endpoint(const json &value, const std::string &field) {
    if (!value.is_string()) throw Error::invalid(field, "must be a string");
    std::string s = value.get<std::string>();
    if (s.size() > 2048) throw Error::invalid(field, "must be at most 2048 characters");
    auto scheme_end = s.find("://");
    std::string scheme = scheme_end == std::string::npos ? "" : lower(s.substr(0, scheme_end));
    if (scheme != "http" && scheme != "https") throw Error::invalid(field, "must be an http or https URL");
    if (s.find_first_of("?#") != std::string::npos) throw Error::invalid(field, "must have no query or fragment");
    if (!field_value(s) || s.find_first_of(" \t") != std::string::npos)
        throw Error::invalid(field, "must not contain spaces or control characters");
    std::string rest = s.substr(scheme_end + 3);
    auto slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    std::string path = slash == std::string::npos ? "" : rest.substr(slash);
    if (authority.find('@') != std::string::npos)
        throw Error::invalid(field, "must not carry user info (put credentials in headers)");
    std::string host = authority;
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        if (close == std::string::npos) throw Error::invalid(field, "has a malformed IPv6 host");
        std::string port = host.substr(close + 1);
        if (!port.empty() && (port.front() != ':' || port.size() == 1 ||
                              port.substr(1).find_first_not_of("0123456789") != std::string::npos))
            throw Error::invalid(field, "has a malformed port");
        host = host.substr(1, close - 1);
    } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
        std::string port = host.substr(colon + 1);
        if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
            std::stoi(port) == 0 || std::stoi(port) > 65535)
            throw Error::invalid(field, "has a malformed port");
        host = host.substr(0, colon);
    }
    if (host.empty()) throw Error::invalid(field, "must name a host");
    while (!path.empty() && path.back() == '/')
        path.pop_back();
    for (const char *signal : {"/v1/logs", "/v1/traces", "/v1/metrics"})
        if (lower(path).ends_with(signal))
            throw Error::invalid(field, std::string("must be the collector's base URL without the signal path (drop ") +
                                            signal + "; Hangar appends it)");
    return scheme + "://" + authority + path;
}

std::string logs_url(const std::string &endpoint) {
    return endpoint + "/v1/logs";
}

Headers merge_headers(const Headers &current, const json &value, const std::string &field, bool patch) {
    if (value.is_null()) return current;
    if (!value.is_object()) throw Error::invalid(field, "must be an object of header names to values");
    static const std::set<std::string> reserved = {
        "connection", "content-encoding", "content-length",    "content-type", "expect", "host", "keep-alive",
        "te",         "trailer",          "transfer-encoding", "upgrade"};
    Headers out = current;
    std::set<std::string> seen;
    for (const auto &[name, v] : value.items()) {
        std::string at = field;
        at += '.';
        at += name;
        if (!token(name)) throw Error::invalid(at, "is not a valid header name");
        if (!seen.insert(lower(name)).second)
            throw Error::invalid(at, "is given twice with different spellings (header names ignore case)");
        if (reserved.count(lower(name)))
            throw Error::invalid(at, "is set by the exporter itself and cannot be configured");
        const std::string canonical = hangar::canonical_header_name(name);
        if (v.is_null()) {
            if (!patch) throw Error::invalid(at, "must be a string");
            out.erase(canonical);
            continue;
        }
        if (!v.is_string())
            throw Error::invalid(at, patch ? "must be a string, or null to delete it" : "must be a string");
        const auto &text = v.get_ref<const std::string &>();
        if (!field_value(text)) throw Error::invalid(at, "must not contain line breaks or control characters");
        out[canonical] = text;
    }
    std::size_t total = 0;
    for (const auto &[k, v] : out)
        total += k.size() + v.size();
    if (total > 8192) throw Error::invalid(field, "names and values together must stay within 8192 bytes");
    return out;
}

// ---- events as OTLP log records -----------------------------------------------------------------

json any_value(const json &v) {
    switch (v.type()) {
    case json::value_t::string:
        return {{"stringValue", v}};
    case json::value_t::boolean:
        return {{"boolValue", v}};
    case json::value_t::number_unsigned:
        // AnyValue's int_value is signed 64-bit: a larger count is only representable as a double.
        if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            return {{"doubleValue", v.get<double>()}};
        return {{"intValue", v.dump()}};
    case json::value_t::number_integer:
        return {{"intValue", v.dump()}};
    case json::value_t::number_float:
        return {{"doubleValue", v}};
    case json::value_t::array: {
        json values = json::array();
        for (const auto &e : v)
            values.push_back(any_value(e));
        return {{"arrayValue", {{"values", std::move(values)}}}};
    }
    case json::value_t::object: {
        json values = json::array();
        for (const auto &[k, e] : v.items())
            values.push_back({{"key", k}, {"value", any_value(e)}});
        return {{"kvlistValue", {{"values", std::move(values)}}}};
    }
    default:
        return json::object(); // an empty AnyValue
    }
}

namespace {

json attribute(std::string key, const json &value) {
    return {{"key", std::move(key)}, {"value", any_value(value)}};
}

// OTLP severity numbers: INFO 9, WARN 13, ERROR 17.
std::pair<int, const char *> severity(std::string_view type) {
    static const std::set<std::string_view> errors = {"console_error",       "page_crashed",
                                                      "service_crashed",     "system_oom_kill",
                                                      "monitor_init_failed", "monitor_reconnect_failed"};
    static const std::set<std::string_view> warnings = {"network_loading_failed", "proxy_error", "monitor_disconnected",
                                                        "monitor_dropped", "export_dropped"};
    if (errors.count(type)) return {17, "ERROR"};
    if (warnings.count(type)) return {13, "WARN"};
    return {9, "INFO"};
}

} // namespace

json log_record(const json &envelope) {
    const json &e = envelope.contains("event") ? envelope.at("event") : envelope;
    const std::string type = e.value("type", "");
    const std::int64_t ts_us = e.value("ts", std::int64_t{0});
    const auto [number, text] = severity(type);
    json attributes =
        json::array({attribute("event.name", type), attribute("kernel.telemetry.category", e.value("category", ""))});
    if (envelope.contains("seq")) attributes.push_back(attribute("kernel.telemetry.seq", envelope.at("seq")));
    if (auto s = e.find("source"); s != e.end() && s->is_object()) {
        if (s->contains("kind")) attributes.push_back(attribute("kernel.telemetry.source.kind", s->at("kind")));
        if (s->contains("event")) attributes.push_back(attribute("kernel.telemetry.source.event", s->at("event")));
    }
    if (e.value("truncated", false)) attributes.push_back(attribute("kernel.telemetry.truncated", true));
    // time_unix_nano is unsigned (fixed64): a clock before 1970 is no time at all.
    json record = {{"timeUnixNano", std::to_string(std::max<std::int64_t>(ts_us, 0) * 1000)},
                   {"severityNumber", number},
                   {"severityText", text},
                   {"eventName", type},
                   {"attributes", std::move(attributes)}};
    if (auto d = e.find("data"); d != e.end() && !d->is_null()) record["body"] = any_value(*d);
    return record;
}

json resource(const std::string &session_id, const std::string &project_id, const std::string &node) {
    json attributes =
        json::array({attribute("service.name", "hangar-browser"), attribute("kernel.browser.session_id", session_id),
                     attribute("kernel.project.id", project_id)});
    if (!node.empty()) attributes.push_back(attribute("hangar.node", node));
    return {{"attributes", std::move(attributes)}};
}

json logs_request(const std::vector<Record> &records, const std::string &node) {
    json resource_logs = json::array();
    std::map<std::string, std::size_t> index; // session → position in resource_logs
    for (const auto &r : records) {
        auto [it, fresh] = index.try_emplace(r.session_id, resource_logs.size());
        if (fresh)
            resource_logs.push_back({{"resource", resource(r.session_id, r.project_id, node)},
                                     {"scopeLogs", json::array({{{"scope", {{"name", "hangar.telemetry"}}},
                                                                 {"logRecords", json::array()}}})}});
        resource_logs[it->second]["scopeLogs"][0]["logRecords"].push_back(r.record);
    }
    return {{"resourceLogs", std::move(resource_logs)}};
}

// ---- the queue ----------------------------------------------------------------------------------

bool Queue::push(Record r, std::int64_t now_us) {
    auto pending = pending_drops_.find(r.session_id);
    const std::size_t needed = pending == pending_drops_.end() ? 1 : 2;
    if (items_.size() + needed > capacity_) {
        ++dropped_;
        ++pending_drops_[r.session_id];
        return false;
    }
    if (pending != pending_drops_.end()) {
        json note = {{"category", "monitor"},
                     {"type", "export_dropped"},
                     {"ts", now_us},
                     {"source", {{"kind", "kernel_api"}, {"event", "otlp_export"}}},
                     {"data", {{"count", pending->second}}}};
        items_.push_back({r.session_id, r.project_id, log_record(note)});
        pending_drops_.erase(pending);
    }
    items_.push_back(std::move(r));
    return true;
}

std::vector<Record> Queue::take(std::size_t n) {
    std::vector<Record> out;
    while (!items_.empty() && out.size() < n) {
        out.push_back(std::move(items_.front()));
        items_.pop_front();
    }
    return out;
}

std::size_t Queue::clear() {
    std::size_t n = items_.size();
    items_.clear();
    pending_drops_.clear();
    return n;
}

// ---- retries ------------------------------------------------------------------------------------

bool retryable_status(int status) {
    return status == 408 || status == 429 || status >= 500;
}

std::chrono::milliseconds backoff(int attempt, std::chrono::milliseconds base, std::chrono::milliseconds cap,
                                  double jitter, std::optional<int> retry_after_s) {
    std::int64_t ms = base.count();
    for (int i = 1; i < attempt && ms < cap.count(); ++i)
        ms *= 2;
    ms = std::min(ms, static_cast<std::int64_t>(cap.count()));
    ms -= static_cast<std::int64_t>(static_cast<double>(ms) * 0.25 * std::clamp(jitter, 0.0, 1.0));
    if (retry_after_s && *retry_after_s > 0)
        ms = std::max(
            ms, std::min(static_cast<std::int64_t>(*retry_after_s) * 1000, static_cast<std::int64_t>(cap.count())));
    return std::chrono::milliseconds(ms);
}

std::string error_class_of_status(int status) {
    if (status == 401 || status == 403) return "unauthorized";
    if (status == 404) return "not_found";
    if (status == 413) return "payload_too_large";
    if (status == 429) return "rate_limited";
    if (status >= 500) return "server_error";
    return "rejected";
}

} // namespace hangar::telemetry::otlp
