#include "model.hpp"

#include <liboath/oath.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <stdexcept>

namespace credentials {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
    return out;
}

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

std::string totp(std::string_view key, std::int64_t unix_seconds, unsigned digits) {
    oath_ready();
    char code[16] = {};
    if (oath_totp_generate(key.data(), key.size(), static_cast<time_t>(unix_seconds), 30, 0, digits, code) != OATH_OK)
        throw std::runtime_error("the TOTP code could not be computed");
    return code;
}

TotpCode totp_now(const std::string &canonical_secret, std::int64_t now_ms) {
    std::int64_t secs = now_ms / 1000;
    return {totp(base32_decode(canonical_secret), secs), (secs / 30 + 1) * 30 * 1000};
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

std::optional<std::string> otp_secret(std::string_view value) {
    if (lower(value.substr(0, 10)) == "otpauth://") {
        auto q = value.find('?');
        if (q == std::string_view::npos) return std::nullopt;
        std::string_view query = value.substr(q + 1);
        while (!query.empty()) {
            auto amp = query.find('&');
            std::string_view pair = query.substr(0, amp);
            query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
            if (lower(pair.substr(0, 7)) == "secret=") {
                // Only trailing padding ('=' → %3D) can be percent-encoded in base32, and it is dropped.
                std::string_view secret = pair.substr(7);
                return normalize_base32(secret.substr(0, secret.find('%')));
            }
        }
        return std::nullopt;
    }
    return normalize_base32(value);
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
            if (!out.totp_secret) out.totp_secret = otp_secret(value);
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
