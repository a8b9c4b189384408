// The liveview plugin: browser_live_view_url of every session.
//
// Server role: the page (/browser/live/{token}), its WebSocket (/browser/live/{token}/ws), a
// status probe the page asks once disconnected, and noVNC's static files. The token is the
// credential (no API key), signed for one session; the browsers plugin asks for it through the
// `liveview.url` service when it renders a headful session.
// Instance role: /liveview/ws starts x11vnc on the instance display on first use (one interactive,
// one -viewonly for read-only viewers, each on a unix socket in the instance dir) and bridges the
// viewer's WebSocket to it; for a headless instance, a CDP screencast bridge (screencast.hpp) on a
// unix socket takes x11vnc's place. See README.md for why it is built so.
#include "page.hpp"
#include "screencast.hpp"

#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/web.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace proc = hangar::proc;
using namespace std::chrono_literals;

constexpr const char *kTokenType = "live";
constexpr std::size_t kMaxPasteBytes = 1u << 20;

bool truthy(std::string v) {
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    return v == "1" || v == "true" || v == "yes";
}

// ?readOnly=true, as Kernel's client spells it, or readonly / ro; values 1, true, yes. Asking
// for it with a full link trades the link for a read-only one (see page()); what a link may do
// is its token's, never the query's.
bool read_only_requested(const Request &req) {
    for (const char *name : {"readOnly", "readonly", "ro"})
        if (auto v = req.query(name); v && truthy(*v)) return true;
    return false;
}

std::string content_type_for(const std::string &path) {
    auto ext = std::filesystem::path(path).extension().string();
    if (ext == ".js" || ext == ".mjs") return "text/javascript";
    if (ext == ".html") return "text/html; charset=utf-8";
    if (ext == ".css") return "text/css";
    if (ext == ".svg") return "image/svg+xml";
    if (ext == ".png") return "image/png";
    if (ext == ".json") return "application/json";
    return "application/octet-stream";
}

