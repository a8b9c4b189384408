// The bidi plugin: WebDriver BiDi for browser sessions (`webdriver_ws_url`).
//
// The browsers plugin owns the public URL and its capability token, and relays an accepted
// upgrade to this plugin's agent route /bidi, inside the browser's sandbox. There one long-lived
// Node process (mapper/mapper.mjs, Google's chromium-bidi) serves every BiDi connection of this
// browser on a unix socket, translating each to CDP on its own connection to this Chromium's
// DevTools socket. See README.md for why it is built so.
#include <hangar/cdp.hpp>
#include <hangar/fd_passing.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
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
namespace fdp = hangar::fd_passing;
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
        cdp_endpoint_ = "ws+unix:" + instance_agent_socket() + ":/cdp";
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
        channel_.reset();
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
        if (req.header(fdp::kPassClientHeader)) return hand_client_to_mapper(req, res);
        relay_unix(req, res, socket_, mapper_path());
    }

    // The server offered the client's own connection (it watches none of its bytes): the mapper
    // serves it directly, so a BiDi frame crosses no relay (bench/bidi). The connection to the
    // server goes to the mapper too, which closes it with the client's: the server counts the
    // session active until then, as it does a splice.
    void hand_client_to_mapper(Request &req, Response &res) {
        proc::Fd server;
        try {
            server.reset(res.take_socket());
        } catch (const Error &e) {
            warn(std::string("BiDi: ") + e.what());
            return;
        }
        ::fcntl(server.get(), F_SETFL, ::fcntl(server.get(), F_GETFL) & ~O_NONBLOCK);
        if (::send(server.get(), &fdp::kClientWantedMarker, 1, MSG_NOSIGNAL) != 1) return;
        std::string marker;
        if (!proc::wait_readable(server.get(), 10s)) return;
        proc::Fd client(fdp::receive(server.get(), marker));
        if (!client || marker != std::string_view(&fdp::kClientMarker, 1)) return;

        std::string head = "GET " + mapper_path() + " HTTP/1.1\r\nHost: localhost\r\n";
        for (const auto &[name, value] : req.headers()) {
            std::string_view n = name;
            if (hangar::iequals(n, "Host") || hangar::iequals(n.substr(0, 9), "X-Hangar-")) continue;
            head.append(name).append(": ").append(value).append("\r\n");
        }
        head += "\r\n";
        auto id = next_handover_++;
        auto message = [id](const char *what, const json &extra) {
            json msg = {{"hangar", what}, {"id", id}};
            msg.update(extra);
            // Node's IPC channel: one JSON line per message, a socket attached to it.
            return json({{"cmd", "NODE_HANDLE"}, {"type", "net.Socket"}, {"msg", msg}})
                       .dump(-1, ' ', false, json::error_handler_t::replace) +
                   "\n";
        };
        std::lock_guard lock(mu_);
        if (!channel_) return;
        drain_channel();
        if (!fdp::send(channel_.get(), message("bidi-client", {{"head", head}}), client.get()) ||
            !fdp::send(channel_.get(), message("bidi-lifeline", json::object()), server.get()))
            warn("BiDi: the mapper did not take a connection (it exited?)");
    }

    // Node answers every socket it is given with an acknowledgement on the channel, which nobody
    // here needs: read them away before each hand-over, so they never fill the channel.
    void drain_channel() {
        char buf[512];
        while (::recv(channel_.get(), buf, sizeof buf, MSG_DONTWAIT) > 0) {
        }
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
        // Node's IPC channel (the one child_process.fork sets up): how the mapper is handed
        // client connections, since Node takes descriptors from nothing else.
        int pair[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
            throw Error(502, "upstream_unavailable", "could not start the BiDi mapper: socketpair failed");
        proc::Fd ours(pair[0]), theirs(pair[1]);
        constexpr int kChannelFd = 3;
        proc::Child::Spec spec;
        spec.path = node_;
        spec.args = {dir_ + "/mapper.mjs", socket_, cdp_endpoint_};
        spec.env = proc::environment_with({"NODE_PATH=" + dir_ + "/node_modules",
                                           "NODE_CHANNEL_FD=" + std::to_string(kChannelFd),
                                           "NODE_CHANNEL_SERIALIZATION_MODE=json"});
        spec.stdout_fd = ready.write.get();
        spec.stderr_fd = STDERR_FILENO;
        spec.extra_fds = {{theirs.get(), kChannelFd}};
        try {
            mapper_ = proc::Child::spawn(spec);
        } catch (const std::exception &e) {
            throw Error(502, "upstream_unavailable", std::string("could not start the BiDi mapper: ") + e.what());
        }
        channel_ = std::move(ours);
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
    proc::Fd channel_; // our end of the mapper's IPC channel
    std::atomic<std::uint64_t> next_handover_{1};
};

} // namespace

HANGAR_PLUGIN(BidiPlugin, "bidi", "0.1.0", "browsers", nullptr, 0)
