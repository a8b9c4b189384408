// One Node.js process of the playwright plugin's runtimes (an executor, the REPL, the WebMCP
// service), spoken to in JSON lines: calls go out on the child's fd 3 with an "id", answers come
// back on its stdout carrying the same id. When the process ends, every call still waiting gets
// the answer `on_exit` makes from why it ended, at once.
#pragma once

#include <hangar/plugin.hpp>
#include <hangar/process.hpp>

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace playwright {

class NodeChild {
public:
    struct Spec {
        std::string node;
        std::vector<std::string> args; // the script first
        std::vector<std::string> env;  // added to the agent's environment
        std::function<hangar::json(const std::string &why)> on_exit;
        std::string exited = "the Node.js runtime exited during the call"; // `why` when it just ended
    };

    explicit NodeChild(Spec spec);
    NodeChild(const NodeChild &) = delete;
    NodeChild &operator=(const NodeChild &) = delete;
    ~NodeChild();

    bool alive();
    pid_t pid() const { return child_.pid(); }
    std::future<hangar::json> submit(hangar::json call);
    // Ends the process now; the calls waiting on it are answered with `why`.
    void terminate(const std::string &why);

private:
    void read_answers();
    void deliver(const std::string &line);

    std::function<hangar::json(const std::string &)> on_exit_;
    hangar::proc::Child child_;
    hangar::proc::Fd to_child_;
    hangar::proc::Fd from_child_;
    std::thread reader_;
    std::mutex mu_;
    bool dead_ = false;
    std::string why_;
    std::int64_t next_id_ = 1;
    std::map<std::int64_t, std::promise<hangar::json>> pending_;
};

} // namespace playwright
