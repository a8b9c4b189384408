// profiles: Kernel API §3.13 (endpoints [63]-[68]) and the profile half of browser sessions.
//
// A profile is a row (id, name, times) plus, once a session saved into it, an archive blob
// (Chromium's user-data folder as tar + zstd, written by the browser's agent). The browsers
// plugin takes a lease through the services below when a session starts on a profile (or has
// one attached) and gives it back when the session ends; a lease with save_changes first asks the
// session's agent for its state and replaces the archive atomically (last session to end wins).
#include "tar_bounds.hpp"

#include <hangar/plugin.hpp>
#include <hangar/resource.hpp>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;

const hangar_migration migrations[] = {
    {1, R"sql(
CREATE TABLE profiles_profiles (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    project_id TEXT NOT NULL,
    name TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT,
    last_used_at BIGINT,
    saved INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX profiles_profiles_name ON profiles_profiles (project_id, name) WHERE name IS NOT NULL;
CREATE INDEX profiles_profiles_project ON profiles_profiles (project_id, created_at);
)sql"},
    // Leases as every node sees them (nodes of one store): a profile in use on another node is
    // not deleted either. Each node keeps its own in memory too; these rows mirror them.
    {2, R"sql(
CREATE TABLE profiles_leases (
    session_id TEXT PRIMARY KEY,
    profile_id TEXT NOT NULL,
    node TEXT NOT NULL
);
CREATE INDEX profiles_leases_profile ON profiles_leases (profile_id);
)sql"},
    // What another node must know to wait for a DELETE answered before its session ended there.
    {3, R"sql(
ALTER TABLE profiles_leases ADD COLUMN save_changes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE profiles_leases ADD COLUMN ending INTEGER NOT NULL DEFAULT 0;
)sql"},
};

std::string archive_key(const std::string &id) {
    return id + ".tar.zst";
}

json render(const json &row) {
    json out = {{"id", row.at("id")}, {"created_at", hangar::rfc3339(row.at("created_at").get<std::int64_t>())}};
    out["name"] = row.value("name", json());
    for (const char *k : {"updated_at", "last_used_at"})
        if (auto it = row.find(k); it != row.end() && it->is_number())
            out[k] = hangar::rfc3339(it->get<std::int64_t>());
    return out;
}

class ProfilesPlugin final : public hangar::Plugin {
public:
    void start() override {
        if (role() != HANGAR_ROLE_SERVER) return; // sessions' agents archive profiles themselves
        tar_limits_.max_bytes = static_cast<std::uint64_t>(
            std::max<std::int64_t>(config_int("tar_max_bytes", static_cast<std::int64_t>(tar_limits_.max_bytes)), 1));
        tar_limits_.max_entries = static_cast<std::uint64_t>(std::max<std::int64_t>(
            config_int("tar_max_entries", static_cast<std::int64_t>(tar_limits_.max_entries)), 1));
        tar_dir_ = config("server.data_dir", "/var/lib/hangar") + "/tmp/profiles-tar";
        std::filesystem::create_directories(tar_dir_);
        // The host has the file open once the answer started: a minute later it can go.
        every(60'000, [this] { sweep_tars(std::chrono::minutes(1)); });
        // This node's leases went with its previous run (the browsers plugin takes again those of
        // the sessions it adopts).
        sql("DELETE FROM profiles_leases WHERE node = ?", {node_name()});
        route("POST", "/profiles", [this](Request &q, Response &r) { create(q, r); });
        route("GET", "/profiles", [this](Request &q, Response &r) { list(q, r); });
        route("GET", "/profiles/{id_or_name}",
              [this](Request &q, Response &r) { r.json(render(require_saved(q.project(), q.param("id_or_name")))); });
        route("PATCH", "/profiles/{id_or_name}", [this](Request &q, Response &r) { rename(q, r); });
        route("DELETE", "/profiles/{id_or_name}", [this](Request &q, Response &r) { remove(q, r); });
        route("GET", "/profiles/{id_or_name}/download", [this](Request &q, Response &r) { download(q, r); });

        // {"saved": true}: as the sessions deleted so far left it (waits for their saves).
        service("profiles.get", [this](const json &in) {
            const std::string project = in.value("project_id", ""), id = in.value("id", "");
            return render(in.value("saved", false) ? require_saved(project, id) : require(project, id));
        });
        service("profiles.acquire", [this](const json &in) { return acquire(in); });
        // The browsers plugin: whether a profile has a saved archive (one without starts on the
        // empty user-data folder a warm spare already has). 404 as acquire for an unknown one.
        service("profiles.has_state", [this](const json &in) {
            json row = require_saved(in.value("project_id", ""),
                                     in.contains("id") ? in.value("id", "") : in.value("name", ""));
            return json{{"has_state", row.value("saved", 0) != 0}};
        });
        // Managed auth: the connection's profile, created when missing; and a save of a
        // session's state into its leased profile now (after a login succeeded), whatever the
        // lease's save_changes says.
        service("profiles.ensure", [this](const json &in) { return ensure(in); });
        service("profiles.save", [this](const json &in) {
            save_now(in.value("session_id", ""), in.value("instance_id", ""));
            return json::object();
        });
        // A session whose DELETE is answered before it ends (the browsers plugin ends it in the
        // background): from here on, what reads or replaces its profile waits for its end.
        service("profiles.ending", [this](const json &in) {
            std::string session = in.value("session_id", "");
            std::lock_guard lock(leases_mutex_);
            if (auto it = leases_.find(session); it != leases_.end()) {
                it->second.ending = true;
                sql("UPDATE profiles_leases SET ending = 1 WHERE session_id = ?", {session});
            }
            return json::object();
        });
        service("profiles.release", [this](const json &in) {
            release(in.value("session_id", ""), in.value("instance_id", ""));
            return json::object();
        });
    }

private:
    // Tars of format=tar downloads older than `age`.
    void sweep_tars(std::chrono::minutes age) const {
        std::error_code ec;
        auto before = std::filesystem::file_time_type::clock::now() - age;
        for (const auto &f : std::filesystem::directory_iterator(tar_dir_, ec))
            if (f.last_write_time(ec) < before) std::filesystem::remove(f.path(), ec);
    }

    profiles::TarLimits tar_limits_;
    std::string tar_dir_;

    struct Lease {
        std::string profile_id;
        bool save_changes = false;
        bool ending = false; // its session was deleted; the save (if any) is under way
    };

    // The longest an ending session's save may take (archive_from's own limit), and then some.
    static constexpr std::chrono::seconds kEndingWait{150};

    // Waits, under `lock` on leases_mutex_, until no deleted session still holds profile `id`
    // (`saving_only`: none that will save into it). A create on the profile a DELETE just
    // ended must start from what that session saved, not from the archive before it.
    void wait_for_ending_sessions(std::unique_lock<std::mutex> &lock, const std::string &id, bool saving_only) {
        auto deadline = std::chrono::steady_clock::now() + kEndingWait;
        lock.unlock();
        wait_for_ending_elsewhere(id, saving_only, deadline);
        lock.lock();
        bool ended = leases_changed_.wait_until(lock, deadline, [&] {
            for (const auto &[_, lease] : leases_)
                if (lease.profile_id == id && lease.ending && (lease.save_changes || !saving_only)) return false;
            return true;
        });
        if (!ended)
            throw Error(503, "upstream_unavailable",
                        "profile " + id + " is still being saved by a deleted browser session; try again shortly");
    }

    // The same for the sessions other nodes of the store are ending: no notification crosses
    // nodes, so their lease rows are polled. A node that stopped serving has no save coming.
    void wait_for_ending_elsewhere(const std::string &id, bool saving_only,
                                   std::chrono::steady_clock::time_point deadline) const {
        std::string query = "SELECT node FROM profiles_leases WHERE profile_id = ? AND node <> ? AND ending = 1";
        if (saving_only) query += " AND save_changes = 1";
        for (;;) {
            bool pending = false;
            for (const auto &lease : sql(query, {id, node_name()}))
                pending = pending || serving_node_url(lease.value("node", "")).has_value();
            if (!pending) return;
            if (std::chrono::steady_clock::now() >= deadline)
                throw Error(503, "upstream_unavailable",
                            "profile " + id + " is still being saved by a deleted browser session; try again shortly");
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    }

    // The profile row once no deleted session still saves into it.
    json require_saved(const std::string &project, const std::string &id_or_name) {
        json row = require(project, id_or_name);
        std::unique_lock lock(leases_mutex_);
        wait_for_ending_sessions(lock, row.at("id").get<std::string>(), true);
        lock.unlock();
        return require(project, id_or_name);
    }

    std::optional<json> find(const std::string &project, const std::string &id_or_name) const {
        return hangar::find_by_id_or_name([this](const std::string &q, const json &p) { return sql(q, p); },
                                          "profiles_profiles", project, id_or_name);
    }

    json require(const std::string &project, const std::string &id_or_name) const {
        if (auto row = find(project, id_or_name)) return *row;
        throw Error::not_found("profile \"" + id_or_name + "\" not found");
    }

    static std::optional<std::string> parse_name(const json &body, bool required) {
        auto it = body.find("name");
        if (it == body.end() || it->is_null()) {
            if (required) throw Error::invalid("name", "is required");
            return std::nullopt;
        }
        if (!it->is_string() || !hangar::valid_resource_name(it->get_ref<const std::string &>()))
            throw Error::invalid("name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        return it->get<std::string>();
    }

    void name_must_be_free(const std::string &project, const std::string &name, const std::string &except) const {
        if (!sql("SELECT id FROM profiles_profiles WHERE project_id = ? AND LOWER(name) = LOWER(?) AND id <> ?",
                 {project, name, except})
                 .empty())
            throw Error::conflict("a profile named \"" + name + "\" already exists in this project");
    }

    void create(Request &req, Response &res) {
        std::string project = req.project();
        json caller = req.caller();
        auto name = parse_name(req.json_body(true), false);
        std::lock_guard lock(names_mutex_);
        if (name) name_must_be_free(project, *name, "");
        std::string id = hangar::new_id();
        sql("INSERT INTO profiles_profiles (id, org_id, project_id, name, created_at) VALUES (?, ?, ?, ?, ?)",
            {id, caller.value("org_id", ""), project, name ? json(*name) : json(), hangar::now_ms()});
        res.json(render(require(project, id)));
    }

    void list(Request &req, Response &res) {
        std::string project = req.project();
        hangar::Validation v;
        auto paging = hangar::parse_paging(req, v);
        v.throw_if_failed("invalid list query");
        std::string where = " WHERE project_id = ?";
        json params = json::array({project});
        if (auto name = req.query("name"); name && !name->empty()) {
            where += " AND LOWER(name) = LOWER(?)";
            params.push_back(*name);
        }
        if (auto q = req.query("query"); q && !q->empty()) {
            where += " AND (INSTR(LOWER(COALESCE(name, '')), LOWER(?)) > 0 OR INSTR(LOWER(id), LOWER(?)) > 0)";
            params.push_back(*q);
            params.push_back(*q);
        }
        hangar::answer_page(
            res, [this](const std::string &q, const json &p) { return sql(q, p); },
            "SELECT * FROM profiles_profiles" + where + " ORDER BY created_at DESC, id DESC", params, paging,
            [this](const json &row) { return render(row); });
    }

    void rename(Request &req, Response &res) {
        std::string project = req.project();
        auto name = parse_name(req.json_body(false), true);
        json row = require(project, req.param("id_or_name"));
        std::string id = row.at("id").get<std::string>();
        std::lock_guard lock(names_mutex_);
        name_must_be_free(project, *name, id);
        sql("UPDATE profiles_profiles SET name = ?, updated_at = ? WHERE id = ?", {*name, hangar::now_ms(), id});
        res.json(render(require(project, id)));
    }

    void remove(Request &req, Response &res) {
        json row = require(req.project(), req.param("id_or_name"));
        std::string id = row.at("id").get<std::string>();
        {
            std::unique_lock lock(leases_mutex_);
            wait_for_ending_sessions(lock, id, false);
            for (const auto &[session, lease] : leases_)
                if (lease.profile_id == id) in_use(id, session);
            for (const auto &lease :
                 sql("SELECT session_id, node FROM profiles_leases WHERE profile_id = ? AND node <> ?",
                     {id, node_name()}))
                if (serving_node_url(lease.value("node", ""))) in_use(id, lease.value("session_id", ""));
            sql("DELETE FROM profiles_profiles WHERE id = ?", {id});
        }
        blob_delete(archive_key(id));
        res.no_content();
    }

    [[noreturn]] static void in_use(const std::string &id, const std::string &session) {
        throw Error::conflict("profile " + id + " is in use by browser session " + session +
                              "; delete the session first");
    }

    void download(Request &req, Response &res) {
        json row = require_saved(req.project(), req.param("id_or_name"));
        std::string format = req.query("format").value_or("tar.zst");
        if (format != "tar.zst" && format != "tar" && format != "zstd")
            throw Error::invalid("format", "must be tar.zst or tar");
        std::string id = row.at("id").get<std::string>();
        auto path = blob_path(archive_key(id));
        if (row.value("saved", 0) == 0 || !path || ::access(path->c_str(), R_OK) != 0)
            throw Error::conflict("profile " + id +
                                  " has no saved state yet: end a session that uses it with "
                                  "save_changes: true first");
        std::string file = row.value("name", json()).is_string() ? row.at("name").get<std::string>() : id;
        if (format == "tar") {
            std::string tar = tar_dir_ + "/" + hangar::new_id() + ".tar";
            try {
                profiles::extract_tar_bounded(*path, tar, tar_limits_);
            } catch (const profiles::TarRefused &e) {
                throw Error::bad_request(std::string(e.what()) +
                                         "; download it as format=tar.zst and unpack it with your own limits");
            } catch (const std::runtime_error &e) {
                throw Error::internal(e.what());
            }
            res.header("Content-Disposition", "attachment; filename=\"" + file + ".tar\"");
            res.file("application/x-tar", tar);
        } else {
            res.header("Content-Disposition", "attachment; filename=\"" + file + ".tar.zst\"");
            res.file("application/zstd", *path);
        }
    }

    // {project_id, id?|name?, session_id, save_changes} -> {profile, archive: host path | null}
    json acquire(const json &in) {
        std::string project = in.value("project_id", "");
        std::string session = in.value("session_id", "");
        std::string selector = in.contains("id") ? in.value("id", "") : in.value("name", "");
        json row = require(project, selector);
        if (in.contains("id") && in.contains("name") && row.value("name", json()) != in.at("name"))
            throw Error::invalid("profile", "id and name name different profiles");
        std::string id = row.at("id").get<std::string>();
        {
            std::unique_lock lock(leases_mutex_);
            wait_for_ending_sessions(lock, id, true);
            row = require(project, id); // `saved` as the ended session left it
            // Under the lock that DELETE takes, so a profile cannot vanish between the two.
            if (sql("SELECT id FROM profiles_profiles WHERE id = ?", {id}).empty())
                throw Error::not_found("profile \"" + selector + "\" not found");
            leases_[session] = {id, in.value("save_changes", false)};
            bool save_changes = in.value("save_changes", false);
            sql("INSERT INTO profiles_leases (session_id, profile_id, node, save_changes) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET profile_id = excluded.profile_id, node = excluded.node, "
                "save_changes = excluded.save_changes, ending = 0",
                {session, id, node_name(), save_changes ? 1 : 0});
        }
        sql("UPDATE profiles_profiles SET last_used_at = ? WHERE id = ?", {hangar::now_ms(), id});
        json out = {{"profile", render(require(project, id))}, {"archive", nullptr}};
        if (row.value("saved", 0) != 0)
            if (auto path = blob_path(archive_key(id)); path && ::access(path->c_str(), R_OK) == 0)
                out["archive"] = *path;
        return out;
    }

    void release(const std::string &session, const std::string &instance) {
        Lease lease;
        {
            std::lock_guard lock(leases_mutex_);
            auto it = leases_.find(session);
            if (it == leases_.end()) return;
            lease = it->second;
        }
        struct Forget {
            ProfilesPlugin &self;
            const std::string &session;
            ~Forget() {
                std::lock_guard lock(self.leases_mutex_);
                self.leases_.erase(session);
                self.leases_changed_.notify_all();
                try {
                    self.sql("DELETE FROM profiles_leases WHERE session_id = ?", {session});
                } catch (const Error &) {
                    // the store is away: the row is dropped at this node's next start
                }
            }
        } forget{*this, session};
        if (!lease.save_changes || instance.empty()) return;
        archive_from(lease.profile_id, session, instance);
    }

    void save_now(const std::string &session, const std::string &instance) {
        std::string profile_id;
        {
            std::lock_guard lock(leases_mutex_);
            auto it = leases_.find(session);
            if (it == leases_.end()) throw Error::not_found("browser session " + session + " holds no profile");
            profile_id = it->second.profile_id;
        }
        archive_from(profile_id, session, instance.empty() ? session : instance);
    }

    // {project_id, org_id, name} -> the profile of that name, created when there is none.
    json ensure(const json &in) {
        std::string project = in.value("project_id", "");
        std::string name = in.value("name", "");
        if (!hangar::valid_resource_name(name))
            throw Error::invalid("profile_name", "must be 1 to 255 characters of letters, digits, '.', '_' and '-'");
        std::lock_guard lock(names_mutex_);
        if (auto row = find(project, name)) return render(*row);
        std::string id = hangar::new_id();
        sql("INSERT INTO profiles_profiles (id, org_id, project_id, name, created_at) VALUES (?, ?, ?, ?, ?)",
            {id, in.value("org_id", ""), project, name, hangar::now_ms()});
        return render(require(project, id));
    }

    void archive_from(const std::string &profile_id, const std::string &session, const std::string &instance) {
        auto r = instance_call(instance, "POST", "/chromium/profile", {}, 120000);
        if (r.status != 200)
            throw Error(502, "upstream_unavailable",
                        "the browser could not archive its profile (HTTP " + std::to_string(r.status) + ")");
        // blob_put writes a temporary file and renames it: a crash leaves the previous archive.
        blob_put(archive_key(profile_id), r.body);
        auto now = hangar::now_ms();
        sql("UPDATE profiles_profiles SET saved = 1, updated_at = ?, last_used_at = ? WHERE id = ?",
            {now, now, profile_id});
        info("saved profile " + profile_id + " from browser session " + session + " (" + std::to_string(r.body.size()) +
             " bytes)");
    }

    std::mutex names_mutex_;
    std::mutex leases_mutex_;
    std::map<std::string, Lease> leases_;    // session id -> lease
    std::condition_variable leases_changed_; // a lease was given back
};

} // namespace

HANGAR_PLUGIN(ProfilesPlugin, "profiles", "0.1.0", nullptr, migrations, sizeof(migrations) / sizeof(migrations[0]))
