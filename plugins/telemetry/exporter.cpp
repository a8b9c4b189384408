#include "exporter.hpp"
#include "telemetry_model.hpp"

#include <hangar/metrics.hpp>
#include <hangar/outbound.hpp>
#include <hangar/text.hpp>

#include <random>

namespace hangar::telemetry {

Exporter::Exporter(Settings settings, Lookup lookup, Outcome outcome)
    : settings_(std::move(settings)), lookup_(std::move(lookup)), outcome_(std::move(outcome)) {}

Exporter::~Exporter() {
    std::map<std::string, std::shared_ptr<Destination>> all;
    {
        std::lock_guard lock(mutex_);
        all.swap(destinations_);
    }
    for (auto &[_, d] : all) {
        d->worker.request_stop();
        d->wake.notify_all();
    }
    all.clear(); // joins each worker
}

void Exporter::enqueue(const std::string &destination, const std::string &session_id, const std::string &project_id,
                       const nlohmann::json &envelopes) {
    std::shared_ptr<Destination> d;
    {
        std::lock_guard lock(mutex_);
        auto &slot = destinations_[destination];
        if (!slot) {
            slot = std::make_shared<Destination>(settings_.queue_records);
            Destination &ref = *slot;
            slot->worker =
                std::jthread([this, destination, &ref](const std::stop_token &st) { run(st, destination, ref); });
        }
        d = slot;
    }
    {
        std::lock_guard lock(d->mutex);
        const std::int64_t now = now_us();
        for (const auto &e : envelopes)
            d->queue.push({session_id, project_id, otlp::log_record(e)}, now);
    }
    d->wake.notify_one();
}

void Exporter::forget(const std::string &destination) {
    std::shared_ptr<Destination> d;
    {
        std::lock_guard lock(mutex_);
        auto it = destinations_.find(destination);
        if (it == destinations_.end()) return;
        d = it->second;
        destinations_.erase(it);
    }
    {
        std::lock_guard lock(d->mutex);
        d->dropped_failed += d->queue.clear();
    }
    d->worker.request_stop();
    d->wake.notify_all();
    // The shared_ptr held by this frame joins the worker when it goes.
}

void Exporter::drain(std::chrono::milliseconds deadline) {
    const auto until = std::chrono::steady_clock::now() + deadline;
    while (std::chrono::steady_clock::now() < until) {
        bool idle = true;
        {
            std::lock_guard lock(mutex_);
            for (const auto &[_, d] : destinations_) {
                std::lock_guard dl(d->mutex);
                if (d->queue.size() > 0 || d->busy) idle = false;
            }
        }
        if (idle) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void Exporter::run(const std::stop_token &stop, const std::string &id, Destination &d) {
    while (!stop.stop_requested()) {
        std::vector<otlp::Record> batch;
        {
            std::unique_lock lock(d.mutex);
            d.wake.wait(lock, stop, [&] { return d.queue.size() > 0; });
            if (stop.stop_requested()) return;
            batch = d.queue.take(settings_.batch_records);
            d.busy = true;
        }
        deliver(stop, id, d, batch);
        d.busy = false;
    }
}

namespace {
std::optional<int> retry_after(const hangar::outbound::Response &r) {
    for (const auto &[k, v] : r.headers)
        if (hangar::canonical_header_name(k) == "Retry-After") try {
                return std::stoi(v);
            } catch (const std::exception &) {
                return std::nullopt; // an HTTP date: the backoff's own wait applies
            }
    return std::nullopt;
}
} // namespace

void Exporter::deliver(const std::stop_token &stop, const std::string &id, Destination &d,
                       const std::vector<otlp::Record> &batch) {
    std::string body;
    try {
        body = otlp::encode_request(otlp::logs_request(batch, settings_.node), settings_.encoding);
    } catch (const std::exception &) {
        // Sending the same batch again would fail the same way: it is dropped, counted.
        d.dropped_failed += batch.size();
        outcome_(id, false, "internal");
        return;
    }
    std::mt19937 rng(std::random_device{}());
    std::uniform_real_distribution<double> jitter(0.0, 1.0);
    for (int attempt = 1; !stop.stop_requested(); ++attempt) {
        std::string error;
        std::optional<int> wait_hint;
        bool permanent = false;
        try {
            auto target = lookup_(id);
            if (!target) { // deleted while this batch waited
                d.dropped_failed += batch.size();
                return;
            }
            hangar::outbound::Request req;
            req.method = "POST";
            req.url = target->url;
            req.content_type = otlp::content_type(settings_.encoding);
            req.body = body;
            req.timeout = settings_.timeout;
            for (const auto &[k, v] : target->headers)
                req.headers.emplace_back(k, v);
            auto res = hangar::outbound::send(req, settings_.policy, std::size_t{64} * 1024);
            if (res.status >= 200 && res.status < 300) {
                // OTLP's partial success: records the collector refused are not coming back.
                // The answer comes in the request's encoding (OTLP/HTTP).
                const std::uint64_t rejected =
                    std::min<std::uint64_t>(otlp::rejected_records(res.body, settings_.encoding), batch.size());
                d.sent += batch.size() - rejected;
                d.dropped_failed += rejected;
                outcome_(id, true, {});
                return;
            }
            error = otlp::error_class_of_status(res.status);
            permanent = !otlp::retryable_status(res.status);
            wait_hint = retry_after(res);
        } catch (const hangar::outbound::Failure &f) {
            using Kind = hangar::outbound::Failure::Kind;
            // An address the policy refuses stays refused until the operator changes the policy
            // or the tenant the endpoint: retrying would only fill the log.
            permanent = f.kind() == Kind::refused;
            error = f.kind() == Kind::refused      ? "address_refused"
                    : f.kind() == Kind::unresolved ? "dns_failure"
                    : f.kind() == Kind::timeout    ? "timeout"
                                                   : "connection_failed";
        } catch (const std::exception &) {
            error = "internal";
        }
        outcome_(id, false, error);
        if (permanent) {
            d.dropped_failed += batch.size();
            return;
        }
        ++d.retried;
        auto wait = otlp::backoff(attempt, settings_.backoff_base, settings_.backoff_cap, jitter(rng), wait_hint);
        std::unique_lock lock(d.mutex);
        d.wake.wait_for(lock, stop, wait, [] { return false; });
    }
}

nlohmann::json Exporter::metric_families() const {
    using hangar::metrics::family;
    using hangar::metrics::sample;
    auto records = family("hangar_telemetry_export_records_total", "counter",
                          "Telemetry records per OTLP destination, by outcome (sent, dropped)");
    auto retries = family("hangar_telemetry_export_retries_total", "counter",
                          "OTLP export requests sent again after a failure, per destination");
    auto queued =
        family("hangar_telemetry_export_queue_records", "gauge", "Telemetry records waiting per OTLP destination");
    std::lock_guard lock(mutex_);
    for (const auto &[id, d] : destinations_) {
        std::uint64_t dropped = d->dropped_failed;
        std::size_t waiting = 0;
        {
            std::lock_guard dl(d->mutex);
            dropped += d->queue.dropped();
            waiting = d->queue.size();
        }
        records["samples"].push_back(
            sample({{"destination", id}, {"outcome", "sent"}}, static_cast<double>(d->sent.load())));
        records["samples"].push_back(
            sample({{"destination", id}, {"outcome", "dropped"}}, static_cast<double>(dropped)));
        retries["samples"].push_back(sample({{"destination", id}}, static_cast<double>(d->retried.load())));
        queued["samples"].push_back(sample({{"destination", id}}, static_cast<double>(waiting)));
    }
    return nlohmann::json::array({records, retries, queued});
}

} // namespace hangar::telemetry
