// The vaults plugin's pure logic, without the host (kernel-api-0131 §1A, §1B): item specs and
// their validation, PATCH application, the state an item shows and the operations it offers, RFC
// 6901 pointer binding for webmcp_invoke, the fill result object, and the per-vault P-256 key with
// compact JWE (ECDH-ES + A256GCM) decryption. Linked into the plugin and into the unit tests
// (vaults_model). Nothing here logs or puts a value into an error message.
#pragma once

#include <hangar/plugin.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace vaults {

using json = nlohmann::json;

// ---- vaults -----------------------------------------------------------------------------------

// POST /vaults: {name} (1 to 255 of [A-Za-z0-9._-], Kernel's resource-name rule).
std::string parse_vault_name(const json &body);

// ---- credential fields --------------------------------------------------------------------------

struct FieldDef {
    std::string name;
    std::string type; // text | email | password | totp | passkey
    std::optional<std::string> label;
    bool required = false;
    bool sensitive = true;
    bool operator==(const FieldDef &) const = default;
};

// A value as sent: plain, or a compact JWE for the vault's key; `clear` for null or "" on PATCH.
struct ValueInput {
    std::optional<std::string> value;
    std::optional<std::string> encrypted_value;
    bool clear = false;
};

struct KernelCredentialSpec {
    std::vector<FieldDef> fields;
    std::optional<std::string> description;
    std::map<std::string, ValueInput> values; // by field name; only fields sent with a value
};

// The `kernel` credential spec of PUT (400 naming each bad field; values never quoted).
KernelCredentialSpec parse_kernel_credential(const json &spec);

json field_defs_json(const std::vector<FieldDef> &defs);
std::vector<FieldDef> field_defs_from_json(const json &defs);

// CredentialSpecUpdate (PATCH): add_fields (no values), remove_fields, fields, description.
struct CredentialUpdate {
    std::vector<FieldDef> add;
    std::vector<std::string> remove;
    std::map<std::string, ValueInput> fields;
    std::optional<std::string> description; // "" clears
};
CredentialUpdate parse_credential_update(const json &spec);

// What a PATCH does to a stored credential, applied in the contract's order (remove_fields,
// add_fields, then values): the new definitions, the values to write (nullopt = clear) and the
// fields whose values go with their definitions. `values` must already be plain text (the
// server decrypts encrypted_value first). 400 for what the rules refuse.
struct AppliedUpdate {
    std::vector<FieldDef> defs;
    std::map<std::string, std::optional<std::string>> set;
    std::vector<std::string> dropped;
};
AppliedUpdate apply_update(const std::vector<FieldDef> &defs, const std::set<std::string> &has_value,
                           const CredentialUpdate &update);

// pending_collection while a required field has no value, else ready.
std::string credential_status(const std::vector<FieldDef> &defs, const std::set<std::string> &has_value);

// Per-type checks of a value (plain text): 400 naming the field, never quoting the value. A totp
// seed's base32 is checked by the credentials plugin's TOTP service, not here.
void check_value(const FieldDef &def, const std::string &value);

// A card number (13 to 19 digits, spaces or dashes between, Luhn-valid): credentials must not
// hold card data.
bool looks_like_card_number(std::string_view value);

// ---- other item specs ---------------------------------------------------------------------------

// The `spec` of PUT for every (type, provider) but the kernel credential, checked as §1A says and
// returned as the item shows it (secrets such as 1Password tokens are taken out into `secrets`).
struct OtherSpec {
    std::string provider;
    json shown = json::object();         // the response spec
    json secrets = json::object();       // sealed at rest, never shown
    std::optional<json> provider_config; // {id}|{name} a wallet names
};
OtherSpec parse_other_spec(const std::string &type, const json &spec);

// ---- items on the wire ----------------------------------------------------------------------------

struct Operation {
    std::string type;
    std::string description;
};
// What an item offers in its current state. Only what this server performs is advertised.
std::vector<Operation> available_operations(const std::string &type, const std::string &provider,
                                            const std::string &status, const std::vector<FieldDef> &defs,
                                            const std::set<std::string> &has_value);
json operations_json(const std::vector<Operation> &ops);

// Why an operation type is not served here at all (501, naming what is missing), or nullopt when
// it is; `provider` is the item's.
std::optional<std::string> unsupported_operation(const std::string &op, const std::string &type,
                                                 const std::string &provider);

// ---- managed-auth items ----------------------------------------------------------------------------

// The field type a managed-auth item's login value has, from its name in the saved credential
// (what fill matches it as): a name with "password" is a password, with "email" an email, any
// other text. The credential's TOTP secret is the field "totp".
std::string managed_auth_field_type(const std::string &value_name);
// Whether a value of the saved credential is one a managed-auth item lists and fills: every one
// but `totp_secret` (a seed: its code is the field "totp").
bool managed_auth_usable(const std::string &value_name);
// `state.fields` of a managed-auth item (single-item reads; {} while unavailable): {name: {type}}
// for each non-empty value the saved credential holds (`value_keys`, names only) and "totp" when
// it has a TOTP secret.
json managed_auth_fields(const json &value_keys, bool has_totp);

