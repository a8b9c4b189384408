// extensions: Kernel API §3.16 [84]-[89] (the library), §3.4 [20] (upload into a running
// browser) and the `extensions` option of POST /browsers (the `extensions.resolve` service).
//
// Server role: zips are checked here in full before anything is stored or installed (the shared
// hangar/zip.hpp: entry count, uncompressed size, no escaping or linked entries, and a
// manifest.json at the root or in the one top-level folder).
// Instance role: the browser's extension folder (/home/kernel/extensions/<name>). The zips a
// create asked for arrive as instance inputs and are unpacked when the agent starts; an upload
// into a running browser is PUT /extensions/{name} on the agent, then a Chromium restart. The
// browsers plugin's agent asks the `extensions.installed` service which folders to load each
// time it launches Chromium, so the area lives here whole and browsers knows no zip format.
#include "extension_install.hpp"

#include <hangar/multipart.hpp>
#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>
#include <hangar/secrets.hpp>
#include <hangar/zip.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <regex>
#include <set>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using hangar::Validation;
using hangar::secrets::sha256_hex; // Extension.checksum: the exact uploaded bytes

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE extensions_extensions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    size_bytes BIGINT NOT NULL,
    checksum TEXT
);
CREATE UNIQUE INDEX extensions_extensions_name ON extensions_extensions (project_id, name) WHERE name IS NOT NULL;
)sql"},
};

class ExtensionsPlugin final : public hangar::Plugin {
public:
    void start_server() override {
        limits_.max_entries = static_cast<std::size_t>(config_int("max_zip_entries", 5000));
        limits_.max_bytes = static_cast<std::uint64_t>(config_int("max_unpacked_bytes", 128ll << 20));
        max_zip_bytes_ = static_cast<std::size_t>(config_int("max_zip_bytes", 32ll << 20));
        max_total_bytes_ = static_cast<std::size_t>(config_int("max_upload_bytes", 64ll << 20));
        store_timeout_ms_ = static_cast<int>(config_int("chrome_store_timeout_ms", 3000));

        route("POST", "/extensions", [this](Request &q, Response &r) { upload(q, r); });
        route("GET", "/extensions", [this](Request &q, Response &r) { list(q, r); });
        route("GET", "/extensions/from_chrome_store", [this](Request &q, Response &r) { from_store(q, r); });
        route("GET", "/extensions/{id_or_name}", [this](Request &q, Response &r) {
            json row = require(q.project(), q.param("id_or_name"));
            auto path = blob_path(row.at("id").get<std::string>() + ".zip");
            r.header("Content-Disposition", "attachment; filename=\"" + display_name(row) + ".zip\"");
            r.file("application/zip", path.value_or(""));
        });
        route("GET", "/extensions/{id_or_name}/metadata",
              [this](Request &q, Response &r) { r.json(render(require(q.project(), q.param("id_or_name")))); });
        route("DELETE", "/extensions/{id_or_name}", [this](Request &q, Response &r) {
            json row = require(q.project(), q.param("id_or_name"));
            std::string id = row.at("id").get<std::string>();
            sql("DELETE FROM extensions_extensions WHERE id = ?", {id});
            blob_delete(id + ".zip");
            r.no_content();
        });
        route("POST", "/browsers/{id}/extensions", [this](Request &q, Response &r) { load_into_browser(q, r); });

        // For POST /browsers {extensions: [{id}|{name}]}: the zips' host paths, in order.
        service("extensions.resolve", [this](const json &in) {
            std::string project = in.value("project_id", "");
            json out = json::array();
            std::set<std::string> names;
            for (const auto &sel : in.value("extensions", json::array())) {
                std::string key = sel.contains("id") ? sel.value("id", "") : sel.value("name", "");
                json row = require(project, key);
                std::string id = row.at("id").get<std::string>();
                std::string name = display_name(row);
                if (!names.insert(name).second) continue;
                sql("UPDATE extensions_extensions SET last_used_at = ? WHERE id = ?", {hangar::now_ms(), id});
                out.push_back({{"id", id}, {"name", name}, {"path", blob_path(id + ".zip").value_or("")}});
            }
            return out;
        });
    }

private:
    static std::string display_name(const json &row) {
        return row.value("name", json()).is_string() ? row.at("name").get<std::string>()
                                                     : row.at("id").get<std::string>();
    }

    json require(const std::string &project, const std::string &id_or_name) const {
        auto row = hangar::find_by_id_or_name([this](const std::string &q, const json &p) { return sql(q, p); },
                                              "extensions_extensions", project, id_or_name);
        if (!row) throw Error::not_found("extension \"" + id_or_name + "\" not found");
        return *row;
    }

