// The playwright plugin: POST /browsers/{id}/playwright/execute.
//
// The server half relays the call to the browser's instance. There, inside the sandbox, the
// instance half hands each snippet to one long-lived Node executor (executor/executor.mjs), which
// keeps a playwright-core CDP connection to this browser and runs the snippet with page, context
// and browser bound. Requests go to the executor as JSON lines on its fd 3, answers come back as
// JSON lines on its stdout. See README.md for why it is built so.
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace proc = hangar::proc;
using namespace std::chrono_literals;

constexpr double kDefaultTimeoutSec = 60;
constexpr double kMaxTimeoutSec = 300;
// How much longer than the snippet's own timeout the agent waits for the executor (which enforces
// that timeout itself) before it declares the executor wedged and replaces it.
constexpr auto kExecutorGrace = 15s;

// 60 → "60", 1.5 → "1.5", as the executor's own timeout message prints them.
std::string seconds(double value) {
    std::ostringstream out;
    out << value;
    return out.str();
}

// One running executor process. Answers are matched to calls by id; when the process ends every
// waiting call fails at once, and the plugin starts a new executor for the next call.
class Executor {
public:
    Executor(const std::string &node, const std::string &dir, const std::string &endpoint) {
        auto requests = proc::make_pipe();
        auto answers = proc::make_pipe();
        proc::Child::Spec spec;
        spec.path = node;
        spec.args = {dir + "/executor.mjs", endpoint};
        spec.env = proc::environment_with({"NODE_PATH=" + dir + "/node_modules"});
        spec.stdout_fd = answers.write.get();
        spec.stderr_fd = STDERR_FILENO;
        spec.extra_fds = {{requests.read.get(), 3}};
        child_ = proc::Child::spawn(spec);
        to_child_ = std::move(requests.write);
        from_child_ = std::move(answers.read);
        // Our copies of the child's ends close here, so its exit shows up as end-of-file.
        reader_ = std::thread([this] { read_answers(); });
    }
    Executor(const Executor &) = delete;
    Executor &operator=(const Executor &) = delete;
    ~Executor() {
        to_child_.reset(); // the executor exits when its request stream closes
        child_.stop(1000ms);
        if (reader_.joinable()) reader_.join();
    }

    bool alive() {
        std::lock_guard lock(mu_);
        return !dead_;
    }

    std::future<json> submit(json call) {
        std::promise<json> answer;
        auto future = answer.get_future();
        std::lock_guard lock(mu_);
        if (dead_) throw Error(502, "upstream_unavailable", "the Playwright executor is not running");
        auto id = next_id_++;
        call["id"] = id;
        auto line = call.dump() + "\n";
        std::string_view rest = line;
        while (!rest.empty()) {
            auto n = ::write(to_child_.get(), rest.data(), rest.size());
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) throw Error(502, "upstream_unavailable", "the Playwright executor stopped reading");
            rest.remove_prefix(static_cast<std::size_t>(n));
        }
        pending_.emplace(id, std::move(answer));
        return future;
    }

private:
    void read_answers() {
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
        // Most likely the snippet ended it, so this is the snippet's failure (200, success:false);
        // a 5xx would make the SDK retry, running the user's code again.
        for (auto &[id, answer] : pending_)
            answer.set_value({{"success", false},
                              {"error", "the Playwright executor exited during the call"},
                              {"stdout", ""},
                              {"stderr", ""}});
        pending_.clear();
    }

    void deliver(const std::string &line) {
        auto answer = json::parse(line, nullptr, false);
        if (!answer.is_object() || !answer.contains("id")) return; // not an answer
        std::lock_guard lock(mu_);
        auto it = pending_.find(answer["id"].get<std::int64_t>());
        if (it == pending_.end()) return;
        answer.erase("id");
        it->second.set_value(std::move(answer));
        pending_.erase(it);
    }

    proc::Child child_;
    proc::Fd to_child_;
    proc::Fd from_child_;
    std::thread reader_;
    std::mutex mu_;
    bool dead_ = false;
    std::int64_t next_id_ = 1;
    std::map<std::int64_t, std::promise<json>> pending_;
};

