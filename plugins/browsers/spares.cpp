// Warm spares: see browsers.hpp. A spare's instance id becomes the session id at hand-over, so
// nothing is renamed or restarted; a spare has never been connected to, so it carries no state.
#include "browsers.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

namespace hangar::browsers {

namespace {

using Clock = std::chrono::steady_clock;

// MemAvailable from /proc/meminfo in MiB; -1 when it cannot be read.
std::int64_t available_memory_mb() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    std::int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
        if (key == "MemAvailable:") return kb / 1024;
    return -1;
}

} // namespace

bool BrowsersPlugin::spare_can_serve(const CreateOptions &o) {
    // name, tags and timeout_seconds live only in the session row, a start_url is opened in the
    // spare at hand-over, a proxy and request signing are live changes of its forwarder and
    // signer (a proxy's CA bundle is not: the caller checks), stealth is a kind of spare, and a
    // profile with no saved state (the caller asks) is the empty user-data folder the spare
    // already has (its lease is taken at hand-over as on a cold start). Everything else that
    // changes how Chromium starts (a location is its TZ and language flags) needs a cold start.
    bool only_signing =
        std::all_of(o.extensions.begin(), o.extensions.end(), [](const json &e) { return is_signing_extension(e); });
    // An allowlist and private hosts hold from Chromium's first request, so they are set before
    // Chromium starts.
    return !o.kiosk_mode && o.viewport == Viewport{} && !o.chrome_policy && only_signing && o.location == Location{} &&
           !o.allowed_hosts && !o.private_hosts;
}

int BrowsersPlugin::spare_minimum(SpareKind kind) const {
    return kind.stealth ? 0 : warm_spares_; // most servers never create a stealth browser
}

void BrowsersPlugin::start_spares() {
    warm_spares_ = static_cast<int>(std::clamp<std::int64_t>(config_int("warm_spares", 1), 0, 16));
    // warm_spares = 0 turns spares off whatever the maximum: tests and small machines keep the
    // number of live Chromiums exactly what they asked for.
    warm_spares_max_ =
        warm_spares_ == 0
            ? 0
            : static_cast<int>(std::clamp<std::int64_t>(config_int("warm_spares_max", 10), warm_spares_, 32));
    spares_window_ = std::chrono::seconds(std::clamp<std::int64_t>(config_int("spares_window_seconds", 120), 1, 3600));
    spares_min_free_mb_ = config_int("spares_min_free_mb", 2048);
    if (warm_spares_max_ == 0) return;
    // Two at once: a burst's replacements start together, and more would only queue on the CPUs.
    for (int i = 0; i < 2; ++i)
        spare_fillers_.emplace_back([this](const std::stop_token &stop) { fill_spares(stop); });
}

// Enough spares for the creates of one start-up time: the most that came within any such span
// of the window (a burst), or the steady rate times the start-up time, whichever is more.
int BrowsersPlugin::spare_target(SpareKind kind, Clock::time_point now) {
    auto &demand = spare_demand_[kind];
    while (!demand.creates.empty() && now - demand.creates.front() > spares_window_)
        demand.creates.pop_front();
    int minimum = spare_minimum(kind);
    if (demand.creates.empty()) return minimum;
    auto span = std::chrono::milliseconds(static_cast<std::int64_t>(std::max(demand.start_ms, 250.0)));
    int peak = 0;
    for (std::size_t first = 0, last = 0; first < demand.creates.size(); ++first) {
        while (last < demand.creates.size() && demand.creates[last] - demand.creates[first] < span)
            ++last;
        peak = std::max(peak, static_cast<int>(last - first));
    }
    double window_s = std::chrono::duration<double>(spares_window_).count();
    int steady = static_cast<int>(
        std::ceil(static_cast<double>(demand.creates.size()) / window_s * std::chrono::duration<double>(span).count()));
    return std::clamp(std::max(peak, steady), minimum, warm_spares_max_);
}

