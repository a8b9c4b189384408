#include "secrets.hpp"

#include <hangar/secrets.hpp>

#include <algorithm>

namespace hangar::host {

namespace {

// Table and column names are spliced into SQL: only plain lowercase identifiers.
bool identifier(const std::string &s) {
    return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
}

} // namespace

void migrate_secret_registry(Store &store) {
    store.migrate("host.secrets", {{1, "CREATE TABLE secret_columns (owner TEXT NOT NULL, table_name TEXT NOT NULL,"
                                       " id_column TEXT NOT NULL, column_name TEXT NOT NULL,"
                                       " PRIMARY KEY (table_name, column_name))"}});
}

std::string secrets_key_file(const Config &cfg, const std::string &data_dir) {
    return secrets::key_file(cfg.get("secrets.key_file"), data_dir);
}

Rotation rotate_secrets_key(Store &store, const std::string &key_file) {
    secrets::Keyring old_ring = secrets::load_keyring(key_file);
    secrets::Key next = secrets::Key::generate();
    secrets::Keyring new_ring(next);
    return store.transaction([&] {
        Rotation result;
        result.key_id = next.id();
        for (const auto &col : store.exec("SELECT owner, table_name, id_column, column_name FROM secret_columns ORDER "
                                          "BY table_name, column_name")) {
            std::string table = col.at("table_name"), id = col.at("id_column"), column = col.at("column_name");
            std::string what = table;
            what.append(".").append(column);
            if (!identifier(table) || !identifier(id) || !identifier(column))
                throw secrets::Error("secret_columns names an invalid column: " + what);
            std::string select = "SELECT ", update = "UPDATE ";
            select.append(id).append(" AS id, ").append(column).append(" AS v FROM ").append(table);
            select.append(" WHERE ").append(column).append(" IS NOT NULL");
            update.append(table).append(" SET ").append(column).append(" = ? WHERE ").append(id).append(" = ?");
            for (const auto &row : store.exec(select)) {
                std::string sealed;
                try {
                    sealed = new_ring.seal(old_ring.open(row.at("v").get<std::string>()));
                } catch (const std::exception &e) {
                    throw secrets::Error(what.append(" of ").append(row.at("id").dump()).append(": ").append(e.what()));
                }
                store.exec(update, {sealed, row.at("id")});
                ++result.values;
            }
        }
        secrets::install_key(key_file, next);
        return result;
    });
}

} // namespace hangar::host
