#include "managed_auth_model.hpp"

#include <hangar/name_fold.hpp>
#include <hangar/resource.hpp>
#include <hangar/text.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <regex>
#include <vector>

namespace managed_auth {

using hangar::lower;

using hangar::Error;

namespace {

bool contains_any(const std::string &haystack, std::initializer_list<const char *> needles) {
    return std::any_of(needles.begin(), needles.end(),
                       [&](const char *n) { return haystack.find(n) != std::string::npos; });
}

// kernel-api.md §2.17: always allowed without listing.
constexpr std::array<const char *, 17> kIdentityProviders = {"accounts.google.com", "login.microsoftonline.com",
                                                             "login.live.com",      "*.okta.com",
                                                             "*.oktapreview.com",   "*.auth0.com",
                                                             "*.us.auth0.com",      "*.eu.auth0.com",
                                                             "*.au.auth0.com",      "appleid.apple.com",
                                                             "github.com",          "www.facebook.com",
                                                             "www.linkedin.com",    "*.amazoncognito.com",
                                                             "*.onelogin.com",      "*.pingone.com",
                                                             "*.pingidentity.com"};

bool host_matches(const std::string &host, const std::string &pattern) {
    if (pattern.starts_with("*.")) {
        std::string suffix = pattern.substr(1); // ".okta.com"
        return host.size() > suffix.size() && host.ends_with(suffix);
    }
    return host == pattern;
}

std::optional<bool> opt_bool(const json &body, const char *name, hangar::Validation &v) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) {
        v.fail(name, "must be a boolean");
        return std::nullopt;
    }
    return it->get<bool>();
}

// Whitespace runs as one space, trimmed, at most `max` bytes (cut before a UTF-8 continuation).
std::string collapse(std::string_view in, std::size_t max) {
    std::string out;
    bool space = false;
    for (char c : in) {
        if (std::isspace(static_cast<unsigned char>(c))) {
            space = !out.empty();
            continue;
        }
        if (space) out.push_back(' ');
        space = false;
        out.push_back(c);
    }
    if (out.size() > max) {
        std::size_t cut = max;
        while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80)
            --cut;
        out.resize(cut);
    }
    return out;
}

bool valid_credential_ref(const json &c) {
    if (!c.is_object()) return false;
    for (const auto &[k, val] : c.items()) {
        if (k == "auto") {
            if (!val.is_boolean()) return false;
        } else if (k == "name" || k == "path" || k == "provider") {
            if (!val.is_string() || val.get_ref<const std::string &>().empty()) return false;
        } else {
            return false;
        }
    }
    if (c.contains("name")) return !c.contains("path") && !c.contains("provider") && !c.contains("auto");
    if (c.value("auto", false)) return !c.contains("path");
    return c.contains("provider") && c.contains("path");
}

} // namespace

std::optional<std::string> normalise_domain(std::string_view in) {
    std::string d = lower(in);
    while (!d.empty() && d.back() == '.')
        d.pop_back();
    if (d.empty() || d.size() > 253) return std::nullopt;
    static const std::regex re(R"(^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$)");
    if (!std::regex_match(d, re)) return std::nullopt;
    return d;
}

