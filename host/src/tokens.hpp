// Capability tokens (HS256 JWT) for URLs handed to clients, such as cdp_ws_url.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace hangar::host {

class Tokens {
public:
    // `secret_file` holds the signing secret; created (0600) on first use.
    explicit Tokens(const std::string &secret_file);
    Tokens(std::string secret, int) : secret_(std::move(secret)) {}

    std::string sign(const nlohmann::json &claims, std::uint32_t ttl_seconds) const;
    // The claims when the signature is ours, the algorithm is HS256 and it has not expired.
    std::optional<nlohmann::json> verify(const std::string &token) const;

private:
    std::string secret_;
};

} // namespace hangar::host
