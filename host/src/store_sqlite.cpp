// The SQLite engine: one connection (SQLite serialises writers anyway), WAL, a recursive mutex so a
// transaction's statements on the same thread pass while other threads wait.
#include "store.hpp"

#include <Poco/Data/SQLite/Connector.h>
#include <Poco/Data/SQLite/Utility.h>
#include <Poco/Data/Session.h>

#include <sqlite3.h>

#include <mutex>

namespace hangar::host {

namespace {

struct StmtCloser {
    void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtCloser>;

class SqliteBackend final : public StoreBackend {
public:
    explicit SqliteBackend(const std::string &path) {
        Poco::Data::SQLite::Connector::registerConnector();
        try {
            session_ = std::make_unique<Poco::Data::Session>("SQLite", path);
        } catch (const Poco::Exception &e) {
            throw StoreError(std::string(kStoreSetting) + " = sqlite:" + path + ": cannot open: " + e.displayText());
        }
        db_ = Poco::Data::SQLite::Utility::dbHandle(*session_);
        sqlite3_busy_timeout(db_, 5000);
        // WAL must be set outside a transaction or SQLite ignores it.
        raw("PRAGMA journal_mode=WAL");
        raw("PRAGMA synchronous=NORMAL");
        raw("PRAGMA foreign_keys=ON");
    }

    nlohmann::json exec(const std::string &sql, const nlohmann::json &params) override {
        std::lock_guard lock(mutex_);
        return exec_locked(sql, params);
    }
    void script(const std::string &sql) override {
        std::lock_guard lock(mutex_);
        raw(sql);
    }
    void begin() override {
        mutex_.lock();
        try {
            raw("BEGIN IMMEDIATE");
        } catch (...) {
            mutex_.unlock();
            throw;
        }
    }
    // A failed COMMIT keeps the lock: the caller's rollback() releases it.
    void commit() override {
        raw("COMMIT");
        mutex_.unlock();
    }
    void rollback() override {
        struct Unlock {
            std::recursive_mutex &m;
            ~Unlock() { m.unlock(); }
        } unlock{mutex_};
        raw("ROLLBACK");
    }

private:
    void raw(const std::string &sql) {
        char *err = nullptr;
        if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
            std::string msg = err ? err : "unknown error";
            sqlite3_free(err);
            throw StoreError(msg);
        }
    }

    nlohmann::json exec_locked(const std::string &sql, const nlohmann::json &params) {
        sqlite3_stmt *stmt_raw = nullptr;
        const char *tail = nullptr;
        if (sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt_raw, &tail) != SQLITE_OK)
            throw StoreError(sqlite3_errmsg(db_));
        Stmt stmt(stmt_raw);
        if (!stmt) return nlohmann::json::array();
        if (static_cast<int>(params.size()) != sqlite3_bind_parameter_count(stmt.get()))
            throw StoreError("statement expects " + std::to_string(sqlite3_bind_parameter_count(stmt.get())) +
                             " parameters, got " + std::to_string(params.size()));
        int i = 1;
        for (const auto &p : params) {
            int rc = SQLITE_OK;
            if (p.is_null())
                rc = sqlite3_bind_null(stmt.get(), i);
            else if (p.is_boolean())
                rc = sqlite3_bind_int64(stmt.get(), i, p.get<bool>() ? 1 : 0);
            else if (p.is_number_integer())
                rc = sqlite3_bind_int64(stmt.get(), i, p.get<std::int64_t>());
            else if (p.is_number_float())
                rc = sqlite3_bind_double(stmt.get(), i, p.get<double>());
            else if (p.is_string()) {
                const auto &s = p.get_ref<const std::string &>();
                rc = sqlite3_bind_text(stmt.get(), i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
            } else {
                auto s = p.dump(); // objects and arrays are stored as JSON text
                rc = sqlite3_bind_text(stmt.get(), i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
            }
            if (rc != SQLITE_OK) throw StoreError(sqlite3_errmsg(db_));
            ++i;
        }
        nlohmann::json rows = nlohmann::json::array();
        int cols = sqlite3_column_count(stmt.get());
        while (true) {
            int rc = sqlite3_step(stmt.get());
            if (rc == SQLITE_DONE) break;
            if (rc != SQLITE_ROW) throw StoreError(sqlite3_errmsg(db_));
            nlohmann::json row = nlohmann::json::object();
            for (int c = 0; c < cols; ++c) {
                const char *name = sqlite3_column_name(stmt.get(), c);
                switch (sqlite3_column_type(stmt.get(), c)) {
                case SQLITE_INTEGER:
                    row[name] = sqlite3_column_int64(stmt.get(), c);
                    break;
                case SQLITE_FLOAT:
                    row[name] = sqlite3_column_double(stmt.get(), c);
                    break;
                case SQLITE_NULL:
                    row[name] = nullptr;
                    break;
                default: {
                    const auto *text = reinterpret_cast<const char *>(sqlite3_column_text(stmt.get(), c));
                    row[name] =
                        std::string(text ? text : "", static_cast<std::size_t>(sqlite3_column_bytes(stmt.get(), c)));
                }
                }
            }
            rows.push_back(std::move(row));
        }
        return rows;
    }

    std::unique_ptr<Poco::Data::Session> session_;
    sqlite3 *db_ = nullptr;
    std::recursive_mutex mutex_;
};

} // namespace

std::unique_ptr<StoreBackend> open_sqlite_backend(const std::string &path) {
    return std::make_unique<SqliteBackend>(path);
}

} // namespace hangar::host
