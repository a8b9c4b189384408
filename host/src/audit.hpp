// The audit log: one row per authenticated request, written off the request threads.
//
// Request threads only push an entry onto a bounded queue (no I/O, no allocation beyond the
// entry); one writer thread drains it in batches, each batch one transaction, and prunes rows
// older than the retention. When the queue is full an entry is dropped and counted rather than
// making a request wait: the log must never slow the API down.
#pragma once

#include "store.hpp"

#include <Poco/Logger.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace hangar::host {

struct AuditEntry {
    std::int64_t ts_ms = 0;
    std::string org_id;
    std::string project_id;
    std::string method;
    std::string path;
    std::string route; // the matched pattern, e.g. /browsers/{id}
    int status = 0;
    std::int64_t duration_ms = 0;
    std::string client_ip;
    std::string user_agent;
    std::string domain;
    std::string auth_strategy;
    std::string user_id; // the API key's id
};

class AuditLog {
public:
    struct Options {
        std::size_t queue_capacity = 10000;
        int retention_days = 365;
        int flush_interval_ms = 100;
    };
    AuditLog(Store &store, Poco::Logger &log, Options options);
    ~AuditLog(); // writes what is queued, then stops the writer
    AuditLog(const AuditLog &) = delete;
    AuditLog &operator=(const AuditLog &) = delete;

    // Never blocks on I/O; false when the queue was full and the entry dropped.
    bool record(AuditEntry entry);
    // Waits until everything recorded so far is in the store (tests, shutdown).
    void flush();
    std::uint64_t dropped() const;

private:
    void run();
    void write(std::deque<AuditEntry> &batch);
    void prune();

    Store &store_;
    Poco::Logger &log_;
    Options options_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable written_;
    std::deque<AuditEntry> queue_;
    std::uint64_t queued_total_ = 0;
    std::uint64_t written_total_ = 0;
    std::uint64_t dropped_ = 0;
    bool stopping_ = false;
    bool flush_requested_ = false;
    std::thread writer_;
};

} // namespace hangar::host
