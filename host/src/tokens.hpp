// Capability tokens (HS256 JWT) for URLs handed to clients, such as cdp_ws_url.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace hangar::host {

class Store;

class Tokens {
public:
    // `secret_file` holds the signing secret; created (0600) on first use.
    explicit Tokens(const std::string &secret_file);
    Tokens(std::string secret, int) : secret_(std::move(secret)) {}
    // The server's tokens: one signing secret for every node of `store`, so a URL one node hands
    // out verifies on the node it points at. Kept in `host_keys`, sealed with the secrets key
    // (`key_file`, which nodes of a store share); made by the first node that starts, from
    // `legacy_file` when that holds one (the per-data-dir secret before nodes shared it, so an
    // upgrade keeps the URLs handed out before it).
    static Tokens shared(Store &store, const std::string &key_file, const std::string &legacy_file);

    std::string sign(const nlohmann::json &claims, std::uint32_t ttl_seconds) const;
    // The claims when the signature is ours, the algorithm is HS256 and it has not expired.
    std::optional<nlohmann::json> verify(const std::string &token) const;
    // What keys for other purposes are derived from (relay_proof.hpp): one secret per store.
    const std::string &secret() const { return secret_; }

private:
    std::string secret_;
};

} // namespace hangar::host
