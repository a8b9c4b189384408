#include "vaults_model.hpp"

#include <hangar/resource.hpp>
#include <hangar/text.hpp>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>

namespace vaults {

using hangar::Error;
using hangar::Validation;

namespace {

constexpr std::size_t kMaxFields = 32;
constexpr std::size_t kMaxValueBytes = std::size_t{16} * 1024;
constexpr std::size_t kMaxDescriptionBytes = std::size_t{16} * 1024;
constexpr std::size_t kMaxLabelBytes = 128;
constexpr std::size_t kMaxNameBytes = 128;
constexpr std::size_t kMaxWebmcpInput = std::size_t{64} * 1024;

const std::set<std::string> kFieldTypes = {"text", "email", "password", "totp", "passkey"};
bool must_be_sensitive(const std::string &type) {
    return type == "password" || type == "totp" || type == "passkey";
}

const json *member(const json &body, const char *name) {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return nullptr;
    return &*it;
}

// A member of client JSON as text: "" when it is missing or not a string (never a type error).
std::string text(const json &body, const char *name) {
    auto it = body.find(name);
    return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<std::string> string_member(Validation &v, const json &body, const std::string &prefix, const char *name,
                                         bool required, std::size_t max = 255) {
    const json *f = member(body, name);
    if (!f) {
        if (required) v.fail(prefix + name, "is required");
        return std::nullopt;
    }
    if (!f->is_string() || f->get_ref<const std::string &>().empty()) {
        v.fail(prefix + name, "must be a non-empty string");
        return std::nullopt;
    }
    if (f->get_ref<const std::string &>().size() > max) {
        v.fail(prefix + name, "must be at most " + std::to_string(max) + " bytes");
        return std::nullopt;
    }
    return f->get<std::string>();
}

void only_members(Validation &v, const json &body, const std::string &prefix,
                  std::initializer_list<const char *> known) {
    for (const auto &[key, value] : body.items()) {
        bool ok = false;
        for (const char *k : known)
            ok = ok || key == k;
        if (!ok) v.fail(prefix + key, "is not a field of this object");
    }
}

// A value or encrypted_value of a field in a request; `on_create` refuses null and "".
std::optional<ValueInput> value_input(Validation &v, const json &f, const std::string &prefix, bool on_create) {
    auto value = f.find("value");
    auto enc = f.find("encrypted_value");
    bool has_value = value != f.end() && !(on_create && value->is_null());
    bool has_enc = enc != f.end() && !enc->is_null();
    if (has_value && has_enc) {
        v.fail(prefix + "value", "cannot be combined with encrypted_value");
        return std::nullopt;
    }
    ValueInput in;
    if (has_enc) {
        if (!enc->is_string() || enc->get_ref<const std::string &>().empty()) {
            v.fail(prefix + "encrypted_value", "must be a compact JWE string");
            return std::nullopt;
        }
        in.encrypted_value = enc->get<std::string>();
        return in;
    }
    if (!has_value) return std::nullopt;
    if (value->is_null() || (value->is_string() && value->get_ref<const std::string &>().empty())) {
        if (on_create) {
            v.fail(prefix + "value", "must not be empty (omit it to leave the field unset)");
            return std::nullopt;
        }
        in.clear = true;
        return in;
    }
    if (!value->is_string()) {
        v.fail(prefix + "value", "must be a string");
        return std::nullopt;
    }
    if (value->get_ref<const std::string &>().size() > kMaxValueBytes) {
        v.fail(prefix + "value", "must be at most 16 KiB");
        return std::nullopt;
    }
    in.value = value->get<std::string>();
    return in;
}

std::optional<FieldDef> field_def(Validation &v, const json &f, const std::string &prefix, bool with_values) {
    if (!f.is_object()) {
        v.fail(prefix.substr(0, prefix.size() - 1), "must be an object");
        return std::nullopt;
    }
    if (with_values)
        only_members(v, f, prefix, {"name", "type", "label", "required", "sensitive", "value", "encrypted_value"});
    else
        only_members(v, f, prefix, {"name", "type", "label", "required", "sensitive"});
    FieldDef d;
    auto name = string_member(v, f, prefix, "name", true, kMaxNameBytes);
    auto type = string_member(v, f, prefix, "type", true, 16);
    if (!name || !type) return std::nullopt;
    d.name = *name;
    d.type = *type;
    if (!kFieldTypes.count(d.type)) {
        v.fail(prefix + "type", "must be text, email, password, totp or passkey");
        return std::nullopt;
    }
    if (const json *l = member(f, "label")) {
        if (!l->is_string() || l->get_ref<const std::string &>().size() > kMaxLabelBytes)
            v.fail(prefix + "label", "must be a string of at most 128 bytes");
        else if (std::any_of(l->get_ref<const std::string &>().begin(), l->get_ref<const std::string &>().end(),
                             [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
            v.fail(prefix + "label", "must be one line without control characters");
        else if (!l->get_ref<const std::string &>().empty())
            d.label = l->get<std::string>();
    }
    if (const json *r = member(f, "required")) {
        if (!r->is_boolean())
            v.fail(prefix + "required", "must be true or false");
        else
            d.required = r->get<bool>();
    }
    if (const json *s = member(f, "sensitive")) {
        if (!s->is_boolean())
            v.fail(prefix + "sensitive", "must be true or false");
        else
            d.sensitive = s->get<bool>();
    }
    if (!d.sensitive && must_be_sensitive(d.type))
        v.fail(prefix + "sensitive", "must be true for a " + d.type + " field");
    return d;
}

bool is_base64url(std::string_view s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) || c == '-' || c == '_'; });
}

} // namespace

std::string parse_vault_name(const json &body) {
    Validation v;
    only_members(v, body, "", {"name"});
    auto name = string_member(v, body, "", "name", true);
    if (name && !hangar::valid_resource_name(*name))
        v.fail("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
    v.throw_if_failed("invalid vault");
    return *name;
}

KernelCredentialSpec parse_kernel_credential(const json &spec) {
    Validation v;
    KernelCredentialSpec out;
    only_members(v, spec, "spec.", {"provider", "fields", "description"});
    const json *fields = member(spec, "fields");
    if (!fields || !fields->is_array() || fields->empty()) {
        v.fail("spec.fields", "must be a non-empty array of fields");
    } else if (fields->size() > kMaxFields) {
        v.fail("spec.fields", "must have at most 32 fields");
    } else {
        std::set<std::string> names;
        for (std::size_t i = 0; i < fields->size(); ++i) {
            std::string prefix = "spec.fields[" + std::to_string(i) + "].";
            auto d = field_def(v, (*fields)[i], prefix, true);
            if (!d) continue;
            if (!names.insert(d->name).second) v.fail(prefix + "name", "repeats another field's name");
            if (auto in = value_input(v, (*fields)[i], prefix, true)) {
                if (in->value) check_value(*d, *in->value); // throws its own 400
                out.values[d->name] = *in;
            }
            out.fields.push_back(*d);
        }
    }
    if (const json *d = member(spec, "description")) {
        if (!d->is_string() || d->get_ref<const std::string &>().size() > kMaxDescriptionBytes)
            v.fail("spec.description", "must be a string of at most 16 KiB");
        else if (!d->get_ref<const std::string &>().empty())
            out.description = d->get<std::string>();
    }
    v.throw_if_failed("invalid credential spec");
    return out;
}

json field_defs_json(const std::vector<FieldDef> &defs) {
    json out = json::array();
    for (const auto &d : defs) {
        json f = {{"name", d.name}, {"type", d.type}, {"required", d.required}, {"sensitive", d.sensitive}};
        if (d.label) f["label"] = *d.label;
        out.push_back(std::move(f));
    }
    return out;
}

std::vector<FieldDef> field_defs_from_json(const json &defs) {
    std::vector<FieldDef> out;
    if (!defs.is_array()) return out;
    for (const auto &f : defs) {
        FieldDef d;
        d.name = f.value("name", "");
        d.type = f.value("type", "text");
        if (f.contains("label") && f["label"].is_string()) d.label = f["label"].get<std::string>();
        d.required = f.value("required", false);
        d.sensitive = f.value("sensitive", true);
        out.push_back(std::move(d));
    }
    return out;
}

CredentialUpdate parse_credential_update(const json &spec) {
    Validation v;
    CredentialUpdate out;
    if (!spec.is_object()) throw Error::invalid("spec", "must be an object");
    only_members(v, spec, "spec.", {"add_fields", "remove_fields", "fields", "description"});
    if (const json *a = member(spec, "add_fields")) {
        if (!a->is_array()) {
            v.fail("spec.add_fields", "must be an array of field definitions");
        } else {
            for (std::size_t i = 0; i < a->size(); ++i)
                if (auto d = field_def(v, (*a)[i], "spec.add_fields[" + std::to_string(i) + "].", false))
                    out.add.push_back(*d);
        }
    }
    if (const json *r = member(spec, "remove_fields")) {
        if (!r->is_array()) {
            v.fail("spec.remove_fields", "must be an array of field names");
        } else {
            for (std::size_t i = 0; i < r->size(); ++i) {
                if (!(*r)[i].is_string())
                    v.fail("spec.remove_fields[" + std::to_string(i) + "]", "must be a field name");
                else
                    out.remove.push_back((*r)[i].get<std::string>());
            }
        }
    }
    if (const json *f = member(spec, "fields")) {
        if (!f->is_object()) {
            v.fail("spec.fields", "must be an object of field name to {value} or {encrypted_value}");
        } else {
            for (const auto &[name, update] : f->items()) {
                std::string prefix = "spec.fields." + name + ".";
                if (!update.is_object()) {
                    v.fail("spec.fields." + name, "must be {value} or {encrypted_value}");
                    continue;
                }
                only_members(v, update, prefix, {"value", "encrypted_value"});
                if (auto in = value_input(v, update, prefix, false)) out.fields[name] = *in;
            }
        }
    }
    if (const json *d = member(spec, "description")) {
        if (!d->is_string() || d->get_ref<const std::string &>().size() > kMaxDescriptionBytes)
            v.fail("spec.description", "must be a string of at most 16 KiB");
        else
            out.description = d->get<std::string>();
    }
    v.throw_if_failed("invalid credential update");
    return out;
}

AppliedUpdate apply_update(const std::vector<FieldDef> &defs, const std::set<std::string> &has_value,
                           const CredentialUpdate &update) {
    Validation v;
    AppliedUpdate out;
    out.defs = defs;
    // 1. remove_fields
    for (const auto &name : update.remove) {
        auto it = std::find_if(out.defs.begin(), out.defs.end(), [&](const FieldDef &d) { return d.name == name; });
        if (it == out.defs.end()) {
            v.fail("spec.remove_fields", "no field is named \"" + name + "\"");
            continue;
        }
        out.defs.erase(it);
        out.dropped.push_back(name);
    }
    // 2. add_fields: new names only (a definition is never edited in place)
    for (const auto &d : update.add) {
        if (std::any_of(out.defs.begin(), out.defs.end(), [&](const FieldDef &e) { return e.name == d.name; })) {
            v.fail("spec.add_fields",
                   "a field named \"" + d.name + "\" exists: remove it and add it again to change its definition");
            continue;
        }
        out.defs.push_back(d);
    }
    if (out.defs.empty()) v.fail("spec.remove_fields", "at least one field must remain");
    if (out.defs.size() > kMaxFields) v.fail("spec.add_fields", "an item holds at most 32 fields");
    v.throw_if_failed("invalid credential update");
    // 3. values
    for (const auto &[field_name, in] : update.fields) {
        const std::string &name = field_name; // a lambda may not capture a structured binding (C++17)
        auto it = std::find_if(out.defs.begin(), out.defs.end(), [&](const FieldDef &d) { return d.name == name; });
        if (it == out.defs.end()) {
            v.fail("spec.fields." + name, "is not a field of this item");
            continue;
        }
        if (in.clear) {
            if (it->required && (it->type == "totp" || it->type == "passkey"))
                v.fail("spec.fields." + name, "a required " + it->type + " field cannot be cleared");
            else
                out.set[name] = std::nullopt;
            continue;
        }
        if (!in.value) {
            v.fail("spec.fields." + name, "encrypted_value must be decrypted before it is applied");
            continue;
        }
        check_value(*it, *in.value);
        out.set[name] = *in.value;
    }
    (void)has_value;
    v.throw_if_failed("invalid credential update");
    return out;
}

std::string credential_status(const std::vector<FieldDef> &defs, const std::set<std::string> &has_value) {
    for (const auto &d : defs)
        if (d.required && !has_value.count(d.name)) return "pending_collection";
    return "ready";
}

bool looks_like_card_number(std::string_view value) {
    std::string digits;
    for (char c : value) {
        if (std::isdigit(static_cast<unsigned char>(c)))
            digits.push_back(c);
        else if (c != ' ' && c != '-')
            return false;
    }
    if (digits.size() < 13 || digits.size() > 19) return false;
    int sum = 0;
    bool twice = false;
    for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
        int d = *it - '0';
        if (twice) {
            d *= 2;
            if (d > 9) d -= 9;
        }
        sum += d;
        twice = !twice;
    }
    return sum % 10 == 0;
}

void check_value(const FieldDef &def, const std::string &value) {
    const std::string where = "fields." + def.name;
    if (value.size() > kMaxValueBytes) throw Error::invalid(where, "must be at most 16 KiB");
    if (looks_like_card_number(value))
        throw Error::invalid(where, "looks like a card number: credential items must not hold card data (use a "
                                    "wallet or card item)");
    if (def.type == "email" && (value.find('@') == std::string::npos || value.find(' ') != std::string::npos))
        throw Error::invalid(where, "must be an email address");
    if (def.type == "totp" && value.rfind("otpauth:", 0) == 0)
        throw Error::invalid(where, "must be a base32 seed, not an otpauth:// URI");
    if (def.type == "passkey") {
        json p = json::parse(value, nullptr, false);
        if (!p.is_object()) throw Error::invalid(where, "must be a JSON FIDO CXF passkey object");
        for (const char *k : {"credentialId", "userHandle", "key", "rpId"})
            if (!p.contains(k) || !p[k].is_string() || p[k].get_ref<const std::string &>().empty())
                throw Error::invalid(where, std::string("must have a string ") + k);
        if (!is_base64url(p["credentialId"].get<std::string>()) || !is_base64url(p["userHandle"].get<std::string>()) ||
            !is_base64url(p["key"].get<std::string>()))
            throw Error::invalid(where, "credentialId, userHandle and key must be unpadded base64url");
        auto handle = base64url_decode(p["userHandle"].get<std::string>());
        if (!handle || handle->size() > 64) throw Error::invalid(where, "userHandle must be at most 64 bytes");
        const auto &rp = p["rpId"].get_ref<const std::string &>();
        if (std::any_of(rp.begin(), rp.end(), [](unsigned char c) { return std::isupper(c) || c == '/' || c == ':'; }))
            throw Error::invalid(where, "rpId must be a lowercase domain");
        auto key = base64url_decode(p["key"].get<std::string>());
        const unsigned char *der = key ? reinterpret_cast<const unsigned char *>(key->data()) : nullptr;
        PKCS8_PRIV_KEY_INFO *p8 =
            der ? d2i_PKCS8_PRIV_KEY_INFO(nullptr, &der, static_cast<long>(key->size())) : nullptr;
        EVP_PKEY *pkey = p8 ? EVP_PKCS82PKEY(p8) : nullptr;
        bool ec = pkey && EVP_PKEY_is_a(pkey, "EC");
        char group[32] = {0};
        std::size_t glen = 0;
        if (ec) EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &glen);
        EVP_PKEY_free(pkey);
        PKCS8_PRIV_KEY_INFO_free(p8);
        if (!ec || std::string(group) != "prime256v1")
            throw Error::invalid(where, "key must be a PKCS#8 ECDSA P-256 private key");
    }
}

// ---- other item specs ---------------------------------------------------------------------------

namespace {

std::optional<json> reference(Validation &v, const json &body, const std::string &field) {
    const json *r = member(body, field.substr(field.rfind('.') + 1).c_str());
    if (!r) return std::nullopt;
    if (!r->is_object()) {
        v.fail(field, "must be {id} or {name}");
        return std::nullopt;
    }
    int n = 0;
    json out = json::object();
    for (const char *k : {"id", "name"})
        if (const json *x = member(*r, k)) {
            ++n;
            if (!x->is_string() || x->get_ref<const std::string &>().empty())
                v.fail(field + "." + k, "must be a non-empty string");
            else
                out[k] = *x;
        }
    if (n != 1) {
        v.fail(field, "must name exactly one of id and name");
        return std::nullopt;
    }
    return out;
}

std::optional<std::int64_t> integer(Validation &v, const json &body, const std::string &prefix, const char *name,
                                    bool required, std::int64_t min, std::int64_t max) {
    const json *f = member(body, name);
    if (!f) {
        if (required) v.fail(prefix + name, "is required");
        return std::nullopt;
    }
    if (!f->is_number_integer() || f->get<std::int64_t>() < min || f->get<std::int64_t>() > max) {
        v.fail(prefix + name, "must be an integer from " + std::to_string(min) + " to " + std::to_string(max));
        return std::nullopt;
    }
    return f->get<std::int64_t>();
}

bool http_url(const std::string &s) {
    return (s.rfind("https://", 0) == 0 && s.size() > 8) || (s.rfind("http://", 0) == 0 && s.size() > 7);
}

const std::set<std::string> kKernelCurrencies = {"aud", "brl", "cad", "chf", "czk", "dkk", "eur", "gbp", "hkd", "inr",
                                                 "jpy", "krw", "mxn", "nok", "nzd", "pln", "sek", "sgd", "usd", "zar"};

} // namespace

OtherSpec parse_other_spec(const std::string &type, const json &spec) {
    Validation v;
    OtherSpec out;
    if (!spec.is_object()) throw Error::invalid("spec", "must be an object");
    auto provider = string_member(v, spec, "spec.", "provider", true, 32);
    v.throw_if_failed("invalid " + type + " spec");
    out.provider = *provider;
    const std::string &p = out.provider;
    const std::string pre = "spec.";
    if (type == "credential" && p == "managed_auth") {
        only_members(v, spec, pre, {"provider", "connection_id", "description"});
        auto conn = string_member(v, spec, pre, "connection_id", true);
        out.shown = {{"provider", p}};
        if (conn) out.shown["connection_id"] = *conn;
        if (const json *d = member(spec, "description")) {
            if (!d->is_string() || d->get_ref<const std::string &>().size() > kMaxDescriptionBytes)
                v.fail("spec.description", "must be a string of at most 16 KiB");
            else
                out.shown["description"] = *d;
        }
    } else if (type == "credential" && p == "1password") {
        only_members(v, spec, pre,
                     {"provider", "account", "access_token", "integration_key", "access_token_expires_at", "requests",
                      "website"});
        out.shown = {{"provider", p}};
        auto account = string_member(v, spec, pre, "account", false);
        auto token = string_member(v, spec, pre, "access_token", false, 16384);
        auto integration = string_member(v, spec, pre, "integration_key", false, 16384);
        if (account && (token || integration)) v.fail("spec.account", "cannot be combined with access_token");
        if (!account && !token) v.fail("spec.account", "or access_token is required");
        if (integration && !token) v.fail("spec.integration_key", "needs access_token");
        if (account) out.shown["account"] = *account;
        if (token) out.secrets["access_token"] = *token;
        if (integration) out.secrets["integration_key"] = *integration;
        if (auto e = string_member(v, spec, pre, "access_token_expires_at", false)) {
            if (!hangar::parse_rfc3339_us(*e))
                v.fail("spec.access_token_expires_at", "must be an RFC 3339 time");
            else
                out.shown["access_token_expires_at"] = *e;
        }
        json requests;
        if (const json *r = member(spec, "requests")) {
            if (!r->is_object() || r->value("version", json()) != json(2) || !r->contains("entries") ||
                !(*r)["entries"].is_array() || (*r)["entries"].empty() || (*r)["entries"].size() > 5) {
                v.fail("spec.requests", "must be {version: 2, entries: [1 to 5 login requests], goal?}");
            } else {
                for (std::size_t i = 0; i < (*r)["entries"].size(); ++i) {
                    const json &e = (*r)["entries"][i];
                    if (!e.is_object() || text(e, "type") != "login" || !e.contains("parameters") ||
                        !e["parameters"].is_object() || !e["parameters"].value("website", json()).is_string())
                        v.fail("spec.requests.entries[" + std::to_string(i) + "]",
                               "must be {type: login, parameters: {website}, keywords?, reason?}");
                }
                requests = *r;
            }
        }
        if (auto w = string_member(v, spec, pre, "website", false, 2048)) {
            if (!requests.is_null()) v.fail("spec.website", "cannot be combined with requests");
            requests = {{"version", 2}, {"entries", {{{"type", "login"}, {"parameters", {{"website", *w}}}}}}};
        }
        if (requests.is_null()) v.fail("spec.requests", "or website is required");
        out.shown["requests"] = requests;
    } else if (type == "credential") {
        v.fail("spec.provider", "must be kernel, 1password or managed_auth");
    } else if (type == "credential_account") {
        only_members(v, spec, pre, {"provider", "authorization"});
        if (p != "1password") v.fail("spec.provider", "must be 1password");
        const json *a = member(spec, "authorization");
        if (!a || !a->is_object() || text(*a, "method") != "oauth" || !a->contains("client") ||
            !(*a)["client"].is_object() || text((*a)["client"], "type") != "kernel_managed")
            v.fail("spec.authorization", "must be {method: oauth, client: {type: kernel_managed}}");
        out.shown = {{"provider", p},
                     {"authorization", {{"method", "oauth"}, {"client", {{"type", "kernel_managed"}}}}}};
    } else if (type == "wallet") {
        out.shown = {{"provider", p}};
        if (p == "link") {
            only_members(v, spec, pre, {"provider", "authorization"});
            const json *a = member(spec, "authorization");
            const json *client = a && a->is_object() ? member(*a, "client") : nullptr;
            std::string ctype = client && client->is_object() ? text(*client, "type") : "";
            if (!a || !a->is_object() || text(*a, "method") != "oauth" ||
                (ctype != "kernel_managed" && ctype != "customer_managed")) {
                v.fail("spec.authorization", "must be {method: oauth, client: {type: kernel_managed | "
                                             "customer_managed, provider_config?}, tokens?}");
            } else {
                json shown_client = {{"type", ctype}};
                if (ctype == "customer_managed" && client) {
                    if (auto ref = reference(v, *client, "spec.authorization.client.provider_config")) {
                        out.provider_config = *ref;
                        shown_client["provider_config"] = *ref;
                    } else {
                        v.fail("spec.authorization.client.provider_config", "is required with customer_managed");
                    }
                    const json *t = member(*a, "tokens");
                    if (!t || !t->is_object() || !t->value("access_token", json()).is_string() ||
                        !t->value("refresh_token", json()).is_string())
                        v.fail("spec.authorization.tokens", "{access_token, refresh_token} are required with "
                                                            "customer_managed");
                    else
                        out.secrets["tokens"] = *t;
                } else if (member(*a, "tokens")) {
                    v.fail("spec.authorization.tokens", "are only sent with customer_managed");
                }
                out.shown["authorization"] = {{"method", "oauth"}, {"client", shown_client}};
            }
        } else if (p == "agentcard") {
            only_members(v, spec, pre, {"provider", "provider_config", "user_id"});
            if (auto ref = reference(v, spec, "spec.provider_config")) {
                out.provider_config = *ref;
                out.shown["provider_config"] = *ref;
            }
            if (auto u = string_member(v, spec, pre, "user_id", false)) out.shown["user_id"] = *u;
        } else if (p == "kernel") {
            only_members(v, spec, pre, {"provider"});
        } else {
            v.fail("spec.provider", "must be link, agentcard or kernel");
        }
    } else if (type == "card") {
        out.shown = {{"provider", p}};
        auto copy = [&](const char *k) {
            if (const json *x = member(spec, k)) out.shown[k] = *x;
        };
        if (p == "link") {
            only_members(v, spec, pre,
                         {"provider", "wallet", "payment_method_id", "amount", "currency", "merchant_name",
                          "merchant_url", "context", "line_items", "totals", "metadata", "recurring"});
            string_member(v, spec, pre, "wallet", true);
            string_member(v, spec, pre, "payment_method_id", true);
            integer(v, spec, pre, "amount", true, 1, 50000);
            string_member(v, spec, pre, "currency", true, 3);
            string_member(v, spec, pre, "merchant_name", true);
            if (auto u = string_member(v, spec, pre, "merchant_url", true, 2048); u && !http_url(*u))
                v.fail("spec.merchant_url", "must be an http(s) URL");
            string_member(v, spec, pre, "context", true, 4096);
            for (const char *k : {"line_items", "totals"})
                if (const json *x = member(spec, k); x && !x->is_array()) v.fail(pre + k, "must be an array");
            if (const json *m = member(spec, "metadata"); m && !m->is_object())
                v.fail("spec.metadata", "must be an object of strings");
            if (const json *r = member(spec, "recurring")) {
                static const std::set<std::string> intervals = {"day", "week", "month", "year"};
                if (!r->is_object() || !intervals.count(text(*r, "interval")))
                    v.fail("spec.recurring", "must be {interval: day|week|month|year, interval_count?}");
            }
            for (const char *k : {"wallet", "payment_method_id", "amount", "currency", "merchant_name", "merchant_url",
                                  "context", "line_items", "totals", "metadata", "recurring"})
                copy(k);
        } else if (p == "agentcard") {
            only_members(v, spec, pre,
                         {"provider", "wallet", "amount", "currency", "merchant", "card_id", "checkout_origin"});
            string_member(v, spec, pre, "wallet", true);
            integer(v, spec, pre, "amount", true, 1, 100000000);
            string_member(v, spec, pre, "currency", true, 3);
            string_member(v, spec, pre, "merchant", true);
            string_member(v, spec, pre, "card_id", false);
            string_member(v, spec, pre, "checkout_origin", false, 2048);
            for (const char *k : {"wallet", "amount", "currency", "merchant", "card_id", "checkout_origin"})
                copy(k);
        } else if (p == "kernel") {
            only_members(v, spec, pre,
                         {"provider", "wallet", "amount", "currency", "merchant_name", "merchant_url",
                          "merchant_category", "merchant_category_code", "merchant_country"});
            string_member(v, spec, pre, "wallet", true);
            integer(v, spec, pre, "amount", true, 1, 1000000);
            if (auto c = string_member(v, spec, pre, "currency", true, 3); c && !kKernelCurrencies.count(*c))
                v.fail("spec.currency", "is not a currency Kernel cards support");
            string_member(v, spec, pre, "merchant_name", true);
            if (auto u = string_member(v, spec, pre, "merchant_url", true, 2048); u && !http_url(*u))
                v.fail("spec.merchant_url", "must be an http(s) URL");
            string_member(v, spec, pre, "merchant_category", false);
            if (auto m = string_member(v, spec, pre, "merchant_category_code", false, 4); m && *m == "0000")
                v.fail("spec.merchant_category_code", "must not be 0000");
            if (auto c = string_member(v, spec, pre, "merchant_country", false, 2); c && c->size() != 2)
                v.fail("spec.merchant_country", "must be an ISO 3166-1 alpha-2 code");
            for (const char *k : {"wallet", "amount", "currency", "merchant_name", "merchant_url", "merchant_category",
                                  "merchant_category_code", "merchant_country"})
                copy(k);
        } else {
            v.fail("spec.provider", "must be link, agentcard or kernel");
        }
    } else {
        v.fail("type", "must be wallet, card, credential_account or credential");
    }
    v.throw_if_failed("invalid " + type + " spec");
    return out;
}

// ---- managed-auth items ----------------------------------------------------------------------------

std::string managed_auth_field_type(const std::string &value_name) {
    const std::string lower = hangar::lower(value_name);
    if (lower.find("password") != std::string::npos) return "password";
    if (lower.find("email") != std::string::npos) return "email";
    return "text";
}

bool managed_auth_usable(const std::string &value_name) {
    return value_name != "totp_secret";
}

json managed_auth_fields(const json &value_keys, bool has_totp) {
    json out = json::object();
    if (value_keys.is_array())
        for (const auto &k : value_keys)
            if (k.is_string() && managed_auth_usable(k.get<std::string>()))
                out[k.get<std::string>()] = {{"type", managed_auth_field_type(k.get<std::string>())}};
    if (has_totp) out["totp"] = {{"type", "totp"}};
    return out;
}

// ---- the hosted collection form -------------------------------------------------------------------

bool form_field(const FieldDef &def) {
    return def.type == "text" || def.type == "email" || def.type == "password";
}

std::map<std::string, std::string> form_changes(const std::vector<FieldDef> &defs, const json &values,
                                                const std::vector<std::pair<std::string, std::string>> &form) {
    std::map<std::string, std::string> sent;
    for (const auto &[k, v] : form)
        if (k.rfind("f.", 0) == 0) sent[k.substr(2)] = v;
    std::map<std::string, std::string> out;
    for (const auto &d : defs) {
        if (!form_field(d)) continue;
        auto it = sent.find(d.name);
        bool given = it != sent.end() && !it->second.empty();
        bool stored = values.contains(d.name);
        if (given) {
            check_value(d, it->second);
            if (d.sensitive || !stored || values.at(d.name) != it->second) out[d.name] = it->second;
        } else if (d.required && !stored) {
            throw Error::invalid("fields." + d.name, "is required");
        }
    }
    return out;
}

// ---- operations ---------------------------------------------------------------------------------

std::vector<Operation> available_operations(const std::string &type, const std::string &provider,
                                            const std::string &status, const std::vector<FieldDef> &defs,
                                            const std::set<std::string> &has_value) {
    std::vector<Operation> ops;
    if (type != "credential") return ops; // payment and account-link providers: nothing Hangar performs
    if (provider == "managed_auth") {
        if (status == "ready")
            ops.push_back({"fill", "Type the connection's saved login into a page of an attached browser; never "
                                   "submits."});
        return ops;
    }
    if (provider != "kernel") return ops;
    bool fillable = false, passkey = false, passkey_value = false, passkey_empty = false, form = false;
    for (const auto &d : defs) {
        form = form || form_field(d);
        bool set = has_value.count(d.name) > 0;
        if (d.type == "passkey") {
            passkey = true;
            (set ? passkey_value : passkey_empty) = true;
        } else if (set) {
            fillable = true;
        }
    }
    if (status == "ready" && fillable) {
        ops.push_back({"fill", "Type the item's text, email, password and TOTP values (a current code) into a page "
                               "of an attached browser; never submits."});
        ops.push_back({"webmcp_invoke", "Invoke a page's WebMCP tool with the item's values bound at null slots of "
                                        "the input."});
    }
    if (form)
        ops.push_back({"collect", "A hosted form (a secret URL, 30 minutes, one submission) where a person enters the "
                                  "item's text, email and password values; GET the item with wait to see it filled."});
    if (passkey_value)
        ops.push_back({"arm_passkey", "Let an attached browser answer navigator.credentials.get for the passkey's "
                                      "relying party with the stored passkey, until disarmed or the browser ends."});
    if (passkey_empty)
        ops.push_back({"register_passkey", "The next navigator.credentials.create in an attached browser makes an "
                                           "ES256 passkey that is stored in the empty passkey field."});
    if (passkey) ops.push_back({"disarm_passkey", "Remove the browser's armed passkeys and any pending registration."});
    return ops;
}

json operations_json(const std::vector<Operation> &ops) {
    json out = json::array();
    for (const auto &o : ops)
        out.push_back({{"type", o.type}, {"description", o.description}});
    return out;
}

std::optional<std::string> unsupported_operation(const std::string &op, const std::string &type,
                                                 const std::string &provider) {
    static const std::set<std::string> known = {"authorize",
                                                "restart_verification",
                                                "confirm_transaction",
                                                "collect",
                                                "prepare_checkout",
                                                "fill",
                                                "arm_passkey",
                                                "register_passkey",
                                                "disarm_passkey",
                                                "1pw_create_access_request",
                                                "1pw_access_request_status",
                                                "1pw_fill",
                                                "1pw_recover",
                                                "1pw_update_access_token",
                                                "webmcp_invoke"};
    if (!known.count(op)) return std::nullopt; // a 400 for the caller, not a missing feature
    if (op == "authorize" || op == "prepare_checkout" || op == "confirm_transaction" || op == "restart_verification" ||
        ((type == "wallet" || type == "card") && op != "webmcp_invoke"))
        return op + " needs a payment provider integration (" +
               (provider.empty() ? std::string("Stripe Link, AgentCard or Kernel cards") : provider) +
               ") that Hangar does not have; no payment is made";
    if (op.rfind("1pw_", 0) == 0 || type == "credential_account")
        return op + " needs 1Password's agent autofill service (access requests approved in the 1Password app, "
                    "its browser extension), which Hangar does not have; Hangar's 1Password support is 1Password "
                    "Connect through the credentials plugin";
    if (op == "collect" && !(type == "credential" && provider == "kernel"))
        return "collect applies to kernel credential items; this " + provider + " " + type + " has no form";
    if ((op == "arm_passkey" || op == "register_passkey" || op == "disarm_passkey") &&
        !(type == "credential" && provider == "kernel"))
        return op + " applies to passkey fields of kernel credentials; this " + provider + " " + type + " has none";
    return std::nullopt;
}

FillRequest parse_fill(const json &body) {
    Validation v;
    FillRequest out;
    only_members(v, body, "", {"type", "browser_id", "page_url", "fields", "timeout_ms"});
    if (auto b = string_member(v, body, "", "browser_id", true)) out.browser_id = *b;
    out.page_url = string_member(v, body, "", "page_url", false, 8192);
    if (const json *t = member(body, "timeout_ms"); t && !t->is_number_integer())
        v.fail("timeout_ms", "must be an integer");
    if (const json *f = member(body, "fields")) {
        if (!f->is_array() || f->empty() || f->size() > kMaxFields) {
            v.fail("fields", "must be an array of 1 to 32 {field, selector}");
        } else {
            out.fields.emplace();
            for (std::size_t i = 0; i < f->size(); ++i) {
                std::string prefix = "fields[" + std::to_string(i) + "].";
                const json &b = (*f)[i];
                if (!b.is_object()) {
                    v.fail("fields[" + std::to_string(i) + "]", "must be {field, selector}");
                    continue;
                }
                only_members(v, b, prefix, {"field", "selector", "format"});
                auto field = string_member(v, b, prefix, "field", true, kMaxNameBytes);
                auto sel = string_member(v, b, prefix, "selector", true, 4096);
                if (member(b, "format")) v.fail(prefix + "format", "applies to card expiry fields only");
                if (field && sel) out.fields->push_back({*field, *sel});
            }
        }
    }
    v.throw_if_failed("invalid fill operation");
    return out;
}

PasskeyRequest parse_passkey(const json &body) {
    Validation v;
    PasskeyRequest out;
    only_members(v, body, "", {"type", "browser_id", "field"});
    if (auto b = string_member(v, body, "", "browser_id", true)) out.browser_id = *b;
    out.field = string_member(v, body, "", "field", false, kMaxNameBytes);
    v.throw_if_failed("invalid passkey operation");
    return out;
}

namespace {
std::string std_from_url(const std::string &url) {
    auto bytes = base64url_decode(url);
    if (!bytes) throw Error::internal("a stored passkey does not decode");
    std::string out = base64url_encode(*bytes);
    for (auto &ch : out)
        ch = ch == '-' ? '+' : ch == '_' ? '/' : ch;
    while (out.size() % 4)
        out.push_back('=');
    return out;
}
std::string url_from_std(std::string std64) {
    while (!std64.empty() && std64.back() == '=')
        std64.pop_back();
    for (auto &ch : std64)
        ch = ch == '+' ? '-' : ch == '/' ? '_' : ch;
    return std64;
}
} // namespace

json passkey_to_cdp(const std::string &cxf) {
    json p = json::parse(cxf, nullptr, false);
    if (!p.is_object()) throw Error::internal("a stored passkey does not parse");
    return {{"credentialId", std_from_url(p.value("credentialId", ""))},
            {"isResidentCredential", true},
            {"rpId", p.value("rpId", "")},
            {"privateKey", std_from_url(p.value("key", ""))},
            {"userHandle", std_from_url(p.value("userHandle", ""))},
            {"signCount", 0}};
}

std::string passkey_from_cdp(const json &credential) {
    json out = {{"credentialId", url_from_std(credential.value("credentialId", ""))},
                {"userHandle", url_from_std(credential.value("userHandle", ""))},
                {"key", url_from_std(credential.value("privateKey", ""))},
                {"rpId", credential.value("rpId", "")}};
    if (credential.contains("userName") && credential["userName"].is_string() &&
        !credential["userName"].get_ref<const std::string &>().empty())
        out["username"] = credential["userName"];
    if (credential.contains("userDisplayName") && credential["userDisplayName"].is_string() &&
        !credential["userDisplayName"].get_ref<const std::string &>().empty())
        out["userDisplayName"] = credential["userDisplayName"];
    return out.dump();
}

WebmcpRequest parse_webmcp(const json &body) {
    Validation v;
    WebmcpRequest out;
    only_members(v, body, "", {"type", "browser_id", "page_url", "tool_ref", "input", "bindings", "timeout_sec"});
    if (auto b = string_member(v, body, "", "browser_id", true)) out.browser_id = *b;
    if (auto p = string_member(v, body, "", "page_url", true, 8192)) out.page_url = *p;
    if (auto t = string_member(v, body, "", "tool_ref", true, 4096)) out.tool_ref = *t;
    const json *in = member(body, "input");
    if (!in || !in->is_object())
        v.fail("input", "must be an object");
    else if (in->dump().size() > kMaxWebmcpInput)
        v.fail("input", "must be at most 64 KiB of JSON");
    else
        out.input = *in;
    if (auto t = integer(v, body, "", "timeout_sec", false, 1, 600)) out.timeout_sec = static_cast<int>(*t);
    const json *b = member(body, "bindings");
    if (!b || !b->is_array() || b->empty() || b->size() > kMaxFields) {
        v.fail("bindings", "must be an array of 1 to 32 {field, input_path}");
    } else {
        std::set<std::string> paths;
        for (std::size_t i = 0; i < b->size(); ++i) {
            std::string prefix = "bindings[" + std::to_string(i) + "].";
            const json &e = (*b)[i];
            if (!e.is_object()) {
                v.fail("bindings[" + std::to_string(i) + "]", "must be {field, input_path}");
                continue;
            }
            only_members(v, e, prefix, {"field", "input_path", "format"});
            if (member(e, "format")) v.fail(prefix + "format", "applies to card expiry fields only");
            auto field = string_member(v, e, prefix, "field", true, kMaxNameBytes);
            auto path = string_member(v, e, prefix, "input_path", true, 4096);
            if (path && !parse_pointer(*path)) v.fail(prefix + "input_path", "must be an RFC 6901 JSON pointer");
            if (path && !paths.insert(*path).second) v.fail(prefix + "input_path", "is bound twice");
            if (field && path) out.bindings.push_back({*field, *path});
        }
    }
    v.throw_if_failed("invalid webmcp_invoke operation");
    return out;
}

std::optional<std::vector<std::string>> parse_pointer(std::string_view pointer) {
    if (pointer.empty() || pointer.front() != '/') return std::nullopt;
    std::vector<std::string> tokens;
    std::string cur;
    for (std::size_t i = 1; i <= pointer.size(); ++i) {
        if (i == pointer.size() || pointer[i] == '/') {
            tokens.push_back(cur);
            cur.clear();
            continue;
        }
        char c = pointer[i];
        if (c == '~') {
            if (i + 1 >= pointer.size() || (pointer[i + 1] != '0' && pointer[i + 1] != '1')) return std::nullopt;
            cur.push_back(pointer[i + 1] == '0' ? '~' : '/');
            ++i;
        } else {
            cur.push_back(c);
        }
    }
    return tokens;
}

void bind_pointer(json &doc, std::string_view pointer, const std::string &value, const std::string &what) {
    auto tokens = parse_pointer(pointer);
    if (!tokens) throw Error::invalid(what, "must be an RFC 6901 JSON pointer");
    json *at = &doc;
    for (const auto &t : *tokens) {
        if (at->is_object()) {
            auto it = at->find(t);
            if (it == at->end()) throw Error::invalid(what, "does not point at an existing member of input");
            at = &*it;
        } else if (at->is_array()) {
            bool digits =
                !t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); });
            if (!digits || (t.size() > 1 && t[0] == '0') || t.size() > 9 || std::stoul(t) >= at->size())
                throw Error::invalid(what, "does not point at an existing element of input");
            at = &(*at)[std::stoul(t)];
        } else {
            throw Error::invalid(what, "does not point at an existing member of input");
        }
    }
    if (!at->is_null()) throw Error::invalid(what, "must point at a null slot of input");
    *at = value;
}

