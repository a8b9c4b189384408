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

// How codes are made from a secret (kernel-api-0131 §2.5): the HMAC (SHA1, SHA256 or SHA512),
// the code's length (6 to 8 digits) and the step in seconds (1 to 300). Kernel's defaults.
struct TotpParams {
    std::string algorithm = "SHA1";
    unsigned digits = 6;
    unsigned period = 30;
};
// Why one of them is not allowed ("totp_digits: must be 6, 7 or 8"), or nullopt.
std::optional<std::string> totp_params_problem(const TotpParams &params);

// RFC 6238 from the Unix epoch.
std::string totp(std::string_view key, std::int64_t unix_seconds, const TotpParams &params = {});

struct TotpCode {
    std::string code;
    std::int64_t expires_at_ms; // end of the current step
};
TotpCode totp_now(const std::string &canonical_secret, std::int64_t now_ms, const TotpParams &params = {});

// A TOTP secret as the API and 1Password's OTP fields give it: an otpauth://totp/ URI (its
// `secret` and any `algorithm`, `digits` and `period` it names) or a bare base32 secret. nullopt
// when there is no valid secret in it; std::invalid_argument naming a URI parameter that is wrong.
struct Otp {
    std::string secret; // canonical base32
    std::optional<std::string> algorithm;
    std::optional<unsigned> digits;
    std::optional<unsigned> period;
    bool from_uri = false;                  // an otpauth:// URI rather than a bare secret
    TotpParams over(TotpParams base) const; // base with what the URI named
};
std::optional<Otp> parse_otp(std::string_view value);

// Why `domain` is not a host name ("must not include a scheme", ...), or nullopt when it is.
// A leading "*." and a ":port" are allowed.
std::optional<std::string> domain_problem(std::string_view domain);

// The lower-case host of "https://user@Host:8443/path", "host/path" or "host".
std::string url_host(std::string_view url);

// Whether an item URL's host (possibly "*.example.com") covers `domain`: equal, or `domain` is
// the wildcard's base or one of its subdomains.
bool host_matches(std::string_view item_host, std::string_view domain);

// Login values of a 1Password Connect item (FullItem): `username` and `password` from the fields
// with those purposes, other labelled text fields by label; the TOTP from an OTP field.
struct ItemLogin {
    json values = json::object();
    std::optional<Otp> totp;
};
ItemLogin login_from_item(const json &item);

} // namespace credentials