class PlaywrightPlugin : public hangar::Plugin {
public:
    void start() override {
        if (role() == HANGAR_ROLE_SERVER) {
            // Session lookup (404 for another project's or an ended browser), activity, and a relay
            // to the instance; validation and execution happen there.
            route("POST", "/browsers/{id}/playwright/execute",
                  [this](Request &q, Response &r) { relay_to_session(q, r, "/playwright/execute"); });
            return;
        }
        // A missing executor must not stop the instance (every other area still works): it is
        // logged now and named in each call's answer.
        try {
            node_ = proc::find_program(config("node", "node"));
            dir_ = executor_dir();
            if (!std::filesystem::exists(dir_ + "/node_modules/playwright-core"))
                throw std::runtime_error(dir_ + " has no node_modules (run `make setup`, or set executor_dir)");
        } catch (const std::exception &e) {
            unavailable_ = std::string("the Playwright executor is not available: ") + e.what();
            warn(unavailable_);
        }
        // The agent's own /cdp route always dials the current Chromium, so the executor's cached
        // connection survives Chromium restarts by reconnecting to the same address.
        endpoint_ = "ws+unix:" + instance_agent_socket() + ":/cdp";
        route("POST", "/playwright/execute", [this](Request &q, Response &r) { execute(q, r); });
        // Node and playwright-core take about a second to load; prestarting moves that out of the
        // first call at the price of a Node process in every browser, used or not.
        if (unavailable_.empty() && config_bool("prestart", false)) executor();
    }

    void stop() override {
        std::lock_guard lock(mu_);
        executor_.reset();
    }

private:
    std::string executor_dir() const {
        return proc::runtime_dir(config("executor_dir", ""), "playwright-executor", "executor.mjs",
                                 HANGAR_PLAYWRIGHT_EXECUTOR_SOURCE_DIR);
    }

    static double timeout_sec(const json &body) {
        auto it = body.find("timeout_sec");
        if (it == body.end() || it->is_null()) return kDefaultTimeoutSec;
        if (!it->is_number()) throw Error::invalid("timeout_sec", "must be a number");
        double v = it->get<double>();
        if (!std::isfinite(v) || v <= 0 || v > kMaxTimeoutSec)
            throw Error::invalid("timeout_sec", "must be greater than 0 and at most 300");
        return v;
    }

    // Called with run_mu_ held (or from start()), so one executor at a time is started.
    std::shared_ptr<Executor> executor() {
        std::lock_guard lock(mu_);
        if (!executor_ || !executor_->alive()) {
            if (executor_) warn("the Playwright executor exited; starting a new one");
            executor_ = std::make_shared<Executor>(node_, dir_, endpoint_);
        }
        return executor_;
    }

    // A wedged executor is replaced; the next call starts a new one.
    void replace(const std::shared_ptr<Executor> &wedged) {
        std::shared_ptr<Executor> old;
        std::lock_guard lock(mu_);
        if (executor_ == wedged) old = std::move(executor_);
        warn("the Playwright executor did not answer in time; replacing it");
    }

    void execute(Request &req, Response &res) {
        json body = req.json_body();
        auto code = body.find("code");
        if (code == body.end() || code->is_null()) throw Error::invalid("code", "required");
        if (!code->is_string()) throw Error::invalid("code", "must be a string");
        if (code->get_ref<const std::string &>().empty()) throw Error::invalid("code", "must not be empty");
        double timeout = timeout_sec(body);
        if (!unavailable_.empty()) throw Error::internal(unavailable_);

        auto timeout_ms = static_cast<std::int64_t>(std::ceil(timeout * 1000));
        json answer;
        {
            // Calls for this browser run one after another, in arrival order.
            std::lock_guard one_at_a_time(run_mu_);
            auto exec = executor();
            auto future = exec->submit({{"code", *code}, {"timeout_ms", timeout_ms}});
            if (future.wait_for(std::chrono::milliseconds(timeout_ms) + kExecutorGrace) != std::future_status::ready) {
                replace(exec);
                answer = {{"success", false}, {"error", "execution timed out after " + seconds(timeout) + " seconds"}};
            } else {
                answer = future.get();
            }
        }
        res.json(answer);
    }

    std::string node_;
    std::string dir_;
    std::string endpoint_;
    std::string unavailable_;
    std::mutex run_mu_;
    std::mutex mu_;
    std::shared_ptr<Executor> executor_;
};

} // namespace

HANGAR_PLUGIN(PlaywrightPlugin, "playwright", "0.1.0", "browsers", nullptr, 0)
