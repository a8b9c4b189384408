// Metrics a plugin reports to the host's `GET /metrics` (Prometheus text format).
//
// A plugin that has metrics offers the service `<plugin>.metrics`; on each scrape the host calls
// it with `{}` and renders what it returns: `{"families": [family, ...]}` where a family is
//   {"name": "hangar_...", "type": "gauge" | "counter" | "histogram", "help": "...",
//    "samples": [{"labels": {"k": "v"}, "value": 1}, ...]}
// and a histogram sample is `Histogram::sample(labels)`. Names must start with `hangar_`; the
// host drops anything else. Label values are the plugin's to keep free of secrets (keys, tokens,
// tenant file paths never belong in a label).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hangar::metrics {

// Buckets for durations in seconds: 5 ms .. 60 s, what API calls and browser starts span.
inline const std::vector<double> &seconds_buckets() {
    static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    return b;
}

// A fixed-bucket histogram. Not synchronised: its owner guards it with the lock that guards the
// rest of its state (one lock per scrape is cheaper than one per histogram).
class Histogram {
public:
    explicit Histogram(const std::vector<double> &bounds = seconds_buckets())
        : bounds_(bounds), counts_(bounds.size(), 0) {}

    void observe(double v) {
        for (std::size_t i = 0; i < bounds_.size(); ++i)
            if (v <= bounds_[i]) ++counts_[i];
        ++count_;
        sum_ += v;
    }
    std::uint64_t count() const { return count_; }
    double sum() const { return sum_; }

    // One sample of a histogram family: cumulative buckets as [[le, count], ...].
    nlohmann::json sample(nlohmann::json labels = nlohmann::json::object()) const {
        nlohmann::json buckets = nlohmann::json::array();
        for (std::size_t i = 0; i < bounds_.size(); ++i)
            buckets.push_back({bounds_[i], counts_[i]});
        return {{"labels", std::move(labels)}, {"buckets", std::move(buckets)}, {"sum", sum_}, {"count", count_}};
    }

private:
    std::vector<double> bounds_;
    std::vector<std::uint64_t> counts_;
    std::uint64_t count_ = 0;
    double sum_ = 0;
};

inline nlohmann::json family(std::string name, std::string type, std::string help,
                             nlohmann::json samples = nlohmann::json::array()) {
    return {{"name", std::move(name)}, {"type", std::move(type)}, {"help", std::move(help)}, {"samples", samples}};
}

inline nlohmann::json sample(nlohmann::json labels, double value) {
    return {{"labels", std::move(labels)}, {"value", value}};
}

} // namespace hangar::metrics
