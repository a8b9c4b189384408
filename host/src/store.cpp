#include "store.hpp"

#include <Poco/Data/SQLite/Connector.h>
#include <Poco/Data/SQLite/Utility.h>

#include <sqlite3.h>

namespace hangar::host {

namespace {
struct StmtCloser {
    void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtCloser>;
} // namespace

Store::Store(const std::string &path) {
    Poco::Data::SQLite::Connector::registerConnector();
    session_ = std::make_unique<Poco::Data::Session>("SQLite", path);
    db_ = Poco::Data::SQLite::Utility::dbHandle(*session_);
    sqlite3_busy_timeout(db_, 5000);
    // WAL must be set outside a transaction or SQLite ignores it.
    raw_exec("PRAGMA journal_mode=WAL");
    raw_exec("PRAGMA synchronous=NORMAL");
    raw_exec("PRAGMA foreign_keys=ON");
    raw_exec("CREATE TABLE IF NOT EXISTS plugin_migrations (plugin TEXT NOT NULL, version INTEGER NOT NULL, "
             "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (plugin, version))");
}

Store::~Store() = default;

void Store::raw_exec(const std::string &sql) {
    char *err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : "unknown error";
        sqlite3_free(err);
        throw StoreError(msg);
    }
}

nlohmann::json Store::exec(const std::string &sql, const nlohmann::json &params) {
    std::lock_guard lock(mutex_);
    return exec_locked(sql, params);
}

nlohmann::json Store::exec_locked(const std::string &sql, const nlohmann::json &params) {
    sqlite3_stmt *raw = nullptr;
    const char *tail = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &raw, &tail) != SQLITE_OK)
        throw StoreError(sqlite3_errmsg(db_));
    Stmt stmt(raw);
    if (!stmt) return nlohmann::json::array();
    if (!params.is_array()) throw StoreError("parameters must be a JSON array");
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

unsigned Store::schema_version(const std::string &owner) {
    auto rows = exec("SELECT MAX(version) AS v FROM plugin_migrations WHERE plugin = ?", {owner});
    return rows.empty() || rows[0]["v"].is_null() ? 0u : rows[0]["v"].get<unsigned>();
}

void Store::migrate(const std::string &owner, const std::vector<Migration> &migrations) {
    unsigned previous = 0;
    for (const auto &m : migrations) {
        if (m.version <= previous) throw StoreError(owner + ": migration versions must increase");
        previous = m.version;
    }
    unsigned current = schema_version(owner);
    for (const auto &m : migrations) {
        if (m.version <= current) continue;
        std::lock_guard lock(mutex_);
        raw_exec("BEGIN IMMEDIATE");
        try {
            raw_exec(m.sql);
            exec_locked("INSERT INTO plugin_migrations (plugin, version) VALUES (?, ?)", {owner, m.version});
            raw_exec("COMMIT");
        } catch (const std::exception &e) {
            raw_exec("ROLLBACK");
            throw StoreError(owner + " migration " + std::to_string(m.version) + ": " + e.what());
        }
    }
}

} // namespace hangar::host
