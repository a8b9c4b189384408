// Tokens::shared: the store-kept signing key. Apart from tokens.cpp so that what signs and
// verifies (and its fuzz target) needs neither the store nor libsodium.
#include "store.hpp"
#include "tokens.hpp"
#include "util.hpp"

#include <hangar/secrets.hpp>

#include <filesystem>
#include <stdexcept>

namespace hangar::host {

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

} // namespace hangar::host
