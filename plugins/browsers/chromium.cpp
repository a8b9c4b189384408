#include "chromium.hpp"

#include "profile_archive.hpp"

#include <hangar/process.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

namespace hangar::browsers {

using namespace hangar::proc;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::chrono::milliseconds until(Clock::time_point deadline) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
}

void write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; // a full disk must not take the browser down with it
        data.remove_prefix(static_cast<std::size_t>(n));
    }
}

// A connection to Chromium's DevTools port with the request already sent; empty on failure.
Fd devtools_request(std::uint16_t port, const std::string &request, std::chrono::milliseconds timeout) {
    Fd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock) return {};
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(sock.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(sock.get(), reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) return {};
    if (::send(sock.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size()))
        return {};
    return sock;
}

// Browser.close over a one-shot CDP connection. Unlike a signal, it closes the profile in order,
// and only that writes the cookie store to disk (a SIGTERMed Chromium leaves it empty).
bool request_browser_close(const DevToolsEndpoint &ep, std::chrono::milliseconds timeout) {
    std::string upgrade = "GET " + ep.ws_path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(ep.port) +
                          "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                          "Sec-WebSocket-Key: aGFuZ2FyLWJyb3dzZXItY2xvc2U=\r\n\r\n";
    Fd sock = devtools_request(ep.port, upgrade, timeout);
    if (!sock) return false;
    std::string head;
    char buf[1024];
    while (head.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        head.append(buf, static_cast<std::size_t>(n));
    }
    if (!head.starts_with("HTTP/1.1 101")) return false;
    // One masked text frame (clients must mask; a zero key is a valid key).
    constexpr std::string_view payload = R"({"id":1,"method":"Browser.close"})";
    std::string frame = {'\x81', static_cast<char>(0x80 | payload.size()), 0, 0, 0, 0};
    frame.append(payload);
    return ::send(sock.get(), frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size());
}

// A tiny HTTP/1.1 request to Chromium's DevTools port (/json/list, /json/new, /json/close).
std::optional<std::string> local_http_get(std::uint16_t port, const std::string &path,
                                          std::chrono::milliseconds timeout, const char *method = "GET") {
    Fd sock = devtools_request(
        port, std::string(method) + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n\r\n",
        timeout);
    if (!sock) return std::nullopt;

    // Chromium keeps the connection open, so the body ends at Content-Length, not at EOF.
    std::string data;
    std::optional<std::size_t> body_at, length;
    char buf[8192];
    for (;;) {
        if (body_at && length && data.size() >= *body_at + *length) break;
        ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        data.append(buf, static_cast<std::size_t>(n));
        if (!body_at) {
            auto end = data.find("\r\n\r\n");
            if (end == std::string::npos) continue;
            body_at = end + 4;
            if (!data.starts_with("HTTP/1.1 200")) return std::nullopt;
            std::string head = data.substr(0, end);
            for (auto &c : head)
                c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            if (auto at = head.find("content-length:"); at != std::string::npos) {
                std::size_t i = at + 15;
                while (i < head.size() && head[i] == ' ')
                    ++i;
                std::size_t len = 0;
                std::from_chars(head.data() + i, head.data() + head.size(), len);
                length = len;
            }
        }
    }
    if (!body_at) return std::nullopt;
    return data.substr(*body_at, length.value_or(std::string::npos));
}

} // namespace

// ---- Xvfb ----------------------------------------------------------------------------------------

