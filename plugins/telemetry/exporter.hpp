// OTLP/HTTP delivery of archived telemetry to the destinations sessions name (server half).
// One queue and one sender thread per destination, so a collector that hangs or refuses holds up
// only its own sessions; the queue is bounded (drops are counted, never waited for), so a dead
// collector costs memory up to the bound and nothing else. The pull that feeds it runs on the
// node that owns the browser, off every request path, so export never slows the browser.
#pragma once

#include "export_model.hpp"

#include <hangar/egress.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace hangar::telemetry {

class Exporter {
public:
    struct Settings {
        std::size_t queue_records = 10000; // per destination
        std::size_t batch_records = 512;
        std::chrono::milliseconds backoff_base{500}, backoff_cap{30000};
        std::chrono::milliseconds timeout{10000};
        hangar::egress::Policy policy;
        std::string node;
        otlp::Encoding encoding = otlp::Encoding::protobuf;
    };
    // Where a destination sends now (read before every attempt, so a PATCH's new headers or
    // endpoint apply to exporting sessions at once); nullopt when it was deleted.
    struct Target {
        std::string url;
        otlp::Headers headers;
    };
    using Lookup = std::function<std::optional<Target>(const std::string &destination)>;
    // A delivery's outcome, for the destination's status fields: ok, or the sanitized error class.
    using Outcome = std::function<void(const std::string &destination, bool ok, const std::string &error_class)>;

    Exporter(Settings settings, Lookup lookup, Outcome outcome);
    ~Exporter();
    Exporter(const Exporter &) = delete;
    Exporter &operator=(const Exporter &) = delete;

    // Queues a session's envelopes ({seq, event}) for `destination`; never blocks on the network.
    void enqueue(const std::string &destination, const std::string &session_id, const std::string &project_id,
                 const nlohmann::json &envelopes);
    // The destination was deleted: what waits for it is dropped (counted).
    void forget(const std::string &destination);
    // Waits until every queue is empty and no request is under way, or `deadline` passed (a
    // server stopping sends what its last pull queued while collectors answer).
    void drain(std::chrono::milliseconds deadline);
    // Prometheus families: records sent and dropped, retries, and the queue's size.
    nlohmann::json metric_families() const;

private:
    struct Destination {
        explicit Destination(std::size_t capacity) : queue(capacity) {}
        std::mutex mutex;
        std::condition_variable_any wake;
        otlp::Queue queue; // under mutex
        std::atomic<std::uint64_t> sent{0}, retried{0}, dropped_failed{0};
        std::atomic<bool> busy{false}; // a batch taken from the queue is being delivered
        std::jthread worker;
    };
    void run(const std::stop_token &stop, const std::string &id, Destination &d);
    // Sends one batch until it is delivered, refused for good, or the exporter stops.
    void deliver(const std::stop_token &stop, const std::string &id, Destination &d,
                 const std::vector<otlp::Record> &batch);

    Settings settings_;
    Lookup lookup_;
    Outcome outcome_;
    mutable std::mutex mutex_;
    std::map<std::string, std::shared_ptr<Destination>> destinations_;
};

} // namespace hangar::telemetry
