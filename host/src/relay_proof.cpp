#include "relay_proof.hpp"

#include <sodium.h>

#include <array>
#include <charconv>
#include <cstdlib>
#include <initializer_list>

namespace hangar::host {

namespace {

using Mac = std::array<unsigned char, crypto_auth_hmacsha256_BYTES>;

Mac hmac(std::string_view key, std::initializer_list<std::string_view> parts) {
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char *>(key.data()), key.size());
    for (auto p : parts) {
        // Each part's length goes first, so no two different requests give the same input.
        const std::string len = std::to_string(p.size()) + ":";
        crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char *>(len.data()), len.size());
        crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char *>(p.data()), p.size());
    }
    Mac out{};
    crypto_auth_hmacsha256_final(&st, out.data());
    return out;
}

std::string hex(const Mac &mac) {
    std::string out(mac.size() * 2 + 1, '\0');
    sodium_bin2hex(out.data(), out.size(), mac.data(), mac.size());
    out.pop_back(); // the terminating NUL
    return out;
}

} // namespace

std::string relay_proof_key(std::string_view token_secret) {
    Mac k = hmac(token_secret, {"hangar node relay proof v1"});
    return {reinterpret_cast<const char *>(k.data()), k.size()};
}

std::string relay_proof(std::string_view key, std::string_view node, std::string_view method, std::string_view target,
                        std::string_view authorization, std::int64_t now_ms) {
    const std::string when = std::to_string(now_ms);
    return "v1." + when + "." + hex(hmac(key, {"v1", when, node, method, target, authorization}));
}

bool relay_proof_valid(std::string_view key, std::string_view proof, std::string_view node, std::string_view method,
                       std::string_view target, std::string_view authorization, std::int64_t now_ms) {
    if (!proof.starts_with("v1.")) return false;
    proof.remove_prefix(3);
    const auto dot = proof.find('.');
    if (dot == std::string_view::npos) return false;
    std::int64_t when = 0;
    auto [end, ec] = std::from_chars(proof.data(), proof.data() + dot, when);
    if (ec != std::errc() || end != proof.data() + dot || std::llabs(now_ms - when) > kRelayProofWindowMs) return false;
    const std::string expected = relay_proof(key, node, method, target, authorization, when);
    const std::string_view given = proof.substr(dot + 1);
    const std::string_view want = std::string_view(expected).substr(expected.rfind('.') + 1);
    return given.size() == want.size() && sodium_memcmp(given.data(), want.data(), want.size()) == 0;
}

} // namespace hangar::host
