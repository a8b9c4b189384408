// The pure rules of managed auth: what a connection request may say, which hosts a login flow
// may visit, how discovered page inputs map to the canonical fields, and what a submit carries.
// No I/O, so the unit tests cover them without a browser.
#pragma once

#include <hangar/plugin.hpp>

#include <optional>
#include <string>
#include <vector>

namespace managed_auth {

using hangar::json;

// The connection's settings as stored (create fills every one; update only the given ones).
struct Settings {
    std::optional<std::string> domain;
    std::optional<std::string> profile_name;
    std::optional<std::string> login_url; // "" clears on update
    std::optional<std::vector<std::string>> allowed_domains;
    std::optional<json> credential; // CredentialRef, or null to clear
    std::optional<bool> save_credentials;
    std::optional<bool> health_checks;
    std::optional<int> health_check_interval;
    std::optional<bool> auto_reauth;
    std::optional<bool> record_session;
    std::optional<json> proxy;             // {id?, name?}
    std::optional<json> browser_telemetry; // object or null
};

// Validates a create (`creating`: domain and profile_name required) or update body; throws
// 400 naming every bad field. `min_interval` is the operator's lowest health check interval.
Settings parse_settings(const json &body, bool creating, int min_interval);

// A bare domain: lower case, no scheme, path or port; nullopt when it is not one.
std::optional<std::string> normalise_domain(std::string_view in);

// The host of an http(s) URL (lower case, no port); empty when it has none.
std::string url_host(std::string_view url);

// Whether a login flow may visit `host`: the connection's domain and its subdomains, the listed
// allowed domains (a leading "*." matches subdomains only), and the well-known identity
// providers of kernel-api.md §2.17.
bool host_allowed(const std::string &host, const std::string &domain, const std::vector<std::string> &allowed);

// One input the page shows, as the discovery script reports it.
struct PageField {
    std::string selector, name, label, html_type, autocomplete, inputmode, placeholder;
    int maxlength = -1;
    bool required = false;
};

// What a discovered input is for.
enum class Kind { Identifier, Password, Totp, Code, Text };

Kind classify(const PageField &f);
// DiscoveredField.type for a kind and the input's HTML type.
std::string discovered_type(Kind k, const PageField &f);
// Field.type / Field.id / Field.ref (the credential key the value is stored under).
std::string field_type(Kind k);
std::string field_id(Kind k, const PageField &f);
std::string field_ref(Kind k, const PageField &f);
// MfaOption.type for a button or link label ("Use your authenticator app" -> totp); empty when
// the label names no method.
std::string mfa_type_of_label(std::string_view label);
// SSO provider named by a button label ("Continue with GitHub" -> github); empty when none.
std::string sso_provider_of_label(std::string_view label);
// The sentence of a page's text that asks the user to approve the sign-in elsewhere (a push to
// their phone, a prompt on another device), trimmed to 200 characters; empty when none does.
std::string external_action_prompt(std::string_view page_text);

// The credential's value for a kind: identifier from username/email/identifier/login, password
// from password, other text inputs by their name.
std::optional<std::string> credential_value(const json &values, Kind k, const PageField &f);

// A submit body reduced to its one kind of input; 400 `invalid_submit` for none or two kinds,
// for sso_button_selector with sso_provider, or for values that are not strings.
struct Submit {
    enum class What { Fields, FieldValues, Choice, MfaOption, SignInOption, Sso } what;
    json values = json::object(); // Fields / FieldValues: name or id -> value
    std::string choice;           // Choice / MfaOption / SignInOption / Sso (provider or selector)
    std::string interaction_id;   // 0.131: the pause this answers; empty when the client did not say
};
Submit parse_submit(const json &body);

// can_reauth / can_reauth_reason from what is known about the connection.
struct Reauth {
    bool can = false;
    std::string reason;
};
Reauth reauth_status(const json &credential, bool has_plan, const json &plan);

} // namespace managed_auth
