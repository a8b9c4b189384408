#include "node_child.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string_view>

namespace playwright {

using hangar::Error;
using hangar::json;
namespace proc = hangar::proc;
using namespace std::chrono_literals;

NodeChild::NodeChild(Spec spec) : on_exit_(std::move(spec.on_exit)), why_(std::move(spec.exited)) {
    auto requests = proc::make_pipe();
    auto answers = proc::make_pipe();
    proc::Child::Spec child;
    child.path = spec.node;
    child.args = std::move(spec.args);
    child.env = proc::environment_with(spec.env);
    child.stdout_fd = answers.write.get();
    child.stderr_fd = STDERR_FILENO;
    child.extra_fds = {{requests.read.get(), 3}};
    child_ = proc::Child::spawn(child);
    to_child_ = std::move(requests.write);
    from_child_ = std::move(answers.read);
    // Our copies of the child's ends close here, so its exit shows up as end-of-file.
    reader_ = std::thread([this] { read_answers(); });
}

NodeChild::~NodeChild() {
    {
        std::lock_guard lock(mu_);
        to_child_.reset(); // a runtime exits when its request stream closes
    }
    child_.stop(1000ms);
    if (reader_.joinable()) reader_.join();
}

bool NodeChild::alive() {
    std::lock_guard lock(mu_);
    return !dead_;
}

std::future<json> NodeChild::submit(json call) {
    std::promise<json> answer;
    auto future = answer.get_future();
    std::lock_guard lock(mu_);
    if (dead_) throw Error(502, "upstream_unavailable", "the Node.js runtime is not running");
    auto id = next_id_++;
    call["id"] = id;
    auto line = call.dump() + "\n";
    std::string_view rest = line;
    while (!rest.empty()) {
        auto n = ::write(to_child_.get(), rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error(502, "upstream_unavailable", "the Node.js runtime stopped reading");
        rest.remove_prefix(static_cast<std::size_t>(n));
    }
    pending_.emplace(id, std::move(answer));
    return future;
}

void NodeChild::terminate(const std::string &why) {
    {
        std::lock_guard lock(mu_);
        if (dead_) return;
        why_ = why;
    }
    // The group gets SIGTERM, which ends Node at once even inside a busy loop (it has no handler).
    if (auto pid = child_.pid(); pid > 0) ::kill(-pid, SIGTERM);
}

void NodeChild::read_answers() {
    std::string buffer;
    char chunk[65536];
    for (;;) {
        auto n = ::read(from_child_.get(), chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        buffer.append(chunk, static_cast<std::size_t>(n));
        std::size_t nl;
        while ((nl = buffer.find('\n')) != std::string::npos) {
            deliver(buffer.substr(0, nl));
            buffer.erase(0, nl + 1);
        }
    }
    std::lock_guard lock(mu_);
    dead_ = true;
    for (auto &[id, answer] : pending_)
        answer.set_value(on_exit_(why_));
    pending_.clear();
}

void NodeChild::deliver(const std::string &line) {
    auto answer = json::parse(line, nullptr, false);
    if (!answer.is_object() || !answer.contains("id")) return; // not an answer
    std::lock_guard lock(mu_);
    auto it = pending_.find(answer["id"].get<std::int64_t>());
    if (it == pending_.end()) return;
    answer.erase("id");
    it->second.set_value(std::move(answer));
    pending_.erase(it);
}

} // namespace playwright
