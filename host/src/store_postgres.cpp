// The PostgreSQL engine: connections opened through Poco::Data's PostgreSQL connector, statements
// run on the PGconn it exposes (the JSON-in, JSON-out shape needs each value's own type, as for
// SQLite). A small pool lets threads run statements side by side; a transaction pins one
// connection to its thread until COMMIT or ROLLBACK, so every statement inside it sees it.
#include "store.hpp"

#include <Poco/Data/PostgreSQL/Connector.h>
#include <Poco/Data/PostgreSQL/SessionImpl.h>
#include <Poco/Data/Session.h>

#include <libpq-fe.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <unordered_map>

namespace hangar::host {

namespace {

constexpr std::size_t kPoolSize = 8;
constexpr auto kPoolWait = std::chrono::seconds(30);
// pg_advisory_lock keys, one per purpose, the same in every hangar binary.
constexpr long long kCompatibilityLock = 2024062401, kSchemaLock = 2024062402;

// Type oids from PostgreSQL's pg_type.h (stable across releases).
constexpr Oid kBool = 16, kInt8 = 20, kInt2 = 21, kInt4 = 23, kOid = 26, kFloat4 = 700, kFloat8 = 701, kNumeric = 1700;

struct ResultCloser {
    void operator()(PGresult *r) const { PQclear(r); }
};
using Result = std::unique_ptr<PGresult, ResultCloser>;

// Statements are prepared once per connection: parsing and planning a statement costs the
// server more than running one of ours (a lookup by key), and the API runs the same few texts
// again and again (host/README.md, "Store"). Texts built with a varying number of placeholders
// would grow the set without end, so past this many a connection runs new texts unprepared.
constexpr std::size_t kMaxPreparedPerConnection = 512;

struct Connection {
    std::unique_ptr<Poco::Data::Session> session; // owns the PGconn
    PGconn *pg = nullptr;
    std::unordered_map<std::string, std::string> prepared; // statement text -> its name on this connection
    std::size_t next_name = 0; // names are never reused, so a dropped entry cannot clash with a new one
};

std::string scrub(std::string text, const std::string &secret) {
    if (secret.empty()) return text;
    for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, at))
        text.replace(at, secret.size(), "***");
    return text;
}

std::string first_line(std::string text) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
        text.pop_back();
    return text;
}

nlohmann::json cell(const PGresult *r, int row, int col) {
    if (PQgetisnull(r, row, col)) return nullptr;
    const char *v = PQgetvalue(r, row, col);
    switch (PQftype(r, col)) {
    case kInt2:
    case kInt4:
    case kInt8:
    case kOid:
        return std::strtoll(v, nullptr, 10);
    case kBool: // SQLite has no booleans: comparisons read as 0/1 there, so here too
        return v[0] == 't' ? 1 : 0;
    case kNumeric: // SUM(integer) is numeric here and an integer in SQLite
        if (std::string_view(v).find_first_of(".eEN") == std::string_view::npos) return std::strtoll(v, nullptr, 10);
        return std::strtod(v, nullptr);
    case kFloat4:
    case kFloat8:
        return std::strtod(v, nullptr);
    default:
        return std::string(v, static_cast<std::size_t>(PQgetlength(r, row, col)));
    }
}

// The few SQLite spellings plugins use that have no common one, given to PostgreSQL under the
// same names so plugin SQL stays one text (issue 24: the store layer hides the difference, not
// each plugin). Created at open; CREATE OR REPLACE keeps them current with the binary.
constexpr const char *kCompatibility = R"sql(
CREATE OR REPLACE FUNCTION instr(haystack text, needle text) RETURNS integer
    LANGUAGE sql IMMUTABLE AS 'SELECT strpos(haystack, needle)';
CREATE OR REPLACE FUNCTION json_extract(doc text, path text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$SELECT CASE WHEN doc IS NULL OR doc = '' THEN NULL
        ELSE doc::jsonb #>> string_to_array(substr(path, 3), '.') END$$;
CREATE OR REPLACE VIEW sqlite_master AS
    SELECT 'table'::text AS type, table_name::text AS name FROM information_schema.tables
    WHERE table_schema = current_schema() AND table_type = 'BASE TABLE';
CREATE OR REPLACE FUNCTION pragma_table_info(tbl text) RETURNS TABLE(name text)
    LANGUAGE sql STABLE AS $$SELECT column_name::text FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = tbl ORDER BY ordinal_position$$;
)sql";

