#include "audit.hpp"

#include "util.hpp"

#include <algorithm>
#include <chrono>

namespace hangar::host {

namespace {
const std::vector<Store::Migration> kAuditMigrations = {
    {1, "CREATE TABLE audit_logs (seq INTEGER PRIMARY KEY AUTOINCREMENT, org_id TEXT NOT NULL, project_id TEXT,"
        " ts_ms INTEGER NOT NULL, timestamp TEXT NOT NULL, method TEXT NOT NULL, path TEXT NOT NULL,"
        " route TEXT NOT NULL, status INTEGER NOT NULL, duration_ms INTEGER NOT NULL, client_ip TEXT NOT NULL,"
        " user_agent TEXT NOT NULL, domain TEXT NOT NULL, auth_strategy TEXT NOT NULL, user_id TEXT NOT NULL,"
        " email TEXT NOT NULL DEFAULT '');"
        "CREATE INDEX audit_logs_org_ts ON audit_logs (org_id, ts_ms);"},
};
constexpr std::size_t kBatch = 512;
constexpr std::int64_t kPruneEveryMs = 3600LL * 1000;
} // namespace

AuditLog::AuditLog(Store &store, Poco::Logger &log, Options options) : store_(store), log_(log), options_(options) {
    store_.migrate("host.audit", kAuditMigrations);
    writer_ = std::thread([this] { run(); });
}

AuditLog::~AuditLog() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    if (writer_.joinable()) writer_.join();
}

bool AuditLog::record(AuditEntry entry) {
    {
        std::lock_guard lock(mutex_);
        if (queue_.size() >= options_.queue_capacity) {
            ++dropped_;
            return false;
        }
        queue_.push_back(std::move(entry));
        ++queued_total_;
    }
    return true; // the writer wakes on its interval: batching is the point
}

void AuditLog::flush() {
    std::unique_lock lock(mutex_);
    auto target = queued_total_;
    flush_requested_ = true;
    wake_.notify_all();
    written_.wait(lock, [&] { return written_total_ >= target || stopping_; });
}

std::uint64_t AuditLog::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

void AuditLog::run() {
    std::int64_t last_prune = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
        wake_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms),
                       [&] { return stopping_ || flush_requested_; });
        flush_requested_ = false;
        while (!queue_.empty()) {
            std::deque<AuditEntry> batch;
            while (!queue_.empty() && batch.size() < kBatch) {
                batch.push_back(std::move(queue_.front()));
                queue_.pop_front();
            }
            lock.unlock();
            write(batch);
            lock.lock();
            written_total_ += batch.size();
        }
        written_.notify_all();
        if (stopping_) return;
        if (auto now = now_ms(); now - last_prune > kPruneEveryMs) {
            last_prune = now;
            lock.unlock();
            prune();
            lock.lock();
        }
    }
}

void AuditLog::write(std::deque<AuditEntry> &batch) {
    // One multi-row INSERT per chunk: parsing one statement instead of one per row keeps the
    // store's lock (which request threads also take to authenticate) held for as short as can be.
    constexpr std::size_t kRowsPerStatement = 128;
    // Statements are built before the lock is taken.
    try {
        std::vector<std::pair<std::string, nlohmann::json>> statements;
        for (std::size_t first = 0; first < batch.size(); first += kRowsPerStatement) {
            std::string sql = "INSERT INTO audit_logs (org_id, project_id, ts_ms, timestamp, method, path, route,"
                              " status, duration_ms, client_ip, user_agent, domain, auth_strategy, user_id) VALUES ";
            nlohmann::json params = nlohmann::json::array();
            for (std::size_t i = first; i < std::min(batch.size(), first + kRowsPerStatement); ++i) {
                const auto &e = batch[i];
                sql += i == first ? "(?,?,?,?,?,?,?,?,?,?,?,?,?,?)" : ",(?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
                for (nlohmann::json v :
                     {nlohmann::json(e.org_id), nlohmann::json(e.project_id), nlohmann::json(e.ts_ms),
                      nlohmann::json(rfc3339(e.ts_ms)), nlohmann::json(e.method), nlohmann::json(e.path),
                      nlohmann::json(e.route), nlohmann::json(e.status), nlohmann::json(e.duration_ms),
                      nlohmann::json(e.client_ip), nlohmann::json(e.user_agent), nlohmann::json(e.domain),
                      nlohmann::json(e.auth_strategy), nlohmann::json(e.user_id)})
                    params.push_back(std::move(v));
            }
            statements.emplace_back(std::move(sql), std::move(params));
        }
        store_.transaction([&] {
            for (const auto &[sql, params] : statements)
                store_.exec(sql, params);
            return 0;
        });
    } catch (const std::exception &ex) {
        log_.error("audit log: %z entries could not be written: %s", batch.size(), std::string(ex.what()));
    }
}

void AuditLog::prune() {
    try {
        auto cutoff = now_ms() - static_cast<std::int64_t>(options_.retention_days) * 86400 * 1000;
        store_.exec("DELETE FROM audit_logs WHERE ts_ms < ?", {cutoff});
    } catch (const std::exception &ex) {
        log_.warning("audit log: pruning failed: %s", std::string(ex.what()));
    }
}

} // namespace hangar::host
