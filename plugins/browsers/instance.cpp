// Instance role: runs inside one browser's sandbox (`hangar agent`), owns Xvfb and Chromium, and
// serves the agent routes the server half relays to. These routes have no auth: the agent socket
// is only reachable by the server.
#include "browsers.hpp"
#include "page_text.hpp"

#include <unistd.h>

#include <algorithm>
#include <set>

namespace hangar::browsers {

void BrowsersPlugin::start_instance() {
    ChromiumSettings settings;
    settings.chromium_path = config("chromium_path", settings.chromium_path);
    settings.xvfb_path = config("xvfb_path", settings.xvfb_path);
    settings.pulseaudio_path = config("pulseaudio_path", settings.pulseaudio_path);
    settings.run_dir = instance_run_dir();
    settings.user_data_dir = config("user_data_dir", instance_home_dir() + "/user-data");
    settings.policy_mount_dir = config("policy_mount_dir", settings.policy_mount_dir);
    settings.extra_flags = split_flags(config("chromium_flags", ""));
    settings.startup_timeout_ms = static_cast<int>(config_int("startup_timeout_ms", settings.startup_timeout_ms));
    settings.first_page_timeout_ms =
        static_cast<int>(config_int("first_page_timeout_ms", settings.first_page_timeout_ms));

    // The proxies plugin's forwarder, when it runs here: Chromium is pointed at it once and the
    // proxy behind it changes without a restart. Without it, Chromium connects directly.
    try {
        if (auto server = call("proxies.forwarder", json::object()).value("proxy_server", ""); !server.empty()) {
            settings.extra_flags.push_back("--proxy-server=" + server);
            // Loopback too: the forwarder decides (a proxy's upstream on the host's loopback,
            // bypass hosts), and goes direct when no proxy is set, as Chromium would.
            settings.extra_flags.emplace_back("--proxy-bypass-list=<-loopback>");
        }
    } catch (const Error &e) {
        if (e.status() != 404) throw;
    }
    // The proxies plugin's request signer extension, in a browser created to sign.
    try {
        json forced = call("proxies.signer_extension", json::object());
        settings.forced_extension_id = forced.value("id", "");
        settings.forced_extension_update_url = forced.value("update_url", "");
    } catch (const Error &e) {
        if (e.status() != 404) throw;
    }
    LaunchSpec spec = parse_launch_spec(instance_spec());
    auto logger = [this](LogLevel level, std::string_view msg) {
        log(level == LogLevel::Error  ? HANGAR_LOG_ERROR
            : level == LogLevel::Warn ? HANGAR_LOG_WARN
                                      : HANGAR_LOG_INFO,
            msg);
    };
    // The extensions plugin owns the extension folder (it unpacked the create's zips before we
    // started: we depend on it); without it, Chromium runs with none.
    auto extensions = [this]() -> std::vector<std::string> {
        try {
            return call("extensions.installed", json::object()).value("paths", std::vector<std::string>{});
        } catch (const Error &e) {
            if (e.status() == 404) return {};
            throw;
        }
    };
    chromium_ = std::make_unique<ChromiumRunner>(std::move(settings), std::move(spec), logger, extensions);
    // Synchronous on purpose: the host's instance_start returns when every plugin has started,
    // so POST /browsers answers only once Chromium is ready.
    chromium_->start();
    curl_ = std::make_unique<BrowserCurl>(
        static_cast<std::size_t>(std::max<std::int64_t>(0, config_int("curl_kept_tabs", 4))),
        std::chrono::milliseconds(config_int("curl_tab_idle_ms", 15000)));

    route("GET", "/chromium", [this](Request &, Response &res) { res.json(chromium_->status()); });
    // For other plugins in this agent (computer, replays ...): where Chromium and its display are.
    service("browsers.chromium", [this](const json &) { return chromium_->status(); });

    route("POST", "/chromium/restart", [this](Request &req, Response &res) {
        json body = req.json_body(true);
        std::optional<Viewport> viewport;
        std::optional<bool> kiosk;
        if (auto it = body.find("viewport"); it != body.end() && !it->is_null()) viewport = parse_viewport(*it);
        if (auto it = body.find("kiosk_mode"); it != body.end() && !it->is_null()) {
            if (!it->is_boolean()) throw Error::invalid("kiosk_mode", "must be a boolean");
            kiosk = it->get<bool>();
        }
        std::optional<Location> location;
        if (auto it = body.find("location"); it != body.end() && !it->is_null()) location = parse_location(*it);
        res.json(chromium_->restart(viewport, kiosk, location));
    });

    // The session's state for its profile; the server calls it just before ending the session.
    route("POST", "/chromium/profile",
          [this](Request &, Response &res) { res.body("application/zstd", chromium_->archive_profile()); });

    route("PUT", "/chromium/profile",
          [this](Request &req, Response &res) { res.json(chromium_->load_profile(req.body())); });

    route("POST", "/chromium/open", [this](Request &req, Response &res) {
        json body = req.json_body(false);
        auto it = body.find("url");
        if (it == body.end() || !it->is_string() || it->get_ref<const std::string &>().empty())
            throw Error::invalid("url", "is required");
        res.json(chromium_->open_only(it->get<std::string>()));
    });

    // curl through this Chromium: JSON in and out, or (curl/raw, for the SDK's browsers.fetch) the
    // request passed on whole and the target's answer returned as it is.
    route("POST", "/chromium/curl", [this](Request &req, Response &res) {
        CurlRequest r = parse_curl_request(req.json_body(false));
        res.json(render_curl_response(run_curl(r, res), r.base64_response));
    });
    for (const char *method : {"GET", "POST", "PUT", "PATCH", "DELETE"})
        route(method, "/chromium/curl/raw", [this](Request &req, Response &res) { curl_raw(req, res); });
    // A page's readable text, fetched and extracted here (the server's browsers.page_text service).
    route("POST", "/chromium/page_text", [this](Request &req, Response &res) {
        PageTextRequest r = parse_page_text_request(req.json_body(false));
        auto ep = chromium_->endpoint();
        res.json(page_text(ep.port, ep.ws_path, *curl_, r));
    });

    // Always the current Chromium, so the same public URL works again after a restart.
    route(
        "GET", "/cdp",
        [this](Request &req, Response &res) { relay_to_chromium(req, res, chromium_->endpoint().ws_path); },
        HANGAR_ROUTE_STREAMING);
    route(
        "GET", "/cdp/devtools/{rest*}",
        [this](Request &req, Response &res) { relay_to_chromium(req, res, "/devtools/" + req.param("rest")); },
        HANGAR_ROUTE_STREAMING);
    for (const char *path : {"/json/version", "/json/list", "/json"}) {
        route("GET", path,
              [this, p = std::string(path)](Request &req, Response &res) { relay_to_chromium(req, res, p); });
    }
}

CurlResponse BrowsersPlugin::run_curl(const CurlRequest &r, Response &res) {
    auto ep = chromium_->endpoint();
    try {
        return curl_->request(ep.port, ep.ws_path, r);
    } catch (const Error &e) {
        // The target failed or was slow: resending would not help, and the SDK retries 5xx.
        if (e.status() == 502 || e.status() == 504) res.header("x-should-retry", "false");
        throw;
    }
}

void BrowsersPlugin::curl_raw(Request &req, Response &res) {
    json body = {{"url", req.query("url").value_or("")}, {"method", std::string(req.method())}};
    if (auto t = req.query("timeout_ms")) {
        try {
            body["timeout_ms"] = std::stod(*t);
        } catch (const std::exception &) {
            body["timeout_ms"] = *t; // rejected by the parser, naming the field
        }
    }
    // The caller's headers go on, except what belongs to this hop or to the SDK itself: the
    // browser's own User-Agent is the point of asking the browser.
    json headers = json::object();
    for (const auto &[name, value] : req.headers()) {
        std::string l = name;
        std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
        static const std::set<std::string> skip = {
            "host",    "connection", "keep-alive", "content-length", "transfer-encoding", "te",
            "trailer", "upgrade",    "user-agent", "authorization",  "accept-encoding",   "x-request-id"};
        if (skip.count(l) || l.rfind("x-stainless-", 0) == 0) continue;
        headers[name] = value;
    }
    body["headers"] = headers;
    auto payload = req.body();
    if (!payload.empty() && req.method() != "GET") body["body"] = std::string(payload);
    CurlRequest r = parse_curl_request(body);
    CurlResponse answer = run_curl(r, res);
    std::string content_type = "application/octet-stream";
    for (const auto &[name, value] : answer.headers) {
        std::string l = canonical_header_name(name);
        if (l == "Content-Type") {
            content_type = value;
            continue;
        }
        // The body is whole and decoded here, so its framing and encoding headers no longer apply.
        if (l == "Content-Length" || l == "Content-Encoding" || l == "Transfer-Encoding" || l == "Connection" ||
            l == "Keep-Alive")
            continue;
        res.header(name, value);
    }
    res.status(answer.status);
    res.body(content_type, answer.body);
}

void BrowsersPlugin::relay_to_chromium(Request &req, Response &res, const std::string &path) {
    auto ep = chromium_->endpoint();
    relay_tcp(req, res, "127.0.0.1", ep.port, path);
}

void BrowsersPlugin::stop_instance() {
    curl_.reset();     // its tabs close while Chromium is there to close them
    chromium_.reset(); // SIGTERM, grace, SIGKILL, reap: Chromium first, then Xvfb
}

} // namespace hangar::browsers
