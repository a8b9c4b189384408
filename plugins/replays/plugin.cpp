// The replays plugin: /browsers/{id}/replays — video recordings of headful sessions.
//
// Instance role: /replays/{rid}/start feeds the instance display (ScreenFeed) to an ffmpeg that
// writes /run/hangar/recordings/<rid>.part.mp4; /replays/{rid}/stop ends the feed (ffmpeg writes
// the index and moves it to the front) and renames the file <rid>.mp4. A recording that reached
// its maximum duration has ended by itself and is only renamed.
// Server role: the rows (replays_recordings), the API, and finishing: the finished file is moved
// from the instance dir into this plugin's blobs, so it outlives the session. Recordings are
// finished on stop, at their maximum duration (a timer), when the session ends (the browsers
// plugin calls replays.session_ending before removing the instance) and at shutdown.
// See README.md for why it is built so.
#include "recording.hpp"
#include "screen_feed.hpp"

#include <hangar/beneath.hpp>
#include <hangar/plugin.hpp>
#include <hangar/process.hpp>
#include <hangar/resource.hpp>
#include <hangar/web.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

using hangar::Error;
using hangar::html_escape;
using hangar::json;
using hangar::Request;
using hangar::Response;
namespace proc = hangar::proc;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace hangar::replays;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE replays_recordings (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    finished_at BIGINT,
    max_duration_ms BIGINT NOT NULL,
    framerate INTEGER NOT NULL,
    state TEXT NOT NULL,
    size_bytes BIGINT
);
CREATE INDEX replays_recordings_session ON replays_recordings (project_id, session_id, started_at);
CREATE INDEX replays_recordings_state ON replays_recordings (state);
)sql"},
    {2, "ALTER TABLE replays_recordings ADD COLUMN record_audio INTEGER NOT NULL DEFAULT 0"},
};