// ---- the hosted collection form -------------------------------------------------------------------

// The fields a collection form shows: text, email and password (totp and passkey never).
bool form_field(const FieldDef &def);
// What a submitted form changes: field name → new value, for form fields sent non-empty (a
// non-sensitive one only when it differs from `values`, the item's current plain values). Form
// inputs are named "f.<field>". 400 naming the field when a required one would stay empty, or a
// value is not valid for its type.
std::map<std::string, std::string> form_changes(const std::vector<FieldDef> &defs, const json &values,
                                                const std::vector<std::pair<std::string, std::string>> &form);

// ---- operations -----------------------------------------------------------------------------------

// `fill`: {browser_id!, page_url?, fields?: [{field!, selector!, format?}], timeout_ms?}.
struct FillBinding {
    std::string field;
    std::string selector;
};
struct FillRequest {
    std::string browser_id;
    std::optional<std::string> page_url;
    std::optional<std::vector<FillBinding>> fields;
};
FillRequest parse_fill(const json &body);

// `webmcp_invoke`: {browser_id!, page_url!, tool_ref!, input! (object, <= 64 KiB), bindings!,
// timeout_sec?}.
struct Binding {
    std::string field;
    std::string input_path;
};
struct WebmcpRequest {
    std::string browser_id;
    std::string page_url;
    std::string tool_ref;
    json input;
    std::vector<Binding> bindings;
    std::optional<int> timeout_sec;
};
WebmcpRequest parse_webmcp(const json &body);

// `arm_passkey`, `register_passkey`, `disarm_passkey`: {browser_id!, field?}.
struct PasskeyRequest {
    std::string browser_id;
    std::optional<std::string> field;
};
PasskeyRequest parse_passkey(const json &body);

// A passkey field's value (FIDO CXF JSON: base64url credentialId, userHandle, PKCS#8 key; rpId)
// as CDP's WebAuthn.Credential takes it (standard base64, a resident credential), and a
// credential Chromium's virtual authenticator made back into CXF JSON.
json passkey_to_cdp(const std::string &cxf);
std::string passkey_from_cdp(const json &credential);

// RFC 6901: the tokens of a pointer ("/a/b~1c" → a, b/c); nullopt when malformed.
std::optional<std::vector<std::string>> parse_pointer(std::string_view pointer);
// Writes `value` at `pointer`, which must name an existing null inside `doc` (400 otherwise,
// naming `what`, never the value).
void bind_pointer(json &doc, std::string_view pointer, const std::string &value, const std::string &what);

// The fill result (§1A): one entry per binding in request order, everything after the first
// failed or unknown one not_attempted. `outcomes` are what the page reported per attempted
// binding: "filled", or an error code, or "unknown".
json fill_result(std::size_t bindings, const std::vector<std::string> &outcomes);

// ---- vault provider configs (§1B) ------------------------------------------------------------

struct ProviderConfigCreate {
    std::string provider; // link | agentcard
    std::string name;
    std::string client_id;
    std::string client_secret;
    std::optional<std::string> publishable_key;
};
ProviderConfigCreate parse_provider_config_create(const json &body);
struct ProviderConfigUpdate {
    std::optional<std::string> name;
    std::optional<std::string> client_secret;
    std::optional<std::string> publishable_key;
};
ProviderConfigUpdate parse_provider_config_update(const json &body, const std::string &provider);

// ---- the vault's key and JWE ------------------------------------------------------------------

std::string base64url_encode(std::string_view bytes);
std::optional<std::string> base64url_decode(std::string_view text);

struct VaultKey {
    std::string private_pkcs8; // DER; sealed at rest
    std::string x, y;          // base64url coordinates
};
VaultKey generate_key();
// The public half of a stored key (from its PKCS#8).
VaultKey key_from_pkcs8(const std::string &pkcs8);

// The `kid` of a compact JWE's protected header; nullopt when it is not a compact JWE with one.
std::optional<std::string> jwe_kid(std::string_view compact);
// Decrypts a compact JWE (alg ECDH-ES, enc A256GCM, no zip) with the vault's key. Throws
// hangar::Error 400 invalid_request when it is malformed or does not decrypt; never says more.
std::string jwe_decrypt(std::string_view compact, const std::string &private_pkcs8);
// The sender's side (what a customer-hosted collection form does), for tests and tools.
std::string jwe_encrypt(std::string_view plaintext, const VaultKey &recipient, const std::string &kid);

} // namespace vaults
