#include "model.hpp"

#include <hangar/text.hpp>

#include <liboath/oath.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace credentials {

using hangar::lower;

namespace {

void oath_ready() {
    // Idempotent; liboath needs it before its first call.
    static const int rc = oath_init();
    if (rc != OATH_OK) throw std::runtime_error("liboath could not be initialised");
}

} // namespace

std::optional<std::string> normalize_base32(std::string_view input) {
    std::string out;
    for (char c : input) {
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '-') continue;
        out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    }
    while (!out.empty() && out.back() == '=')
        out.pop_back();
    if (out.empty()) return std::nullopt;
    if (!std::all_of(out.begin(), out.end(), [](char c) { return (c >= 'A' && c <= 'Z') || (c >= '2' && c <= '7'); }))
        return std::nullopt;
    try {
        if (base32_decode(out).empty()) return std::nullopt;
    } catch (const std::invalid_argument &) {
        return std::nullopt;
    }
    return out;
}

std::string base32_decode(const std::string &canonical) {
    oath_ready();
    char *raw = nullptr;
    std::size_t len = 0;
    if (oath_base32_decode(canonical.data(), canonical.size(), &raw, &len) != OATH_OK)
        throw std::invalid_argument("not base32");
    std::unique_ptr<char, decltype(&std::free)> owned(raw, &std::free);
    return raw ? std::string(raw, len) : std::string();
}

std::optional<std::string> totp_params_problem(const TotpParams &p) {
    if (p.algorithm != "SHA1" && p.algorithm != "SHA256" && p.algorithm != "SHA512")
        return "totp_algorithm: must be SHA1, SHA256 or SHA512";
    if (p.digits < 6 || p.digits > 8) return "totp_digits: must be 6, 7 or 8";
    if (p.period < 1 || p.period > 300) return "totp_period: must be 1 to 300 seconds";
    return std::nullopt;
}

std::string totp(std::string_view key, std::int64_t unix_seconds, const TotpParams &params) {
    oath_ready();
    if (totp_params_problem(params)) throw std::invalid_argument("TOTP parameters out of range");
    int flags = params.algorithm == "SHA256"   ? OATH_TOTP_HMAC_SHA256
                : params.algorithm == "SHA512" ? OATH_TOTP_HMAC_SHA512
                                               : 0;
    char code[16] = {};
    if (oath_totp_generate2(key.data(), key.size(), static_cast<time_t>(unix_seconds), params.period, 0, params.digits,
                            flags, code) != OATH_OK)
        throw std::runtime_error("the TOTP code could not be computed");
    return code;
}

TotpCode totp_now(const std::string &canonical_secret, std::int64_t now_ms, const TotpParams &params) {
    std::int64_t secs = now_ms / 1000;
    std::int64_t step = params.period;
    return {totp(base32_decode(canonical_secret), secs, params), (secs / step + 1) * step * 1000};
}

TotpParams Otp::over(TotpParams base) const {
    if (algorithm) base.algorithm = *algorithm;
    if (digits) base.digits = *digits;
    if (period) base.period = *period;
    return base;
}

std::optional<std::string> domain_problem(std::string_view domain) {
    if (domain.empty()) return "must not be empty";
    if (domain.find("://") != std::string_view::npos) return "must be a host name without a scheme (no \"https://\")";
    if (domain.find_first_of("/?#") != std::string_view::npos) return "must be a host name without a path";
    if (domain.size() > 253) return "must be at most 253 characters";
    std::string_view host =
        domain.substr(0, domain.rfind(':') == std::string_view::npos ? domain.size() : domain.rfind(':'));
    if (host.substr(0, 2) == "*.") host.remove_prefix(2);
    bool ok =
        !host.empty() && host.front() != '.' && host.back() != '.' && std::all_of(host.begin(), host.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_';
        });
    if (ok && host.size() < domain.size() && domain.rfind(':') != std::string_view::npos) {
        auto port = domain.substr(domain.rfind(':') + 1);
        ok = !port.empty() && port.size() <= 5 &&
             std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
    if (!ok) return "must be a host name such as example.com";
    return std::nullopt;
}