// DDL that SQLite spells its own way, rewritten for PostgreSQL in migrations.
std::string translate_ddl(const std::string &sql) {
    // A column `INTEGER PRIMARY KEY` is SQLite's rowid: filled in when an INSERT leaves it out (with
    // or without AUTOINCREMENT, which only forbids reusing ids). An identity column does the same.
    static const std::regex kRowid(R"(\bINTEGER\s+PRIMARY\s+KEY(\s+AUTOINCREMENT)?\b)", std::regex::icase);
    static const std::regex kBlob(R"((\s)BLOB\b)"); // the type, not a column named blob
    // SQLite's INTEGER holds 64 bits, PostgreSQL's 32: millisecond times overflow it.
    static const std::regex kInteger(R"(\bINTEGER\b)", std::regex::icase);
    auto out = std::regex_replace(sql, kRowid, "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY");
    out = std::regex_replace(out, kBlob, "$1BYTEA");
    return std::regex_replace(out, kInteger, "BIGINT");
}

class PostgresBackend final : public StoreBackend {
public:
    explicit PostgresBackend(const StoreUrl &url) : url_(url) {
        Poco::Data::PostgreSQL::Connector::registerConnector();
        idle_.push_back(connect()); // fail at start, not at the first request
        open_ = 1;
        // Serialised across nodes starting at once: concurrent CREATE OR REPLACE can collide.
        // One query string runs as one transaction, so the lock is the transaction's: held until
        // the functions are committed. (A session lock given back by a statement of the same
        // string let the next node in before the commit: "duplicate key … pg_proc".)
        // Not through script(): its DDL rewrites are for SQLite-spelled migrations, not this text.
        auto c = checkout();
        try {
            run_script(*c, "SELECT pg_advisory_xact_lock(" + std::to_string(kCompatibilityLock) + "); " +
                               std::string(kCompatibility));
        } catch (const std::exception &e) {
            checkin(std::move(c));
            throw StoreError(std::string(kStoreSetting) + " = " + url_.redacted() +
                             ": cannot create the store's compatibility functions: " + e.what());
        }
        checkin(std::move(c));
    }
    ~PostgresBackend() override {
        std::lock_guard lock(mutex_);
        pinned().erase(this);
    }

    nlohmann::json exec(const std::string &sql, const nlohmann::json &params) override {
        if (auto *c = pinned_connection()) return run(*c, sql, params);
        auto c = checkout();
        try {
            auto rows = run(*c, sql, params);
            checkin(std::move(c));
            return rows;
        } catch (...) {
            checkin(std::move(c));
            throw;
        }
    }
    void script(const std::string &sql_text) override {
        auto sql = translate_ddl(sql_text);
        if (auto *c = pinned_connection()) return run_script(*c, sql);
        auto c = checkout();
        try {
            run_script(*c, sql);
        } catch (...) {
            checkin(std::move(c));
            throw;
        }
        checkin(std::move(c));
    }
    void begin() override {
        if (pinned_connection()) throw StoreError("a store transaction is already open on this thread");
        auto c = checkout();
        try {
            run_script(*c, "BEGIN");
        } catch (...) {
            checkin(std::move(c));
            throw;
        }
        pinned()[this] = std::move(c);
    }
    void commit() override {
        auto *c = pinned_connection();
        if (!c) throw StoreError("COMMIT without a transaction");
        run_script(*c, "COMMIT"); // on failure the caller rolls back, which releases the pin
        release_pin();
    }
    void rollback() override {
        auto *c = pinned_connection();
        if (!c) return;
        try {
            run_script(*c, "ROLLBACK");
        } catch (...) {
            release_pin();
            throw;
        }
        release_pin();
    }

    void lock_schema() override {
        auto *c = pinned_connection();
        if (!c) throw StoreError("the schema lock needs a transaction");
        run_script(*c, "SELECT pg_advisory_xact_lock(" + std::to_string(kSchemaLock) + ")");
    }

