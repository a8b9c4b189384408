#include "session_model.hpp"

#include <hangar/resource.hpp>
#include <hangar/text.hpp>

#include <sys/random.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <stdexcept>

namespace hangar::browsers {

namespace {

// An integral JSON number (1920 or 1920.0), or nullopt for anything else.
std::optional<std::int64_t> as_integer(const json &v) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
            return std::nullopt;
        return v.get<std::int64_t>();
    }
    if (v.is_number_float()) {
        double d = v.get<double>();
        if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) return static_cast<std::int64_t>(d);
    }
    return std::nullopt;
}

bool has_control_chars(std::string_view s) {
    return std::any_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

const json *field(const json &body, const char *name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

void check_bool(Validation &v, const json &body, const char *name, bool &out) {
    if (const json *f = field(body, name)) {
        if (f->is_boolean())
            out = f->get<bool>();
        else
            v.fail(name, "must be a boolean");
    }
}

std::optional<int> check_int(Validation &v, const std::string &name, const json &value, int min, int max) {
    auto n = as_integer(value);
    if (!n) {
        v.fail(name, "must be an integer");
        return std::nullopt;
    }
    if (*n < min || *n > max) {
        v.fail(name, "must be between " + std::to_string(min) + " and " + std::to_string(max));
        return std::nullopt;
    }
    return static_cast<int>(*n);
}

// A session name: shown in paths as {id_or_name}, so it must not look like an id.
std::optional<std::string> check_name(Validation &v, const json &value) {
    if (!value.is_string()) {
        v.fail("name", "must be a string");
        return std::nullopt;
    }
    auto s = value.get<std::string>();
    if (s.size() > kMaxName)
        v.fail("name", "must be at most " + std::to_string(kMaxName) + " characters");
    else if (has_control_chars(s))
        v.fail("name", "must not contain control characters");
    else if (looks_like_session_id(s))
        v.fail("name", "must not look like a session id (24 lowercase alphanumerics)");
    else
        return s;
    return std::nullopt;
}

std::optional<Tags> check_tags(Validation &v, const json &value) {
    if (!value.is_object()) {
        v.fail("tags", "must be an object of string values");
        return std::nullopt;
    }
    if (value.size() > kMaxTags) {
        v.fail("tags", "at most " + std::to_string(kMaxTags) + " pairs");
        return std::nullopt;
    }
    Tags tags;
    bool ok = true;
    for (const auto &[key, val] : value.items()) {
        std::string f = "tags." + key;
        if (key.empty() || key.size() > kMaxTagKey || has_control_chars(key)) {
            v.fail(f, "keys must be 1-" + std::to_string(kMaxTagKey) + " printable characters");
            ok = false;
        } else if (!val.is_string()) {
            v.fail(f, "must be a string");
            ok = false;
        } else if (val.get_ref<const std::string &>().size() > kMaxTagValue) {
            v.fail(f, "must be at most " + std::to_string(kMaxTagValue) + " characters");
            ok = false;
        } else {
            tags.emplace(key, val.get<std::string>());
        }
    }
    return ok ? std::optional<Tags>(std::move(tags)) : std::nullopt;
}

std::optional<Viewport> check_viewport(Validation &v, const json &value, bool *force) {
    if (!value.is_object()) {
        v.fail("viewport", "must be an object {width, height, refresh_rate?}");
        return std::nullopt;
    }
    Viewport vp;
    bool ok = true;
    for (const char *dim : {"width", "height"}) {
        const json *f = field(value, dim);
        if (!f) {
            v.fail(std::string("viewport.") + dim, "is required");
            ok = false;
            continue;
        }
        bool is_width = std::string_view(dim) == "width";
        auto n = check_int(v, std::string("viewport.") + dim, *f, is_width ? kMinWidth : kMinHeight,
                           is_width ? kMaxWidth : kMaxHeight);
        if (!n)
            ok = false;
        else
            (is_width ? vp.width : vp.height) = *n;
    }
    if (const json *f = field(value, "refresh_rate")) {
        auto n = check_int(v, "viewport.refresh_rate", *f, 1, kMaxRefreshRate);
        if (!n)
            ok = false;
        else
            vp.refresh_rate = *n;
    } else if (ok) {
        vp.refresh_rate = default_refresh_rate(vp.width, vp.height);
    }
    if (force) {
        if (const json *f = field(value, "force")) {
            if (f->is_boolean())
                *force = f->get<bool>();
            else {
                v.fail("viewport.force", "must be a boolean");
                ok = false;
            }
        }
    }
    return ok ? std::optional<Viewport>(vp) : std::nullopt;
}

// Policies Hangar itself manages (extension loading, proxying, the debugging port it needs).
std::optional<std::string> managed_policy_reason(const std::string &name) {
    auto l = lower(name);
    if (l.find("extension") != std::string::npos) return "extensions are managed by Hangar";
    if (l.find("proxy") != std::string::npos) return "the proxy is managed by Hangar";
    if (name == "RemoteDebuggingAllowed" || name == "DeveloperToolsAvailability" || name == "DeveloperToolsDisabled")
        return "Hangar needs the DevTools protocol to drive the browser";
    return std::nullopt;
}

std::optional<json> check_policy(Validation &v, const json &value) {
    if (!value.is_object()) {
        v.fail("chrome_policy", "must be an object of policy name to value");
        return std::nullopt;
    }
    bool ok = true;
    for (const auto &[key, val] : value.items()) {
        bool valid_name =
            !key.empty() && key.size() <= 128 && std::isalpha(static_cast<unsigned char>(key[0])) &&
            std::all_of(key.begin(), key.end(), [](unsigned char c) { return std::isalnum(c) || c == '_'; });
        if (!valid_name) {
            v.fail("chrome_policy." + key, "is not a policy name");
            ok = false;
        } else if (auto reason = managed_policy_reason(key)) {
            v.fail("chrome_policy." + key, "cannot be set: " + *reason);
            ok = false;
        }
    }
    if (ok && value.dump().size() > kMaxPolicyBytes) {
        v.fail("chrome_policy", "must be at most 5 MiB serialized");
        ok = false;
    }
    return ok ? std::optional<json>(value) : std::nullopt;
}

// Telemetry request object (contract §2.5): its shape (the telemetry plugin checks the rest).
// Returns whether it would start or change capture.
bool check_telemetry(Validation &v, const json &value, bool on_update) {
    if (!value.is_object()) {
        v.fail("telemetry", "must be an object");
        return false;
    }
    std::optional<bool> enabled;
    if (const json *e = field(value, "enabled")) {
        if (!e->is_boolean()) {
            v.fail("telemetry.enabled", "must be a boolean");
            return false;
        }
        enabled = e->get<bool>();
    }
    bool any_category = false, any_on = false;
    if (const json *b = field(value, "browser")) {
        if (!b->is_object()) {
            v.fail("telemetry.browser", "must be an object of categories");
            return false;
        }
        for (const auto &[cat, cfg] : b->items()) {
            if (cfg.is_null()) continue;
            const json *ce = cfg.is_object() ? field(cfg, "enabled") : nullptr;
            if (!cfg.is_object() || (ce && !ce->is_boolean())) {
                v.fail("telemetry.browser." + cat, "must be {enabled?: boolean}");
                return false;
            }
            any_category = true;
            if (!ce || ce->get<bool>()) any_on = true;
        }
    }
    if (enabled == false && any_category) {
        v.fail("telemetry", "enabled: false cannot be combined with category settings");
        return false;
    }
    if (enabled == true) return true;
    if (enabled == false) return false; // "stop capture": nothing captures, so already true
    return on_update ? any_category : any_on;
}

std::optional<ProfileRef> check_profile(Validation &v, const json &f) {
    if (!f.is_object()) {
        v.fail("profile", "must be an object {id?, name?, save_changes?}");
        return std::nullopt;
    }
    ProfileRef ref;
    bool ok = true;
    for (const char *key : {"id", "name"}) {
        auto it = f.find(key);
        if (it == f.end() || it->is_null()) continue;
        const std::string field = std::string("profile.") + key;
        if (!it->is_string() || it->get_ref<const std::string &>().empty() ||
            it->get_ref<const std::string &>().size() > kMaxName) {
            v.fail(field, "must be a string of 1 to 255 characters");
            ok = false;
        } else {
            (std::string_view(key) == "id" ? ref.id : ref.name) = it->get<std::string>();
        }
    }
    if (ok && !ref.id && !ref.name) {
        v.fail("profile", "needs an id or a name");
        ok = false;
    }
    if (auto it = f.find("save_changes"); it != f.end() && !it->is_null()) {
        if (!it->is_boolean()) {
            v.fail("profile.save_changes", "must be a boolean");
            ok = false;
        } else {
            ref.save_changes = it->get<bool>();
        }
    }
    return ok ? std::optional<ProfileRef>(ref) : std::nullopt;
}

void check_string(Validation &v, const json &body, const char *name, std::optional<std::string> &out,
                  std::size_t max_len) {
    if (const json *f = field(body, name)) {
        if (!f->is_string())
            v.fail(name, "must be a string");
        else if (f->get_ref<const std::string &>().size() > max_len)
            v.fail(name, "must be at most " + std::to_string(max_len) + " characters");
        else
            out = f->get<std::string>();
    }
}

// `location` on create (every field optional) or update (null clears one): checks each field
// and puts what was sent into `timezone` / `locale` (inner nullopt: cleared).
void check_location(Validation &v, const json &value, bool on_update,
                    std::optional<std::optional<std::string>> &timezone,
                    std::optional<std::optional<std::string>> &locale) {
    if (!value.is_object()) {
        v.fail("location", "must be an object {locale?, timezone?}");
        return;
    }
    if (auto it = value.find("timezone"); it != value.end() && (on_update || !it->is_null())) {
        if (it->is_null())
            timezone = std::optional<std::string>();
        else if (!it->is_string() || !known_timezone(it->get_ref<const std::string &>()))
            v.fail("location.timezone", "must be a known IANA timezone such as Europe/Berlin or America/New_York");
        else
            timezone = it->get<std::string>();
    }
    if (auto it = value.find("locale"); it != value.end() && (on_update || !it->is_null())) {
        std::optional<std::string> canonical;
        if (it->is_string()) canonical = canonical_locale(it->get_ref<const std::string &>());
        if (it->is_null())
            locale = std::optional<std::string>();
        else if (!canonical)
            v.fail("location.locale", "must be a BCP 47 language tag such as en-US, de-DE or zh-Hant-TW");
        else
            locale = std::move(canonical);
    }
}

// Python SDK 0.131's browser fields that no plugin serves yet: refused, never dropped.
constexpr const char *kNotYetCreate[] = {"video_memory"};
constexpr const char *kNotYetReason = " (Kernel API fields this server does not serve yet)";

std::optional<ProxySelector> check_proxy_selector(Validation &v, const json &proxy) {
    if (!proxy.is_object()) {
        v.fail("proxy", "must be an object: {mode: direct|default}, {id} or {name}");
        return std::nullopt;
    }
    ProxySelector sel;
    int given = 0;
    for (const auto &[key, value] : proxy.items()) {
        if (value.is_null()) continue;
        if (key != "mode" && key != "id" && key != "name") {
            v.fail("proxy." + key, "is not a field of proxy (mode, id, name)");
            continue;
        }
        ++given;
        if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
            value.get_ref<const std::string &>().size() > 255) {
            v.fail("proxy." + key, "must be a string of 1 to 255 characters");
            continue;
        }
        std::string text = value.get<std::string>();
        if (key == "mode" && text != "direct" && text != "default") v.fail("proxy.mode", "must be direct or default");
        (key == "mode" ? sel.mode : key == "id" ? sel.id : sel.name) = std::move(text);
    }
    if (given != 1) {
        v.fail("proxy", "must name exactly one of mode, id and name");
        return std::nullopt;
    }
    return sel;
}

// `network` on create: {allowed_hosts?, private_hosts?, proxy_routes?}. The last two have no
// server behind them yet: named in `unsupported` (501), never dropped.
// [{hosts: [names], proxy: {id} | {name}}]: the shape only; an empty list is no routes.
void check_proxy_routes(Validation &v, const json &routes, std::optional<json> &out) {
    const std::string field = "network.proxy_routes";
    if (!routes.is_array()) {
        v.fail(field, "must be an array of {hosts, proxy}");
        return;
    }
    if (routes.size() > 100) v.fail(field, "must have at most 100 routes");
    bool ok = true;
    for (std::size_t i = 0; i < routes.size(); ++i) {
        const json &r = routes[i];
        std::string at = field + "[" + std::to_string(i) + "]";
        if (!r.is_object()) {
            v.fail(at, "must be an object {hosts, proxy}");
            ok = false;
            continue;
        }
        for (const auto &[key, value] : r.items())
            if (key != "hosts" && key != "proxy") {
                std::string name = at;
                name.append(".").append(key);
                v.fail(name, "is not a field of a proxy route (hosts, proxy)");
                ok = false;
            }
        const json hosts = r.value("hosts", json());
        if (!hosts.is_array() || hosts.empty() ||
            !std::all_of(hosts.begin(), hosts.end(), [](const json &h) { return h.is_string(); })) {
            v.fail(at + ".hosts", "must be a non-empty array of host names");
            ok = false;
        }
        const json proxy = r.value("proxy", json());
        auto names = [&](const char *k) {
            return proxy.contains(k) && proxy[k].is_string() && !proxy[k].get_ref<const std::string &>().empty();
        };
        if (!proxy.is_object() || proxy.size() != 1 || !(names("id") || names("name"))) {
            v.fail(at + ".proxy", "must be {id} or {name} of one of the project's proxies");
            ok = false;
        }
    }
    if (ok && !routes.empty()) out = routes;
}

void check_network(Validation &v, const json &network, CreateOptions &o) {
    if (!network.is_object()) {
        v.fail("network", "must be an object {allowed_hosts?, private_hosts?, proxy_routes?}");
        return;
    }
    for (const auto &[key, value] : network.items()) {
        if (value.is_null()) continue;
        if (key == "allowed_hosts") {
            if (!value.is_array() || value.empty())
                v.fail("network.allowed_hosts", "must be a non-empty array of host names, addresses and networks");
            else
                o.allowed_hosts = value;
        } else if (key == "proxy_routes") {
            check_proxy_routes(v, value, o.proxy_routes);
        } else if (key == "private_hosts") {
            if (!value.is_array())
                v.fail("network.private_hosts", "must be an array of host names, addresses and networks ([] for none)");
            else
                o.private_hosts = value;
        } else {
            v.fail("network." + key, "is not a field of network (allowed_hosts, private_hosts, proxy_routes)");
        }
    }
}

// `network` on update: {allowed_hosts: [...] | null, expected_allowlist_revision?, mutation_id?}.
void check_network_update(Validation &v, const json &network, std::optional<UpdateOptions::NetworkUpdate> &out) {
    if (!network.is_object()) {
        v.fail("network", "must be an object {allowed_hosts, expected_allowlist_revision?, mutation_id?}");
        return;
    }
    UpdateOptions::NetworkUpdate u;
    bool sent_hosts = false;
    for (const auto &[key, value] : network.items()) {
        if (key == "allowed_hosts") {
            sent_hosts = true;
            if (!value.is_null() && (!value.is_array() || value.empty()))
                v.fail("network.allowed_hosts", "must be a non-empty array, or null to remove the allowlist");
            u.allowed_hosts = value;
        } else if (key == "expected_allowlist_revision" || key == "mutation_id") {
            if (value.is_null()) continue;
            if (!value.is_string() || value.get_ref<const std::string &>().empty() ||
                value.get_ref<const std::string &>().size() > 255)
                v.fail("network." + key, "must be a string of 1 to 255 characters");
            else
                (key == "mutation_id" ? u.mutation_id : u.expected_revision) = value.get<std::string>();
        } else if (key == "private_hosts" || key == "proxy_routes") {
            v.fail("network." + key, "is fixed when the browser is created; only allowed_hosts can change");
        } else {
            v.fail("network." + key,
                   "is not a field of a network update (allowed_hosts, expected_allowlist_revision, mutation_id)");
        }
    }
    if (!sent_hosts) v.fail("network.allowed_hosts", "is required: the new list, or null to remove it");
    out = std::move(u);
}

// "" is the same as not sending it: the browser stays where it is.
void check_start_url(Validation &v, const json &body, std::optional<std::string> &out) {
    check_string(v, body, "start_url", out, kMaxStartUrl);
    if (out && out->empty()) out.reset();
    if (out && has_control_chars(*out)) v.fail("start_url", "must not contain control characters");
}

[[noreturn]] void throw_not_implemented(const std::vector<std::string> &fields,
                                        const char *why = " (the plugin providing it is not installed or enabled)") {
    std::string list;
    for (const auto &f : fields)
        list += (list.empty() ? "" : ", ") + f;
    throw Error::not_implemented("not implemented in Hangar yet: " + list + why);
}

template <std::size_t N> void refuse_not_yet(const json &body, const char *const (&names)[N]) {
    std::vector<std::string> asked;
    for (const char *name : names)
        if (auto it = body.find(name); it != body.end() && !it->is_null()) asked.emplace_back(name);
    if (!asked.empty()) throw_not_implemented(asked, kNotYetReason);
}

} // namespace