std::string url_host(std::string_view url) {
    if (auto scheme = url.find("://"); scheme != std::string_view::npos) url.remove_prefix(scheme + 3);
    url = url.substr(0, url.find_first_of("/?#"));
    if (auto at = url.rfind('@'); at != std::string_view::npos) url.remove_prefix(at + 1);
    if (!url.empty() && url.front() == '[') return lower(url.substr(0, url.find(']') + 1)); // IPv6 literal
    return lower(url.substr(0, url.find(':')));
}

bool host_matches(std::string_view item_host, std::string_view domain) {
    std::string host = lower(item_host), want = lower(domain);
    if (host.empty() || want.empty()) return false;
    if (host.rfind("*.", 0) == 0) {
        std::string base = host.substr(2);
        return want == base ||
               (want.size() > base.size() && want.compare(want.size() - base.size(), base.size(), base) == 0 &&
                want[want.size() - base.size() - 1] == '.');
    }
    return host == want;
}

namespace {

std::optional<unsigned> small_number(std::string_view text) {
    unsigned n = 0;
    if (text.empty() || text.size() > 4) return std::nullopt;
    for (char c : text) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + static_cast<unsigned>(c - '0');
    }
    return n;
}

} // namespace

std::optional<Otp> parse_otp(std::string_view value) {
    if (lower(value.substr(0, 10)) != "otpauth://") {
        auto secret = normalize_base32(value);
        if (!secret) return std::nullopt;
        return Otp{*secret, std::nullopt, std::nullopt, std::nullopt, false};
    }
    if (lower(value.substr(0, 15)) != "otpauth://totp/")
        throw std::invalid_argument("only otpauth://totp/ URIs are TOTP secrets");
    auto q = value.find('?');
    if (q == std::string_view::npos) return std::nullopt;
    Otp otp;
    otp.from_uri = true;
    std::optional<std::string> secret;
    for (std::string_view query = value.substr(q + 1); !query.empty();) {
        auto amp = query.find('&');
        std::string_view pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
        auto eq = pair.find('=');
        std::string key = lower(pair.substr(0, eq));
        std::string_view v = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
        if (key == "secret") {
            // Only trailing padding ('=' → %3D) can be percent-encoded in base32, and it is dropped.
            secret = normalize_base32(v.substr(0, v.find('%')));
        } else if (key == "algorithm") {
            std::string a = lower(v);
            std::transform(a.begin(), a.end(), a.begin(), [](unsigned char c) { return std::toupper(c); });
            if (a != "SHA1" && a != "SHA256" && a != "SHA512")
                throw std::invalid_argument("the URI's algorithm must be SHA1, SHA256 or SHA512");
            otp.algorithm = a;
        } else if (key == "digits") {
            otp.digits = small_number(v);
            if (!otp.digits || *otp.digits < 6 || *otp.digits > 8)
                throw std::invalid_argument("the URI's digits must be 6, 7 or 8");
        } else if (key == "period") {
            otp.period = small_number(v);
            if (!otp.period || *otp.period < 1 || *otp.period > 300)
                throw std::invalid_argument("the URI's period must be 1 to 300 seconds");
        }
    }
    if (!secret) return std::nullopt;
    otp.secret = *secret;
    return otp;
}

ItemLogin login_from_item(const json &item) {
    ItemLogin out;
    auto fields = item.find("fields");
    if (fields == item.end() || !fields->is_array()) return out;
    for (const auto &f : *fields) {
        if (!f.is_object()) continue;
        std::string type = f.value("type", ""), purpose = f.value("purpose", ""), label = f.value("label", "");
        auto value_it = f.find("value");
        if (value_it == f.end() || !value_it->is_string() || value_it->get_ref<const std::string &>().empty()) continue;
        const std::string &value = value_it->get_ref<const std::string &>();
        if (type == "OTP") {
            if (!out.totp) {
                try {
                    out.totp = parse_otp(value);
                } catch (const std::invalid_argument &) {
                    out.totp = std::nullopt; // a URI whose parameters no code can be made with: no TOTP
                }
            }
        } else if (purpose == "USERNAME") {
            out.values["username"] = value;
        } else if (purpose == "PASSWORD") {
            out.values["password"] = value;
        } else if (purpose.empty() && !label.empty() &&
                   (type == "STRING" || type == "EMAIL" || type == "CONCEALED" || type == "PHONE") &&
                   !out.values.contains(label)) {
            out.values[label] = value;
        }
    }
    return out;
}

} // namespace credentials
