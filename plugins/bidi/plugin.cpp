// The bidi plugin: WebDriver BiDi for browser sessions (`webdriver_ws_url`).
//
// The browsers plugin owns the public URL and its capability token, and relays an accepted
// upgrade to this plugin's agent route /bidi, inside the browser's sandbox. There one long-lived
// Node process (mapper/mapper.mjs, Google's chromium-bidi) serves every BiDi connection of this
// browser on a unix socket, translating each to CDP on its own connection to this Chromium's
// DevTools socket. See README.md for why it is built so.
#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace proc = hangar::proc;
using namespace std::chrono_literals;

// WebSocket close code for "the server cannot serve this connection" (RFC 6455 §7.4.1).
constexpr std::uint16_t kInternalError = 1011;

class BidiPlugin : public hangar::Plugin {
public:
    void start() override {
        if (role() == HANGAR_ROLE_SERVER) return; // the browsers plugin serves the public URL
        start_timeout_ = std::chrono::milliseconds(config_int("start_timeout_ms", 20000));
        // A missing mapper must not stop the instance (every other area still works): it is
        // logged now and given as the close reason of each BiDi connection.
        try {
            node_ = proc::find_program(config("node", "node"));
            dir_ =
                proc::runtime_dir(config("mapper_dir", ""), "bidi-mapper", "mapper.mjs", HANGAR_BIDI_MAPPER_SOURCE_DIR);
            if (!std::filesystem::exists(dir_ + "/node_modules/chromium-bidi"))
                throw std::runtime_error(dir_ + " has no node_modules (run `make setup`, or set mapper_dir)");
        } catch (const std::exception &e) {
            unavailable_ = std::string("WebDriver BiDi is not available: ") + e.what();
            warn(unavailable_);
        }
        auto run_dir = instance_run_dir();
        socket_ = run_dir + "/bidi.sock";
        // The agent's /cdp always dials the current Chromium, so a BiDi connection opened after a
        // Chromium restart reaches the new one.
        cdp_endpoint_ = "ws+unix:" + run_dir + "/agent.sock:/cdp";
        route(
            "GET", "/bidi", [this](Request &q, Response &r) { connect(q, r); }, HANGAR_ROUTE_STREAMING);
        if (unavailable_.empty() && config_bool("prestart", false)) {
            try {
                ensure_mapper();
            } catch (const Error &e) {
                warn(e.what());
            }
        }
    }

    void stop() override {
        std::lock_guard lock(mu_);
        mapper_ = proc::Child();
    }

private:
    void connect(Request &req, Response &res) {
        try {
            if (!unavailable_.empty()) throw Error::internal(unavailable_);
            ensure_mapper();
        } catch (const Error &e) {
            ws_reject(req, res, kInternalError, e.what());
            return;
        }
        relay_unix(req, res, socket_, mapper_path());
    }

    // The mapper dials the current Chromium's DevTools socket in this sandbox directly, which
    // saves each BiDi command's CDP traffic a hop through the agent (bench/bidi); the agent's
    // /cdp (its default) is for when Chromium is between restarts. A path with a query also keeps
    // the public URL's jwt out of the mapper.
    std::string mapper_path() const {
        try {
            if (auto endpoint = hangar::cdp::endpoint_of(call("browsers.chromium", json::object())))
                return "/session?port=" + std::to_string(endpoint->port) + "&path=" + endpoint->ws_path;
        } catch (const Error &) {
            // no browsers service here: the agent's /cdp
        }
        return "/session?";
    }

    // Starts the mapper unless it runs, and returns once it listens.
    void ensure_mapper() {
        std::lock_guard lock(mu_);
        if (mapper_.running()) return;
        if (mapper_.pid() > 0) {
            mapper_.stop(0ms); // reaps it, so its exit can be told
            warn("the BiDi mapper exited (" + mapper_.exit_description() + "); starting it again");
        }
        auto ready = proc::make_pipe();
        proc::Child::Spec spec;
        spec.path = node_;
        spec.args = {dir_ + "/mapper.mjs", socket_, cdp_endpoint_};
        spec.env = proc::environment_with({"NODE_PATH=" + dir_ + "/node_modules"});
        spec.stdout_fd = ready.write.get();
        spec.stderr_fd = STDERR_FILENO;
        try {
            mapper_ = proc::Child::spawn(spec);
        } catch (const std::exception &e) {
            throw Error(502, "upstream_unavailable", std::string("could not start the BiDi mapper: ") + e.what());
        }
        ready.write.reset(); // its exit shows up as end-of-file
        std::string out;
        auto deadline = std::chrono::steady_clock::now() + start_timeout_;
        char buf[256];
        while (out.find("ready\n") == std::string::npos) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0 || !proc::wait_readable(ready.read.get(), left)) {
                mapper_ = proc::Child(); // stopped and reaped
                throw Error(504, "upstream_timeout", "the BiDi mapper did not start in time");
            }
            auto n = ::read(ready.read.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                mapper_ = proc::Child();
                throw Error(502, "upstream_unavailable", "the BiDi mapper exited while starting");
            }
            out.append(buf, static_cast<std::size_t>(n));
        }
    }

    std::string node_;
    std::string dir_;
    std::string socket_;
    std::string cdp_endpoint_;
    std::string unavailable_;
    std::chrono::milliseconds start_timeout_{20000};
    std::mutex mu_;
    proc::Child mapper_;
};

} // namespace

HANGAR_PLUGIN(BidiPlugin, "bidi", "0.1.0", "browsers", nullptr, 0)