bool known_timezone(std::string_view name, const std::string &zoneinfo) {
    if (name.empty() || name.size() > 64) return false;
    // Segments of letters, digits, _ + -, each starting with a letter: no "..", no absolute path.
    std::size_t start = 0;
    while (start <= name.size()) {
        auto end = name.find('/', start);
        auto seg = name.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
        if (seg.empty() || !std::isalpha(static_cast<unsigned char>(seg[0])) ||
            !std::all_of(seg.begin(), seg.end(),
                         [](unsigned char c) { return std::isalnum(c) || c == '_' || c == '+' || c == '-'; }))
            return false;
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    // Copies of the whole database under other rules, and files that are no zone of their own.
    if (name.starts_with("posix/") || name.starts_with("right/") || name == "posixrules" || name == "localtime" ||
        name == "Factory")
        return false;
    std::ifstream in(zoneinfo + "/" + std::string(name), std::ios::binary);
    char magic[4] = {};
    return in.read(magic, 4) && std::string_view(magic, 4) == "TZif";
}

std::optional<std::string> canonical_locale(std::string_view tag) {
    if (tag.empty() || tag.size() > 35) return std::nullopt;
    auto all = [](std::string_view s, auto pred) {
        return std::all_of(s.begin(), s.end(), [&](unsigned char c) { return pred(c); });
    };
    auto alpha = [](unsigned char c) { return std::isalpha(c) != 0; };
    auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
    auto alnum = [](unsigned char c) { return std::isalnum(c) != 0; };
    std::vector<std::string> parts;
    for (std::size_t start = 0;;) {
        auto end = tag.find('-', start);
        parts.emplace_back(tag.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
        if (end == std::string_view::npos) break;
        start = end + 1;
    }
    std::size_t i = 0;
    std::string out;
    const std::string &language = parts[i++];
    if (!(language.size() >= 2 && language.size() <= 8 && language.size() != 4 && all(language, alpha)))
        return std::nullopt;
    out = lower(language);
    if (i < parts.size() && parts[i].size() == 4 && all(parts[i], alpha)) {
        std::string script = lower(parts[i++]);
        script[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(script[0])));
        out += "-" + script;
    }
    if (i < parts.size() &&
        ((parts[i].size() == 2 && all(parts[i], alpha)) || (parts[i].size() == 3 && all(parts[i], digit)))) {
        std::string region = parts[i++];
        std::transform(region.begin(), region.end(), region.begin(), [](unsigned char c) { return std::toupper(c); });
        out += "-" + region;
    }
    for (; i < parts.size(); ++i) {
        const std::string &variant = parts[i];
        bool ok =
            all(variant, alnum) && ((variant.size() >= 5 && variant.size() <= 8) ||
                                    (variant.size() == 4 && std::isdigit(static_cast<unsigned char>(variant[0]))));
        if (!ok) return std::nullopt;
        out += "-" + lower(variant);
    }
    return out;
}

json location_json(const Location &l) {
    return {{"timezone", l.timezone.value_or(kDefaultTimezone)},
            {"timezone_source", l.timezone ? "override" : "default"},
            {"locale", l.locale.value_or(kDefaultLocale)},
            {"locale_source", l.locale ? "override" : "default"}};
}

std::string memory_name(std::uint64_t bytes) {
    static constexpr int kGiB[] = {16, 12, 8, 6, 4, 2, 1};
    for (int g : kGiB)
        if (bytes >= (std::uint64_t{static_cast<unsigned>(g)} << 30)) return std::to_string(g) + "GiB";
    return "1GiB";
}

std::optional<std::uint64_t> memory_request_bytes(std::string_view name) {
    for (int g : {1, 2, 4, 8, 16})
        if (name == std::to_string(g) + "GiB") return std::uint64_t{static_cast<unsigned>(g)} << 30;
    return std::nullopt;
}

int default_refresh_rate(int width, int height) {
    long long area = static_cast<long long>(width) * height;
    if (area > 1920LL * 1200) return 10;
    if (area >= 1440LL * 900) return 25;
    return 60;
}

json viewport_json(const Viewport &v) {
    return {{"width", v.width}, {"height", v.height}, {"refresh_rate", v.refresh_rate}};
}

bool is_signing_extension(const json &selector) {
    return selector.is_object() && !selector.contains("id") && selector.value("name", json()) == kSigningExtension;
}

CreateOptions parse_create(const json &body) {
    if (!body.is_object()) throw Error::invalid("body", "must be a JSON object");
    Validation v;
    CreateOptions o;
    std::vector<std::string> unsupported;

    if (const json *f = field(body, "name")) {
        if (auto n = check_name(v, *f); n && !n->empty()) o.name = std::move(*n);
    }
    if (const json *f = field(body, "tags")) o.tags = check_tags(v, *f);
    if (const json *f = field(body, "timeout_seconds")) {
        if (auto n = check_int(v, "timeout_seconds", *f, kMinTimeoutSeconds, kMaxTimeoutSeconds))
            o.timeout_seconds = *n;
    }
    check_bool(v, body, "headless", o.headless);
    check_bool(v, body, "stealth", o.stealth);
    check_bool(v, body, "kiosk_mode", o.kiosk_mode);
    if (const json *f = field(body, "viewport")) {
        if (auto vp = check_viewport(v, *f, nullptr)) o.viewport = *vp;
    }
    check_start_url(v, body, o.start_url);
    if (const json *f = field(body, "chrome_policy")) o.chrome_policy = check_policy(v, *f);

    if (const json *f = field(body, "profile")) o.profile = check_profile(v, *f);

    // Valid options whose feature lives in a plugin that does not exist yet.
    if (const json *f = field(body, "extensions")) {
        if (!f->is_array()) {
            v.fail("extensions", "must be an array of {id?, name?}");
        } else {
            for (std::size_t i = 0; i < f->size(); ++i) {
                const json &e = (*f)[i];
                bool named =
                    e.is_object() &&
                    ((e.contains("id") && e["id"].is_string() && !e["id"].get_ref<const std::string &>().empty()) ||
                     (e.contains("name") && e["name"].is_string() &&
                      !e["name"].get_ref<const std::string &>().empty()));
                if (!named) v.fail("extensions[" + std::to_string(i) + "]", "must be {id} or {name}");
                if (named && is_signing_extension(e)) o.sign = true;
            }
            o.extensions = *f;
        }
    }
    check_string(v, body, "proxy_id", o.proxy_id, 255);
    if (o.proxy_id && o.proxy_id->empty()) o.proxy_id.reset();
    if (const json *f = field(body, "proxy")) {
        o.proxy = check_proxy_selector(v, *f);
        if (o.proxy_id) v.fail("proxy", "cannot be combined with proxy_id");
    }
    check_string(v, body, "invocation_id", o.invocation_id, 255);
    if (o.invocation_id && o.invocation_id->empty()) o.invocation_id.reset();
    if (const json *f = field(body, "telemetry")) {
        o.telemetry_captures = check_telemetry(v, *f, false);
        o.telemetry = *f;
    }
    if (const json *f = field(body, "location")) {
        std::optional<std::optional<std::string>> timezone, locale;
        check_location(v, *f, false, timezone, locale);
        if (timezone) o.location.timezone = *timezone;
        if (locale) o.location.locale = *locale;
    }
    check_string(v, body, "region", o.region, 64);
    if (o.region && o.region->empty()) o.region.reset();
    check_string(v, body, "memory", o.memory, 16);
    if (o.memory && !memory_request_bytes(*o.memory)) v.fail("memory", "must be one of 1GiB, 2GiB, 4GiB, 8GiB, 16GiB");
    if (const json *f = field(body, "network")) check_network(v, *f, o);
    if (const json *f = field(body, "vaults")) {
        if (!f->is_array() || f->size() > 16) {
            v.fail("vaults", "must be an array of at most 16 {id} or {name}");
        } else {
            for (std::size_t i = 0; i < f->size(); ++i) {
                const json &e = (*f)[i];
                auto given = [&](const char *k) {
                    return e.is_object() && e.contains(k) && e[k].is_string() &&
                           !e[k].get_ref<const std::string &>().empty();
                };
                bool extra = e.is_object() && std::any_of(e.items().begin(), e.items().end(), [](const auto &kv) {
                                 return kv.key() != "id" && kv.key() != "name";
                             });
                if (given("id") == given("name") || extra)
                    v.fail("vaults[" + std::to_string(i) + "]", "must be {id} or {name}");
            }
            if (!f->empty()) o.vaults = *f;
        }
    }
    bool gpu = false;
    check_bool(v, body, "gpu", gpu);
    if (gpu) unsupported.emplace_back("gpu");
    // Kernel's retired persistence (the Go SDK and CLI still send it): ignoring it would hand out
    // a fresh browser where the caller asked to resume one. Past its end of life (2026-05-18) it
    // is refused as bad input, with what replaced it.
    if (const json *p = field(body, "persistence"); p && !p->is_null())
        v.fail("persistence",
               "was retired by Kernel (end of life 2026-05-18): keep a browser with a long timeout_seconds, and "
               "its state across browsers with a profile");

    v.throw_if_failed("invalid browser options");
    if (!unsupported.empty()) throw_not_implemented(unsupported);
    refuse_not_yet(body, kNotYetCreate);
    return o;
}

json proxy_routes_wire(const json &checked) {
    json out = json::array();
    for (const auto &r : checked)
        out.push_back({{"hosts", r.at("hosts")}, {"proxy", {{"id", r.at("proxy_id")}}}});
    return out;
}

json network_config(const std::optional<json> &allowed_hosts, const std::optional<json> &proxy_routes_wire,
                    const std::optional<json> &private_hosts) {
    json n = json::object();
    if (allowed_hosts) n["allowed_hosts"] = *allowed_hosts;
    if (proxy_routes_wire) n["proxy_routes"] = *proxy_routes_wire;
    if (private_hosts) n["private_hosts"] = *private_hosts;
    return n;
}

std::optional<json> browser_network(const std::optional<json> &allowed_hosts,
                                    const std::optional<json> &proxy_routes_wire,
                                    const std::optional<json> &private_hosts) {
    json n = network_config(allowed_hosts, proxy_routes_wire, private_hosts);
    if (allowed_hosts) n["allowlist_state"] = {{"revision", hangar::new_id()}};
    if (n.empty()) return std::nullopt;
    return n;
}

UpdateOptions parse_update(const json &body) {
    if (!body.is_object()) throw Error::invalid("body", "must be a JSON object");
    Validation v;
    UpdateOptions o;
    std::vector<std::string> unsupported;

    if (auto it = body.find("name"); it != body.end()) {
        if (it->is_null() || (it->is_string() && it->get_ref<const std::string &>().empty()))
            o.name = std::optional<std::string>();
        else if (auto n = check_name(v, *it))
            o.name = std::optional<std::string>(std::move(*n));
    }
    if (auto it = body.find("tags"); it != body.end()) {
        if (it->is_null())
            o.tags = Tags{};
        else
            o.tags = check_tags(v, *it);
    }
    if (const json *f = field(body, "viewport")) o.viewport = check_viewport(v, *f, &o.force);

    if (const json *f = field(body, "profile")) o.profile = check_profile(v, *f);
    check_string(v, body, "proxy_id", o.proxy_id, 255);
    if (const json *f = field(body, "telemetry")) {
        o.telemetry_captures = check_telemetry(v, *f, true);
        o.telemetry = *f;
    }
    if (const json *f = field(body, "location")) check_location(v, *f, true, o.timezone, o.locale);
    if (const json *f = field(body, "network")) check_network_update(v, *f, o.network);
    bool disable_default_proxy = false;
    check_bool(v, body, "disable_default_proxy", disable_default_proxy);
    if (const json *f = field(body, "proxy")) {
        o.proxy = check_proxy_selector(v, *f);
        if (o.proxy_id || disable_default_proxy)
            v.fail("proxy", "cannot be combined with proxy_id or disable_default_proxy");
    }
    if (disable_default_proxy) unsupported.emplace_back("disable_default_proxy");
    check_start_url(v, body, o.start_url);

    v.throw_if_failed("invalid browser update");
    if (!unsupported.empty()) throw_not_implemented(unsupported);
    return o;
}

Session session_from_row(const json &row) {
    auto text = [&](const char *k) -> std::optional<std::string> {
        auto it = row.find(k);
        if (it == row.end() || it->is_null()) return std::nullopt;
        return it->is_string() ? it->get<std::string>() : it->dump();
    };
    auto integer = [&](const char *k, std::int64_t fallback) -> std::int64_t {
        auto it = row.find(k);
        if (it == row.end() || it->is_null()) return fallback;
        if (it->is_number()) return it->get<std::int64_t>();
        if (it->is_string()) return std::stoll(it->get<std::string>());
        return fallback;
    };
    auto parsed = [&](const char *k) -> std::optional<json> {
        auto t = text(k);
        if (!t || t->empty()) return std::nullopt;
        json j = json::parse(*t, nullptr, false);
        if (j.is_discarded()) return std::nullopt;
        return j;
    };

    Session s;
    s.id = text("id").value_or("");
    s.org_id = text("org_id").value_or("");
    s.project_id = text("project_id").value_or("");
    s.name = text("name");
    s.created_ms = integer("created_at", 0);
    if (auto it = row.find("deleted_at"); it != row.end() && !it->is_null()) s.deleted_ms = integer("deleted_at", 0);
    s.timeout_seconds = static_cast<int>(integer("timeout_seconds", kDefaultTimeoutSeconds));
    s.headless = integer("headless", 0) != 0;
    s.stealth = integer("stealth", 0) != 0;
    s.kiosk_mode = integer("kiosk_mode", 0) != 0;
    s.viewport.width = static_cast<int>(integer("viewport_width", 1920));
    s.viewport.height = static_cast<int>(integer("viewport_height", 1080));
    s.viewport.refresh_rate = static_cast<int>(integer("viewport_refresh_rate", 25));
    s.start_url = text("start_url");
    if (auto t = parsed("tags"); t && t->is_object()) {
        Tags tags;
        for (const auto &[k, val] : t->items())
            if (val.is_string()) tags.emplace(k, val.get<std::string>());
        s.tags = std::move(tags);
    }
    if (auto p = parsed("chrome_policy"); p && p->is_object()) s.chrome_policy = std::move(*p);
    s.profile_id = text("profile_id");
    s.pool_id = text("pool_id");
    s.proxy_id = text("proxy_id");
    s.invocation_id = text("invocation_id");
    s.node = text("node");
    s.profile_save_changes = integer("profile_save_changes", 0) != 0;
    s.location.timezone = text("location_timezone");
    s.location.locale = text("location_locale");
    s.region = text("region").value_or("");
    s.memory = text("memory").value_or("");
    if (auto n = parsed("network"); n && n->is_object()) s.network = std::move(*n);
    if (auto vs = parsed("vaults"); vs && vs->is_array()) s.vaults = std::move(*vs);
    return s;
}

json render_session(const Session &s, const Links &links, std::int64_t now) {
    std::int64_t end = s.deleted_ms.value_or(now);
    json out = {
        {"session_id", s.id},
        {"cdp_ws_url", links.cdp_ws_url},
        {"webdriver_ws_url", links.webdriver_ws_url},
        {"created_at", rfc3339(s.created_ms)},
        {"headless", s.headless},
        {"stealth", s.stealth},
        {"timeout_seconds", s.timeout_seconds},
        {"kiosk_mode", s.kiosk_mode},
        {"gpu", false},
        {"viewport", viewport_json(s.viewport)},
        {"usage", {{"uptime_ms", std::max<std::int64_t>(0, end - s.created_ms)}}},
        {"location", location_json(s.location)},
        {"region", s.region},
        {"memory", s.memory},
    };
    if (s.name) out["name"] = *s.name;
    if (s.tags && !s.tags->empty()) out["tags"] = *s.tags;
    if (s.start_url) out["start_url"] = *s.start_url;
    if (s.chrome_policy) out["chrome_policy"] = *s.chrome_policy;
    if (s.proxy_id) out["proxy_id"] = *s.proxy_id;
    // The resolved egress (0.131): the proxy in use by id, else direct.
    out["proxy"] = s.proxy_id ? json{{"id", *s.proxy_id}} : json{{"mode", "direct"}};
    if (s.network) out["network"] = *s.network;
    if (s.vaults) out["vaults"] = *s.vaults;
    if (s.profile_id) out["profile_save_changes"] = s.profile_save_changes;
    if (s.deleted_ms) out["deleted_at"] = rfc3339(*s.deleted_ms);
    return out;
}

json location_spec(const Location &l) {
    json out = json::object();
    if (l.timezone) out["timezone"] = *l.timezone;
    if (l.locale) out["locale"] = *l.locale;
    return out;
}

json make_instance_spec(const std::string &id, const CreateOptions &o) {
    json spec = {
        {"id", id},
        {"headless", o.headless},
        {"stealth", o.stealth},
        {"kiosk_mode", o.kiosk_mode},
        {"viewport", viewport_json(o.viewport)},
    };
    if (o.start_url) spec["start_url"] = *o.start_url;
    if (o.chrome_policy) spec["chrome_policy"] = *o.chrome_policy;
    // The instance's forwarder holds requests until the server hands it this proxy's route.
    if (o.proxy_id) spec["proxy"] = true;
    if (o.location.timezone || o.location.locale) spec["location"] = location_spec(o.location);
    // The instance's own cgroup memory limit (the runtime's memory_limit_bytes).
    if (o.memory)
        if (auto bytes = memory_request_bytes(*o.memory)) spec["memory_limit_bytes"] = *bytes;
    return spec;
}

std::string ws_base(std::string_view http_base) {
    std::string out;
    if (http_base.starts_with("https://"))
        out = "wss://" + std::string(http_base.substr(8));
    else if (http_base.starts_with("http://"))
        out = "ws://" + std::string(http_base.substr(7));
    else
        out = std::string(http_base);
    while (!out.empty() && out.back() == '/')
        out.pop_back();
    return out;
}

std::string cdp_ws_url(std::string_view base, std::string_view token) {
    return std::string(base) + "/browser/cdp?jwt=" + std::string(token);
}

std::string webdriver_ws_url(std::string_view base, std::string_view token) {
    return std::string(base) + "/browser/webdriver?jwt=" + std::string(token);
}

std::string target_ws_url(std::string_view base, std::string_view token, std::string_view devtools_path) {
    // devtools_path is "/devtools/page/<id>" as Chromium reports it.
    return std::string(base) + "/browser/cdp/" + std::string(token) + std::string(devtools_path);
}

json rewrite_devtools_json(const json &body, std::string_view base, std::string_view token) {
    auto rewrite_one = [&](json entry) {
        if (!entry.is_object()) return entry;
        entry.erase("devtoolsFrontendUrl");
        entry.erase("devtoolsFrontendUrlCompat");
        auto it = entry.find("webSocketDebuggerUrl");
        if (it == entry.end() || !it->is_string()) return entry;
        std::string url = it->get<std::string>();
        // ws://127.0.0.1:PORT/devtools/<kind>/<id>: keep only the path.
        auto scheme = url.find("://");
        auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
        std::string path = slash == std::string::npos ? std::string() : url.substr(slash);
        if (path.starts_with("/devtools/browser/") || path.empty())
            *it = cdp_ws_url(base, token);
        else
            *it = target_ws_url(base, token, path);
        return entry;
    };
    if (body.is_array()) {
        json out = json::array();
        for (const auto &e : body)
            out.push_back(rewrite_one(e));
        return out;
    }
    return rewrite_one(body);
}

namespace {

// The tags[k]=v pairs of a raw query; sets `problem` and stops at the first malformed one.
std::vector<std::pair<std::string, std::string>> tag_filters(std::string_view raw, std::string &problem) {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto &[key, value] : query_pairs(raw)) {
        if (!key.starts_with("tags[")) continue;
        if (key.size() < 7 || key.back() != ']') {
            problem = "filters are written tags[<key>]=<value>";
            return {};
        }
        std::string inner = key.substr(5, key.size() - 6);
        if (inner.find_first_of("[]") != std::string::npos) {
            problem = "nested keys are not supported; use tags[<key>]=<value>";
            return {};
        }
        out.emplace_back(std::move(inner), std::move(value));
    }
    return out;
}

} // namespace

