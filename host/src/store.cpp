#include "store.hpp"

#include <ctime>

namespace hangar::host {

namespace {
// SQLite's CURRENT_TIMESTAMP text shape, written by the host so both engines record the same.
std::string utc_now_text() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}
} // namespace

Store::Store(const std::string &path) : kind_(StoreUrl::Kind::sqlite), backend_(open_sqlite_backend(path)) {
    init_bookkeeping("sqlite:" + path);
}

Store::Store(const StoreUrl &url)
    : kind_(url.kind),
      backend_(url.kind == StoreUrl::Kind::sqlite ? open_sqlite_backend(url.path) : open_postgres_backend(url)) {
    init_bookkeeping(url.redacted());
}

Store::~Store() = default;

void Store::init_bookkeeping(const std::string &shown) {
    // Under the schema lock: nodes starting at once on an empty store would both create the tables.
    backend_->begin();
    try {
        backend_->lock_schema();
        // The schema version first: a newer binary may have reshaped everything else.
        backend_->script("CREATE TABLE IF NOT EXISTS store_schema (version INTEGER NOT NULL)");
        auto rows = exec("SELECT MAX(version) AS v FROM store_schema");
        if (rows.empty() || rows[0]["v"].is_null()) {
            exec("INSERT INTO store_schema (version) VALUES (?)", {kStoreSchemaVersion});
        } else if (auto v = rows[0]["v"].get<long long>(); v > kStoreSchemaVersion) {
            throw StoreError(std::string(kStoreSetting) + " = " + shown + ": the store has schema version " +
                             std::to_string(v) + ", newer than this hangar's " + std::to_string(kStoreSchemaVersion) +
                             "; run the hangar release that wrote it (or a newer one)");
        } else if (v < kStoreSchemaVersion) {
            exec("UPDATE store_schema SET version = ?", {kStoreSchemaVersion});
        }
        backend_->script(
            "CREATE TABLE IF NOT EXISTS plugin_migrations (plugin TEXT NOT NULL, version INTEGER NOT NULL, "
            "applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (plugin, version))");
        backend_->commit();
    } catch (...) {
        backend_->rollback();
        throw;
    }
}

namespace {
thread_local bool t_unavailable_seen = false;
}

bool Store::unavailable_seen(bool reset) {
    bool seen = t_unavailable_seen;
    if (reset) t_unavailable_seen = false;
    return seen;
}

nlohmann::json Store::exec(const std::string &sql, const nlohmann::json &params) {
    if (!params.is_array()) throw StoreError("parameters must be a JSON array");
    try {
        return backend_->exec(sql, params);
    } catch (const StoreUnavailable &) {
        t_unavailable_seen = true;
        throw;
    }
}

long long Store::large_object_import(const std::string &file) {
    try {
        return backend_->large_object_import(file);
    } catch (const StoreUnavailable &) {
        t_unavailable_seen = true;
        throw;
    }
}

void Store::large_object_export(long long oid, const std::string &file) {
    try {
        backend_->large_object_export(oid, file);
    } catch (const StoreUnavailable &) {
        t_unavailable_seen = true;
        throw;
    }
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
        backend_->begin();
        try {
            // Two nodes starting at once: the second waits here, then sees the first one's work.
            backend_->lock_schema();
            if (current = schema_version(owner); m.version <= current) {
                backend_->commit();
                continue;
            }
            backend_->script(m.sql);
            backend_->exec("INSERT INTO plugin_migrations (plugin, version, applied_at) VALUES (?, ?, ?)",
                           {owner, m.version, utc_now_text()});
            backend_->commit();
        } catch (const std::exception &e) {
            backend_->rollback();
            throw StoreError(owner + " migration " + std::to_string(m.version) + ": " + e.what());
        }
    }
}

std::string number_placeholders(const std::string &sql) {
    std::string out;
    out.reserve(sql.size() + 16);
    int n = 0;
    for (std::size_t i = 0; i < sql.size(); ++i) {
        char c = sql[i];
        if (c == '\'' || c == '"') { // a string or quoted identifier; a doubled quote stays inside
            std::size_t end = i + 1;
            while (end < sql.size()) {
                if (sql[end] == c) {
                    if (end + 1 < sql.size() && sql[end + 1] == c) {
                        end += 2;
                        continue;
                    }
                    break;
                }
                ++end;
            }
            out.append(sql, i, end - i + 1);
            i = end;
        } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
            auto end = sql.find('\n', i);
            if (end == std::string::npos) end = sql.size() - 1;
            out.append(sql, i, end - i + 1);
            i = end;
        } else if (c == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
            auto end = sql.find("*/", i + 2);
            end = end == std::string::npos ? sql.size() - 1 : end + 1;
            out.append(sql, i, end - i + 1);
            i = end;
        } else if (c == '?') {
            out += '$' + std::to_string(++n);
        } else {
            out += c;
        }
    }
    return out;
}

} // namespace hangar::host
