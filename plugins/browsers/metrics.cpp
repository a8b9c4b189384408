// The browsers plugin's part of GET /metrics: sessions, creates and deletes, create latency,
// warm spares, pools and admission refusals, as the `browsers.metrics` service (see
// sdk/include/hangar/metrics.hpp for the shape the host renders).
#include "browsers.hpp"

namespace hangar::browsers {

using hangar::metrics::family;
using hangar::metrics::sample;

void BrowsersPlugin::start_metrics() {
    service("browsers.metrics", [this](const json &) { return json{{"families", metrics_families()}}; });
}

void BrowsersPlugin::count_create(const char *source, std::chrono::steady_clock::time_point started) {
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::lock_guard lock(metrics_mutex_);
    create_seconds_[source].observe(seconds);
}

json BrowsersPlugin::metrics_families() const {
    json families = json::array();

    // Every project's sessions: the metrics are the operator's, who sees the whole server.
    json active =
        family("hangar_browser_sessions_active", "gauge",
               "browser sessions not yet deleted, by kind (headless or headful) and whether a pool lent them");
    std::map<std::pair<bool, bool>, double> counts = {
        {{true, false}, 0}, {{false, false}, 0}, {{true, true}, 0}, {{false, true}, 0}};
    for (const auto &row : sql("SELECT headless, pool_id IS NOT NULL AS pooled, COUNT(*) AS n FROM browsers_sessions "
                               "WHERE deleted_at IS NULL GROUP BY headless, pooled"))
        counts[{row.value("headless", 0) != 0, row.value("pooled", 0) != 0}] = row.value("n", 0.0);
    for (const auto &[key, n] : counts)
        active["samples"].push_back(
            sample({{"kind", key.first ? "headless" : "headful"}, {"pooled", key.second ? "true" : "false"}}, n));
    families.push_back(std::move(active));

    json creates = family("hangar_browser_creates_total", "counter",
                          "browser sessions handed out, by source (warm spare, cold start, pool lease)");
    json latency = family("hangar_browser_create_seconds", "histogram",
                          "from the create (or acquire) request to a ready browser, by source");
    {
        std::lock_guard lock(metrics_mutex_);
        for (const char *source : {"spare", "cold", "pool"}) {
            auto it = create_seconds_.find(source);
            creates["samples"].push_back(sample(
                {{"source", source}}, it == create_seconds_.end() ? 0.0 : static_cast<double>(it->second.count())));
            if (it != create_seconds_.end()) latency["samples"].push_back(it->second.sample({{"source", source}}));
        }
    }
    families.push_back(std::move(creates));
    families.push_back(std::move(latency));
    families.push_back(family("hangar_browser_deletes_total", "counter",
                              "browser sessions ended (DELETE, idle timeout, release, shutdown)",
                              {sample(json::object(), static_cast<double>(deletes_.load()))}));
    families.push_back(family("hangar_admission_rejections_total", "counter",
                              "creates, pool creates and pool resizes refused with 429 over a project's browser limit",
                              {sample(json::object(), static_cast<double>(admission_rejections_.load()))}));

    json spares = family("hangar_warm_spares", "gauge", "started browsers waiting to be handed out, by kind");
    {
        std::lock_guard lock(spares_mutex_);
        for (SpareKind kind : kSpareKinds) {
            auto it = spares_.find(kind);
            spares["samples"].push_back(
                sample({{"kind", kind.label()}}, it == spares_.end() ? 0.0 : static_cast<double>(it->second.size())));
        }
    }
    families.push_back(std::move(spares));

    // Pools by id (a pool's name is the tenant's words; its id is an opaque handle).
    json pool_size = family("hangar_pool_size", "gauge", "the configured size of each browser pool");
    json pool_browsers =
        family("hangar_pool_browsers", "gauge", "browsers of each pool by state (idle, leased, starting)");
    {
        std::lock_guard lock(pools_mutex_);
        for (const auto &[id, p] : pools_) {
            pool_size["samples"].push_back(sample({{"pool", id}}, p.size));
            pool_browsers["samples"].push_back(
                sample({{"pool", id}, {"state", "idle"}}, static_cast<double>(p.idle.size())));
            pool_browsers["samples"].push_back(
                sample({{"pool", id}, {"state", "leased"}}, static_cast<double>(p.leased.size())));
            pool_browsers["samples"].push_back(sample({{"pool", id}, {"state", "starting"}}, p.starting));
        }
    }
    families.push_back(std::move(pool_size));
    families.push_back(std::move(pool_browsers));
    return families;
}

} // namespace hangar::browsers
