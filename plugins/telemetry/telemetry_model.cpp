#include "telemetry_model.hpp"

#include <hangar/resource.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>
#include <set>

namespace hangar::telemetry {

const std::vector<std::string> &categories() {
    // Appended only: an index is a bit of the stored batches' category masks.
    static const std::vector<std::string> all = {"captcha", "connection", "console",    "control", "interaction",
                                                 "network", "page",       "screenshot", "system",  "platform"};
    return all;
}

bool is_cdp_category(std::string_view c) {
    return c == "console" || c == "network" || c == "page" || c == "interaction" || c == "screenshot";
}

bool is_filter_category(std::string_view c) {
    return c == "monitor" || std::find(categories().begin(), categories().end(), c) != categories().end();
}

void parse_event_filter(const std::vector<std::pair<std::string, std::string>> &query, hangar::Validation &v,
                        std::set<std::string> *categories, std::set<std::string> &types) {
    for (const auto &t : hangar::query_list(query, "type")) {
        if (t.size() <= 64 &&
            std::all_of(t.begin(), t.end(), [](unsigned char ch) { return std::islower(ch) || ch == '_'; }))
            types.insert(t);
        else
            v.fail("type", "\"" + t + "\" is not an event type (lower-case letters and _)");
    }
    if (!categories) return;
    for (const auto &c : hangar::query_list(query, "category")) {
        if (is_filter_category(c))
            categories->insert(c);
        else
            v.fail("category", "unknown category \"" + c + "\"");
    }
}

const Selection &default_selection() {
    static const Selection defaults = {"control", "connection", "system", "captcha"};
    return defaults;
}

namespace {
// "<parent>.<key>": the field an error names.
std::string member(const std::string &parent, std::string_view key) {
    std::string out = parent;
    out += '.';
    out += key;
    return out;
}
} // namespace

ConfigRequest parse_request(const json &value, const std::string &field) {
    ConfigRequest r;
    if (value.is_null()) return r;
    if (!value.is_object()) throw Error::invalid(field, "must be an object {enabled?, browser?}");
    for (const auto &[key, _] : value.items())
        if (key != "enabled" && key != "browser" && key != "export" && key != "storage")
            throw Error::invalid(member(field, key), "is not a telemetry setting");
    if (auto x = value.find("export"); x != value.end() && !x->is_null()) {
        const std::string xf = member(field, "export");
        if (!x->is_object()) throw Error::invalid(xf, "must be an object {otlp?}");
        for (const auto &[key, _] : x->items())
            if (key != "otlp") throw Error::invalid(member(xf, key), "is not an export setting (otlp)");
        if (auto o = x->find("otlp"); o != x->end() && !o->is_null()) {
            const std::string of = member(xf, "otlp");
            if (!o->is_object()) throw Error::invalid(of, "must be an object {destination?, enabled?}");
            OtlpRequest otlp;
            for (const auto &[key, v] : o->items()) {
                if (key == "enabled") {
                    if (v.is_null()) continue;
                    if (!v.is_boolean()) throw Error::invalid(member(of, key), "must be a boolean");
                    otlp.enabled = v.get<bool>();
                } else if (key == "destination") {
                    if (v.is_null()) continue;
                    const std::string df = member(of, key);
                    if (!v.is_object()) throw Error::invalid(df, "must be an object {id} or {name}");
                    for (const auto &[k, s] : v.items()) {
                        if (k != "id" && k != "name") throw Error::invalid(member(df, k), "is not id or name");
                        if (s.is_null()) continue;
                        if (!s.is_string() || s.get_ref<const std::string &>().empty())
                            throw Error::invalid(member(df, k), "must be a non-empty string");
                        (k == "id" ? otlp.destination_id : otlp.destination_name) = s.get<std::string>();
                    }
                    if (otlp.destination_id.empty() == otlp.destination_name.empty())
                        throw Error::invalid(df, "give exactly one of id and name");
                } else {
                    throw Error::invalid(member(of, key), "is not an otlp setting (destination, enabled)");
                }
            }
            if (otlp.names_destination() && otlp.enabled == false)
                throw Error::invalid(member(of, "enabled"), "false cannot be combined with a destination");
            r.otlp = std::move(otlp);
        }
    }
    if (auto st = value.find("storage"); st != value.end() && !st->is_null()) {
        const std::string sf = member(field, "storage");
        if (!st->is_object()) throw Error::invalid(sf, "must be an object {enabled?}");
        for (const auto &[key, v] : st->items()) {
            if (key != "enabled") throw Error::invalid(member(sf, key), "is not a storage setting (enabled)");
            if (v.is_null()) continue;
            if (!v.is_boolean()) throw Error::invalid(member(sf, key), "must be a boolean");
            r.storage = v.get<bool>();
        }
    }
    if (auto e = value.find("enabled"); e != value.end() && !e->is_null()) {
        if (!e->is_boolean()) throw Error::invalid(member(field, "enabled"), "must be a boolean");
        r.enabled = e->get<bool>();
    }
    if (auto b = value.find("browser"); b != value.end() && !b->is_null()) {
        if (!b->is_object()) throw Error::invalid(member(field, "browser"), "must be an object of categories");
        for (const auto &[cat, cfg] : b->items()) {
            const std::string name = member(member(field, "browser"), cat);
            if (std::find(categories().begin(), categories().end(), cat) == categories().end())
                throw Error::invalid(name, "is not a telemetry category (captcha, connection, console, control, "
                                           "interaction, network, page, platform, screenshot, system)");
            if (cfg.is_null()) continue;
            if (!cfg.is_object()) throw Error::invalid(name, "must be {enabled?: boolean}");
            bool on = true; // a category named without `enabled` is asked for
            for (const auto &[k, v] : cfg.items()) {
                if (k != "enabled") throw Error::invalid(member(name, k), "is not a category setting");
                if (v.is_null()) continue;
                if (!v.is_boolean()) throw Error::invalid(member(name, "enabled"), "must be a boolean");
                on = v.get<bool>();
            }
            r.categories.emplace_back(cat, on);
        }
    }
    if (r.enabled == false && !r.categories.empty())
        throw Error::invalid(field, "enabled: false cannot be combined with category settings");
    return r;
}

namespace {
Selection layered(Selection base, const ConfigRequest &r) {
    for (const auto &[cat, on] : r.categories) {
        if (on)
            base.insert(cat);
        else
            base.erase(cat);
    }
    return base;
}
} // namespace

Selection apply_create(const ConfigRequest &r) {
    if (r.empty() || r.enabled == false) return {};
    return layered(default_selection(), r);
}

Selection apply_update(const Selection &current, const ConfigRequest &r) {
    if (r.empty()) return current;
    if (r.enabled == false) return {};
    if (r.enabled == true) return layered(default_selection(), r);
    return layered(current.empty() ? default_selection() : current, r);
}

ExportState apply_export(const ExportState &current, const ConfigRequest &r, const Selection &capture, bool create,
                         const std::string &resolved, const std::string &field) {
    ExportState next = create ? ExportState{} : current;
    if (r.storage) {
        if (!create && *r.storage != current.storage)
            throw Error::invalid(member(member(field, "storage"), "enabled"), "cannot be changed after create");
        next.storage = *r.storage;
    }
    if (r.otlp) {
        if (r.otlp->names_destination())
            next.destination = resolved;
        else if (r.otlp->enabled == false)
            next.destination.clear();
        else if (r.otlp->enabled == true && next.destination.empty())
            throw Error::invalid(member(member(field, "export"), "otlp.destination"),
                                 "is required to enable export (no destination is selected)");
    }
    if (capture.empty()) {
        // Naming a destination for a session that captures nothing is a mistake worth a 400;
        // stopping capture (enabled: false) ends export with it.
        if (r.otlp && r.otlp->names_destination())
            throw Error::invalid(member(member(field, "export"), "otlp"), "requires telemetry capture to be enabled");
        next.destination.clear();
    }
    if (!capture.empty() && !next.storage && next.destination.empty())
        throw Error::invalid(member(member(field, "storage"), "enabled"),
                             "false requires an OTLP export destination (telemetry.export.otlp.destination)");
    return next;
}

json render(const Selection &s, const ExportState &x) {
    if (s.empty()) return nullptr;
    json browser = json::object();
    for (const auto &c : categories())
        browser[c] = {{"enabled", s.count(c) > 0}};
    json out = {{"browser", browser}};
    if (!x.destination.empty()) out["export"] = {{"otlp", {{"destination", x.destination}, {"enabled", true}}}};
    if (!x.destination.empty() || !x.storage) out["storage"] = {{"enabled", x.storage}};
    return out;
}

ExportState export_from_json(const json &rendered) {
    ExportState x;
    if (!rendered.is_object()) return x;
    if (auto e = rendered.find("export"); e != rendered.end() && e->is_object()) {
        const json otlp = e->value("otlp", json::object());
        if (otlp.is_object() && otlp.value("enabled", false) && otlp.value("destination", json()).is_string())
            x.destination = otlp.at("destination").get<std::string>();
    }
    if (auto st = rendered.find("storage"); st != rendered.end() && st->is_object())
        x.storage = st->value("enabled", true);
    return x;
}

Selection selection_from_json(const json &rendered) {
    Selection s;
    if (!rendered.is_object()) return s;
    auto b = rendered.find("browser");
    if (b == rendered.end() || !b->is_object()) return s;
    for (const auto &[cat, cfg] : b->items())
        if (cfg.is_object() && cfg.value("enabled", false)) s.insert(cat);
    return s;
}

// Time bounds (`since`/`until`): hangar::parse_time_bound in the SDK's resource.hpp.

std::int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

bool any_cdp(const Selection &s) {
    return std::any_of(s.begin(), s.end(), [](const std::string &c) { return is_cdp_category(c); });
}

// ---- bodies -------------------------------------------------------------------------------------

BodyKind body_kind(std::string_view mime) {
    std::string m(mime.substr(0, mime.find(';')));
    std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    while (!m.empty() && m.back() == ' ')
        m.pop_back();
    if (m == "application/json" || m.ends_with("+json") || m == "application/xml" || m == "text/xml" ||
        m.ends_with("+xml") || m == "application/x-www-form-urlencoded")
        return BodyKind::Structured;
    if (m.starts_with("text/") || m == "application/javascript" || m == "application/ecmascript" ||
        m == "application/x-javascript")
        return BodyKind::Text;
    return BodyKind::Binary;
}

std::optional<Truncated> truncate_body(std::string_view mime, std::string_view body) {
    BodyKind kind = body_kind(mime);
    if (kind == BodyKind::Binary) return std::nullopt;
    std::size_t limit = kind == BodyKind::Structured ? kStructuredBodyLimit : kTextBodyLimit;
    if (body.size() <= limit) return Truncated{std::string(body), false};
    std::size_t cut = limit;
    // Back off continuation bytes (10xxxxxx) so a character is never split.
    while (cut > 0 && (static_cast<unsigned char>(body[cut]) & 0xC0) == 0x80)
        --cut;
    return Truncated{std::string(body.substr(0, cut)), true};
}

// ---- events -------------------------------------------------------------------------------------

json make_event(std::string_view category, std::string_view type, std::int64_t ts_us, std::string_view source_kind,
                std::string_view source_event, json data, bool truncated) {
    json source = {{"kind", source_kind}};
    if (!source_event.empty()) source["event"] = source_event;
    json e = {{"category", category}, {"type", type}, {"ts", ts_us}, {"source", std::move(source)}};
    if (!data.is_null()) e["data"] = std::move(data);
    if (truncated) e["truncated"] = true;
    return e;
}

void Ring::append(json event) {
    if (items_.size() >= capacity_) {
        auto seq = items_.front().at("seq").get<std::uint64_t>();
        if (seq > acked_) {
            ++pending_drops_;
            ++dropped_total_;
        }
        items_.pop_front();
    }
    items_.push_back({{"seq", next_seq_++}, {"event", std::move(event)}});
}

std::uint64_t Ring::push(json event, std::int64_t now_us) {
    if (pending_drops_ > 0) {
        json note = make_event("monitor", "monitor_dropped", now_us, "local_process", {}, {{"count", pending_drops_}});
        pending_drops_ = 0;
        append(std::move(note));
    }
    append(std::move(event));
    return next_seq_ - 1;
}

std::vector<json> Ring::after(std::uint64_t after, std::size_t limit) const {
    std::vector<json> out;
    if (items_.empty()) return out;
    std::uint64_t first = items_.front().at("seq").get<std::uint64_t>();
    std::size_t start = after < first ? 0 : static_cast<std::size_t>(after - first + 1);
    for (std::size_t i = start; i < items_.size() && out.size() < limit; ++i)
        out.push_back(items_[i]);
    return out;
}

std::int64_t category_bit(std::string_view category) {
    if (category == "monitor") return std::int64_t{1} << 15;
    auto it = std::find(categories().begin(), categories().end(), category);
    return it == categories().end() ? 0 : std::int64_t{1} << (it - categories().begin());
}

std::int64_t category_mask(const std::set<std::string> &cats) {
    std::int64_t m = 0;
    for (const auto &c : cats)
        m |= category_bit(c);
    return m;
}

// ---- connection and system events -----------------------------------------------------------

std::string digest_hex(std::string_view text) {
    std::uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : text) {
        h ^= c;
        h *= 1099511628211ULL;
    }
    static const char *const kHex = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 15; i >= 0; --i, h >>= 4)
        out[static_cast<std::size_t>(i)] = kHex[h & 0xf];
    return out;
}

