// Warm spares: see browsers.hpp. A spare's instance id becomes the session id at hand-over, so
// nothing is renamed or restarted; a spare has never been connected to, so it carries no state.
#include "browsers.hpp"

#include <chrono>

namespace hangar::browsers {

bool BrowsersPlugin::spare_can_serve(const CreateOptions &o) {
    // name, tags and timeout_seconds live only in the session row, and a start_url is opened in
    // the spare at hand-over; everything that changes how Chromium starts needs a cold start.
    return !o.stealth && !o.kiosk_mode && o.viewport == Viewport{} && !o.chrome_policy && !o.profile &&
           o.extensions.empty() && !o.proxy_id;
}

void BrowsersPlugin::start_spares() {
    warm_spares_ = static_cast<int>(std::clamp<std::int64_t>(config_int("warm_spares", 1), 0, 16));
    if (warm_spares_ == 0) return;
    spare_filler_ = std::jthread([this](const std::stop_token &stop) { fill_spares(stop); });
}

void BrowsersPlugin::fill_spares(const std::stop_token &stop) {
    while (!stop.stop_requested()) {
        std::optional<bool> wanted;
        {
            std::unique_lock lock(spares_mutex_);
            auto deficit = [&]() -> std::optional<bool> {
                for (bool headless : {false, true}) // the default configuration (headful) first
                    if (static_cast<int>(spares_[headless].size()) < warm_spares_) return headless;
                return std::nullopt;
            };
            spares_cv_.wait(lock, stop, [&] { return deficit().has_value(); });
            if (stop.stop_requested()) return;
            wanted = deficit();
        }
        CreateOptions defaults;
        defaults.headless = *wanted;
        std::string id = new_session_id();
        try {
            instance_start(make_instance_spec(id, defaults));
        } catch (const std::exception &e) {
            instance_stop(id);
            warn(std::string("could not start a warm spare: ") + e.what());
            std::unique_lock lock(spares_mutex_);
            spares_cv_.wait_for(lock, stop, std::chrono::seconds(5), [] { return false; });
            continue;
        }
        std::lock_guard lock(spares_mutex_);
        if (stop.stop_requested()) {
            instance_stop(id);
            return;
        }
        spares_[*wanted].push_back(id);
    }
}

std::optional<std::string> BrowsersPlugin::take_spare(bool headless) {
    while (true) {
        std::string id;
        {
            std::lock_guard lock(spares_mutex_);
            auto &queue = spares_[headless];
            if (queue.empty()) return std::nullopt;
            id = queue.front();
            queue.pop_front();
        }
        spares_cv_.notify_all(); // the filler starts a replacement
        // A spare that died while it waited (OOM, crash) is dropped, never handed out.
        if (instance_call(id, "GET", "/chromium", {}, 2000).status == 200) return id;
        warn("dropping warm spare " + id + ": its instance does not answer");
        instance_stop(id);
    }
}

void BrowsersPlugin::stop_spares() {
    if (spare_filler_.joinable()) {
        spare_filler_.request_stop();
        spares_cv_.notify_all();
        spare_filler_.join();
    }
    std::vector<std::string> ids;
    {
        std::lock_guard lock(spares_mutex_);
        for (auto &[_, queue] : spares_)
            ids.insert(ids.end(), queue.begin(), queue.end());
        spares_.clear();
    }
    for (const auto &id : ids)
        instance_stop(id);
}

} // namespace hangar::browsers