void BrowsersPlugin::fill_spares(const std::stop_token &stop) {
    while (!stop.stop_requested()) {
        std::optional<SpareKind> start;
        std::optional<std::string> retire;
        {
            std::unique_lock lock(spares_mutex_);
            // Targets decay as creates leave the window, so look again every second.
            spares_cv_.wait_for(lock, stop, std::chrono::seconds(1), [&] {
                auto now = Clock::now();
                for (SpareKind kind : kSpareKinds) { // the default configuration (headful) first
                    int target = spare_target(kind, now);
                    int ready = static_cast<int>(spares_[kind].size());
                    int supply = ready + spare_demand_[kind].starting;
                    // A waiting create's own start serves it sooner than a spare would.
                    if (supply < target && start_slots_free_ > 0 && creates_waiting_ == 0) {
                        start = kind;
                        return true;
                    }
                    if (ready > target) {
                        retire = spares_[kind].back(); // the youngest: the others are warmer
                        spares_[kind].pop_back();
                        return true;
                    }
                }
                return false;
            });
            if (stop.stop_requested() && !retire) return;
            if (start) {
                // Beyond the minimum only while the machine has memory to spare for it.
                int supply = static_cast<int>(spares_[*start].size()) + spare_demand_[*start].starting;
                auto free_mb = supply >= spare_minimum(*start) ? available_memory_mb() : -1;
                if (free_mb >= 0 && free_mb < spares_min_free_mb_) {
                    spares_cv_.wait_for(lock, stop, std::chrono::seconds(5), [] { return false; });
                    continue;
                }
                ++spare_demand_[*start].starting;
                --start_slots_free_;
            }
        }
        if (retire) {
            instance_stop(*retire);
            continue;
        }
        if (!start) continue;
        CreateOptions defaults;
        defaults.headless = start->headless;
        defaults.stealth = start->stealth;
        std::string id = new_session_id();
        auto began = Clock::now();
        bool ok = true;
        try {
            instance_start(make_instance_spec(id, defaults));
        } catch (const std::exception &e) {
            ok = false;
            instance_stop(id);
            warn(std::string("could not start a warm spare: ") + e.what());
        }
        std::unique_lock lock(spares_mutex_);
        ++start_slots_free_;
        spares_cv_.notify_all(); // the slot: a waiting create or the other filler
        auto &demand = spare_demand_[*start];
        --demand.starting;
        if (!ok) {
            spares_cv_.wait_for(lock, stop, std::chrono::seconds(5), [] { return false; });
            continue;
        }
        demand.start_ms =
            0.7 * demand.start_ms + 0.3 * std::chrono::duration<double, std::milli>(Clock::now() - began).count();
        if (stop.stop_requested()) {
            lock.unlock();
            instance_stop(id);
            return;
        }
        spares_[*start].push_back(id);
        lock.unlock();
        spares_cv_.notify_all(); // a create waiting for a slot takes the spare instead
    }
}

void BrowsersPlugin::StartSlot::release() {
    if (!plugin_) return;
    {
        std::lock_guard lock(plugin_->spares_mutex_);
        ++plugin_->start_slots_free_;
    }
    plugin_->spares_cv_.notify_all();
    plugin_ = nullptr;
}

BrowsersPlugin::StartSlot BrowsersPlugin::wait_for_start_slot() {
    std::unique_lock lock(spares_mutex_);
    ++creates_waiting_;
    spares_cv_.wait(lock, [&] { return start_slots_free_ > 0; });
    --creates_waiting_;
    --start_slots_free_;
    return StartSlot(this);
}

std::variant<std::string, BrowsersPlugin::StartSlot> BrowsersPlugin::spare_or_start_slot(SpareKind kind) {
    {
        std::lock_guard lock(spares_mutex_);
        spare_demand_[kind].creates.push_back(Clock::now());
    }
    while (true) {
        std::string id;
        {
            std::unique_lock lock(spares_mutex_);
            auto &queue = spares_[kind];
            if (queue.empty()) {
                ++creates_waiting_;
                spares_cv_.notify_all(); // demand rose: the fillers aim higher once no create waits
                spares_cv_.wait(lock, [&] { return !queue.empty() || start_slots_free_ > 0; });
                --creates_waiting_;
            }
            if (queue.empty()) {
                --start_slots_free_;
                return StartSlot(this);
            }
            id = queue.front();
            queue.pop_front();
        }
        spares_cv_.notify_all(); // the fillers start a replacement
        // A spare that died while it waited (OOM, crash) is dropped, never handed out.
        if (instance_call(id, "GET", "/chromium", {}, 2000).status == 200) return id;
        warn("dropping warm spare " + id + ": its instance does not answer");
        instance_stop(id);
    }
}

void BrowsersPlugin::stop_spares() {
    // A drain (the sweep thread) and the shutdown may both stop them.
    std::lock_guard stopping(spares_stop_mutex_);
    for (auto &filler : spare_fillers_)
        filler.request_stop();
    spares_cv_.notify_all();
    spare_fillers_.clear(); // joins
    std::vector<std::string> ids;
    {
        std::lock_guard lock(spares_mutex_);
        for (auto &[_, queue] : spares_)
            ids.insert(ids.end(), queue.begin(), queue.end());
        spares_.clear();
    }
    // At once: one at a time, graceful stops of a few spares could outlast a service manager's
    // stop timeout and end in SIGKILL.
    std::vector<std::jthread> stoppers;
    stoppers.reserve(ids.size());
    for (const auto &id : ids)
        stoppers.emplace_back([this, id] { instance_stop(id); });
}

} // namespace hangar::browsers
