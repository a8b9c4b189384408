// Proof that a request carrying X-Hangar-Relayed-By was relayed by a node of this store.
//
// The header steers placement (a create or pool acquire another node sent here stays here), so a
// client must not be able to set it. Nodes of one store already share a secret nobody else holds:
// the token signing key, kept in the store sealed with the secrets key every node must have
// (Tokens::shared). The proof is an HMAC under a key derived from it, over the request it came
// with, and a time, so it cannot be moved to another request or kept for later.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace hangar::host {

// How far a proof's time may be from the receiving node's clock, either way (node clocks differ a
// little; a relay is sent at once).
inline constexpr std::int64_t kRelayProofWindowMs = 60'000;

// The key proofs are made with, derived from the store's token signing secret (so it is not the
// key that signs capability tokens).
std::string relay_proof_key(std::string_view token_secret);

// What a relayed request carries: "v1.<ms>.<hex HMAC-SHA256>" over the relaying node's name, the
// method, the request target (path and query as sent), the Authorization header and the time.
std::string relay_proof(std::string_view key, std::string_view node, std::string_view method, std::string_view target,
                        std::string_view authorization, std::int64_t now_ms);

// Whether `proof` was made with `key` for this node name, method, target and Authorization, within
// kRelayProofWindowMs of `now_ms`. Compared in constant time.
bool relay_proof_valid(std::string_view key, std::string_view proof, std::string_view node, std::string_view method,
                       std::string_view target, std::string_view authorization, std::int64_t now_ms);

} // namespace hangar::host