    // libpq's client-side import and export read and write the file in chunks (LO_BUFSIZE).
    bool has_large_objects() const override { return true; }
    long long large_object_import(const std::string &file) override {
        auto *c = pinned_connection();
        if (!c) throw StoreError("large objects need a transaction");
        Oid oid = lo_import(c->pg, file.c_str());
        if (oid == InvalidOid) fail(*c, "cannot store " + file);
        return static_cast<long long>(oid);
    }
    void large_object_export(long long oid, const std::string &file) override {
        auto *c = pinned_connection();
        if (!c) throw StoreError("large objects need a transaction");
        if (lo_export(c->pg, static_cast<Oid>(oid), file.c_str()) != 1)
            fail(*c, "cannot read large object " + std::to_string(oid));
    }

private:
    using Pins = std::unordered_map<const PostgresBackend *, std::unique_ptr<Connection>>;
    static Pins &pinned() {
        thread_local Pins pins;
        return pins;
    }
    Connection *pinned_connection() {
        auto &pins = pinned();
        auto it = pins.find(this);
        return it == pins.end() ? nullptr : it->second.get();
    }
    void release_pin() {
        auto &pins = pinned();
        auto it = pins.find(this);
        if (it == pins.end()) return;
        auto c = std::move(it->second);
        pins.erase(it);
        checkin(std::move(c));
    }

    std::unique_ptr<Connection> connect() {
        auto c = std::make_unique<Connection>();
        try {
            c->session = std::make_unique<Poco::Data::Session>("PostgreSQL", url_.conninfo());
            auto *impl = dynamic_cast<Poco::Data::PostgreSQL::SessionImpl *>(c->session->impl());
            if (!impl) throw StoreError("the PostgreSQL connector gave no native session");
            c->pg = impl->handle();
        } catch (const Poco::Exception &e) {
            throw StoreUnavailable(
                std::string(kStoreSetting) + " = " + url_.redacted() + ": cannot connect: " +
                first_line(scrub(e.message().empty() ? e.displayText() : e.message(), url_.password)));
        }
        if (!c->pg || PQstatus(c->pg) != CONNECTION_OK)
            throw StoreUnavailable(std::string(kStoreSetting) + " = " + url_.redacted() + ": cannot connect: " +
                                   first_line(scrub(c->pg ? PQerrorMessage(c->pg) : "no connection", url_.password)));
        // Notices (DROP ... CASCADE, IF NOT EXISTS skips) would go to stderr: they are not errors.
        PQsetNoticeProcessor(
            c->pg, [](void *, const char *) {}, nullptr);
        // Plugins write UTC text timestamps; keep the session's own clock on UTC too.
        run_script(*c, "SET TIME ZONE 'UTC'");
        return c;
    }

    std::unique_ptr<Connection> checkout() {
        std::unique_lock lock(mutex_);
        for (;;) {
            if (!idle_.empty()) {
                auto c = std::move(idle_.back());
                idle_.pop_back();
                return c;
            }
            if (open_ < kPoolSize) {
                ++open_;
                lock.unlock();
                try {
                    return connect();
                } catch (...) {
                    lock.lock();
                    --open_;
                    throw;
                }
            }
            if (!free_.wait_for(lock, kPoolWait, [&] { return !idle_.empty() || open_ < kPoolSize; }))
                throw StoreError("no store connection came free within 30 s");
        }
    }
    // A connection the server dropped (restart, network) is closed rather than handed out again.
    void checkin(std::unique_ptr<Connection> c) {
        bool healthy = c && PQstatus(c->pg) == CONNECTION_OK && PQtransactionStatus(c->pg) == PQTRANS_IDLE;
        std::lock_guard lock(mutex_);
        if (healthy) {
            idle_.push_back(std::move(c));
            // One connection came free: one waiter takes it. Waking them all (every API thread
            // under load) had each fight for the mutex to find it gone: `bench/run.mjs cluster`
            // spent most of its CPU in that herd (host/README.md, "Store").
            free_.notify_one();
        } else {
            // One lost connection means the server went away: the idle ones are as stale, and
            // every slot they held may be opened again.
            open_ -= 1 + idle_.size();
            idle_.clear();
            free_.notify_all();
        }
    }

