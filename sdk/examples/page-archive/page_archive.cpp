// page-archive: the Hangar SDK's worked example of a plugin with both halves.
//
//   POST   /browsers/{id}/archive                    save the session's current page as MHTML
//   GET    /browsers/{id}/archives                   the session's archives, newest first (paged)
//   GET    /browsers/{id}/archives/{archive_id}      the MHTML file
//   DELETE /browsers/{id}/archives/{archive_id}      204
//
// Server role (`hangar serve`): checks the caller's session through the browsers plugin's
// `browsers.session` service, asks the session's agent for a snapshot, keeps the bytes in this
// plugin's blob store and a row in its own table (the migration below). Archives outlive the
// session, like replays do.
// Instance role (`hangar agent`, inside the browser's sandbox): POST /page-archive/capture asks
// the browsers plugin's `browsers.chromium` service where Chromium's DevTools port is and runs
// Page.captureSnapshot on the first page through <hangar/cdp.hpp>.
//
// It builds out of tree against the installed SDK alone (README.md) and is the running example
// of sdk/README.md.
#include <hangar/cdp.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

// Runs once per database, before start(); the host records that it ran. Table names start with
// the plugin's name so that plugins never collide.
const hangar_migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE page_archive_archives (
    id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    url TEXT NOT NULL,
    title TEXT NOT NULL,
    size_bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX page_archive_archives_session ON page_archive_archives (project_id, session_id, created_at);
)sql"},
};

class PageArchivePlugin final : public hangar::Plugin {
public:
    // ---- server role ------------------------------------------------------------------------

    void start_server() override {
        read_config();

        route("POST", "/browsers/{id}/archive", [this](Request &req, Response &res) { archive(req, res); });
        route("GET", "/browsers/{id}/archives", [this](Request &req, Response &res) { list(req, res); });
        route("GET", "/browsers/{id}/archives/{archive_id}", [this](Request &req, Response &res) {
            json row = require(req);
            auto path = blob_path(blob_key(row));
            if (!path) throw Error::not_found("archive " + req.param("archive_id") + " has no file");
            res.header("Content-Disposition", "attachment; filename=\"" + row.at("id").get<std::string>() + ".mhtml\"");
            res.file("multipart/related", *path);
        });
        route("DELETE", "/browsers/{id}/archives/{archive_id}", [this](Request &req, Response &res) {
            json row = require(req);
            sql("DELETE FROM page_archive_archives WHERE id = ?", json::array({row.at("id")}));
            blob_delete(blob_key(row));
            res.no_content();
        });
    }

    // ---- instance role ----------------------------------------------------------------------

    void start_instance() override {
        read_config();
        // Agent routes are reachable only by the server (through instance_call or a relay), so
        // they carry no authentication of their own.
        route("POST", "/page-archive/capture", [this](Request &, Response &res) { res.json(capture()); });
    }

private:
    // etc/plugins.d/page-archive.ini, read by both halves (the agent loads the same files).
    void read_config() {
        max_bytes_ = static_cast<std::size_t>(config_int("max_bytes", 64ll << 20));
        capture_timeout_ms_ = static_cast<std::uint32_t>(config_int("capture_timeout_ms", 30000));
    }

    // The session, checked against the caller's project by the browsers plugin (404 otherwise).
    // `ended` sessions are found too when `include_deleted`: their archives are still there.
    json session(const Request &req, bool include_deleted) const {
        return call("browsers.session",
                    {{"project_id", req.project()}, {"id", req.param("id")}, {"include_deleted", include_deleted}});
    }