std::string disconnect_reason(std::string_view host_reason) {
    if (host_reason == "client_close" || host_reason == "client_error") return "client_close";
    // Chromium's side ended: it restarted (or the session is going away); the client reconnects.
    if (host_reason == "upstream_close") return "upstream_changed";
    if (host_reason == "upstream_error") return "upstream_error";
    return "context_cancelled"; // the server is stopping
}

std::string proxy_error_code(std::string_view header_value, std::string &raw_code) {
    static const std::set<std::string, std::less<>> known = {"destination_blocked",    "destination_route_unavailable",
                                                             "network_policy_denied",  "provider_blacklisted",
                                                             "provider_unreachable",   "provider_rejected",
                                                             "origin_tls_timeout",     "origin_response_incomplete",
                                                             "proxy_unavailable",      "restricted_route_unavailable",
                                                             "upstream_timeout",       "upstream_dns_failure",
                                                             "upstream_connect_failed"};
    auto first = header_value.find_first_not_of(" \t");
    auto last = header_value.find_last_not_of(" \t");
    std::string_view trimmed =
        first == std::string_view::npos ? std::string_view{} : header_value.substr(first, last - first + 1);
    if (known.count(trimmed)) {
        raw_code.clear();
        return std::string(trimmed);
    }
    constexpr std::size_t kRawMax = 64;
    raw_code.clear();
    for (char c : trimmed.substr(0, kRawMax)) {
        char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        raw_code += (std::isalnum(static_cast<unsigned char>(l)) || l == '_') ? l : '_';
    }
    return "unknown";
}

