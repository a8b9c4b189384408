#include "tokens.hpp"

#include "util.hpp"

#include <Poco/JSON/Parser.h>
#include <Poco/JSON/Stringifier.h>
#include <Poco/JWT/Signer.h>
#include <Poco/JWT/Token.h>

#include <filesystem>
#include <sstream>

namespace hangar::host {

Tokens::Tokens(const std::string &secret_file) {
    if (std::filesystem::exists(secret_file)) {
        secret_ = trim(read_file(secret_file));
    }
    if (secret_.size() < 32) {
        secret_ = random_token(48);
        write_file_atomic(secret_file, secret_ + "\n", 0600);
    }
}

std::string Tokens::sign(const nlohmann::json &claims, std::uint32_t ttl_seconds) const {
    // Poco::JWT carries claims as Poco::JSON; convert through text to keep nlohmann everywhere else.
    Poco::JSON::Parser parser;
    auto payload = parser.parse(claims.dump()).extract<Poco::JSON::Object::Ptr>();
    Poco::JWT::Token token;
    for (const auto &[name, value] : *payload)
        token.payload().set(name, value);
    token.setType("JWT");
    // Whole seconds: some JWT libraries reject a fractional "exp".
    token.payload().set("exp", static_cast<Poco::Int64>(now_ms() / 1000 + ttl_seconds));
    Poco::JWT::Signer signer(secret_);
    return signer.sign(token, Poco::JWT::Signer::ALGO_HS256);
}

std::optional<nlohmann::json> Tokens::verify(const std::string &text) const {
    Poco::JWT::Signer signer(secret_); // allows HS256 only, so "none" and RS tricks are refused
    Poco::JWT::Token token;
    try {
        if (!signer.tryVerify(text, token)) return std::nullopt;
    } catch (const std::exception &) {
        return std::nullopt;
    }
    if (token.getAlgorithm() != Poco::JWT::Signer::ALGO_HS256) return std::nullopt;
    if (!token.payload().has("exp") || token.getExpiration() < Poco::Timestamp()) return std::nullopt;
    std::ostringstream out;
    Poco::JSON::Stringifier::stringify(token.payload(), out);
    auto claims = nlohmann::json::parse(out.str(), nullptr, false);
    if (claims.is_discarded()) return std::nullopt;
    return claims;
}

} // namespace hangar::host
