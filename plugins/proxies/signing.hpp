// Web Bot Auth request signing (RFC 9421 HTTP Message Signatures with the web-bot-auth drafts):
// one Ed25519 key per project, its JWK and RFC 7638 thumbprint (the keyid), and the three headers
// a signed request carries. Pure functions over libsodium, so the unit tests can pin them to the
// RFCs' vectors.
#pragma once

#include <hangar/plugin.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace proxies::signing {

inline constexpr const char *kTag = "web-bot-auth";
inline constexpr const char *kLabel = "sig1";
inline constexpr const char *kDirectoryPath = "/.well-known/http-message-signatures-directory";
inline constexpr const char *kDirectoryMediaType = "application/http-message-signatures-directory+json";

std::string base64url(std::string_view raw);
std::string base64(std::string_view raw);

struct KeyPair {
    std::string public_key; // 32 bytes
    std::string secret_key; // 64 bytes (libsodium's seed + public key)
};
KeyPair generate();

// {"kty":"OKP","crv":"Ed25519","x":…,"kid":thumbprint,"use":"sig"}
hangar::json public_jwk(std::string_view public_key);
// RFC 7638: base64url(SHA-256 of {"crv","kty","x"} in that order, no spaces).
std::string thumbprint(std::string_view public_key);

// RFC 9421 @authority of an absolute http(s) URL: host (lower-case) and a non-default port, no
// userinfo. Empty when the URL is not http(s).
std::string authority(std::string_view url);

struct Headers {
    std::string signature_agent;
    std::string signature_input;
    std::string signature;
};

// How Signature-Agent is sent and covered.
enum class AgentForm {
    // As Kernel's web-bot-auth extension sends it (Cloudflare's `web-bot-auth` signer, which that
    // extension bundles): `Signature-Agent: "https://…"`, an sf-string, covered as
    // "signature-agent"; parameters in that signer's order.
    string,
    // The web-bot-auth architecture draft-02: `Signature-Agent: sig1="https://…"`, a dictionary
    // whose member is named after the signature's label, covered as "signature-agent";key="sig1".
    dictionary,
};
// "string" or "dictionary" (the names proxies.ini uses); nullopt for anything else.
std::optional<AgentForm> parse_agent_form(std::string_view name);

struct Params {
    AgentForm form = AgentForm::string;
    std::string keyid;
    std::string agent; // the origin serving the directory, e.g. https://hangar.example
    std::int64_t created = 0;
    std::int64_t expires = 0;
    std::string nonce; // base64; empty leaves it out
};

// The signature base (RFC 9421 §2.5) over "@authority" and Signature-Agent (in `p.form`), and the
// headers carrying its Ed25519 signature.
std::string signature_base(std::string_view authority, const Params &p);
Headers sign(std::string_view secret_key, std::string_view authority, const Params &p);

// The same signature base and headers with the per-request values left as placeholders:
// {authority}, {created}, {expires}, {nonce}. Hangar's signer extension (signer_extension.hpp)
// fills them in for each WebSocket upgrade request, so its signatures come from the one text
// sign() makes and the two cannot drift. `p.created`, `p.expires` and `p.nonce` are not used.
struct Template {
    std::string base;
    std::string signature_agent;
    std::string signature_input;
    std::string signature_prefix; // "sig1=:", then base64(signature) and ":"
};
Template signing_template(const Params &p);

// An sf-string can carry the agent URL as it is (printable ASCII, no quote or backslash).
bool valid_agent(std::string_view agent);

} // namespace proxies::signing