std::string url_host(std::string_view url) {
    auto scheme = url.find("://");
    if (scheme == std::string_view::npos) return {};
    std::string_view rest = url.substr(scheme + 3);
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (auto at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
    if (rest.starts_with("[")) return lower(rest.substr(0, rest.find(']') + 1));
    return lower(rest.substr(0, rest.find(':')));
}

bool host_allowed(const std::string &host, const std::string &domain, const std::vector<std::string> &allowed) {
    if (host.empty()) return false;
    if (host == domain || host.ends_with("." + domain)) return true;
    for (const auto &a : allowed) {
        std::string p = lower(a);
        if (host_matches(host, p) || (!p.starts_with("*.") && host.ends_with("." + p))) return true;
    }
    return std::any_of(kIdentityProviders.begin(), kIdentityProviders.end(),
                       [&](const char *p) { return host_matches(host, p); });
}

Settings parse_settings(const json &body, bool creating, int min_interval) {
    hangar::Validation v;
    Settings s;
    auto string_field = [&](const char *name, bool required) -> std::optional<std::string> {
        auto it = body.find(name);
        if (it == body.end() || it->is_null()) {
            if (required) v.fail(name, "is required");
            return std::nullopt;
        }
        if (!it->is_string()) {
            v.fail(name, "must be a string");
            return std::nullopt;
        }
        return it->get<std::string>();
    };
    if (creating) {
        if (auto d = string_field("domain", true)) {
            if (auto n = normalise_domain(*d))
                s.domain = *n;
            else
                v.fail("domain", "must be a bare domain such as example.com (no scheme, port or path)");
        }
        if (auto p = string_field("profile_name", true)) {
            if (hangar::valid_resource_name(*p))
                s.profile_name = *p;
            else
                v.fail("profile_name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        }
    }
    if (auto u = string_field("login_url", false)) {
        if (u->empty() && !creating)
            s.login_url = "";
        else if ((u->starts_with("https://") || u->starts_with("http://")) && !url_host(*u).empty())
            s.login_url = *u;
        else
            v.fail("login_url", "must be an http(s) URL");
    }
    if (auto it = body.find("allowed_domains"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) {
            v.fail("allowed_domains", "must be an array of domains");
        } else {
            std::vector<std::string> list;
            for (const auto &d : *it) {
                std::string text = d.is_string() ? d.get<std::string>() : "";
                bool wildcard = text.starts_with("*.");
                auto n = normalise_domain(wildcard ? text.substr(2) : text);
                if (!n) {
                    v.fail("allowed_domains", "each entry must be a domain, optionally starting with *.");
                    break;
                }
                list.push_back(wildcard ? "*." + *n : *n);
            }
            s.allowed_domains = list;
        }
    }
    if (auto it = body.find("credential"); it != body.end()) {
        if (it->is_null() && !creating)
            s.credential = json(nullptr);
        else if (!it->is_null() && valid_credential_ref(*it))
            s.credential = *it;
        else if (!it->is_null())
            v.fail("credential", "must be {name}, {provider, path} or {provider?, auto: true}");
    }
    s.save_credentials = opt_bool(body, "save_credentials", v);
    s.health_checks = opt_bool(body, "health_checks", v);
    s.auto_reauth = opt_bool(body, "auto_reauth", v);
    s.record_session = opt_bool(body, "record_session", v);
    if (auto it = body.find("health_check_interval"); it != body.end() && !it->is_null()) {
        if (!it->is_number_integer())
            v.fail("health_check_interval", "must be an integer number of seconds");
        else if (it->get<std::int64_t>() < min_interval || it->get<std::int64_t>() > 86400)
            v.fail("health_check_interval",
                   "must be between " + std::to_string(min_interval) + " and 86400 seconds on this server");
        else
            s.health_check_interval = static_cast<int>(it->get<std::int64_t>());
    }
    if (auto it = body.find("proxy"); it != body.end() && !it->is_null()) {
        bool ok = it->is_object() && !it->empty();
        if (ok)
            for (const auto &[k, val] : it->items())
                ok = ok && (k == "id" || k == "name") && val.is_string() && !val.get_ref<const std::string &>().empty();
        if (ok)
            s.proxy = *it;
        else
            v.fail("proxy", "must be {id} or {name}");
    }
    if (auto it = body.find("browser_telemetry"); it != body.end()) {
        if (it->is_null() || it->is_object())
            s.browser_telemetry = *it;
        else
            v.fail("browser_telemetry", "must be an object or null");
    }
    if (auto it = body.find("browser"); it != body.end() && !it->is_null()) s.browser = parse_browser_config(*it, v);
    v.throw_if_failed(creating ? "invalid auth connection" : "invalid auth connection update");
    // The deprecated telemetry field is browser.telemetry under its old name (the proxy is
    // compared once both are resolved to a proxy id).
    std::optional<json> successor;
    if (s.browser && s.browser->contains("telemetry")) successor = s.browser->at("telemetry");
    if (auto t = supersede(s.browser_telemetry, "browser_telemetry", successor, "browser.telemetry")) {
        if (!s.browser) s.browser = json::object();
        (*s.browser)["telemetry"] = *t;
    }
    s.browser_telemetry.reset();
    return s;
}

bool known_region(const std::string &region) {
    return region == "us-east" || region == "us-west" || region == "eu-west" || region == "ap-southeast";
}

json parse_browser_config(const json &value, hangar::Validation &v, const std::string &field) {
    json out = json::object();
    if (!value.is_object()) {
        v.fail(field, "must be an object {proxy?, region?, stealth?, telemetry?}");
        return out;
    }
    for (const auto &[key, val] : value.items()) {
        std::string name = field;
        name.append(".").append(key);
        if (key == "telemetry") { // null: no telemetry (clears the connection's on update)
            if (val.is_null() || val.is_object())
                out[key] = val;
            else
                v.fail(name, "must be an object or null");
            continue;
        }
        if (val.is_null()) continue; // omitted: kept (update) or inherited (login)
        if (key == "stealth") {
            if (val.is_boolean())
                out[key] = val;
            else
                v.fail(name, "must be a boolean");
        } else if (key == "region") {
            if (val.is_string() && known_region(val.get<std::string>()))
                out[key] = val;
            else
                v.fail(name, "must be one of us-east, us-west, eu-west, ap-southeast");
        } else if (key == "proxy") {
            bool ok = val.is_object();
            int given = 0;
            if (ok)
                for (const auto &[k, p] : val.items()) {
                    if (p.is_null()) continue;
                    ++given;
                    bool text = p.is_string() && !p.get_ref<const std::string &>().empty();
                    ok = ok && (k == "mode" || k == "id" || k == "name") && text &&
                         (k != "mode" || p == "direct" || p == "default");
                }
            if (ok && given == 1)
                out[key] = val;
            else
                v.fail(name, "must name exactly one of mode (direct or default), id and name");
        } else {
            v.fail(name, "is not a browser setting of an auth connection (proxy, region, stealth, telemetry); the "
                         "login flow manages the others");
        }
    }
    return out;
}

std::optional<json> supersede(const std::optional<json> &deprecated, const std::string &deprecated_name,
                              const std::optional<json> &successor, const std::string &successor_name) {
    if (deprecated && successor && *deprecated != *successor)
        throw Error::invalid(deprecated_name, "differs from " + successor_name + "; send " + successor_name +
                                                  " only (" + deprecated_name + " is deprecated)");
    return successor ? successor : deprecated;
}

std::string destination_selection(const json &settings, const std::string &id, const std::string &name) {
    const json b = stored_browser(settings);
    const json *node = &b;
    for (const char *key : {"telemetry", "export", "otlp", "destination"}) {
        if (!node->is_object()) return {};
        auto it = node->find(key);
        if (it == node->end()) return {};
        node = &*it;
    }
    if (!node->is_object()) return {};
    if (!id.empty() && node->value("id", json()) == json(id)) return "id";
    const json by_name = node->value("name", json());
    if (!name.empty() && by_name.is_string() &&
        hangar::fold_name(by_name.get<std::string>()) == hangar::fold_name(name))
        return "name";
    return {};
}

json stored_browser(const json &settings) {
    json b = settings.value("browser", json::object());
    if (!b.is_object()) b = json::object();
    if (!b.contains("proxy") && settings.value("proxy_id", "") != "") b["proxy"] = {{"id", settings.at("proxy_id")}};
    if (!b.contains("telemetry") && settings.value("browser_telemetry", json()).is_object())
        b["telemetry"] = settings.at("browser_telemetry");
    return b;
}

json layer_browser(json base, const json &over) {
    if (!base.is_object()) base = json::object();
    if (!over.is_object()) return base;
    for (const auto &[k, val] : over.items()) {
        if (val.is_null())
            base.erase(k);
        else
            base[k] = val;
    }
    return base;
}

json browser_create_fields(const json &config) {
    json out = {{"stealth", config.value("stealth", true)}};
    if (config.value("proxy", json()).is_object()) out["proxy"] = config.at("proxy");
    if (config.value("region", json()).is_string()) out["region"] = config.at("region");
    if (config.value("telemetry", json()).is_object()) out["telemetry"] = config.at("telemetry");
    return out;
}

json render_browser(const json &config, const std::string &node_region) {
    json out = layer_browser(json::object(), config);
    out["stealth"] = config.value("stealth", true);
    if (!out.value("region", json()).is_string()) out["region"] = node_region;
    return out;
}

bool parse_skill_mode(const json &body) {
    auto it = body.find("skill_mode");
    if (it == body.end() || it->is_null()) return true;
    if (*it == "enabled") return true;
    if (*it == "disabled") return false;
    throw Error::invalid("skill_mode", "must be enabled or disabled");
}

bool inherited_skill_mode(const json &settings) {
    return !settings.is_object() || settings.value("skill_mode", "enabled") != "disabled";
}

std::string flow_type(bool automatic, bool plan_read, bool has_credential) {
    return automatic || (plan_read && has_credential) ? "REAUTH" : "LOGIN";
}

Kind classify(const PageField &f) {
    std::string type = lower(f.html_type), ac = lower(f.autocomplete), im = lower(f.inputmode);
    std::string words = lower(f.name + " " + f.label + " " + f.placeholder + " " + f.selector + " " +
                              field_hint(Kind::Text, f.described, f.nearby, ""));
    if (type == "password" && !contains_any(ac, {"one-time-code"})) return Kind::Password;
    bool otp_shape = ac == "one-time-code" || (im == "numeric" && f.maxlength > 0 && f.maxlength <= 8) ||
                     contains_any(words, {"otp", "totp", "2fa", "mfa", "verification code", "one-time", "passcode",
                                          "security code", "authenticator", "code"});
    if (otp_shape) {
        bool app = contains_any(words, {"authenticator", "totp", "app"});
        bool sent = contains_any(words, {"sms", "text message", "texted", "email", "sent", "phone"});
        return app || !sent ? Kind::Totp : Kind::Code;
    }
    if (type == "email" || contains_any(ac, {"username", "email"}) ||
        contains_any(words, {"user", "email", "e-mail", "login", "identifier", "account"}))
        return Kind::Identifier;
    return Kind::Text;
}

std::string discovered_type(Kind k, const PageField &f) {
    switch (k) {
    case Kind::Password:
        return "password";
    case Kind::Totp:
        return "totp";
    case Kind::Code:
        return "code";
    case Kind::Identifier:
        return lower(f.html_type) == "email" ? "email" : "text";
    case Kind::Text:
        break;
    }
    std::string t = lower(f.html_type);
    for (const char *known : {"email", "tel", "number", "url"})
        if (t == known) return t;
    return "text";
}

std::string field_type(Kind k) {
    switch (k) {
    case Kind::Identifier:
        return "identifier";
    case Kind::Password:
        return "password";
    case Kind::Totp:
        return "totp_code";
    case Kind::Code:
        return "code";
    case Kind::Text:
        break;
    }
    return "text";
}

std::string field_id(Kind k, const PageField &f) {
    if (k == Kind::Text) return "text:" + (f.name.empty() ? f.selector : f.name);
    return field_type(k);
}

std::string field_ref(Kind k, const PageField &f) {
    switch (k) {
    case Kind::Identifier:
        return "username";
    case Kind::Password:
        return "password";
    case Kind::Totp:
        return "totp_code";
    case Kind::Code:
        return "code";
    case Kind::Text:
        break;
    }
    return f.name.empty() ? "text" : f.name;
}

std::string input_mode(const PageField &f) {
    std::string im = lower(f.inputmode), type = lower(f.html_type), ac = lower(f.autocomplete);
    if (im == "numeric" || im == "decimal") return "numeric";
    if (im == "email" || im == "tel" || im == "text") return im;
    if (type == "email") return "email";
    if (type == "tel") return "tel";
    if (type == "number") return "numeric";
    if (contains_any(ac, {"one-time-code"})) return "numeric"; // the keyboard browsers offer for codes
    if (contains_any(ac, {"email"})) return "email";
    if (contains_any(ac, {"tel"})) return "tel";
    return "text";
}

std::string masked_destination(std::string_view text) {
    // A masking character, in runs of two or more: *, bullets, # (and x in a phone number; an
    // address may hold "xx" itself).
    static const std::string m = "(?:\\*|\u2022|\u25CF|#|x|X)";
    static const std::string me = "(?:\\*|\u2022|\u25CF|#)";
    static const std::regex email("[A-Za-z0-9._%+-]*" + me + "{2,}[A-Za-z0-9._%+-]*@[A-Za-z0-9.-]*(?:" + me +
                                  "+[A-Za-z0-9.-]*)*\\.[A-Za-z]{2,}");
    static const std::regex phone("(?:\\+\\d{1,3}[ .-]?)?(?:\\(?" + m + "{2,}\\)?[ .-]?)+" + m + "*\\d{2,4}");
    std::string s(text);
    std::smatch found;
    if (std::regex_search(s, found, email)) return found.str();
    if (std::regex_search(s, found, phone)) return found.str();
    return {};
}

std::string field_hint(Kind k, const std::string &described, const std::string &nearby, std::string_view page_text) {
    if (auto d = collapse(described, 200); !d.empty()) return d;
    if (auto n = collapse(nearby, 200); !n.empty()) return n;
    if (k != Kind::Code) return {};
    // A sent code: the page's sentence saying where it went.
    std::size_t start = 0;
    while (start < page_text.size()) {
        auto end = page_text.find('\n', start);
        if (end == std::string_view::npos) end = page_text.size();
        std::string_view line = page_text.substr(start, end - start);
        if (!masked_destination(line).empty()) return collapse(line, 200);
        start = end + 1;
    }
    return {};
}

ChoiceDetails choice_details(std::string_view full_text, std::string_view context) {
    ChoiceDetails d;
    d.display_text = collapse(full_text, 300);
    d.mfa_type = mfa_type_of_label(d.display_text);
    d.masked_destination = masked_destination(d.display_text);
    d.context = collapse(context, 200);
    if (d.context == d.display_text) d.context.clear();
    return d;
}

std::string mfa_type_of_label(std::string_view label) {
    std::string l = lower(label);
    if (contains_any(l, {"authenticator", "totp", "authentication app", "auth app"})) return "totp";
    if (contains_any(l, {"text message", "sms", "text me"})) return "sms";
    if (contains_any(l, {"call me", "phone call", "voice"})) return "call";
    if (contains_any(l, {"email me", "e-mail", "email"})) return "email";
    if (contains_any(l, {"push", "approve", "notification", "on your device", "on your phone"})) return "push";
    if (contains_any(l, {"use your password", "use password", "with password"})) return "password";
    if (contains_any(l, {"another method", "another way", "other options", "different method", "try another"}))
        return "switch";
    return {};
}

std::string sso_provider_of_label(std::string_view label) {
    std::string l = lower(label);
    if (!contains_any(l, {"sign in with", "log in with", "login with", "continue with", "sign up with", "use "}))
        return {};
    for (const char *p : {"google", "github", "microsoft", "apple", "facebook", "linkedin", "okta", "auth0"})
        if (l.find(p) != std::string::npos) return p;
    return {};
}

std::string external_action_prompt(std::string_view page_text) {
    // A line (a heading or a paragraph of the rendered text) that asks for an action and names
    // where it happens; else one with a stock phrase ("Check your phone" is often the heading
    // above the sentence that says what to do, which is the better message).
    static const std::regex act(R"(\b(approve|approval|confirm|tap|accept|allow)\b)", std::regex::icase);
    static const std::regex where(R"(\b(phone|device|app|notification|push|prompt)s?\b)", std::regex::icase);
    static const std::regex stock(R"(check your (phone|device)|push notification|waiting for (your )?approval)",
                                  std::regex::icase);
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start <= page_text.size()) {
        auto end = page_text.find('\n', start);
        if (end == std::string_view::npos) end = page_text.size();
        std::string line(page_text.substr(start, end - start));
        auto b = line.find_first_not_of(" \t\r");
        auto e = line.find_last_not_of(" \t\r");
        if (b != std::string::npos) lines.push_back(line.substr(b, e - b + 1).substr(0, 200));
        start = end + 1;
    }
    for (const auto &line : lines)
        if (std::regex_search(line, act) && std::regex_search(line, where)) return line;
    for (const auto &line : lines)
        if (std::regex_search(line, stock)) return line;
    return {};
}

std::optional<std::string> credential_value(const json &values, Kind k, const PageField &f) {
    if (!values.is_object()) return std::nullopt;
    auto get = [&](const char *key) -> std::optional<std::string> {
        auto it = values.find(key);
        if (it != values.end() && it->is_string() && !it->get_ref<const std::string &>().empty())
            return it->get<std::string>();
        return std::nullopt;
    };
    switch (k) {
    case Kind::Identifier:
        for (const char *key : {"username", "email", "identifier", "login", "user"})
            if (auto v = get(key)) return v;
        return std::nullopt;
    case Kind::Password:
        return get("password");
    case Kind::Totp:
        return get("totp_code");
    case Kind::Code:
        return std::nullopt; // one-time codes come from the user, never from storage
    case Kind::Text:
        break;
    }
    if (!f.name.empty())
        if (auto v = get(f.name.c_str())) return v;
    return std::nullopt;
}

Submit parse_submit(const json &body) {
    std::vector<Submit> kinds;
    auto map_of = [&](const char *name, Submit::What what) {
        auto it = body.find(name);
        if (it == body.end() || it->is_null()) return;
        if (!it->is_object())
            throw Error(400, "invalid_submit", std::string(name) + " must be an object of strings",
                        {{"invalid_input", std::string(name) + ": must be an object"}});
        for (const auto &[k, v] : it->items())
            if (!v.is_string())
                throw Error(400, "invalid_submit", std::string(name) + " values must be strings",
                            {{"invalid_input", std::string(name) + "." + k + ": must be a string"}});
        kinds.push_back({what, *it, {}, {}});
    };
    auto one = [&](const char *name, Submit::What what) {
        auto it = body.find(name);
        if (it == body.end() || it->is_null()) return;
        if (!it->is_string() || it->get_ref<const std::string &>().empty())
            throw Error(400, "invalid_submit", std::string(name) + " must be a non-empty string",
                        {{"invalid_input", std::string(name) + ": must be a non-empty string"}});
        kinds.push_back({what, json::object(), it->get<std::string>(), {}});
    };
    map_of("fields", Submit::What::Fields);
    map_of("field_values", Submit::What::FieldValues);
    one("selected_choice_id", Submit::What::Choice);
    one("mfa_option_id", Submit::What::MfaOption);
    one("sign_in_option_id", Submit::What::SignInOption);
    bool has_selector = body.contains("sso_button_selector") && !body.at("sso_button_selector").is_null();
    bool has_provider = body.contains("sso_provider") && !body.at("sso_provider").is_null();
    if (has_selector && has_provider)
        throw Error(400, "invalid_submit", "sso_button_selector and sso_provider cannot be combined");
    one("sso_button_selector", Submit::What::Sso);
    one("sso_provider", Submit::What::Sso);
    if (kinds.empty())
        throw Error(400, "invalid_submit",
                    "submit needs one of fields, field_values, selected_choice_id, mfa_option_id, sign_in_option_id, "
                    "sso_button_selector or sso_provider");
    if (kinds.size() > 1) throw Error(400, "invalid_submit", "submit exactly one kind of input at a time");
    if (auto it = body.find("interaction_id"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) throw Error(400, "invalid_submit", "interaction_id must be a string");
        kinds.front().interaction_id = it->get<std::string>();
    }
    return kinds.front();
}

Reauth reauth_status(const json &credential, bool has_plan, const json &plan) {
    bool has_credential = credential.is_object() && !credential.empty();
    if (!has_credential) return {false, "no_credential"};
    bool totp_from_secret = false;
    if (has_plan && plan.is_object()) {
        if (plan.value("needs_code", false))
            return {false, plan.value("code_channel", "") == "email" ? "requires_email_code" : "requires_sms_code"};
        if (plan.value("needs_external_action", false)) return {false, "requires_external_action"};
        if (plan.value("totp", "") == "user") return {false, "requires_totp_without_secret"};
        if (plan.value("needs_customer_input", false)) return {false, "requires_customer_input"};
        totp_from_secret = plan.value("totp", "") == "secret";
    }
    if (credential.contains("provider")) return {true, "external_credential"};
    if (totp_from_secret) return {true, "totp_reauth_allowed"};
    if (has_plan) return {true, "viable_plans_found"};
    return {true, "has_credential"};
}

std::string health_check_unavailable_reason(bool health_checks, bool has_post_login_url) {
    return health_checks && !has_post_login_url ? "no_auth_check_url" : "";
}

} // namespace managed_auth
