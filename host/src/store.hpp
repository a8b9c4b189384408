// The host database: SQLite (WAL, the single-machine default) or PostgreSQL, behind one Store.
//
// Plugins send SQL text with a JSON array of parameters and get rows back as JSON objects. That
// dynamic shape is why statements run on the raw handle Poco::Data exposes (sqlite3 for SQLite,
// PGconn for PostgreSQL): it binds a JSON value per `?` and reports each result value's own type
// (Poco's RecordSet types columns by their declared type, which expressions such as COUNT(*) do
// not have). Each engine is a StoreBackend; Store adds what both share (migrations, the schema
// version, the transaction helper).
#pragma once

#include "store_url.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hangar::host {

class StoreError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The store's server cannot be reached right now (PostgreSQL restarting, the network): the request
// is answered 503 `store_unavailable` with Retry-After, and the next one reconnects by itself.
class StoreUnavailable : public StoreError {
public:
    using StoreError::StoreError;
};
inline constexpr int kStoreRetryAfterSeconds = 2;
inline constexpr const char *kStoreUnavailableMessage = "the store cannot be reached right now; retry shortly";

// The layout of the store's own bookkeeping (plugin_migrations, store_schema). A store written by a
// newer binary is refused rather than guessed at.
inline constexpr unsigned kStoreSchemaVersion = 1;

class StoreBackend {
public:
    virtual ~StoreBackend() = default;
    // One statement, `?` parameters bound in order.
    virtual nlohmann::json exec(const std::string &sql, const nlohmann::json &params) = 0;
    // Several statements, no parameters (migrations).
    virtual void script(const std::string &sql) = 0;
    // A transaction pins one connection to the calling thread until commit or rollback.
    virtual void begin() = 0;
    virtual void commit() = 0;
    virtual void rollback() = 0;
    // Inside a transaction: waits until no other store (another node) changes the schema, until
    // the transaction ends. SQLite's BEGIN IMMEDIATE already serialises every writer.
    virtual void lock_schema() {}
    // Large objects, inside a transaction (PostgreSQL only: SQLite stores keep blobs as files).
    // A file is streamed into the store and back in small chunks, never whole in memory.
    virtual bool has_large_objects() const { return false; }
    virtual long long large_object_import(const std::string & /*file*/) { throw StoreError("no large objects"); }
    virtual void large_object_export(long long /*oid*/, const std::string & /*file*/) {
        throw StoreError("no large objects");
    }
};

class Store {
public:
    // The SQLite file at `path` (today's default layout).
    explicit Store(const std::string &path);
    // Whatever `url` names. Errors name the setting and never echo the password.
    explicit Store(const StoreUrl &url);
    ~Store();
    Store(const Store &) = delete;
    Store &operator=(const Store &) = delete;

    StoreUrl::Kind kind() const { return kind_; }

    // Whether a statement on this thread met StoreUnavailable since the last reset. A plugin sees
    // only a failed call (the C ABI has one error code), so the host reads this after the handler
    // to answer 503 instead of the plugin's 500, for plugins built against any SDK.
    static bool unavailable_seen(bool reset = false);

    // Runs one statement with `params` bound to `?` in order; returns the rows (possibly empty).
    nlohmann::json exec(const std::string &sql, const nlohmann::json &params = nlohmann::json::array());

    // Applies the plugin's migrations with version > the recorded one, each in one transaction.
    struct Migration {
        unsigned version;
        std::string sql;
    };
    void migrate(const std::string &owner, const std::vector<Migration> &migrations);
    unsigned schema_version(const std::string &owner);

    // Runs `fn` inside BEGIN ... COMMIT (ROLLBACK on exception). SQLite takes its write lock at
    // BEGIN (IMMEDIATE), so the transaction never fails half-way on a lock upgrade.
    // Large objects (has_large_objects): each call inside transaction(). Removing one is plain SQL
    // (SELECT lo_unlink(?)).
    bool has_large_objects() const { return backend_->has_large_objects(); }
    long long large_object_import(const std::string &file);
    void large_object_export(long long oid, const std::string &file);

    template <typename Fn> auto transaction(Fn &&fn) {
        backend_->begin();
        try {
            auto result = fn();
            backend_->commit();
            return result;
        } catch (...) {
            backend_->rollback();
            throw;
        }
    }

private:
    void init_bookkeeping(const std::string &shown);

    StoreUrl::Kind kind_;
    std::unique_ptr<StoreBackend> backend_;
};

// The engines (store_sqlite.cpp, store_postgres.cpp).
std::unique_ptr<StoreBackend> open_sqlite_backend(const std::string &path);
std::unique_ptr<StoreBackend> open_postgres_backend(const StoreUrl &url);

// `?` placeholders → `$1, $2, ...`, skipping quoted strings, identifiers and comments.
std::string number_placeholders(const std::string &sql);

} // namespace hangar::host