    void archive(Request &req, Response &res) {
        json s = session(req, false);
        std::string sid = s.at("session_id").get<std::string>();
        // The capture is activity: the session's idle timeout does not run out under it.
        auto busy = activity(sid);
        auto answer = instance_call(sid, "POST", "/page-archive/capture", "", capture_timeout_ms_);
        if (answer.status != 200) {
            // The agent answered with a wire error (or 502 when it could not be reached): pass
            // its code and message on rather than inventing our own.
            json err = json::parse(answer.body, nullptr, false);
            throw Error(answer.status, err.is_object() ? err.value("code", "internal") : "upstream_unavailable",
                        err.is_object() ? err.value("message", "the capture failed") : "the browser did not answer");
        }
        json snap = json::parse(answer.body);
        const auto &mhtml = snap.at("mhtml").get_ref<const std::string &>();
        if (mhtml.size() > max_bytes_)
            throw Error(413, "payload_too_large",
                        "the page's snapshot is " + std::to_string(mhtml.size()) + " bytes, over max_bytes (" +
                            std::to_string(max_bytes_) + ")");

        json row = {{"id", hangar::new_id()},        {"project_id", req.project()},      {"session_id", sid},
                    {"url", snap.value("url", "")},  {"title", snap.value("title", "")}, {"size_bytes", mhtml.size()},
                    {"created_at", hangar::now_ms()}};
        // Statement parameters go as a JSON array (json::array: a one-element brace list would not
        // be one). The file first, then the row: a failed insert removes the file, so a listed archive
        // always has its bytes and nothing is left half-written.
        blob_put(blob_key(row), mhtml);
        try {
            sql("INSERT INTO page_archive_archives (id, project_id, session_id, url, title, size_bytes, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                json::array({row["id"], row["project_id"], row["session_id"], row["url"], row["title"],
                             row["size_bytes"], row["created_at"]}));
        } catch (...) {
            blob_delete(blob_key(row));
            throw;
        }
        res.json(render(row), 201);
    }

    void list(Request &req, Response &res) {
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string sid = session(req, true).at("session_id").get<std::string>();
        // One row more than asked says whether there is another page.
        json rows = sql("SELECT * FROM page_archive_archives WHERE project_id = ? AND session_id = ? "
                        "ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
                        json::array({req.project(), sid, paging.limit + 1, paging.offset}));
        bool more = rows.size() > static_cast<std::size_t>(paging.limit);
        json items = json::array();
        for (std::size_t i = 0; i < rows.size() && i < static_cast<std::size_t>(paging.limit); ++i)
            items.push_back(render(rows[i]));
        res.page(items, paging.offset, more);
    }

    json require(const Request &req) const {
        std::string sid = session(req, true).at("session_id").get<std::string>();
        json rows = sql("SELECT * FROM page_archive_archives WHERE project_id = ? AND session_id = ? AND id = ?",
                        json::array({req.project(), sid, req.param("archive_id")}));
        if (rows.empty()) throw Error::not_found("archive " + req.param("archive_id") + " not found");
        return rows[0];
    }

    static std::string blob_key(const json &row) { return row.at("id").get<std::string>() + ".mhtml"; }

    static json render(const json &row) {
        return {{"id", row.at("id")},
                {"session_id", row.at("session_id")},
                {"url", row.at("url")},
                {"title", row.at("title")},
                {"size_bytes", row.at("size_bytes")},
                {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())}};
    }

    // In the agent: {url, title, mhtml} of the first page.
    json capture() const {
        json chromium = call("browsers.chromium", json::object());
        if (!chromium.value("port", json()).is_number())
            throw Error::conflict("Chromium is not running in this browser session");
        int port = chromium.at("port").get<int>();
        try {
            hangar::cdp::Connection page(port, hangar::cdp::first_page_path(port));
            auto timeout = std::chrono::milliseconds(capture_timeout_ms_);
            // A page still loading would be saved half-built: wait for its load event first.
            json where = page.call("Runtime.evaluate",
                                   {{"expression", R"js(new Promise((done) => {
                                       const now = () => done({url: location.href, title: document.title});
                                       if (document.readyState === 'complete') now();
                                       else addEventListener('load', now, {once: true});
                                   }))js"},
                                    {"awaitPromise", true},
                                    {"returnByValue", true}},
                                   {}, timeout);
            json snapshot = page.call("Page.captureSnapshot", {{"format", "mhtml"}}, {}, timeout);
            json value = where.value("result", json::object()).value("value", json::object());
            return {{"url", value.value("url", "")},
                    {"title", value.value("title", "")},
                    {"mhtml", snapshot.value("data", "")}};
        } catch (const hangar::cdp::Failure &e) {
            throw Error(502, "upstream_unavailable", std::string("Chromium could not save the page: ") + e.what());
        }
    }

    std::size_t max_bytes_ = 64u << 20;
    std::uint32_t capture_timeout_ms_ = 30000;
};

} // namespace

// Depends on browsers: its services (browsers.session on the server, browsers.chromium in the
// agent) are called from our handlers, and it must start first and stop last.
HANGAR_PLUGIN(PageArchivePlugin, "page-archive", "1.0.0", "browsers", kMigrations,
              sizeof(kMigrations) / sizeof(kMigrations[0]))