    static json render(const json &row) {
        json out = {{"id", row.at("id")},
                    {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())},
                    {"size_bytes", row.at("size_bytes")},
                    {"name", row.value("name", json())},
                    {"checksum", row.value("checksum", json())}};
        auto last = row.value("last_used_at", json());
        out["last_used_at"] = last.is_number() ? json(hangar::rfc3339(last.get<std::int64_t>())) : json();
        return out;
    }

    // Problems with one zip, each a detail under `field`: not a zip, over a limit, no manifest.
    void check_zip(std::string_view zip, const std::string &field, Validation &v) const {
        if (zip.size() > max_zip_bytes_) {
            v.fail(field, "is " + std::to_string(zip.size()) + " bytes, over the per-zip limit of " +
                              std::to_string(max_zip_bytes_) + " bytes");
            return;
        }
        try {
            hangar::extensions::extension_root(zip, limits_, field);
        } catch (const Error &e) {
            for (const auto &d : e.details())
                v.fail(field,
                       d.message.substr(d.message.find(": ") == std::string::npos ? 0 : d.message.find(": ") + 2));
            if (e.details().empty()) v.fail(field, e.what());
        }
    }

    void upload(Request &req, Response &res) {
        std::string project = req.project();
        req.require_entitlement("extensions");
        auto parts = hangar::parse_multipart(req);
        Validation v;
        const auto *file = hangar::find_part(parts, "file");
        std::optional<std::string> name;
        if (const auto *n = hangar::find_part(parts, "name"); n && !n->data.empty()) {
            name = std::string(n->data);
            if (!hangar::valid_resource_name(*name))
                v.fail("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        }
        if (!file)
            v.fail("file", "is required (a zip of an unpacked extension)");
        else
            check_zip(file->data, "file", v);
        v.throw_if_failed("invalid extension");
        std::lock_guard lock(m_);
        if (name && !sql("SELECT id FROM extensions_extensions WHERE project_id = ? AND LOWER(name) = LOWER(?)",
                         {project, *name})
                         .empty())
            throw Error::conflict("an extension named \"" + *name + "\" already exists in this project");
        std::string id = hangar::new_id();
        blob_put(id + ".zip", file->data);
        sql("INSERT INTO extensions_extensions (id, org_id, project_id, name, created_at, size_bytes, checksum) VALUES "
            "(?, ?, ?, ?, ?, ?, ?)",
            {id, req.caller().value("org_id", ""), project, name ? json(*name) : json(), hangar::now_ms(),
             file->data.size(), sha256_hex(file->data)});
        res.json(render(require(project, id)));
    }

    void list(Request &req, Response &res) {
        std::string project = req.project();
        Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE project_id = ?";
        json params = json::array({project});
        if (auto n = req.query("name"); n && !n->empty()) {
            where += " AND LOWER(name) = LOWER(?)";
            params.push_back(*n);
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(COALESCE(name, '')), LOWER(?)) > 0 OR id = ?)";
            params.push_back(*q);
            params.push_back(*q);
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM extensions_extensions" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [this](const json &row) { return render(row); });
    }

    // The Web Store is on the internet; without it the answer must come quickly and say so.
    void from_store(Request &req, Response &res) {
        (void)res;
        auto url = req.query("url").value_or("");
        if (url.empty()) throw Error::invalid("url", "is required (a Chrome Web Store URL)");
        // A store page names the extension by its 32-letter id (a-p); anything else is not one.
        static const std::regex store_url(
            R"(^https://(chromewebstore\.google\.com|chrome\.google\.com/webstore)/(.*/)?[a-p]{32}([/?#].*)?$)");
        if (!std::regex_match(url, store_url))
            throw Error::invalid("url", "must be a Chrome Web Store URL naming an extension id");
        if (auto os = req.query("os"); os && *os != "win" && *os != "mac" && *os != "linux")
            throw Error::invalid("os", "must be win, mac or linux");
        if (!reachable("clients2.google.com", "443", store_timeout_ms_))
            throw Error(502, "upstream_unavailable",
                        "the Chrome Web Store cannot be reached from this server (no route to clients2.google.com); "
                        "download the extension elsewhere and upload its unpacked zip with POST /extensions");
        throw Error::not_implemented("repackaging Chrome Web Store downloads is not implemented in Hangar yet; upload "
                                     "the unpacked extension as a zip with POST /extensions");
    }

    static bool reachable(const char *host, const char *port, int timeout_ms) {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo *res = nullptr;
        if (::getaddrinfo(host, port, &hints, &res) != 0 || !res) return false;
        std::unique_ptr<addrinfo, void (*)(addrinfo *)> guard(res, ::freeaddrinfo);
        int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return false;
        struct Close {
            int fd;
            ~Close() { ::close(fd); }
        } closer{fd};
        if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) return true;
        if (errno != EINPROGRESS) return false;
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, timeout_ms) != 1) return false;
        int err = 0;
        socklen_t len = sizeof err;
        return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }

    void load_into_browser(Request &req, Response &res) {
        req.require_entitlement("extensions");
        auto parts = hangar::parse_multipart(req);
        // extensions[<i>][name] / extensions[<i>][zip_file] (or the Go SDK's forms), in index order.
        std::vector<std::pair<const hangar::Part *, const hangar::Part *>> items;
        for (const auto &e : hangar::indexed_parts(parts, "extensions")) {
            auto field = [&](const char *k) { return e.fields.count(k) ? e.fields.at(k) : nullptr; };
            items.emplace_back(field("name"), field("zip_file"));
        }
        Validation v;
        if (items.empty()) v.fail("extensions", "is required: parts extensions[i][name] and extensions[i][zip_file]");
        std::size_t total = 0;
        std::set<std::string> seen;
        for (std::size_t i = 0; i < items.size(); ++i) {
            const auto &item = items[i];
            std::string at = "extensions[" + std::to_string(i) + "]";
            if (!item.first) v.fail(at + ".name", "is required");
            if (!item.second) v.fail(at + ".zip_file", "is required");
            if (item.first) {
                std::string name(item.first->data);
                if (!hangar::valid_resource_name(name) || name.front() == '.')
                    v.fail(at + ".name", "must match ^[a-zA-Z0-9._-]{1,255}$ (and not start with '.')");
                else if (!seen.insert(name).second)
                    v.fail(at + ".name", "repeats the name of another extension in this upload");
            }
            if (item.second) {
                total += item.second->data.size();
                check_zip(item.second->data, at + ".zip_file", v);
            }
        }
        if (total > max_total_bytes_)
            v.fail("extensions", "total upload of " + std::to_string(total) + " bytes is over the limit of " +
                                     std::to_string(max_total_bytes_) + " bytes");
        v.throw_if_failed("invalid extensions: nothing was installed");

        json caller = req.caller();
        json session =
            call("browsers.session", {{"project_id", caller.value("project_id", "")}, {"id", req.param("id")}});
        std::string sid = session.value("session_id", "");
        auto busy = activity(sid);
        for (const auto &item : items) {
            auto r =
                instance_call(sid, "PUT", "/extensions/" + std::string(item.first->data), item.second->data, 60000);
            if (r.status != 204)
                throw Error(500, "internal",
                            "installing extension " + std::string(item.first->data) + " failed in the browser (HTTP " +
                                std::to_string(r.status) + "): " + r.body.substr(0, 300));
        }
        // Chromium loads everything in the extensions folder when it starts; answer once it is back.
        auto r = instance_call(sid, "POST", "/chromium/restart", "{}", 60000);
        if (r.status != 200)
            throw Error(500, "internal",
                        "Chromium did not come back after loading the extensions: " + r.body.substr(0, 300));
        res.status(201);
        res.body("application/json", "");
    }

    void start_instance() override {
        std::string run_dir = instance_run_dir();
        dir_ = config("extensions_dir", instance_home_dir() + "/extensions");
        // Extensions a create asked for arrive as inputs ("extension-<name>.zip"); they are in
        // place before the browsers plugin (which depends on us) launches Chromium.
        std::error_code ec;
        for (const auto &entry : std::filesystem::directory_iterator(run_dir + "/inputs", ec)) {
            std::string file = entry.path().filename().string();
            if (!file.starts_with("extension-") || !file.ends_with(".zip")) continue;
            std::ifstream in(entry.path(), std::ios::binary);
            std::string zip((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            hangar::extensions::install_extension(zip, dir_, file.substr(10, file.size() - 14), limits_);
            std::filesystem::remove(entry.path(), ec);
        }

        // One extension (its zip as the body) into <dir>/<name>; the server restarts Chromium
        // once every extension of an upload is in place.
        route("PUT", "/extensions/{name}", [this](Request &req, Response &res) {
            std::string name = req.param("name");
            if (!hangar::valid_resource_name(name) || name.front() == '.')
                throw Error::invalid("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
            hangar::extensions::install_extension(req.body(), dir_, name, limits_);
            res.no_content();
        });
        // The hook the browsers plugin's agent calls at every Chromium launch.
        service("extensions.installed", [this](const json &) {
            return json{{"paths", hangar::extensions::installed_extensions(dir_)}};
        });
    }

    hangar::ZipLimits limits_;
    std::size_t max_zip_bytes_ = 32u << 20;
    std::size_t max_total_bytes_ = 64u << 20;
    int store_timeout_ms_ = 3000;
    std::string dir_; // instance role: where extensions are unpacked
    std::mutex m_;
};

} // namespace

// No dependency on browsers: its agent calls extensions.installed while it starts, so browsers
// depends on "extensions?" and extensions must start first (browsers.session is only called from
// handlers, when both run).
HANGAR_PLUGIN(ExtensionsPlugin, "extensions", "0.1.0", nullptr, migrations, sizeof(migrations) / sizeof(migrations[0]))
