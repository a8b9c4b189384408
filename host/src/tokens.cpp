#include "tokens.hpp"

#include "store.hpp"
#include "util.hpp"

#include <hangar/secrets.hpp>

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

namespace {

const std::vector<Store::Migration> kKeyMigrations = {
    {1, "CREATE TABLE host_keys (name TEXT PRIMARY KEY, sealed TEXT NOT NULL);"
        "INSERT INTO secret_columns (owner, table_name, id_column, column_name)"
        " VALUES ('host', 'host_keys', 'name', 'sealed')"},
};

std::string file_secret(const std::string &path) {
    if (!std::filesystem::exists(path)) return {};
    auto secret = trim(read_file(path));
    return secret.size() >= 32 ? secret : std::string();
}

} // namespace

Tokens Tokens::shared(Store &store, const std::string &key_file, const std::string &legacy_file) {
    store.migrate("host.keys", kKeyMigrations);
    Secrets secrets(key_file);
    if (store.exec("SELECT 1 FROM host_keys WHERE name = 'token_signing'").empty()) {
        auto secret = file_secret(legacy_file);
        if (secret.empty()) secret = random_token(48);
        // Two nodes starting at once: the first insert wins, both read the winner.
        store.exec("INSERT INTO host_keys (name, sealed) VALUES ('token_signing', ?) ON CONFLICT (name) DO NOTHING",
                   {secrets.seal(secret)});
    }
    auto rows = store.exec("SELECT sealed FROM host_keys WHERE name = 'token_signing'");
    if (rows.empty()) throw std::runtime_error("the token signing key could not be stored");
    try {
        return Tokens(secrets.open(rows[0].at("sealed").get<std::string>()), 0);
    } catch (const secrets::Error &) {
        throw std::runtime_error("[secrets] key_file / HANGAR_SECRETS_KEY_FILE = \"" + key_file +
                                 "\" does not open what this store holds: every node of a store needs the same "
                                 "secrets key (copy the key file of a node that runs)");
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
