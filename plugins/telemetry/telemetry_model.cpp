#include "telemetry_model.hpp"

#include <hangar/resource.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>

namespace hangar::telemetry {

const std::vector<std::string> &categories() {
    static const std::vector<std::string> all = {"captcha", "connection", "console",    "control", "interaction",
                                                 "network", "page",       "screenshot", "system"};
    return all;
}

bool is_cdp_category(std::string_view c) {
    return c == "console" || c == "network" || c == "page" || c == "interaction" || c == "screenshot";
}

bool is_filter_category(std::string_view c) {
    return c == "monitor" || std::find(categories().begin(), categories().end(), c) != categories().end();
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
        if (key != "enabled" && key != "browser")
            throw Error::invalid(member(field, key), "is not a telemetry setting");
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
                                           "interaction, network, page, screenshot, system)");
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

json render(const Selection &s) {
    if (s.empty()) return nullptr;
    json browser = json::object();
    for (const auto &c : categories())
        browser[c] = {{"enabled", s.count(c) > 0}};
    return {{"browser", browser}};
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

} // namespace hangar::telemetry