// noVNC's own modules only: core/ and vendor/, plain relative names.
bool safe_asset_path(const std::string &rel) {
    if (rel.rfind("core/", 0) != 0 && rel.rfind("vendor/", 0) != 0) return false;
    if (rel.find("..") != std::string::npos || rel.find("//") != std::string::npos) return false;
    return std::all_of(rel.begin(), rel.end(),
                       [](unsigned char c) { return std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-'; });
}

class LiveViewPlugin final : public hangar::Plugin {
public:
    void stop() override {
        std::lock_guard lock(mutex_);
        vnc_.clear();  // stops x11vnc; bridged viewers see their stream end
        cast_.clear(); // ends the screencast viewers and their CDP connections
    }

private:
    // ---- server role ---------------------------------------------------------------------------

    void start_server() override {
        novnc_dir_ = config("novnc_dir", "/usr/share/novnc");
        if (!std::filesystem::exists(novnc_dir_ + "/core/rfb.js"))
            warn("noVNC was not found in " + novnc_dir_ + " (Debian package novnc); live view pages will not load");

        // For the browsers plugin: the live-view URL of one session.
        service("liveview.url", [this](const json &in) {
            std::string sid = in.value("session_id", "");
            std::string project = in.value("project_id", "");
            if (sid.empty() || project.empty()) throw Error::bad_request("session_id and project_id are required");
            auto ttl = static_cast<std::uint32_t>(in.value("ttl_seconds", 7 * 24 * 3600));
            return json{{"url", in.value("base_url", "") + "/browser/live/" +
                                    sign({sid, project, in.value("read_only", false)}, ttl)}};
        });

        // Viewers connected now, per session: a headful resize restarts the screen under them, so
        // the browsers plugin refuses it unless forced (as on Kernel).
        observe_relays("/liveview/ws", [this](const RelayEvent &e) -> std::uint32_t {
            std::lock_guard lock(viewers_mutex_);
            if (e.kind == HANGAR_RELAY_OPENED) {
                viewer_of_[e.relay_id] = std::string(e.activity_key);
                ++viewers_[std::string(e.activity_key)];
                return HANGAR_RELAY_WATCH_CLOSE;
            }
            if (e.kind == HANGAR_RELAY_CLOSED) {
                auto it = viewer_of_.find(e.relay_id);
                if (it != viewer_of_.end() && --viewers_[it->second] <= 0) viewers_.erase(it->second);
                if (it != viewer_of_.end()) viewer_of_.erase(it);
            }
            return 0;
        });
        service("liveview.viewers", [this](const json &in) {
            std::lock_guard lock(viewers_mutex_);
            auto it = viewers_.find(in.value("session_id", ""));
            return json{{"count", it == viewers_.end() ? 0 : it->second}};
        });

        route(
            "GET", "/browser/live/{token}", [this](Request &q, Response &r) { page(q, r); }, HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/browser/live/{token}/status", [this](Request &q, Response &r) { status(q, r); },
            HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/browser/live/{token}/ws", [this](Request &q, Response &r) { viewer_socket(q, r); },
            HANGAR_ROUTE_PUBLIC | HANGAR_ROUTE_STREAMING);
        route(
            "GET", "/liveview/novnc/{path*}", [this](Request &q, Response &r) { asset(q, r); }, HANGAR_ROUTE_PUBLIC);
        route(
            "POST", "/browser/live/{token}/clipboard", [this](Request &q, Response &r) { paste(q, r); },
            HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/browser/live/{token}/clipboard",
            [this](Request &q, Response &r) {
                Claims c = claims_of(q.param("token"));
                if (c.read_only) throw Error::forbidden("a read-only live view cannot read the clipboard");
                relay_unix(q, r, live_agent_socket(c), "/liveview/clipboard", c.session_id);
            },
            HANGAR_ROUTE_PUBLIC);

        // Viewer pages are meant to be embedded (they tell their parent KERNEL_CONNECTED), so
        // any page may frame them unless the operator narrows it.
        page_policy_.script_src = "'self'"; // noVNC's modules
        page_policy_.img_src = "'self' data: blob:";
        page_policy_.form_action = "";
        page_policy_.frame_ancestors = config("frame_ancestors", "*");
    }

    // Text pasted into the viewer, for the remote clipboard (GET reads it back after a copy).
    // Debian's x11vnc takes RFB cut text but never owns the X selections with it, nor sends their
    // changes, so the page uses these routes instead.
    void paste(Request &req, Response &res) {
        Claims c = claims_of(req.param("token"));
        if (c.read_only || read_only_requested(req)) throw Error::forbidden("a read-only live view cannot paste");
        std::string socket = live_agent_socket(c);
        json body = req.json_body(false);
        auto text = body.find("text");
        if (text == body.end() || !text->is_string()) throw Error::invalid("text", "must be a string");
        if (text->get_ref<const std::string &>().size() > kMaxPasteBytes)
            throw Error::invalid("text", "is longer than " + std::to_string(kMaxPasteBytes) + " bytes");
        relay_unix(req, res, socket, "/liveview/clipboard", c.session_id);
    }

    struct Claims {
        std::string session_id;
        std::string project_id;
        bool read_only = false; // the token's "ro": no input, paste or clipboard, whatever the query says
        std::int64_t expires_s = 0;
    };

    std::string sign(const Claims &c, std::uint32_t ttl) const {
        json claims = {{"sid", c.session_id}, {"pid", c.project_id}, {"typ", kTokenType}};
        if (c.read_only) claims["ro"] = true;
        return token_sign(claims, ttl);
    }

    Claims claims_of(const std::string &token) const {
        auto c = token.empty() ? std::nullopt : token_verify(token);
        if (!c || !c->is_object() || c->value("typ", "") != kTokenType || !c->contains("sid") ||
            !c->at("sid").is_string() || !c->contains("pid") || !c->at("pid").is_string())
            throw Error::unauthorized("invalid or expired live view link");
        auto ro = c->find("ro");
        auto exp = c->find("exp");
        return {c->at("sid").get<std::string>(), c->at("pid").get<std::string>(),
                ro != c->end() && ro->is_boolean() && ro->get<bool>(),
                exp != c->end() && exp->is_number_integer() ? exp->get<std::int64_t>() : 0};
    }

    // The link's session while it runs; nullopt once it ended (or never was).
    std::optional<json> session_of(const Claims &c) const {
        try {
            return call("browsers.session", {{"project_id", c.project_id}, {"id", c.session_id}});
        } catch (const Error &e) {
            if (e.status() == 404) return std::nullopt;
            throw;
        }
    }
    bool active(const Claims &c) const { return session_of(c).has_value(); }

    // The agent socket of the link's session while it runs; 404 once it ended.
    std::string live_agent_socket(const Claims &c) const {
        if (!active(c)) throw Error::not_found("browser session " + c.session_id + " has ended");
        return agent_socket(c.session_id);
    }

    static void no_store(Response &res) {
        res.header("Cache-Control", "no-store");
        res.header("Referrer-Policy", "no-referrer");
    }

    void page(Request &req, Response &res) {
        Claims c = claims_of(req.param("token"));
        // Read-only asked for with a full link: the viewer goes on with a read-only token (as
        // long-lived as the link), so the page's requests carry a link that cannot be turned
        // back into control by editing the query. A read-only token's page says so in its query,
        // which the page reads to hide its input.
        if (c.read_only != read_only_requested(req)) {
            std::string token = req.param("token");
            if (!c.read_only) {
                c.read_only = true;
                auto left = c.expires_s - std::chrono::duration_cast<std::chrono::seconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count();
                token = sign(c, static_cast<std::uint32_t>(std::max<std::int64_t>(left, 1)));
            }
            no_store(res);
            res.header("Location", token + "?readOnly=true");
            res.status(302);
            res.body("text/plain; charset=utf-8", "read-only live view");
            return;
        }
        auto session = session_of(c);
        if (!session) {
            hangar::web::html(res, hangar::liveview::kEndedPage, page_policy_, 404);
            return;
        }
        // Same link, same routes: a headless session's page draws the screencast on a canvas.
        hangar::web::html(res,
                          session->value("headless", false) ? hangar::liveview::screencast_page()
                                                            : hangar::liveview::viewer_page(),
                          page_policy_);
    }

    void status(Request &req, Response &res) {
        Claims c = claims_of(req.param("token"));
        no_store(res);
        res.json({{"state", active(c) ? "active" : "ended"}});
    }

    void viewer_socket(Request &req, Response &res) {
        Claims c = claims_of(req.param("token"));
        std::string socket = live_agent_socket(c);
        // Read-only is decided here, not in the page: such a viewer reaches an x11vnc that
        // drops all input. An open viewer keeps the session from idling out.
        std::string mode = c.read_only || read_only_requested(req) ? "view" : "control";
        relay_unix(req, res, socket, "/liveview/ws?mode=" + mode, c.session_id);
    }

    void asset(Request &req, Response &res) {
        std::string rel = req.param("path");
        if (!safe_asset_path(rel)) throw Error::not_found("no such live view file");
        std::string path = novnc_dir_ + "/" + rel;
        if (!std::filesystem::is_regular_file(path)) throw Error::not_found("no such live view file");
        res.header("Cache-Control", "public, max-age=3600");
        res.header("X-Content-Type-Options", "nosniff");
        res.file(content_type_for(path), path);
    }

    // ---- instance role -------------------------------------------------------------------------

    void start_instance() override {
        run_dir_ = instance_run_dir();
        poll_ms_ = std::clamp<std::int64_t>(config_int("poll_ms", 10), 1, 1000);
        defer_ms_ = std::clamp<std::int64_t>(config_int("defer_ms", 10), 0, 1000);
        quality_ = static_cast<int>(std::clamp<std::int64_t>(config_int("screencast_quality", 70), 10, 100));
        route(
            "GET", "/liveview/ws",
            [this](Request &q, Response &r) {
                bool view_only = q.query("mode").value_or("") == "view";
                json st = call("browsers.chromium", json::object());
                ws_bridge_unix(q, r, st.value("headless", false) ? cast_socket(view_only) : vnc_socket(view_only));
            },
            HANGAR_ROUTE_STREAMING);
        route("POST", "/liveview/clipboard", [this](Request &q, Response &r) {
            json body = q.json_body(false);
            clipboard("computer.clipboard_write", {{"text", body.value("text", "")}});
            r.no_content();
        });
        route("GET", "/liveview/clipboard",
              [this](Request &, Response &r) { r.json(clipboard("computer.clipboard_read", json::object())); });
    }

    json clipboard(const char *service_name, const json &in) const {
        try {
            return call(service_name, in);
        } catch (const Error &e) {
            if (e.status() == 404) throw Error::not_implemented("the live view's clipboard needs the computer plugin");
            throw;
        }
    }

    struct Vnc {
        proc::Child child;
        std::string display;
        std::string socket;
    };

    // The x11vnc for this kind of viewer, started (again) when it is not running on the current
    // display: a viewport change restarts Xvfb, and x11vnc exits with its display.
    std::string vnc_socket(bool view_only) {
        json st = call("browsers.chromium", json::object());
        auto display = st.value("display", json());
        if (!display.is_string()) throw Error::bad_request("live view needs a headful browser");
        std::lock_guard lock(mutex_);
        Vnc &vnc = vnc_[view_only];
        if (vnc.child.running() && vnc.display == display.get<std::string>()) return vnc.socket;

        std::string name = view_only ? "view" : "control";
        vnc = Vnc{};
        vnc.display = display.get<std::string>();
        vnc.socket = run_dir_ + "/liveview-" + name + ".sock";
        ::unlink(vnc.socket.c_str());
        proc::Fd log = proc::open_log(run_dir_ + "/logs/x11vnc-" + name + ".log");
        proc::Child::Spec spec;
        spec.path = "/usr/bin/x11vnc";
        // -sb 0: x11vnc's screen-blank throttle would, after 60 s without a screen change, poll
        // only every 2-4 s and let nothing but viewer input wake it, so the first navigation
        // after a still minute reached the viewer up to 4 s late (measured, see README.md).
        spec.args = {"-display",   vnc.display,
                     "-unixsock",  vnc.socket,
                     "-rfbport",   "0",
                     "-shared",    "-forever",
                     "-nopw",      "-norc",
                     "-quiet",     "-xkb",
                     "-noxrecord", "-nowf",
                     "-sb",        "0",
                     "-wait",      std::to_string(poll_ms_),
                     "-defer",     std::to_string(defer_ms_)};
        if (view_only) spec.args.emplace_back("-viewonly");
        spec.env = proc::environment_with({"DISPLAY=" + vnc.display});
        spec.stdout_fd = log.get();
        spec.stderr_fd = log.get();
        try {
            vnc.child = proc::Child::spawn(spec);
        } catch (const std::exception &e) {
            throw Error(502, "upstream_unavailable", std::string("could not start x11vnc: ") + e.what());
        }
        if (!proc::wait_listening(vnc.child, vnc.socket, std::chrono::steady_clock::now() + 10s, 10ms)) {
            std::string why = vnc.child.running() ? "did not listen in time" : vnc.child.exit_description();
            vnc = Vnc{};
            throw Error(502, "upstream_unavailable", "x11vnc failed to start: " + why);
        }
        return vnc.socket;
    }

    // The screencast bridge for this kind of viewer (headless instances), started on first use.
    // Each viewer connection locates Chromium anew: a restart moves its DevTools endpoint.
    std::string cast_socket(bool view_only) {
        std::lock_guard lock(mutex_);
        auto &bridge = cast_[view_only];
        if (!bridge) {
            auto locate = [this] {
                json st = call("browsers.chromium", json::object());
                auto endpoint = hangar::cdp::endpoint_of(st);
                if (!endpoint) throw std::runtime_error("Chromium is not running");
                hangar::liveview::CastTarget t;
                t.port = endpoint->port;
                t.browser_path = endpoint->ws_path;
                if (st.contains("viewport") && st["viewport"].is_object()) {
                    t.width = st["viewport"].value("width", 0);
                    t.height = st["viewport"].value("height", 0);
                }
                return t;
            };
            std::string path = run_dir_ + "/liveview-cast-" + (view_only ? "view" : "control") + ".sock";
            try {
                bridge = std::make_unique<hangar::liveview::ScreencastBridge>(path, view_only, locate, quality_);
            } catch (const std::exception &e) {
                throw Error(502, "upstream_unavailable", std::string("could not start the screencast: ") + e.what());
            }
        }
        return bridge->socket();
    }

    std::string novnc_dir_;
    hangar::web::PagePolicy page_policy_;
    std::string run_dir_;
    std::int64_t poll_ms_ = 10;
    std::int64_t defer_ms_ = 10;
    std::mutex mutex_;
    std::map<bool, Vnc> vnc_;                                                  // view_only → its x11vnc
    std::map<bool, std::unique_ptr<hangar::liveview::ScreencastBridge>> cast_; // view_only → its bridge
    int quality_ = 70;
    std::mutex viewers_mutex_;
    std::map<std::string, int> viewers_;             // session id → viewers connected (server role)
    std::map<std::uint64_t, std::string> viewer_of_; // relay id → its session
};

} // namespace

HANGAR_PLUGIN(LiveViewPlugin, "liveview", "0.1.0", "browsers,computer?", nullptr, 0)
