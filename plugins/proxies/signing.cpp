#include "signing.hpp"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace proxies::signing {

namespace {

const unsigned char *bytes(std::string_view s) {
    return reinterpret_cast<const unsigned char *>(s.data());
}

void init() {
    if (sodium_init() < 0) throw std::runtime_error("libsodium could not be initialised");
}

std::string encode(std::string_view raw, int variant) {
    std::string out(sodium_base64_ENCODED_LEN(raw.size(), variant), '\0');
    sodium_bin2base64(out.data(), out.size(), bytes(raw), raw.size(), variant);
    out.resize(out.size() - 1); // the terminating NUL
    return out;
}

// The inner list and parameters of Signature-Input, also the value of "@signature-params". The
// values are text so that template() can put placeholders where sign() puts numbers.
std::string signature_params(AgentForm form, std::string_view keyid_value, std::string_view created,
                             std::string_view expires, std::string_view nonce_value) {
    std::string nonce = nonce_value.empty() ? "" : ";nonce=\"" + std::string(nonce_value) + "\"";
    std::string keyid = ";keyid=\"" + std::string(keyid_value) + "\";alg=\"ed25519\"";
    std::string tag = std::string(";tag=\"") + kTag + "\"";
    if (form == AgentForm::string)
        return R"(("@authority" "signature-agent");created=)" + std::string(created) + keyid +
               ";expires=" + std::string(expires) + nonce + tag;
    return std::string(R"(("@authority" "signature-agent";key=")") + kLabel + R"(");created=)" + std::string(created) +
           ";expires=" + std::string(expires) + keyid + nonce + tag;
}

std::string signature_params(const Params &p) {
    return signature_params(p.form, p.keyid, std::to_string(p.created), std::to_string(p.expires), p.nonce);
}

// The Signature-Agent field value, as sent and as covered.
std::string agent_field(const Params &p) {
    std::string quoted = "\"" + p.agent + "\"";
    return p.form == AgentForm::string ? quoted : std::string(kLabel) + "=" + quoted;
}

std::string base_text(std::string_view authority, const Params &p, const std::string &params) {
    // Either way the covered value is the quoted agent: the whole field, or the member's value.
    std::string covered = p.form == AgentForm::string ? R"("signature-agent")"
                                                      : R"("signature-agent";key=")" + std::string(kLabel) + "\"";
    return "\"@authority\": " + std::string(authority) + "\n" + covered + ": \"" + p.agent +
           "\"\n\"@signature-params\": " + params;
}

} // namespace

std::string base64url(std::string_view raw) {
    return encode(raw, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
}

std::string base64(std::string_view raw) {
    return encode(raw, sodium_base64_VARIANT_ORIGINAL);
}

KeyPair generate() {
    init();
    KeyPair k;
    k.public_key.resize(crypto_sign_PUBLICKEYBYTES);
    k.secret_key.resize(crypto_sign_SECRETKEYBYTES);
    crypto_sign_keypair(reinterpret_cast<unsigned char *>(k.public_key.data()),
                        reinterpret_cast<unsigned char *>(k.secret_key.data()));
    return k;
}

std::string thumbprint(std::string_view public_key) {
    init();
    std::string members = R"({"crv":"Ed25519","kty":"OKP","x":")" + base64url(public_key) + "\"}";
    std::string digest(crypto_hash_sha256_BYTES, '\0');
    crypto_hash_sha256(reinterpret_cast<unsigned char *>(digest.data()), bytes(members), members.size());
    return base64url(digest);
}

hangar::json public_jwk(std::string_view public_key) {
    return {{"kty", "OKP"},
            {"crv", "Ed25519"},
            {"x", base64url(public_key)},
            {"kid", thumbprint(public_key)},
            {"use", "sig"}};
}

std::string authority(std::string_view url) {
    std::size_t default_port = 0;
    std::string_view rest;
    if (url.starts_with("https://")) {
        default_port = 443;
        rest = url.substr(8);
    } else if (url.starts_with("http://")) {
        default_port = 80;
        rest = url.substr(7);
    } else {
        return {};
    }
    rest = rest.substr(0, rest.find_first_of("/?#"));
    if (auto at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
    std::string host(rest);
    std::string port;
    auto colon = host.rfind(':');
    if (colon != std::string::npos && host.find(']', colon) == std::string::npos) {
        port = host.substr(colon + 1);
        host.resize(colon);
    }
    std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return std::tolower(c); });
    if (!port.empty() && port != std::to_string(default_port)) host += ":" + port;
    return host;
}

bool valid_agent(std::string_view agent) {
    return !agent.empty() && std::all_of(agent.begin(), agent.end(),
                                         [](char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; });
}

std::optional<AgentForm> parse_agent_form(std::string_view name) {
    if (name == "string") return AgentForm::string;
    if (name == "dictionary") return AgentForm::dictionary;
    return std::nullopt;
}

std::string signature_base(std::string_view authority, const Params &p) {
    return base_text(authority, p, signature_params(p));
}

Template signing_template(const Params &p) {
    Template t;
    t.base = base_text("{authority}", p, signature_params(p.form, p.keyid, "{created}", "{expires}", "{nonce}"));
    t.signature_agent = agent_field(p);
    t.signature_input =
        std::string(kLabel) + "=" + signature_params(p.form, p.keyid, "{created}", "{expires}", "{nonce}");
    t.signature_prefix = std::string(kLabel) + "=:";
    return t;
}

Headers sign(std::string_view secret_key, std::string_view authority, const Params &p) {
    if (secret_key.size() != crypto_sign_SECRETKEYBYTES) throw std::invalid_argument("not an Ed25519 secret key");
    std::string base = signature_base(authority, p);
    std::string sig(crypto_sign_BYTES, '\0');
    crypto_sign_detached(reinterpret_cast<unsigned char *>(sig.data()), nullptr, bytes(base), base.size(),
                         bytes(secret_key));
    return {agent_field(p), std::string(kLabel) + "=" + signature_params(p),
            std::string(kLabel) + "=:" + base64(sig) + ":"};
}

} // namespace proxies::signing