constexpr const char *kViewTokenType = "replay";
// ffmpeg needs a moment after SIGTERM: it writes the index, then rewrites the file with the index
// first (+faststart), which for a long recording is a full copy.
constexpr auto kFinishGrace = 60s;
constexpr auto kFlowingTimeout = std::chrono::milliseconds(10'000);

std::string blob_key(const std::string &rid) {
    return rid + ".mp4";
}

class ReplaysPlugin final : public hangar::Plugin {
private:
    // ---- server role ---------------------------------------------------------------------------

    void start_server() override {
        view_ttl_ = static_cast<std::uint32_t>(config_int("view_ttl_seconds", std::int64_t{7} * 24 * 3600));
        // Recordings a killed server left unfinished. Where the instance was adopted, its ffmpeg
        // still records: the recording goes on, keeps its session busy, and ends by a stop, its
        // maximum duration or the session's end as any other. Where the instance is gone, the
        // timer below finds it unreachable and marks it failed.
        for (const auto &row : sql("SELECT id, session_id FROM replays_recordings WHERE state = 'recording'")) {
            std::lock_guard lock(mutex_);
            recording_activity_[row.at("id").get<std::string>()] = activity(row.at("session_id").get<std::string>());
        }

        route("POST", "/browsers/{id}/replays", [this](Request &q, Response &r) { start_recording(q, r); });
        route("GET", "/browsers/{id}/replays", [this](Request &q, Response &r) { list(q, r); });
        route("GET", "/browsers/{id}/replays/{replay_id}", [this](Request &q, Response &r) { download(q, r); });
        route("POST", "/browsers/{id}/replays/{replay_id}/stop", [this](Request &q, Response &r) {
            auto row = require(q);
            finish(row.at("id").get<std::string>());
            r.no_content();
        });
        route(
            "GET", "/replays/view/{token}", [this](Request &q, Response &r) { view_page(q, r); }, HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/replays/view/{token}/video.mp4", [this](Request &q, Response &r) { view_video(q, r); },
            HANGAR_ROUTE_PUBLIC);

        // For the browsers plugin: a resize would cut a running recording off.
        service("replays.active", [this](const json &in) {
            auto rows = sql("SELECT COUNT(*) AS n FROM replays_recordings WHERE session_id = ? AND state = 'recording'",
                            {in.value("session_id", "")});
            return json{{"count", rows.empty() ? 0 : rows[0].value("n", 0)}};
        });
        // Managed auth's record_session: one replay of an auth browser, with the defaults.
        service("replays.start", [this](const json &in) {
            return json{{"replay_id",
                         begin_recording(in.value("session_id", ""), in.value("org_id", ""), in.value("project_id", ""),
                                         kDefaultFramerate, std::int64_t{kDefaultMaxDurationSeconds} * 1000, false)}};
        });
        service("replays.split_begin", [this](const json &in) { return split_begin(in.value("session_id", "")); });
        service("replays.split_end", [this](const json &in) {
            return split_end(in.value("session_id", ""), in.value("segments", json::array()));
        });
        service("replays.session_ending", [this](const json &in) {
            finish_session(in.value("session_id", ""));
            return json::object();
        });
        every(1000, [this] { finish_ended(); });
    }

    void stop_server() override {
        // Stopped before the browsers plugin ends the sessions: finish what is recording now,
        // while the instances still run.
        for (const auto &row : sql("SELECT id FROM replays_recordings WHERE state = 'recording'"))
            finish(row.at("id").get<std::string>());
    }

    // The caller's session, active or ended (replays outlive sessions): {session_id, headless, ended}.
    json session_of(const Request &req) const {
        return call("browsers.session",
                    {{"project_id", req.project()}, {"id", req.param("id")}, {"include_deleted", true}});
    }

    json render(const json &row, const std::string &base_url) const {
        std::string rid = row.at("id").get<std::string>();
        std::string token = token_sign({{"rid", rid}, {"typ", kViewTokenType}}, view_ttl_);
        json finished = row.at("finished_at").is_number() && row.value("state", "") != "recording"
                            ? json(hangar::rfc3339(row.at("finished_at").get<std::int64_t>()))
                            : json(nullptr);
        return {{"replay_id", rid},
                {"started_at", hangar::rfc3339(row.at("started_at").get<std::int64_t>())},
                {"finished_at", finished},
                {"replay_view_url", base_url + "/replays/view/" + token}};
    }

    json row_of(const std::string &rid) const {
        auto rows = sql("SELECT * FROM replays_recordings WHERE id = ?", {rid});
        return rows.empty() ? json() : rows.front();
    }

    // The replay named in the path, of the caller's session.
    json require(const Request &req) const {
        json session = session_of(req);
        auto rows = sql("SELECT * FROM replays_recordings WHERE id = ? AND session_id = ? AND project_id = ?",
                        {req.param("replay_id"), session.at("session_id"), req.project()});
        if (rows.empty()) throw Error::not_found("replay \"" + req.param("replay_id") + "\" not found");
        return rows.front();
    }

    void start_recording(Request &req, Response &res) {
        StartOptions options = parse_start_options(req.json_body(true));
        json session = session_of(req);
        std::string sid = session.at("session_id").get<std::string>();
        if (session.value("ended", false)) throw Error::not_found("browser session " + sid + " has ended");
        if (session.value("headless", false)) {
            std::vector<Error::Detail> why = {{"invalid_input", "session: headless browsers have no screen to record"}};
            if (options.record_audio)
                why.push_back({"invalid_input", "record_audio: headless browsers have no audio output (muted)"});
            throw Error::bad_request("replays need a headful browser: this session is headless", why);
        }
        std::string rid =
            begin_recording(sid, req.caller().value("org_id", ""), req.project(), options.framerate,
                            static_cast<std::int64_t>(options.max_duration_seconds) * 1000, options.record_audio);
        res.json(render(row_of(rid), req.base_url()));
    }

    // A row, the activity hold and the agent's ffmpeg; nothing of it left when the agent refuses.
    std::string begin_recording(const std::string &sid, const std::string &org, const std::string &project,
                                int framerate, std::int64_t max_duration_ms, bool record_audio) {
        std::string rid = hangar::new_id();
        sql("INSERT INTO replays_recordings (id, session_id, org_id, project_id, started_at, finished_at, "
            "max_duration_ms, framerate, state, size_bytes, record_audio) VALUES (?, ?, ?, ?, ?, NULL, ?, ?, "
            "'recording', NULL, ?)",
            {rid, sid, org, project, hangar::now_ms(), max_duration_ms, framerate, record_audio ? 1 : 0});
        {
            // A recording counts as activity, as on Kernel: the session does not idle out under it.
            std::lock_guard lock(mutex_);
            recording_activity_[rid] = activity(sid);
        }
        auto answer = instance_call(sid, "POST", "/replays/" + rid + "/start",
                                    json{{"framerate", framerate},
                                         {"max_duration_in_seconds", std::max<std::int64_t>(1, max_duration_ms / 1000)},
                                         {"record_audio", record_audio}}
                                        .dump());
        if (answer.status != 200) {
            sql("DELETE FROM replays_recordings WHERE id = ?", {rid});
            std::lock_guard lock(mutex_);
            recording_activity_.erase(rid);
            json err = json::parse(answer.body, nullptr, false);
            std::string msg = err.is_object() ? err.value("message", "") : "";
            // What the instance refused (no audio sink) is the caller's to know as it is.
            if (answer.status == 400) throw Error::bad_request(msg.empty() ? "the recording could not start" : msg);
            throw Error(answer.status == 502 ? 502 : 500, answer.status == 502 ? "upstream_unavailable" : "internal",
                        "the recording could not start" + (msg.empty() ? std::string() : ": " + msg));
        }
        return rid;
    }

    // A forced resize (the browsers plugin): each running recording is finished as one segment,
    // and once the screen has its new size a new one starts with the same settings and what was
    // left of its maximum duration.
    json split_begin(const std::string &sid) {
        json segments = json::array();
        for (const auto &row :
             sql("SELECT * FROM replays_recordings WHERE session_id = ? AND state = 'recording'", {sid})) {
            std::int64_t left = row.at("started_at").get<std::int64_t>() +
                                row.at("max_duration_ms").get<std::int64_t>() - hangar::now_ms();
            finish(row.at("id").get<std::string>());
            if (left < 1000) continue; // it was ending anyway
            segments.push_back({{"org_id", row.value("org_id", "")},
                                {"project_id", row.value("project_id", "")},
                                {"framerate", row.at("framerate")},
                                {"record_audio", row.value("record_audio", 0) != 0},
                                {"max_duration_ms", left}});
        }
        return {{"segments", segments}};
    }

    json split_end(const std::string &sid, const json &segments) {
        json started = json::array();
        for (const auto &seg : segments)
            try {
                started.push_back(begin_recording(
                    sid, seg.value("org_id", ""), seg.value("project_id", ""), seg.value("framerate", 25),
                    seg.value("max_duration_ms", std::int64_t{1000}), seg.value("record_audio", false)));
            } catch (const std::exception &e) {
                warn("browser session " + sid + ": the recording after the resize did not start: " + e.what());
            }
        return {{"replay_ids", started}};
    }

    void list(Request &req, Response &res) {
        json session = session_of(req);
        json out = json::array();
        for (const auto &row :
             sql("SELECT * FROM replays_recordings WHERE session_id = ? AND project_id = ? ORDER BY started_at, id",
                 {session.at("session_id"), req.project()}))
            out.push_back(render(row, req.base_url()));
        res.json(out);
    }

    // The MP4, once finished; the host serves files with single-range support (206, 416).
    void serve_video(const json &row, Response &res) const {
        std::string state = row.value("state", "");
        if (state == "recording")
            throw Error::conflict("the replay is still recording; stop it first (POST .../replays/{replay_id}/stop)");
        auto path = blob_path(blob_key(row.at("id").get<std::string>()));
        if (state != "finished" || !path || !fs::exists(*path))
            throw Error::not_found("the replay has no video: the recording failed");
        res.header("Accept-Ranges", "bytes");
        res.header("Content-Disposition", "inline; filename=\"replay-" + row.at("id").get<std::string>() + ".mp4\"");
        res.file("video/mp4", *path);
    }

    void download(Request &req, Response &res) { serve_video(require(req), res); }

    json row_from_view_token(const std::string &token) const {
        auto claims = token.empty() ? std::nullopt : token_verify(token);
        if (!claims || !claims->is_object() || claims->value("typ", "") != kViewTokenType || !claims->contains("rid") ||
            !claims->at("rid").is_string())
            throw Error::unauthorized("invalid or expired replay link");
        json row = row_of(claims->at("rid").get<std::string>());
        if (row.is_null()) throw Error::not_found("replay not found");
        return row;
    }

    void view_page(Request &req, Response &res) {
        json row = row_from_view_token(req.param("token"));
        std::string title = "Replay " + row.at("id").get<std::string>();
        std::string video = html_escape(req.param("token")) + "/video.mp4";
        std::string body;
        if (row.value("state", "") == "recording")
            body = "<p>This replay is still recording. Reload the page once it has stopped.</p>";
        else if (row.value("state", "") != "finished")
            body = "<p>This replay has no video: the recording failed.</p>";
        else
            body = "<video controls autoplay muted playsinline src=\"" + video + "\"></video>";
        // No script at all; the dashboard frames the page (as may the origins the operator lists).
        hangar::web::PagePolicy policy;
        policy.connect_src = "";
        policy.media_src = "'self'";
        policy.form_action = "";
        policy.frame_ancestors = config("frame_ancestors", "'self'");
        hangar::web::html(
            res,
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(title) +
                "</title><link rel=\"icon\" href=\"data:,\"><style nonce=\"{{nonce}}\">html,body{margin:0;height:100%;"
                "background:#202124;color:#e8eaed;font:16px system-ui,sans-serif;display:flex;"
                "align-items:center;justify-content:center}video{max-width:100%;max-height:100%}</style>"
                "</head><body>" +
                body + "</body></html>",
            policy);
    }

    void view_video(Request &req, Response &res) {
        // The page refers to it relatively: /replays/view/{token}/video.mp4
        serve_video(row_from_view_token(req.param("token")), res);
    }

    // Ends one recording (idempotent): the agent stops ffmpeg, the file moves into the blobs.
    void finish(const std::string &rid) {
        std::lock_guard finishing(finish_mutex_);
        json row = row_of(rid);
        if (row.is_null() || row.value("state", "") != "recording") return;
        std::string sid = row.at("session_id").get<std::string>();
        std::string state = "failed";
        std::int64_t finished = hangar::now_ms();
        std::optional<std::int64_t> size;
        auto answer = instance_call(sid, "POST", "/replays/" + rid + "/stop", "", 90'000);
        json result = json::parse(answer.body, nullptr, false);
        if (answer.status == 200 && result.is_object() && result.value("state", "") == "finished") {
            finished = result.value("finished_at_ms", finished);
            auto dir = instance_dir(sid);
            auto dst = blob_path(blob_key(rid));
            if (dir && dst) {
                std::error_code ec;
                if (hangar::beneath::move_out(*dir, "recordings/" + rid + ".mp4", *dst)) {
                    state = "finished";
                    size = static_cast<std::int64_t>(fs::file_size(*dst, ec));
                    try {
                        blob_commit(blob_key(rid)); // so that every node serves it
                    } catch (const Error &e) {
                        warn("replay " + rid + ": the video stays on this node only: " + e.what());
                    }
                } else {
                    warn("replay " + rid + ": the video could not be kept (not a plain file in the instance)");
                }
            }
        } else {
            warn("replay " + rid + ": the recording did not finish (" + std::to_string(answer.status) + " " +
                 answer.body.substr(0, 200) + ")");
        }
        sql("UPDATE replays_recordings SET state = ?, finished_at = ?, size_bytes = ? WHERE id = ?",
            {state, finished, size ? json(*size) : json(nullptr), rid});
        std::lock_guard lock(mutex_);
        recording_activity_.erase(rid);
    }

    void finish_session(const std::string &sid) {
        for (const auto &row :
             sql("SELECT id FROM replays_recordings WHERE session_id = ? AND state = 'recording'", {sid}))
            finish(row.at("id").get<std::string>());
    }

    // Recordings that ended in the instance (the feed reached the maximum duration, or ffmpeg
    // died with its display) and those whose instance is gone are finished here, so the video
    // is kept and the session's activity released without waiting for a stop.
    void finish_ended() {
        std::map<std::string, std::vector<json>> by_session;
        for (auto &row : sql("SELECT id, session_id, started_at, max_duration_ms FROM replays_recordings WHERE state = "
                             "'recording'"))
            by_session[row.at("session_id").get<std::string>()].push_back(std::move(row));
        for (const auto &[sid, rows] : by_session) {
            auto answer = instance_call(sid, "GET", "/replays/ended", "", 5000);
            json ended = json::parse(answer.body, nullptr, false);
            std::set<std::string> gone;
            if (answer.status == 200 && ended.is_object())
                for (const auto &rid : ended.value("ended", json::array()))
                    if (rid.is_string()) gone.insert(rid.get<std::string>());
            for (const auto &row : rows) {
                std::string rid = row.at("id").get<std::string>();
                bool overdue =
                    row.at("started_at").get<std::int64_t>() + row.at("max_duration_ms").get<std::int64_t>() + 5000 <
                    hangar::now_ms();
                if (gone.count(rid) || answer.status == 502 || answer.status == 404 || overdue) finish(rid);
            }
        }
    }

    std::uint32_t view_ttl_ = 7 * 24 * 3600;
    std::mutex finish_mutex_; // one finish at a time: stop, the timer and session end may race
    std::mutex mutex_;
    std::map<std::string, std::unique_ptr<Activity>> recording_activity_;

    // ---- instance role -------------------------------------------------------------------------

    // One recording in the agent. Its own mutex: finishing one (ffmpeg rewriting a long file)
    // must not hold up the others or the server's questions.
    struct Recording {
        std::mutex mutex;
        proc::Child ffmpeg;
        std::unique_ptr<ScreenFeed> feed; // ffmpeg's input
        std::string part;                 // being written
        std::string done;                 // after it finished
        std::optional<std::int64_t> finished_ms;
        bool ok = false;
    };

    void start_instance() override {
        auto run_dir = instance_run_dir();
        recordings_dir_ = run_dir + "/recordings";
        logs_dir_ = run_dir + "/logs";
        route("POST", "/replays/{rid}/start", [this](Request &q, Response &r) { agent_start(q, r); });
        route("GET", "/replays/ended", [this](Request &, Response &r) {
            std::lock_guard lock(agent_mutex_);
            json ended = json::array();
            for (auto &[rid, rec] : recordings_) {
                std::unique_lock busy(rec->mutex, std::try_to_lock); // being stopped: not ended by itself
                if (busy && !rec->finished_ms && !rec->ffmpeg.running()) ended.push_back(rid);
            }
            r.json({{"ended", ended}});
        });
        route("POST", "/replays/{rid}/stop", [this](Request &q, Response &r) { r.json(agent_stop(q.param("rid"))); });
    }

    void stop_instance() override {
        // The agent is shutting down: end every recording properly (the server moves the files
        // out before it stops an instance; this covers a shutdown it did not announce).
        std::lock_guard lock(agent_mutex_);
        for (auto &[rid, rec] : recordings_) {
            std::lock_guard one(rec->mutex);
            close_recording(*rec);
        }
    }

    void agent_start(Request &req, Response &res) {
        std::string rid = req.param("rid");
        if (!hangar::looks_like_id(rid)) throw Error::bad_request("invalid replay id");
        json body = req.json_body(false);
        StartOptions options = parse_start_options(body);
        json st = call("browsers.chromium", json::object());
        auto display = st.value("display", json());
        if (!display.is_string()) throw Error::bad_request("replays need a headful browser");
        Capture capture;
        capture.display = display.get<std::string>();
        capture.width = st.at("viewport").at("width").get<int>();
        capture.height = st.at("viewport").at("height").get<int>();
        if (options.record_audio) {
            auto audio = st.value("audio", json());
            if (!audio.is_object())
                throw Error::bad_request("record_audio: this browser has no audio sink (PulseAudio is not installed "
                                         "or did not start; see logs/pulseaudio.log in the instance logs)");
            capture.audio_server = audio.value("server", "");
            capture.audio_source = audio.value("source", "");
        }

        std::lock_guard lock(agent_mutex_);
        if (recordings_.count(rid)) throw Error::conflict("replay " + rid + " is already recording");
        proc::make_dirs(recordings_dir_);
        auto recording = std::make_shared<Recording>();
        Recording &rec = *recording;
        rec.part = recordings_dir_ + "/" + rid + ".part.mp4";
        rec.done = recordings_dir_ + "/" + rid + ".mp4";
        proc::Fd log = proc::open_log(logs_dir_ + "/ffmpeg-" + rid + ".log");
        proc::Pipe frames = proc::make_pipe();
        constexpr int kFramesFd = 3;
        proc::Child::Spec spec;
        spec.path = "/usr/bin/ffmpeg";
        // Frame 0 is due now, on both clocks: the sound is placed on the feed's timeline by it.
        const auto feed_start = std::chrono::steady_clock::now();
        capture.start_wallclock_us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        spec.args = ffmpeg_args(capture, options, rec.part, kFramesFd);
        spec.env = proc::environment_with(ffmpeg_environment_overrides());
        spec.stdout_fd = log.get();
        spec.stderr_fd = log.get();
        spec.extra_fds = {{frames.read.get(), kFramesFd}};
        try {
            rec.ffmpeg = proc::Child::spawn(spec);
            frames.read.reset();
            rec.feed = std::make_unique<ScreenFeed>(capture.display, capture.width, capture.height, options.framerate,
                                                    std::chrono::seconds(options.max_duration_seconds),
                                                    std::move(frames.write), feed_start);
        } catch (const std::exception &e) {
            rec.ffmpeg.stop();
            throw Error::internal(std::string("could not start recording: ") + e.what());
        }
        // The recording has begun once ffmpeg takes frames (it opens its inputs first, a second
        // or more under load, the sink too): answering earlier would let the client change the
        // page before the feed can see it. ffmpeg that cannot start ends: say so now, not at stop.
        if (!rec.feed->wait_flowing(kFlowingTimeout))
            warn("replay " + rid + ": ffmpeg took no frames within " + std::to_string(kFlowingTimeout.count()) + " ms");
        if (!rec.ffmpeg.running()) {
            rec.ffmpeg.stop();
            throw Error::internal("ffmpeg ended at once (" + rec.ffmpeg.exit_description() + "); see ffmpeg-" + rid +
                                  ".log in the instance logs");
        }
        recordings_.emplace(rid, std::move(recording));
        res.json({{"replay_id", rid}, {"started_at_ms", hangar::now_ms()}});
    }

    // Stops ffmpeg (if it still runs) and keeps the file when it is a finished MP4.
    static void close_recording(Recording &rec) {
        if (rec.finished_ms) return;
        bool ended_by_itself = !rec.ffmpeg.running();
        // The end of its input first: ffmpeg encodes what it has and finishes the file by itself.
        if (rec.feed) rec.feed->stop();
        for (auto until = std::chrono::steady_clock::now() + kFinishGrace;
             rec.ffmpeg.running() && std::chrono::steady_clock::now() < until;)
            std::this_thread::sleep_for(10ms);
        rec.ffmpeg.stop(kFinishGrace); // SIGTERM (ffmpeg still finishes the file), then SIGKILL
        rec.finished_ms = hangar::now_ms();
        if (ended_by_itself) {
            // The maximum duration ended it: the file's last write is when the recording ended.
            struct stat st {};
            if (::stat(rec.part.c_str(), &st) == 0)
                rec.finished_ms = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
        }
        std::error_code ec;
        if (fs::exists(rec.part, ec) && fs::file_size(rec.part, ec) > 0) {
            fs::rename(rec.part, rec.done, ec);
            rec.ok = !ec;
        }
    }

    json agent_stop(const std::string &rid) {
        std::shared_ptr<Recording> rec;
        {
            std::lock_guard lock(agent_mutex_);
            auto it = recordings_.find(rid);
            if (it == recordings_.end()) throw Error::not_found("replay " + rid + " is not recording here");
            rec = it->second;
        }
        std::lock_guard one(rec->mutex);
        close_recording(*rec);
        return {{"replay_id", rid}, {"state", rec->ok ? "finished" : "failed"}, {"finished_at_ms", *rec->finished_ms}};
    }

    std::string recordings_dir_;
    std::string logs_dir_;
    std::mutex agent_mutex_;
    std::map<std::string, std::shared_ptr<Recording>> recordings_;
};

} // namespace

HANGAR_PLUGIN(ReplaysPlugin, "replays", "0.1.0", "browsers", migrations, sizeof(migrations) / sizeof(migrations[0]))