class Xvfb {
public:
    Xvfb(const ChromiumSettings &settings, const Viewport &vp) {
        Pipe ready = make_pipe();
        Fd log = open_log(settings.run_dir + "/logs/xvfb.log");
        child_ = Child::spawn({settings.xvfb_path,
                               xvfb_args(vp, 3),
                               environment_with({}),
                               log.get(),
                               log.get(),
                               {{ready.write.get(), 3}}});
        ready.write.reset(); // so a dying Xvfb shows up as EOF

        auto deadline = Clock::now() + std::chrono::milliseconds(settings.startup_timeout_ms);
        std::string text;
        char buf[32];
        while (text.find('\n') == std::string::npos) {
            auto left = until(deadline);
            if (left.count() <= 0 || !wait_readable(ready.read.get(), left))
                throw std::runtime_error("Xvfb did not report a display within " +
                                         std::to_string(settings.startup_timeout_ms / 1000) + " s (see logs/xvfb.log)");
            ssize_t n = ::read(ready.read.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                child_.stop(0ms);
                throw std::runtime_error("Xvfb exited before it was ready (" + child_.exit_description() +
                                         "; see logs/xvfb.log)");
            }
            text.append(buf, static_cast<std::size_t>(n));
        }
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), display_);
        if (ec != std::errc()) throw std::runtime_error("Xvfb reported a bad display number: " + text);
    }
    ~Xvfb() { child_.stop(1000ms); }
    Xvfb(const Xvfb &) = delete;
    Xvfb &operator=(const Xvfb &) = delete;

    int display() const { return display_; }
    bool running() { return child_.running(); }

private:
    Child child_;
    int display_ = -1;
};

// ---- PulseAudio ----------------------------------------------------------------------------------