json fill_result(std::size_t bindings, const std::vector<std::string> &outcomes) {
    json fields = json::array();
    std::string status = "completed";
    for (std::size_t i = 0; i < bindings; ++i) {
        json f = {{"index", i}};
        if (status != "completed" || i >= outcomes.size()) {
            f["status"] = status == "completed" ? "unknown" : "not_attempted";
            if (status == "completed") status = "unknown";
        } else if (outcomes[i] == "filled") {
            f["status"] = "filled";
        } else if (outcomes[i] == "unknown") {
            f["status"] = "unknown";
            status = "unknown";
        } else {
            f["status"] = "failed";
            f["error_code"] = outcomes[i];
            status = "failed";
        }
        fields.push_back(std::move(f));
    }
    return {{"type", "fill"}, {"status", status}, {"fields", fields}};
}

// ---- vault provider configs ---------------------------------------------------------------------

ProviderConfigCreate parse_provider_config_create(const json &body) {
    Validation v;
    ProviderConfigCreate out;
    only_members(v, body, "", {"provider", "name", "credentials"});
    if (auto p = string_member(v, body, "", "provider", true, 16)) {
        if (*p != "link" && *p != "agentcard")
            v.fail("provider", "must be link or agentcard");
        else
            out.provider = *p;
    }
    if (auto n = string_member(v, body, "", "name", true)) {
        if (!hangar::valid_resource_name(*n))
            v.fail("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        out.name = *n;
    }
    const json *c = member(body, "credentials");
    if (!c || !c->is_object()) {
        v.fail("credentials", "must be {client_id, client_secret, publishable_key?}");
    } else {
        only_members(v, *c, "credentials.", {"client_id", "client_secret", "publishable_key"});
        if (auto id = string_member(v, *c, "credentials.", "client_id", true, 1024)) out.client_id = *id;
        if (auto s = string_member(v, *c, "credentials.", "client_secret", true, 4096)) out.client_secret = *s;
        out.publishable_key = string_member(v, *c, "credentials.", "publishable_key", false, 1024);
        if (out.publishable_key && out.provider == "agentcard")
            v.fail("credentials.publishable_key", "is for link configurations only");
    }
    v.throw_if_failed("invalid vault provider config");
    return out;
}

ProviderConfigUpdate parse_provider_config_update(const json &body, const std::string &provider) {
    Validation v;
    ProviderConfigUpdate out;
    only_members(v, body, "", {"name", "credentials"});
    if ((out.name = string_member(v, body, "", "name", false)) && !hangar::valid_resource_name(*out.name))
        v.fail("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
    if (const json *c = member(body, "credentials")) {
        if (!c->is_object()) {
            v.fail("credentials", "must be {client_secret?, publishable_key?}");
        } else {
            if (member(*c, "client_id")) v.fail("credentials.client_id", "is immutable: create another configuration");
            only_members(v, *c, "credentials.", {"client_id", "client_secret", "publishable_key"});
            out.client_secret = string_member(v, *c, "credentials.", "client_secret", false, 4096);
            out.publishable_key = string_member(v, *c, "credentials.", "publishable_key", false, 1024);
            if (out.publishable_key && provider != "link")
                v.fail("credentials.publishable_key", "is for link configurations only");
        }
    }
    v.throw_if_failed("invalid vault provider config update");
    return out;
}

// ---- keys and JWE -------------------------------------------------------------------------------

std::string base64url_encode(std::string_view bytes) {
    static constexpr char chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < bytes.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                     static_cast<unsigned char>(bytes[i + 2]);
        out += chars[(v >> 18) & 63];
        out += chars[(v >> 12) & 63];
        out += chars[(v >> 6) & 63];
        out += chars[v & 63];
    }
    if (i < bytes.size()) {
        unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
        if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
        out += chars[(v >> 18) & 63];
        out += chars[(v >> 12) & 63];
        if (i + 1 < bytes.size()) out += chars[(v >> 6) & 63];
    }
    return out;
}

std::optional<std::string> base64url_decode(std::string_view text) {
    std::string out;
    unsigned val = 0;
    int bits = -8;
    for (char c : text) {
        int d;
        if (c >= 'A' && c <= 'Z')
            d = c - 'A';
        else if (c >= 'a' && c <= 'z')
            d = c - 'a' + 26;
        else if (c >= '0' && c <= '9')
            d = c - '0' + 52;
        else if (c == '-')
            d = 62;
        else if (c == '_')
            d = 63;
        else
            return std::nullopt;
        val = (val << 6) | static_cast<unsigned>(d);
        bits += 6;
        if (bits >= 0) {
            out.push_back(static_cast<char>((val >> bits) & 0xFF));
            bits -= 8;
        }
    }
    if (text.size() % 4 == 1) return std::nullopt;
    return out;
}

namespace {

struct PkeyFree {
    void operator()(EVP_PKEY *p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
struct CtxFree {
    void operator()(EVP_PKEY_CTX *p) const { EVP_PKEY_CTX_free(p); }
};
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, CtxFree>;

Error bad_jwe() {
    return {400, "invalid_request", "encrypted_value is not a compact JWE (ECDH-ES, A256GCM) for this vault's key"};
}

std::string coordinate(const EVP_PKEY *pkey, const char *param) {
    BIGNUM *bn = nullptr;
    if (EVP_PKEY_get_bn_param(pkey, param, &bn) != 1) throw std::runtime_error("EC key without coordinates");
    std::array<unsigned char, 32> buf{};
    BN_bn2binpad(bn, buf.data(), static_cast<int>(buf.size()));
    BN_free(bn);
    return base64url_encode(std::string_view(reinterpret_cast<const char *>(buf.data()), buf.size()));
}

VaultKey describe(EVP_PKEY *pkey) {
    VaultKey k;
    PKCS8_PRIV_KEY_INFO *p8 = EVP_PKEY2PKCS8(pkey);
    if (!p8) throw std::runtime_error("could not encode the vault key");
    unsigned char *der = nullptr;
    int len = i2d_PKCS8_PRIV_KEY_INFO(p8, &der);
    PKCS8_PRIV_KEY_INFO_free(p8);
    if (len <= 0) throw std::runtime_error("could not encode the vault key");
    k.private_pkcs8.assign(reinterpret_cast<char *>(der), static_cast<std::size_t>(len));
    OPENSSL_clear_free(der, static_cast<std::size_t>(len));
    k.x = coordinate(pkey, OSSL_PKEY_PARAM_EC_PUB_X);
    k.y = coordinate(pkey, OSSL_PKEY_PARAM_EC_PUB_Y);
    return k;
}

Pkey load_pkcs8(const std::string &der) {
    const auto *p = reinterpret_cast<const unsigned char *>(der.data());
    PKCS8_PRIV_KEY_INFO *p8 = d2i_PKCS8_PRIV_KEY_INFO(nullptr, &p, static_cast<long>(der.size()));
    if (!p8) throw std::runtime_error("the stored vault key does not decode");
    Pkey key(EVP_PKCS82PKEY(p8));
    PKCS8_PRIV_KEY_INFO_free(p8);
    if (!key) throw std::runtime_error("the stored vault key does not decode");
    return key;
}

// An EC public key from base64url x and y; nullptr when they are not a P-256 point.
Pkey public_key(const std::string &x, const std::string &y) {
    auto bx = base64url_decode(x), by = base64url_decode(y);
    if (!bx || !by || bx->size() != 32 || by->size() != 32) return nullptr;
    std::string point = "\x04" + *bx + *by;
    OSSL_PARAM_BLD *bld = OSSL_PARAM_BLD_new();
    OSSL_PARAM_BLD_push_utf8_string(bld, OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0);
    OSSL_PARAM_BLD_push_octet_string(bld, OSSL_PKEY_PARAM_PUB_KEY, point.data(), point.size());
    OSSL_PARAM *params = OSSL_PARAM_BLD_to_param(bld);
    OSSL_PARAM_BLD_free(bld);
    PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
    EVP_PKEY *out = nullptr;
    if (!ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
        EVP_PKEY_fromdata(ctx.get(), &out, EVP_PKEY_PUBLIC_KEY, params) != 1)
        out = nullptr;
    OSSL_PARAM_free(params);
    return Pkey(out);
}

// ECDH (the peer checked to be on the curve) and the Concat KDF of RFC 7518 §4.6 for A256GCM.
using Cek = std::array<unsigned char, SHA256_DIGEST_LENGTH>;
std::optional<Cek> derive_cek(EVP_PKEY *mine, EVP_PKEY *peer, const std::string &apu, const std::string &apv) {
    PkeyCtx ctx(EVP_PKEY_CTX_new(mine, nullptr));
    std::size_t zlen = 0;
    if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer_ex(ctx.get(), peer, 1) != 1 ||
        EVP_PKEY_derive(ctx.get(), nullptr, &zlen) != 1)
        return std::nullopt;
    std::string z(zlen, '\0');
    if (EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char *>(z.data()), &zlen) != 1) return std::nullopt;
    auto be32 = [](std::uint32_t n) {
        return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                           static_cast<char>(n)};
    };
    const std::string alg = "A256GCM";
    std::string input = be32(1) + z + be32(static_cast<std::uint32_t>(alg.size())) + alg +
                        be32(static_cast<std::uint32_t>(apu.size())) + apu +
                        be32(static_cast<std::uint32_t>(apv.size())) + apv + be32(256);
    Cek cek{};
    SHA256(reinterpret_cast<const unsigned char *>(input.data()), input.size(), cek.data());
    OPENSSL_cleanse(z.data(), z.size());
    return cek;
}

// AES-256-GCM: decrypts `in` checking `tag_in`, or (with `tag_out`) encrypts it and gives the tag.
std::optional<std::string> gcm(const Cek &key, const std::string &iv, const std::string &aad, const std::string &in,
                               const std::string &tag_in, std::string *tag_out = nullptr) {
    const bool encrypt = tag_out != nullptr;
    std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
    auto u = [](const std::string &s) { return reinterpret_cast<const unsigned char *>(s.data()); };
    int len = 0;
    if (!ctx || EVP_CipherInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr, encrypt ? 1 : 0) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, static_cast<int>(iv.size()), nullptr) != 1 ||
        EVP_CipherInit_ex(ctx.get(), nullptr, nullptr, key.data(), u(iv), encrypt ? 1 : 0) != 1 ||
        EVP_CipherUpdate(ctx.get(), nullptr, &len, u(aad), static_cast<int>(aad.size())) != 1)
        return std::nullopt;
    std::string out(in.size() + 16, '\0');
    if (EVP_CipherUpdate(ctx.get(), reinterpret_cast<unsigned char *>(out.data()), &len, u(in),
                         static_cast<int>(in.size())) != 1)
        return std::nullopt;
    int total = len;
    std::string expected = tag_in; // OpenSSL's ctrl takes a mutable pointer
    if (!encrypt &&
        (expected.size() != 16 || EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, 16, expected.data()) != 1))
        return std::nullopt;
    if (EVP_CipherFinal_ex(ctx.get(), reinterpret_cast<unsigned char *>(out.data()) + total, &len) != 1)
        return std::nullopt;
    total += len;
    if (encrypt) {
        tag_out->assign(16, '\0');
        if (EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, 16, tag_out->data()) != 1) return std::nullopt;
    }
    out.resize(static_cast<std::size_t>(total));
    return out;
}

