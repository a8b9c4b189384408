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
    std::optional<json> proxy;             // deprecated {id?, name?}
    std::optional<json> browser_telemetry; // deprecated: object or null
    // 0.131's {proxy?, region?, stealth?, telemetry?}, shape checked (proxy not resolved yet)
    std::optional<json> browser;
};

// Validates a create (`creating`: domain and profile_name required) or update body; throws
// 400 naming every bad field. `min_interval` is the operator's lowest health check interval.
Settings parse_settings(const json &body, bool creating, int min_interval);

// ---- the auth browser's configuration (0.131 `browser`) ---------------------------------------------
//
// A connection keeps one browser config: {proxy?: {mode} | {id}, region?, stealth?, telemetry?}.
// The deprecated top-level `proxy` and `browser_telemetry` are the same settings under their old
// names: a request may send either name, or both saying the same thing; both saying different
// things is 400. A login's `browser` layers onto the connection's for that login only.

// `browser` of a request: an object of proxy (exactly one of mode direct|default, id, name),
// region (Kernel's four), stealth (boolean) and telemetry (object or null); fails `v` naming each
// bad property. Returns the object with its null properties kept (null telemetry clears it).
json parse_browser_config(const json &value, hangar::Validation &v, const std::string &field = "browser");

// One setting sent as a deprecated field and as its `browser.*` successor: the one given, or
// either when both are equal; 400 naming both when they differ.
std::optional<json> supersede(const std::optional<json> &deprecated, const std::string &deprecated_name,
                              const std::optional<json> &successor, const std::string &successor_name);

// The browser config kept in a connection's settings, with what Hangar stored before 0.131
// (`proxy_id`, `browser_telemetry`) folded in.
json stored_browser(const json &settings);

// How a connection's stored settings select the OTLP destination `id` named `name` through
// browser.telemetry.export.otlp.destination: "id", "name" (compared without case, as the
// telemetry plugin resolves names), or "" when they do not. The telemetry plugin refuses to
// delete a selected destination, and to rename one selected by name, since the connection's next
// login would then fail to find it.
std::string destination_selection(const json &settings, const std::string &id, const std::string &name);

// `over`'s properties replace `base`'s; a null one removes it (telemetry: null = none).
json layer_browser(json base, const json &over);

// The POST /browsers fields an auth browser gets from an effective config: stealth (true unless
// said), proxy ({mode} or {id}), region and telemetry when set.
json browser_create_fields(const json &config);

// ManagedAuth.browser: the config with stealth and region always said (region: the node's when
// the connection names none, which is where its browsers run).
json render_browser(const json &config, const std::string &node_region);

// Kernel's regions (kernel-api-0131 §2.1).
bool known_region(const std::string &region);

// ---- learned plan ----------------------------------------------------------------------------------

// login's `skill_mode` (enabled | disabled; absent = enabled): whether the flow reads and writes
// the learned plan. 400 for anything else.
bool parse_skill_mode(const json &body);
// The skill_mode an automatic re-auth runs with: the last accepted login's (kept in the
// connection's settings as skill_mode; absent = enabled). True = enabled.
bool inherited_skill_mode(const json &settings);
// A flow's flow_type: REAUTH for an automatic re-auth after a health check, and for a login()
// that replays a learned plan with the stored credential (skill_mode disabled reads no plan);
// LOGIN otherwise.
std::string flow_type(bool automatic, bool plan_read, bool has_credential);

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
    std::string described, nearby; // the text aria-describedby names; a hint element beside it
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
// Field.input_mode: the keyboard the input asks for, from its inputmode, then its type, then its
// autocomplete; one-time codes are numeric. Always one of text, email, tel, numeric.
std::string input_mode(const PageField &f);
// Field.hint: the text the input points at (aria-describedby), else a hint element next to it,
// else for a code the page's line naming a masked destination ("sent to ***-***-1234"); trimmed to
// 200 characters, empty when there is none.
std::string field_hint(Kind k, const std::string &described, const std::string &nearby, std::string_view page_text);
// A masked phone number or e-mail address in `text` ("***-***-0199", "(***) ***-**92",
// "j***@example.com", "+1 ••• ••• 1234"); empty when none.
std::string masked_destination(std::string_view text);

// What a canonical choice shows (0.131 Choice): the method, where it sends a code, its own words
// and the prompt above it.
struct ChoiceDetails {
    std::string mfa_type;           // mfa_type_of_label of its text; empty for no method
    std::string masked_destination; // masked_destination of its text
    std::string display_text;       // its whole visible text, whitespace collapsed
    std::string context;            // the page's prompt for the group of choices
};
ChoiceDetails choice_details(std::string_view full_text, std::string_view context);

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

// can_reauth / can_reauth_reason from what is known about the connection: its credential and the
// learned plan's record of what the last login needed (`needs_code` + `code_channel`,
// `needs_external_action`, `totp`: "secret" | "user", `needs_customer_input`). Hangar never makes
// an unattended attempt it expects to need a human, so `optimistic_totp_attempt` is never said.
struct Reauth {
    bool can = false;
    std::string reason;
};
Reauth reauth_status(const json &credential, bool has_plan, const json &plan);

// ManagedAuth.health_check_unavailable_reason: "no_auth_check_url" when health checks are on but
// no logged-in page is known to check (no login has succeeded yet); empty otherwise.
std::string health_check_unavailable_reason(bool health_checks, bool has_post_login_url);

} // namespace managed_auth