std::optional<std::pair<std::string, int>> url_endpoint(std::string_view url) {
    auto colon = url.find("://");
    if (colon == std::string_view::npos) return std::nullopt;
    std::string scheme(url.substr(0, colon));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    int port = scheme == "https" || scheme == "wss" ? 443 : scheme == "http" || scheme == "ws" ? 80 : 0;
    if (!port) return std::nullopt;
    std::string_view rest = url.substr(colon + 3);
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (auto at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
    std::string_view host = rest;
    std::string_view port_text;
    if (!rest.empty() && rest.front() == '[') {
        auto close = rest.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        host = rest.substr(1, close - 1);
        if (close + 1 < rest.size() && rest[close + 1] == ':') port_text = rest.substr(close + 2);
    } else if (auto c = rest.rfind(':'); c != std::string_view::npos) {
        host = rest.substr(0, c);
        port_text = rest.substr(c + 1);
    }
    if (!port_text.empty()) {
        int p = 0;
        auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), p);
        if (ec != std::errc() || end != port_text.data() + port_text.size() || p < 1 || p > 65535) return std::nullopt;
        port = p;
    }
    if (host.empty()) return std::nullopt;
    std::string h(host);
    std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
    return std::pair<std::string, int>(std::move(h), port);
}

namespace {
std::optional<long> number_after(std::string_view text, std::string_view key) {
    auto at = text.find(key);
    if (at == std::string_view::npos) return std::nullopt;
    at += key.size();
    long v = 0;
    auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), v);
    if (ec != std::errc()) return std::nullopt;
    return v;
}