    // The statement's name on this connection, prepared now if it was not; "" to run it unprepared.
    static std::string prepared_name(Connection &c, const std::string &sql, const std::string &text) {
        if (auto it = c.prepared.find(sql); it != c.prepared.end()) return it->second;
        if (c.prepared.size() >= kMaxPreparedPerConnection) return "";
        // DDL runs once (migrations, tests): worth no slot.
        static const std::regex kQuery(R"(^\s*(SELECT|INSERT|UPDATE|DELETE|WITH)\b)", std::regex::icase);
        if (!std::regex_search(sql, kQuery)) return "";
        std::string name = "h" + std::to_string(c.next_name++);
        Result r(PQprepare(c.pg, name.c_str(), text.c_str(), 0, nullptr));
        check(r.get(), c.pg);
        c.prepared.emplace(sql, name);
        return name;
    }

    static bool plan_outdated(const PGresult *r) {
        // Another node's migration changed a table a prepared `SELECT *` reads: prepare it again.
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
        return state && std::string_view(state) == "0A000" &&
               std::string_view(PQresultErrorMessage(r)).find("cached plan") != std::string_view::npos;
    }

    static void check(const PGresult *r, PGconn *pg) {
        auto status = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
        if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) return;
        // A lost connection is the server's outage, not the statement's fault (checkin drops it).
        if (PQstatus(pg) != CONNECTION_OK)
            throw StoreUnavailable("the store's server closed the connection: " +
                                   first_line(r ? PQresultErrorMessage(r) : PQerrorMessage(pg)));
        throw StoreError(first_line(r ? PQresultErrorMessage(r) : PQerrorMessage(pg)));
    }

    [[noreturn]] static void fail(Connection &c, const std::string &what) {
        std::string why = first_line(PQerrorMessage(c.pg));
        if (PQstatus(c.pg) != CONNECTION_OK) throw StoreUnavailable(what + ": " + why);
        throw StoreError(what + ": " + why);
    }

    static void run_script(Connection &c, const std::string &sql) {
        Result r(PQexec(c.pg, sql.c_str()));
        check(r.get(), c.pg);
    }

    static nlohmann::json run(Connection &c, const std::string &sql, const nlohmann::json &params) {
        std::vector<std::string> values;
        std::vector<const char *> ptrs;
        values.reserve(params.size());
        for (const auto &p : params) {
            if (p.is_null()) {
                values.emplace_back();
            } else if (p.is_boolean()) {
                values.emplace_back(p.get<bool>() ? "1" : "0");
            } else if (p.is_string()) {
                values.push_back(p.get<std::string>());
            } else {
                values.push_back(p.dump()); // numbers print as themselves; objects and arrays as JSON text
            }
        }
        for (std::size_t i = 0; i < params.size(); ++i)
            ptrs.push_back(params[i].is_null() ? nullptr : values[i].c_str());
        const int count = static_cast<int>(ptrs.size());
        Result r;
        for (int attempt = 0; attempt < 2; ++attempt) {
            auto it = c.prepared.find(sql);
            std::string text = it == c.prepared.end() ? number_placeholders(sql) : std::string();
            std::string name = it == c.prepared.end() ? prepared_name(c, sql, text) : it->second;
            r.reset(name.empty() ? PQexecParams(c.pg, text.c_str(), count, nullptr, ptrs.data(), nullptr, nullptr, 0)
                                 : PQexecPrepared(c.pg, name.c_str(), count, ptrs.data(), nullptr, nullptr, 0));
            if (name.empty() || !plan_outdated(r.get())) break;
            c.prepared.erase(sql);
            // Inside a transaction the failure aborted it: the caller's rollback and retry prepare anew.
            if (PQtransactionStatus(c.pg) != PQTRANS_IDLE) break;
        }
        check(r.get(), c.pg);
        nlohmann::json rows = nlohmann::json::array();
        int n = PQntuples(r.get()), cols = PQnfields(r.get());
        for (int i = 0; i < n; ++i) {
            nlohmann::json row = nlohmann::json::object();
            for (int col = 0; col < cols; ++col)
                row[PQfname(r.get(), col)] = cell(r.get(), i, col);
            rows.push_back(std::move(row));
        }
        return rows;
    }

    StoreUrl url_;
    std::mutex mutex_;
    std::condition_variable free_;
    std::vector<std::unique_ptr<Connection>> idle_;
    std::size_t open_ = 0;
};

} // namespace

std::unique_ptr<StoreBackend> open_postgres_backend(const StoreUrl &url) {
    return std::make_unique<PostgresBackend>(url);
}

} // namespace hangar::host