std::vector<std::string_view> split_compact(std::string_view compact) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    for (;;) {
        auto dot = compact.find('.', start);
        parts.push_back(compact.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return parts;
}

std::optional<json> protected_header(std::string_view compact) {
    auto parts = split_compact(compact);
    if (parts.size() != 5) return std::nullopt;
    auto text = base64url_decode(parts[0]);
    if (!text) return std::nullopt;
    json h = json::parse(*text, nullptr, false);
    if (!h.is_object()) return std::nullopt;
    return h;
}

} // namespace

VaultKey generate_key() {
    Pkey key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    if (!key) throw std::runtime_error("could not generate a P-256 key");
    return describe(key.get());
}

VaultKey key_from_pkcs8(const std::string &pkcs8) {
    return describe(load_pkcs8(pkcs8).get());
}

std::optional<std::string> jwe_kid(std::string_view compact) {
    auto h = protected_header(compact);
    if (!h || !h->contains("kid") || !(*h)["kid"].is_string()) return std::nullopt;
    return (*h)["kid"].get<std::string>();
}

std::string jwe_decrypt(std::string_view compact, const std::string &private_pkcs8) {
    auto h = protected_header(compact);
    if (!h || text(*h, "alg") != "ECDH-ES" || text(*h, "enc") != "A256GCM" || h->contains("zip") ||
        !h->contains("epk") || !(*h)["epk"].is_object())
        throw bad_jwe();
    auto parts = split_compact(compact);
    if (!parts[1].empty()) throw bad_jwe(); // ECDH-ES (direct): no encrypted key
    const json &epk = (*h)["epk"];
    if (text(epk, "kty") != "EC" || text(epk, "crv") != "P-256" || !epk.value("x", json()).is_string() ||
        !epk.value("y", json()).is_string())
        throw bad_jwe();
    Pkey peer = public_key(epk["x"].get<std::string>(), epk["y"].get<std::string>());
    auto apu = base64url_decode(text(*h, "apu")), apv = base64url_decode(text(*h, "apv"));
    auto iv = base64url_decode(parts[2]), cipher = base64url_decode(parts[3]), tag = base64url_decode(parts[4]);
    if (!peer || !apu || !apv || !iv || iv->size() != 12 || !cipher || !tag) throw bad_jwe();
    Pkey mine = load_pkcs8(private_pkcs8);
    auto cek = derive_cek(mine.get(), peer.get(), *apu, *apv);
    if (!cek) throw bad_jwe();
    const std::string aad(parts[0]); // the protected header as sent
    auto plain = gcm(*cek, *iv, aad, *cipher, *tag);
    OPENSSL_cleanse(cek->data(), cek->size());
    if (!plain) throw bad_jwe();
    return *plain;
}

std::string jwe_encrypt(std::string_view plaintext, const VaultKey &recipient, const std::string &kid) {
    Pkey eph(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
    Pkey peer = public_key(recipient.x, recipient.y);
    if (!eph || !peer) throw std::runtime_error("bad recipient key");
    VaultKey e = describe(eph.get());
    json header = {{"alg", "ECDH-ES"},
                   {"enc", "A256GCM"},
                   {"kid", kid},
                   {"epk", {{"kty", "EC"}, {"crv", "P-256"}, {"x", e.x}, {"y", e.y}}}};
    std::string h64 = base64url_encode(header.dump());
    auto cek = derive_cek(eph.get(), peer.get(), "", "");
    std::string iv(12, '\0');
    RAND_bytes(reinterpret_cast<unsigned char *>(iv.data()), 12);
    std::string tag;
    auto cipher = gcm(*cek, iv, h64, std::string(plaintext), "", &tag);
    if (!cipher) throw std::runtime_error("could not encrypt");
    return h64 + ".." + base64url_encode(iv) + "." + base64url_encode(*cipher) + "." + base64url_encode(tag);
}

} // namespace vaults