std::vector<std::pair<std::string, std::string>> parse_tag_filters(std::string_view raw) {
    std::string problem;
    auto out = tag_filters(raw, problem);
    if (!problem.empty()) throw Error::invalid("tags", problem);
    return out;
}

bool parse_bool_param(std::string_view name, const std::optional<std::string> &value, bool fallback) {
    if (!value) return fallback;
    if (*value == "true" || *value == "1") return true;
    if (*value == "false" || *value == "0" || value->empty()) return false;
    throw Error::invalid(std::string(name), "must be true or false");
}

ListQuery parse_list_query(const QueryLookup &param, std::string_view raw_query) {
    ListQuery q;
    Validation v;
    bool include_deleted = false;
    try {
        include_deleted = parse_bool_param("include_deleted", param("include_deleted"), false);
    } catch (const Error &) {
        v.fail("include_deleted", "must be true or false");
    }
    q.status = include_deleted ? StatusFilter::All : StatusFilter::Active;
    if (auto s = param("status"); s && !s->empty()) {
        if (*s == "active")
            q.status = StatusFilter::Active;
        else if (*s == "deleted")
            q.status = StatusFilter::Deleted;
        else if (*s == "all")
            q.status = StatusFilter::All;
        else
            v.fail("status", "must be one of active, deleted, all");
    }
    if (auto s = param("query"); s && !s->empty()) q.query = *s;
    if (auto s = param("region"); s && !s->empty()) q.region = *s;

    auto paging = hangar::parse_paging(param, v, kDefaultPageSize, kMaxPageSize);
    q.offset = paging.offset;
    q.limit = paging.limit;
    std::string problem;
    q.tags = tag_filters(raw_query, problem);
    if (!problem.empty()) v.fail("tags", problem);
    v.throw_if_failed("invalid list query");
    return q;
}

std::string like_contains(std::string_view text) {
    std::string out = "%";
    for (char c : text) {
        if (c == '%' || c == '_' || c == '\\') out.push_back('\\');
        out.push_back(c);
    }
    out.push_back('%');
    return out;
}

} // namespace hangar::browsers
