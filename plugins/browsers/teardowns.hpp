// Session teardowns that run after their DELETE has been answered (issue 42): the session reads
// deleted at once, and what ending it takes (recordings finished, telemetry archived, the profile
// saved, Chromium and its sandbox gone) runs on a thread of its own here. Whoever needs that end
// result waits for it by session id; the plugin's stop waits for all of them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hangar::browsers {

class Teardowns {
public:
    Teardowns() = default;
    Teardowns(const Teardowns &) = delete;
    Teardowns &operator=(const Teardowns &) = delete;
    ~Teardowns() { wait_all(); }

    // Runs `end` for session `id` in the background. A session is ended once (the caller decided
    // that), so an id already under way is a caller's bug and throws std::logic_error.
    void start(const std::string &id, std::function<void()> end);
    // Waits until the teardown of `id`, if one runs, has finished; false when `timeout` passed
    // first. On the teardown's own thread it returns at once: that thread finishes it.
    bool wait(const std::string &id, std::chrono::milliseconds timeout);
    // Waits for every teardown started so far.
    void wait_all();
    std::size_t running() const;
    // Whether the calling thread is running the teardown of `id`.
    static bool on_teardown_of(const std::string &id);

private:
    // Joins the threads of finished teardowns; called without the mutex held.
    void join_finished();

    mutable std::mutex mutex_;
    std::condition_variable finished_;
    std::map<std::string, std::thread> running_;
    std::vector<std::thread> finished_threads_;
};

} // namespace hangar::browsers