std::string field(std::string_view text, std::string_view key) {
    auto at = text.find(key);
    if (at == std::string_view::npos) return {};
    at += key.size();
    auto end = text.find_first_of(",\n ", at);
    return std::string(text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
}
} // namespace

std::optional<std::uint64_t> oom_kill_count(std::string_view text) {
    std::size_t at = 0;
    while (at < text.size()) {
        auto end = text.find('\n', at);
        auto line = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
        if (line.rfind("oom_kill ", 0) == 0) {
            std::uint64_t v = 0;
            auto [p, ec] = std::from_chars(line.data() + 9, line.data() + line.size(), v);
            if (ec == std::errc()) return v;
        }
        if (end == std::string_view::npos) break;
        at = end + 1;
    }
    return std::nullopt;
}

bool parse_kernel_oom_line(std::string_view record, std::map<long, KernelOomKill> &kills) {
    // /dev/kmsg records are "<prio>,<seq>,<usec>,<flags>;<message>".
    auto semi = record.find(';');
    std::string_view msg = semi == std::string_view::npos ? record : record.substr(semi + 1);
    if (auto at = msg.find("oom-kill:"); at != std::string_view::npos) {
        auto pid = number_after(msg, ",pid=");
        if (!pid) return false;
        auto &k = kills[*pid];
        k.pid = *pid;
        k.name = field(msg, ",task=");
        k.task_memcg = field(msg, "task_memcg=");
        std::string c = field(msg, "constraint=");
        k.constraint = c == "CONSTRAINT_MEMCG"           ? "memcg"
                       : c == "CONSTRAINT_CPUSET"        ? "cpuset"
                       : c == "CONSTRAINT_MEMORY_POLICY" ? "memory_policy"
                                                         : "none";
        return true;
    }
    if (auto at = msg.find("Killed process "); at != std::string_view::npos) {
        auto pid = number_after(msg, "Killed process ");
        if (!pid) return false;
        auto &k = kills[*pid];
        k.pid = *pid;
        auto open = msg.find('(', at), close = msg.find(')', at);
        if (k.name.empty() && open != std::string_view::npos && close != std::string_view::npos && close > open)
            k.name = std::string(msg.substr(open + 1, close - open - 1));
        k.rss_kb = number_after(msg, "anon-rss:").value_or(0) + number_after(msg, "file-rss:").value_or(0) +
                   number_after(msg, "shmem-rss:").value_or(0);
        return true;
    }
    return false;
}

} // namespace hangar::telemetry
