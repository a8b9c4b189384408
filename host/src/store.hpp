// The host database: SQLite (WAL) opened through Poco::Data.
//
// Plugins send SQL text with a JSON array of parameters and get rows back as JSON objects. That
// dynamic shape is why statements run on the raw sqlite3 handle Poco::Data exposes: it binds a
// JSON value per `?` and reports each result value's own type (Poco's RecordSet types columns
// by their declared type, which expressions such as COUNT(*) do not have).
#pragma once

#include <Poco/Data/Session.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <mutex>
#include <string>

struct sqlite3;

namespace hangar::host {

class StoreError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class Store {
public:
    explicit Store(const std::string &path);
    ~Store();
    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;

    // Runs one statement with `params` bound to `?` in order; returns the rows (possibly empty).
    nlohmann::json exec(const std::string &sql, const nlohmann::json &params = nlohmann::json::array());

    // Applies the plugin's migrations with version > the recorded one, each in one transaction.
    struct Migration {
        unsigned version;
        std::string sql;
    };
    void migrate(const std::string &owner, const std::vector<Migration> &migrations);
    unsigned schema_version(const std::string &owner);

    // Runs `fn` inside BEGIN IMMEDIATE ... COMMIT (ROLLBACK on exception).
    template <typename Fn> auto transaction(Fn &&fn) {
        std::lock_guard lock(mutex_);
        raw_exec("BEGIN IMMEDIATE");
        try {
            auto result = fn();
            raw_exec("COMMIT");
            return result;
        } catch (...) {
            raw_exec("ROLLBACK");
            throw;
        }
    }

private:
    void raw_exec(const std::string &sql);
    nlohmann::json exec_locked(const std::string &sql, const nlohmann::json &params);

    std::unique_ptr<Poco::Data::Session> session_;
    sqlite3 *db_ = nullptr;
    std::recursive_mutex mutex_; // one connection; SQLite writes are serial anyway
};

} // namespace hangar::host
