// The credentials plugin's pure logic, without the host: TOTP (RFC 6238), base32 secrets, the
// domain rule, host matching for provider items, and how a 1Password item becomes login values.
// Linked into the plugin and into the unit tests (credentials_model).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace credentials {

using json = nlohmann::json;

// A TOTP secret as people paste it ("jbsw y3dp-ehpk 3pxp", padded or not) in canonical form:
// upper case, no spaces, dashes or padding. nullopt when it is not base32 or decodes to nothing.
std::optional<std::string> normalize_base32(std::string_view input);

// The secret bytes of a canonical base32 string (throws std::invalid_argument when invalid).
std::string base32_decode(const std::string &canonical);

// RFC 6238 with HMAC-SHA-1 and a 30 s step from the Unix epoch, `digits` long (6 to 8).
std::string totp(std::string_view key, std::int64_t unix_seconds, unsigned digits = 6);

struct TotpCode {
    std::string code;
    std::int64_t expires_at_ms; // end of the current 30 s window
};
TotpCode totp_now(const std::string &canonical_secret, std::int64_t now_ms);

// Why `domain` is not a host name ("must not include a scheme", ...), or nullopt when it is.
// A leading "*." and a ":port" are allowed.
std::optional<std::string> domain_problem(std::string_view domain);

// The lower-case host of "https://user@Host:8443/path", "host/path" or "host".
std::string url_host(std::string_view url);

// Whether an item URL's host (possibly "*.example.com") covers `domain`: equal, or `domain` is
// the wildcard's base or one of its subdomains.
bool host_matches(std::string_view item_host, std::string_view domain);

// The base32 secret in a 1Password OTP field value: an otpauth:// URI's `secret`, or the value.
std::optional<std::string> otp_secret(std::string_view field_value);

// Login values of a 1Password Connect item (FullItem): `username` and `password` from the fields
// with those purposes, other labelled text fields by label; `totp_secret` from an OTP field.
struct ItemLogin {
    json values = json::object();
    std::optional<std::string> totp_secret; // canonical base32
};
ItemLogin login_from_item(const json &item);

} // namespace credentials
