#include "teardowns.hpp"

#include <stdexcept>
#include <utility>

namespace hangar::browsers {

namespace {
thread_local const std::string *current_teardown = nullptr;
} // namespace

void Teardowns::start(const std::string &id, std::function<void()> end) {
    join_finished();
    std::lock_guard lock(mutex_);
    if (running_.count(id)) throw std::logic_error("session " + id + " is already being ended");
    // The thread starts under the lock, so it finds its own entry when it finishes.
    running_.emplace(id, std::thread([this, id, end = std::move(end)] {
                         current_teardown = &id;
                         try {
                             end();
                         } catch (...) {
                             // end() reports its own failures; a teardown never takes the server down.
                         }
                         current_teardown = nullptr;
                         std::lock_guard done(mutex_);
                         auto it = running_.find(id);
                         finished_threads_.push_back(std::move(it->second));
                         running_.erase(it);
                         finished_.notify_all();
                     }));
}

bool Teardowns::wait(const std::string &id, std::chrono::milliseconds timeout) {
    if (on_teardown_of(id)) return true;
    std::unique_lock lock(mutex_);
    return finished_.wait_for(lock, timeout, [&] { return running_.count(id) == 0; });
}

void Teardowns::wait_all() {
    {
        std::unique_lock lock(mutex_);
        finished_.wait(lock, [&] { return running_.empty(); });
    }
    join_finished();
}

std::size_t Teardowns::running() const {
    std::lock_guard lock(mutex_);
    return running_.size();
}

bool Teardowns::on_teardown_of(const std::string &id) {
    return current_teardown != nullptr && *current_teardown == id;
}

void Teardowns::join_finished() {
    std::vector<std::thread> done;
    {
        std::lock_guard lock(mutex_);
        done.swap(finished_threads_);
    }
    for (auto &t : done)
        t.join();
}

} // namespace hangar::browsers