// The headful instance's audio sink: a PulseAudio with one null sink, whose socket lies in the
// instance's run dir. Started beside Xvfb, it costs ~3 MB PSS and no CPU while idle (README of
// replays), so Chromium always has an output and a recording can add audio at any time.
class PulseSink {
public:
    explicit PulseSink(const ChromiumSettings &settings)
        : dir_(settings.run_dir + "/pulse"), socket_(dir_ + "/native") {
        make_dirs(dir_);
        ::unlink(socket_.c_str()); // a killed agent's; PulseAudio would refuse to start on it
        Fd log = open_log(settings.run_dir + "/logs/pulseaudio.log");
        // Its own HOME and runtime dir, and no DISPLAY: no cookie or state outside the instance
        // folder, and no D-Bus autolaunch through X11.
        child_ = Child::spawn({settings.pulseaudio_path,
                               pulseaudio_args(socket_),
                               environment_with({"HOME=" + dir_, "XDG_RUNTIME_DIR=" + dir_, "XDG_CONFIG_HOME=" + dir_},
                                                {"DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "PULSE_SERVER"}),
                               log.get(),
                               log.get(),
                               {}});
    }
    ~PulseSink() { child_.stop(1000ms); }
    PulseSink(const PulseSink &) = delete;
    PulseSink &operator=(const PulseSink &) = delete;

    // Whether the socket accepts connections by `deadline` (PulseAudio has no readiness fd).
    bool wait_ready(Clock::time_point deadline) { return wait_listening(child_, socket_, deadline, 2ms); }

    bool running() { return child_.running(); }
    std::string server() const { return "unix:" + socket_; }

private:
    std::string dir_;
    std::string socket_;
    Child child_;
};

// ---- Chromium ------------------------------------------------------------------------------------

class ChromiumProcess {
public:
    ChromiumProcess(const ChromiumSettings &settings, const LaunchSpec &spec, std::optional<int> display,
                    std::string_view user_agent, std::string_view url, const std::optional<std::string> &pulse_server,
                    const Logger &log) {
        log_ = open_log(settings.run_dir + "/logs/chromium.log");
        Pipe err = make_pipe();
        // PULSE_SERVER names the instance's sink only; without one, no server is named, and
        // Chromium (which never autospawns one) stays muted.
        std::vector<std::string> set;
        std::vector<std::string> remove = {"PULSE_SERVER"};
        if (display)
            set.push_back("DISPLAY=:" + std::to_string(*display));
        else
            remove.insert(remove.end(), {"DISPLAY", "WAYLAND_DISPLAY"});
        if (pulse_server) set.push_back("PULSE_SERVER=" + *pulse_server);
        set.push_back("TZ=" + chromium_timezone(spec));
        child_ = Child::spawn({settings.chromium_path,
                               chromium_args(settings, spec, user_agent, url, pulse_server.has_value()),
                               environment_with(set, remove),
                               log_.get(),
                               err.write.get(),
                               {}});
        err.write.reset();
        stderr_ = std::move(err.read);

        wait_for_devtools(settings);
        // Readiness proper is the DevTools line; waiting for the first page as well means a
        // client that connects right away finds contexts()[0].pages()[0], as on Kernel.
        auto deadline = Clock::now() + std::chrono::milliseconds(settings.first_page_timeout_ms);
        bool page = false;
        while (!page && until(deadline).count() > 0 && child_.running()) {
            if (auto body = local_http_get(endpoint_.port, "/json/list", 1000ms)) {
                json list = json::parse(*body, nullptr, false);
                if (list.is_array())
                    for (const auto &t : list)
                        page = page || (t.is_object() && t.value("type", "") == "page");
            }
            if (!page) std::this_thread::sleep_for(5ms);
        }
        if (!page) log(LogLevel::Warn, "Chromium is ready but showed no page within the first-page timeout");

        drain_ = std::jthread([this](const std::stop_token &stop) { drain(stop); });
    }

    ~ChromiumProcess() {
        child_.stop(); // its children close the pipe as they die, so the drainer sees EOF
        if (drain_.joinable()) {
            drain_.request_stop();
            drain_.join();
        }
    }
    ChromiumProcess(const ChromiumProcess &) = delete;
    ChromiumProcess &operator=(const ChromiumProcess &) = delete;

    pid_t pid() const { return child_.pid(); }
    const DevToolsEndpoint &endpoint() const { return endpoint_; }
    // Asks Chromium to close itself and waits up to `grace` for it to exit.
    void close_in_order(std::chrono::milliseconds grace) {
        if (!child_.running() || !request_browser_close(endpoint_, grace)) return;
        auto deadline = Clock::now() + grace;
        while (child_.running() && until(deadline).count() > 0)
            std::this_thread::sleep_for(10ms);
    }
    bool running() { return child_.running(); }
    std::string exit_description() const { return child_.exit_description(); }

private:
    void wait_for_devtools(const ChromiumSettings &settings) {
        auto deadline = Clock::now() + std::chrono::milliseconds(settings.startup_timeout_ms);
        std::string pending; // an incomplete last line
        std::string tail;    // recent output, for the error message
        char buf[8192];
        for (;;) {
            auto left = until(deadline);
            if (left.count() <= 0 || !wait_readable(stderr_.get(), left)) {
                child_.stop(1000ms);
                throw std::runtime_error("Chromium did not print \"DevTools listening on\" within " +
                                         std::to_string(settings.startup_timeout_ms / 1000) +
                                         " s (see logs/chromium.log)" + last_lines(tail));
            }
            ssize_t n = ::read(stderr_.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                child_.stop(1000ms);
                throw std::runtime_error("Chromium exited before DevTools was ready (" + child_.exit_description() +
                                         ")" + last_lines(tail));
            }
            std::string_view chunk(buf, static_cast<std::size_t>(n));
            write_all(log_.get(), chunk);
            tail.append(chunk);
            if (tail.size() > 4096) tail.erase(0, tail.size() - 4096);
            pending.append(chunk);
            std::size_t nl;
            while ((nl = pending.find('\n')) != std::string::npos) {
                auto found = parse_devtools_line(std::string_view(pending).substr(0, nl));
                pending.erase(0, nl + 1);
                if (found) {
                    endpoint_ = *found;
                    return;
                }
            }
        }
    }

    static std::string last_lines(const std::string &tail) {
        if (tail.empty()) return "";
        auto from = tail.size() > 600 ? tail.size() - 600 : 0;
        return ": ..." + tail.substr(from);
    }

    // Chromium writes to stderr for its whole life; an undrained pipe would block it once full.
    void drain(const std::stop_token &stop) {
        char buf[16384];
        while (!stop.stop_requested()) {
            if (!wait_readable(stderr_.get(), 200ms)) continue;
            ssize_t n = ::read(stderr_.get(), buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return;
            write_all(log_.get(), std::string_view(buf, static_cast<std::size_t>(n)));
        }
    }

    Fd log_;
    Fd stderr_;
    Child child_;
    DevToolsEndpoint endpoint_;
    std::jthread drain_;
};

// ---- runner --------------------------------------------------------------------------------------

ChromiumRunner::ChromiumRunner(ChromiumSettings settings, LaunchSpec spec, Logger log, ExtensionFolders extensions)
    : settings_(std::move(settings)), spec_(std::move(spec)), log_(std::move(log)), extensions_(std::move(extensions)) {
}

ChromiumRunner::~ChromiumRunner() {
    std::lock_guard lock(mutex_);
    stop_locked();
}

void ChromiumRunner::stop_locked() {
    chromium_.reset();
    display_.reset();
    audio_.reset();
}

void ChromiumRunner::start() {
    std::lock_guard lock(mutex_);
    make_dirs(settings_.run_dir + "/logs");
    make_dirs(settings_.user_data_dir);
    // The server copies a session's profile here (spec "inputs"); Chromium starts on it.
    std::string profile = settings_.run_dir + "/inputs/profile.tar.zst";
    if (::access(profile.c_str(), R_OK) == 0) {
        unpack_profile(profile, settings_.user_data_dir);
        ::unlink(profile.c_str());
    }
    write_policy();
    install_forced_extension();
    if (!spec_.headless) {
        // The sink starts while Xvfb does; audio is not worth failing a session for.
        if (!settings_.pulseaudio_path.empty() && ::access(settings_.pulseaudio_path.c_str(), X_OK) == 0)
            audio_ = std::make_unique<PulseSink>(settings_);
        display_ = std::make_unique<Xvfb>(settings_, spec_.viewport);
        auto display_ready = Clock::now();
        if (audio_ && !audio_->wait_ready(display_ready + std::chrono::milliseconds(settings_.startup_timeout_ms))) {
            log_(LogLevel::Warn, "PulseAudio did not start (see logs/pulseaudio.log); this browser has no audio");
            audio_.reset();
        }
        if (audio_) {
            // What the sink adds to a start: it starts with Xvfb, so usually nothing.
            auto after = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - display_ready).count();
            log_(LogLevel::Info, "audio sink ready " + std::to_string(after) + " ms after the display");
        }
    }
    // Never the profile's last tabs (profile_archive.cpp leaves them out): they would race the
    // agent's first navigation.
    launch_locked(spec_.start_url.value_or("about:blank"));
}

void ChromiumRunner::write_policy() {
    // The host bind-mounts <instance>/policy at /etc/chromium/policies/managed.
    std::string dir = settings_.run_dir + "/policy";
    std::string path = dir + "/hangar.json";
    std::optional<json> policy = spec_.chrome_policy;
    if (!settings_.forced_extension_id.empty()) {
        // Tenants cannot set extension policies (session_model.cpp), so this list is Hangar's.
        // DeveloperToolsAvailability stays unset: Chromium then refuses DevTools (and so every
        // CDP client, the tenant's included) on extensions installed by policy.
        if (!policy) policy = json::object();
        (*policy)["ExtensionInstallForcelist"] =
            json::array({settings_.forced_extension_id + ";" + settings_.forced_extension_update_url});
    }
    if (!policy) {
        ::unlink(path.c_str());
        return;
    }
    make_dirs(dir);
    std::string tmp = path + ".tmp";
    {
        Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
        if (!fd) throw std::runtime_error("cannot write the Chromium policy " + tmp + ": " + std::strerror(errno));
        write_all(fd.get(), policy->dump(2));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw std::runtime_error("cannot write the Chromium policy " + path + ": " + std::strerror(errno));
    // Echoing a policy that Chromium never reads would be a lie; say why instead.
    if (!settings_.policy_mount_dir.empty() &&
        ::access((settings_.policy_mount_dir + "/hangar.json").c_str(), R_OK) != 0)
        throw std::runtime_error((spec_.chrome_policy ? std::string("chrome_policy") : std::string("request signing")) +
                                 " cannot be applied: " + settings_.policy_mount_dir +
                                 " is not this instance's policy dir (the host binds it only when that directory "
                                 "exists on the machine: mkdir -p " +
                                 settings_.policy_mount_dir + ")");
}

void ChromiumRunner::install_forced_extension() {
    const std::string &id = settings_.forced_extension_id;
    if (id.empty()) return;
    std::string installed = settings_.user_data_dir + "/Default/Extensions/" + id;
    auto has_manifest = [&] {
        std::error_code ec;
        for (const auto &e : std::filesystem::directory_iterator(installed, ec))
            if (std::filesystem::exists(e.path() / "manifest.json", ec)) return true;
        return false;
    };
    if (has_manifest()) return;
    // A run of its own with Chromium's updater on (no --disable-background-networking), which
    // reads the update manifest and the CRX from file:// URLs. Everything else that run would
    // fetch goes to a proxy on a port nothing listens on in this network namespace (the
    // discard port), so nothing leaves; no page is opened; and it closes in order, so the
    // install is in the profile's preferences when the real run (with the flag) starts.
    auto started = Clock::now();
    ChromiumSettings install = settings_;
    install.background_networking = true;
    std::erase_if(install.extra_flags, [](const std::string &f) { return f.rfind("--proxy-", 0) == 0; });
    install.extra_flags.emplace_back("--proxy-server=http://127.0.0.1:9");
    install.extra_flags.emplace_back("--proxy-bypass-list=<-loopback>");
    LaunchSpec spec = spec_;
    spec.headless = true; // no display yet, and none is needed
    spec.extensions.clear();
    {
        ChromiumProcess run(install, spec, std::nullopt, "", "about:blank", std::nullopt, log_);
        auto deadline = Clock::now() + std::chrono::milliseconds(settings_.startup_timeout_ms);
        while (!has_manifest() && Clock::now() < deadline && run.running())
            std::this_thread::sleep_for(20ms);
        run.close_in_order(5000ms);
    }
    if (!has_manifest())
        throw std::runtime_error("Chromium did not install the request signer extension (see logs/chromium.log)");
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    log_(LogLevel::Info, "request signer extension installed in " + std::to_string(ms) + " ms");
}

std::string ChromiumRunner::user_agent_locked() {
    if (!user_agent_) {
        auto out = run_capture(settings_.chromium_path, {"--version"}, 5000ms);
        auto ua = out ? stealth_user_agent(*out) : std::nullopt;
        if (!ua) log_(LogLevel::Warn, "stealth: could not read Chromium's version; keeping its own user agent");
        user_agent_ = ua.value_or("");
    }
    return *user_agent_;
}

void ChromiumRunner::launch_locked(std::string_view url) {
    // Left behind when a previous Chromium was killed; they would make the new one refuse the
    // profile ("already in use").
    for (const char *f : {"SingletonLock", "SingletonSocket", "SingletonCookie"})
        ::unlink((settings_.user_data_dir + "/" + f).c_str());
    std::optional<int> display;
    if (display_) display = display_->display();
    std::string ua = spec_.stealth ? user_agent_locked() : std::string();
    // Whatever is installed now is loaded: an upload installs, then restarts Chromium.
    spec_.extensions = extensions_();
    auto started = Clock::now();
    std::optional<std::string> pulse_server;
    if (audio_) pulse_server = audio_->server();
    chromium_ = std::make_unique<ChromiumProcess>(settings_, spec_, display, ua, url, pulse_server, log_);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
    log_(LogLevel::Info, "Chromium " + std::to_string(chromium_->pid()) + " ready on port " +
                             std::to_string(chromium_->endpoint().port) + " in " + std::to_string(ms) + " ms");
}

json ChromiumRunner::status() {
    std::lock_guard lock(mutex_);
    json s = {
        {"pid", nullptr},
        {"port", nullptr},
        {"ws_path", nullptr},
        {"restarts", restarts_},
        {"headless", spec_.headless},
        {"kiosk_mode", spec_.kiosk_mode},
        {"viewport", viewport_json(spec_.viewport)},
    };
    if (chromium_ && chromium_->running()) {
        s["pid"] = chromium_->pid();
        s["port"] = chromium_->endpoint().port;
        s["ws_path"] = chromium_->endpoint().ws_path;
    }
    if (display_) s["display"] = ":" + std::to_string(display_->display());
    // Where a recording reads what Chromium plays.
    if (audio_ && audio_->running()) s["audio"] = {{"server", audio_->server()}, {"source", kAudioSource}};
    return s;
}

json ChromiumRunner::open_only(const std::string &url) {
    auto port = endpoint().port;
    std::vector<std::string> old;
    if (auto body = local_http_get(port, "/json/list", 2000ms)) {
        json list = json::parse(*body, nullptr, false);
        if (list.is_array())
            for (const auto &t : list)
                if (t.is_object() && t.value("type", "") == "page") old.push_back(t.value("id", ""));
    }
    // Chromium reads everything after '?' as the URL, percent-decoded.
    std::string encoded;
    for (unsigned char c : url) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            encoded += static_cast<char>(c);
        } else {
            constexpr char hex[] = "0123456789ABCDEF";
            encoded += '%';
            encoded += hex[c >> 4];
            encoded += hex[c & 15];
        }
    }
    auto created = local_http_get(port, "/json/new?" + encoded, 5000ms, "PUT");
    json page = created ? json::parse(*created, nullptr, false) : json();
    if (!page.is_object() || !page.contains("id"))
        throw Error(502, "upstream_unavailable", "Chromium did not open the start URL");
    for (const auto &id : old)
        local_http_get(port, "/json/close/" + id, 2000ms);
    return {{"id", page.at("id")}};
}

ChromiumRunner::Endpoint ChromiumRunner::endpoint() {
    std::lock_guard lock(mutex_);
    if (chromium_ && !chromium_->running() && ++crashes_ > 1) {
        // A browser that keeps dying (a page that crashes it, memory it cannot have) is not
        // brought back again: the agent ends, and the server ends the session with a reason.
        log_(LogLevel::Error, "Chromium exited again (" + chromium_->exit_description() + "); ending the session");
        ::kill(::getpid(), SIGTERM);
        throw Error(502, "upstream_unavailable", "Chromium crashed twice; this browser session is ending");
    }
    if (!chromium_ || !chromium_->running()) {
        // Crashed or killed (e.g. by the OOM killer): bring it back once, like a supervisor would.
        std::string why = chromium_ ? "exited (" + chromium_->exit_description() + ")" : "is not running";
        chromium_.reset();
        log_(LogLevel::Warn, "Chromium " + why + "; starting it again");
        if (!spec_.headless && (!display_ || !display_->running())) {
            display_.reset();
            display_ = std::make_unique<Xvfb>(settings_, spec_.viewport);
        }
        launch_locked("about:blank");
        ++restarts_;
    }
    return {chromium_->endpoint().port, chromium_->endpoint().ws_path};
}

std::string ChromiumRunner::archive_profile() {
    std::lock_guard lock(mutex_);
    if (chromium_) chromium_->close_in_order(10s);
    chromium_.reset();
    return pack_profile(settings_.user_data_dir);
}

json ChromiumRunner::load_profile(std::string_view archive) {
    {
        std::lock_guard lock(mutex_);
        std::string staged = settings_.run_dir + "/inputs/profile.tar.zst";
        make_dirs(settings_.run_dir + "/inputs");
        {
            Fd fd(::open(staged.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
            if (!fd) throw std::runtime_error("cannot stage the profile: " + std::string(std::strerror(errno)));
            write_all(fd.get(), archive);
        }
        chromium_.reset();
        std::error_code ec;
        std::filesystem::remove_all(settings_.user_data_dir, ec);
        make_dirs(settings_.user_data_dir);
        unpack_profile(staged, settings_.user_data_dir);
        ::unlink(staged.c_str());
        ++restarts_;
        launch_locked("about:blank");
    }
    return status();
}

json ChromiumRunner::restart(std::optional<Viewport> viewport, std::optional<bool> kiosk_mode,
                             std::optional<Location> location) {
    {
        std::lock_guard lock(mutex_);
        bool resize_display = !spec_.headless && viewport &&
                              (viewport->width != spec_.viewport.width || viewport->height != spec_.viewport.height);
        chromium_.reset();
        if (resize_display) display_.reset(); // Xvfb cannot change its screen size live
        if (viewport) spec_.viewport = *viewport;
        if (kiosk_mode) spec_.kiosk_mode = *kiosk_mode;
        if (location) spec_.location = *location;
        if (!spec_.headless && (!display_ || !display_->running())) {
            display_.reset();
            display_ = std::make_unique<Xvfb>(settings_, spec_.viewport);
        }
        ++restarts_;
        launch_locked("about:blank");
    }
    return status();
}

} // namespace hangar::browsers
