// fs: the browser filesystem API (/browsers/{id}/fs/*). Server role: authenticated relays to the
// session's agent. Instance role (inside the sandbox): the filesystem operations themselves.
#include <hangar/multipart.hpp>
#include <hangar/plugin.hpp>
#include <hangar/zip.hpp>

#include "paths.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::parse_multipart;
using hangar::Part;
using hangar::fs::checked_path;
namespace stdfs = std::filesystem;

// Limits for upload_zip (set from fs.ini at start).
hangar::ZipLimits zip_limits;
std::size_t kMaxWatches = 64;

// Temp names of atomic writes, so watches can hide them and report the final name instead.
const std::string kTempMarker = ".hangar-tmp-";
bool is_temp_name(const std::string &name) {
    return name.size() > 1 && name[0] == '.' && name.find(kTempMarker) != std::string::npos;
}

// Final paths an atomic write is about to replace: the watch reports WRITE for those, CREATE
// for new ones (both arrive as a rename of the temp file).
std::mutex g_replacing_mu;
std::map<std::string, bool> g_replacing;

std::string join_path(const std::string &dir, const std::string &name) {
    return dir == "/" ? "/" + name : dir + "/" + name;
}

std::string random_hex(int n) {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char *d = "0123456789abcdef";
    std::string s;
    for (int i = 0; i < n; ++i)
        s += d[rng() % 16];
    return s;
}

[[noreturn]] void throw_errno(int err, const std::string &what) {
    std::string msg = what + ": " + std::strerror(err);
    switch (err) {
    case ENOENT:
        throw Error::not_found(msg);
    case EACCES:
    case EPERM:
    case EROFS:
        throw Error::forbidden(msg);
    case EEXIST:
        throw Error::conflict(msg);
    case ENOSPC:
    case EDQUOT:
        throw Error::insufficient_storage(msg);
    default:
        throw Error::bad_request(msg);
    }
}

// A numeric uid or gid (digits only, checked by the caller); 400 beyond what an id can be.
std::uint32_t numeric_id(const std::string &field, const std::string &digits) {
    std::uint32_t id = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), id);
    if (ec != std::errc() || end != digits.data() + digits.size() || id == static_cast<std::uint32_t>(-1))
        throw Error::invalid(field, "is not a valid numeric id");
    return id;
}

bool under_writable_root(const std::string &real) {
    for (const char *root : {"/home/kernel", "/tmp"}) {
        std::string r = root;
        if (real == r || real.rfind(r + "/", 0) == 0) return true;
    }
    return false;
}

// Resolves the parent of `path` (creating it when `create`) and checks that it lies under a
// writable root; returns the real parent directory.
std::string writable_parent(const std::string &field, const std::string &path, bool create) {
    std::string parent = stdfs::path(path).parent_path().string();
    if (parent.empty()) parent = "/";
    std::error_code ec;
    if (create && !stdfs::exists(parent, ec)) {
        // Create component by component so each step is checked against the roots.
        std::string cur;
        for (const auto &part : stdfs::path(parent)) {
            if (part == "/") {
                cur = "/";
                continue;
            }
            cur = join_path(cur, part.string());
            struct stat st {};
            if (lstat(cur.c_str(), &st) == 0) continue;
            char *real = realpath(stdfs::path(cur).parent_path().c_str(), nullptr);
            if (!real) throw_errno(errno, field);
            std::string rp = real;
            free(real);
            if (!under_writable_root(rp) && !under_writable_root(cur))
                throw Error::forbidden(field + ": only /home/kernel and /tmp are writable");
            if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) throw_errno(errno, field);
        }
    }
    char *real = realpath(parent.c_str(), nullptr);
    if (!real) {
        if (errno == ENOENT) throw Error::bad_request(field + ": the parent folder does not exist");
        throw_errno(errno, field);
    }
    std::string rp = real;
    free(real);
    struct stat st {};
    if (stat(rp.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error::bad_request(field + ": the parent is not a folder");
    if (!under_writable_root(rp)) throw Error::forbidden(field + ": only /home/kernel and /tmp are writable");
    return rp;
}

mode_t parse_mode(const std::string &field, const std::optional<std::string> &raw, mode_t fallback) {
    if (!raw || raw->empty()) return fallback;
    if (raw->size() > 4) throw Error::invalid(field, "must be an octal mode such as 644");
    mode_t m = 0;
    for (char c : *raw) {
        if (c < '0' || c > '7') throw Error::invalid(field, "must be an octal mode such as 644");
        m = m * 8 + (c - '0');
    }
    return m;
}

// Writes `data` atomically to `path` (temp file in the same real folder, then rename). The
// final name must not be a symlink or a folder.
void atomic_write(const std::string &field, const std::string &path, std::string_view data, mode_t mode) {
    std::string dir = writable_parent(field, path, true);
    std::string name = stdfs::path(path).filename().string();
    if (name.empty()) throw Error::invalid(field, "names a folder");
    int dfd = open(dir.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC);
    if (dfd < 0) throw_errno(errno, field);
    struct stat st {};
    if (fstatat(dfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISDIR(st.st_mode)) {
            close(dfd);
            throw Error::bad_request(field + ": is a folder");
        }
    }
    std::string tmp = "." + name + kTempMarker + random_hex(12);
    int fd = openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        close(dfd);
        throw_errno(e, field);
    }
    std::size_t off = 0;
    int err = 0;
    while (off < data.size()) {
        ssize_t n = write(fd, data.data() + off, data.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        off += static_cast<std::size_t>(n);
    }
    if (!err && fchmod(fd, mode) != 0) err = errno;
    if (!err && fsync(fd) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err) {
        struct stat existing {};
        bool existed = fstatat(dfd, name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0;
        std::string final_path = join_path(dir, name);
        {
            std::lock_guard lk(g_replacing_mu);
            if (g_replacing.size() > 4096) g_replacing.clear();
            g_replacing[final_path] = existed;
        }
        if (renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) err = errno;
    }
    if (err) unlinkat(dfd, tmp.c_str(), 0);
    close(dfd);
    if (err) throw_errno(err, field);
}

std::string mode_string(mode_t m) {
    std::string s;
    s += S_ISDIR(m)    ? 'd'
         : S_ISLNK(m)  ? 'l'
         : S_ISCHR(m)  ? 'c'
         : S_ISBLK(m)  ? 'b'
         : S_ISFIFO(m) ? 'p'
         : S_ISSOCK(m) ? 's'
                       : '-';
    const char *rwx = "rwxrwxrwx";
    for (int i = 0; i < 9; ++i)
        s += (m & (1 << (8 - i))) ? rwx[i] : '-';
    if (m & S_ISUID) s[3] = (m & S_IXUSR) ? 's' : 'S';
    if (m & S_ISGID) s[6] = (m & S_IXGRP) ? 's' : 'S';
    if (m & S_ISVTX) s[9] = (m & S_IXOTH) ? 't' : 'T';
    return s;
}

std::string rfc3339(const struct timespec &ts) {
    std::tm tm{};
    time_t secs = ts.tv_sec;
    gmtime_r(&secs, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[64];
    std::snprintf(out, sizeof out, "%s.%03ldZ", buf, ts.tv_nsec / 1000000);
    return out;
}

json file_info(const std::string &path, const struct stat &st) {
    std::string name = path == "/" ? "/" : stdfs::path(path).filename().string();
    bool dir = S_ISDIR(st.st_mode);
    return {{"name", name},
            {"path", path},
            {"is_dir", dir},
            {"size_bytes", dir ? 0 : static_cast<std::int64_t>(st.st_size)},
            {"mode", mode_string(st.st_mode)},
            {"mod_time", rfc3339(st.st_mtim)}};
}

std::string required_query(hangar::Request &req, const std::string &name) {
    auto v = req.query(name);
    if (!v || v->empty()) throw Error::invalid(name, "required");
    return *v;
}

std::string body_string(const json &body, const std::string &field, bool required = true) {
    if (!body.contains(field) || body[field].is_null()) {
        if (required) throw Error::invalid(field, "required");
        return {};
    }
    if (!body[field].is_string()) throw Error::invalid(field, "must be a string");
    return body[field].get<std::string>();
}

// ---- zip ----

// The folder as a zip, built in memory: at most zip_limits' entries and bytes (what upload_zip
// takes), 400 past them. Without the caps a folder like `/` (all of /usr, /proc/kcore) kept the
// agent reading and the answer's memory growing past any request timeout.
std::string zip_directory(const std::string &dir) {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
    auto too_big = [&dir]() {
        return Error::invalid("path", dir + " holds more than a zip may (" + std::to_string(zip_limits.max_entries) +
                                          " entries, " + std::to_string(zip_limits.max_bytes) + " bytes)");
    };
    // A first walk that reads nothing: a folder past the caps is refused in milliseconds, not after
    // reading up to max_bytes of it.
    {
        std::error_code ec;
        for (auto it = stdfs::recursive_directory_iterator(dir, stdfs::directory_options::skip_permission_denied, ec);
             !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
            struct stat st {};
            if (lstat(it->path().c_str(), &st) != 0) continue;
            if (++entries > zip_limits.max_entries ||
                (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > zip_limits.max_bytes - bytes))
                throw too_big();
            if (S_ISREG(st.st_mode)) bytes += static_cast<std::uint64_t>(st.st_size);
        }
        entries = 0;
        bytes = 0;
    }
    std::string out;
    archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    auto writer = [](archive *, void *user, const void *buf, size_t n) -> la_ssize_t {
        static_cast<std::string *>(user)->append(static_cast<const char *>(buf), n);
        return static_cast<la_ssize_t>(n);
    };
    archive_write_open(a, &out, nullptr, writer, nullptr);
    std::error_code ec;
    for (auto it = stdfs::recursive_directory_iterator(dir, stdfs::directory_options::skip_permission_denied, ec);
         !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
        const auto &p = it->path();
        struct stat st {};
        if (lstat(p.c_str(), &st) != 0) continue;
        if (++entries > zip_limits.max_entries ||
            (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > zip_limits.max_bytes - bytes)) {
            archive_write_free(a);
            throw too_big();
        }
        std::string rel = p.lexically_relative(dir).string();
        archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, (S_ISDIR(st.st_mode) ? rel + "/" : rel).c_str());
        archive_entry_set_perm(e, st.st_mode & 07777);
        archive_entry_set_mtime(e, st.st_mtim.tv_sec, 0);
        if (S_ISDIR(st.st_mode)) {
            archive_entry_set_filetype(e, AE_IFDIR);
            archive_write_header(a, e);
        } else if (S_ISREG(st.st_mode)) {
            int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (fd >= 0) {
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_size(e, st.st_size);
                archive_write_header(a, e);
                char buf[65536];
                ssize_t n;
                // A file may read longer than its size said (/proc): the cap holds on what is read.
                while ((n = read(fd, buf, sizeof buf)) > 0 &&
                       (bytes += static_cast<std::uint64_t>(n)) <= zip_limits.max_bytes)
                    archive_write_data(a, buf, static_cast<size_t>(n));
                close(fd);
                if (bytes > zip_limits.max_bytes) {
                    archive_entry_free(e);
                    archive_write_free(a);
                    throw too_big();
                }
            }
        } // symlinks and special files are left out
        archive_entry_free(e);
    }
    archive_write_close(a);
    archive_write_free(a);
    return out;
}

// ---- watches ----

struct Watch {
    std::string id;
    std::string root;
    bool recursive = false;
    int fd = -1;
    int stop_pipe[2] = {-1, -1};
    std::map<int, std::string> wds;
    std::mutex mu;
    std::unique_ptr<hangar::SseStream> stream;
    std::vector<json> pending; // events before a reader attached
    std::thread thread;
    std::atomic<bool> stopping{false};

    void add_tree(const std::string &dir) {
        int wd = inotify_add_watch(fd, dir.c_str(),
                                   IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                       IN_ONLYDIR);
        if (wd < 0) return;
        wds[wd] = dir;
        if (!recursive) return;
        if (wds.size() >= 8192) return;
        std::error_code ec;
        for (auto it = stdfs::directory_iterator(dir, ec); !ec && it != stdfs::directory_iterator(); it.increment(ec))
            if (it->is_directory(ec) && !it->is_symlink(ec)) add_tree(it->path().string());
    }

    void emit(const json &ev) {
        std::lock_guard lk(mu);
        if (stream) {
            if (!stream->send(ev)) stream.reset();
        } else if (pending.size() < 10000) {
            pending.push_back(ev);
        }
    }

    void run() {
        alignas(inotify_event) char buf[65536];
        while (!stopping) {
            pollfd p[2] = {{fd, POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
            if (poll(p, 2, 1000) < 0) {
                if (errno == EINTR) continue;
                break;
            }
            if (p[1].revents) break;
            if (!(p[0].revents & POLLIN)) continue;
            ssize_t n = read(fd, buf, sizeof buf);
            if (n <= 0) continue;
            std::map<int, std::string> snapshot = wds;
            for (char *ptr = buf; ptr < buf + n;) {
                auto *ev = reinterpret_cast<inotify_event *>(ptr);
                ptr += sizeof(inotify_event) + ev->len;
                auto dir = wds.find(ev->wd);
                if (dir == wds.end()) continue;
                if (ev->mask & IN_IGNORED) {
                    wds.erase(ev->wd);
                    continue;
                }
                if (ev->mask & IN_DELETE_SELF) continue;
                std::string name = ev->len ? std::string(ev->name) : std::string();
                if (name.empty()) continue;
                std::string path = join_path(dir->second, name);
                bool is_dir = ev->mask & IN_ISDIR;
                const char *type = nullptr;
                if (is_temp_name(name)) {
                    // The temp file of an atomic write: its rename onto the final name is the
                    // event (below, as IN_MOVED_TO of the final name); everything else is noise.
                    continue;
                }
                if (ev->mask & IN_MOVED_TO) {
                    std::lock_guard lk(g_replacing_mu);
                    auto r = g_replacing.find(path);
                    if (r != g_replacing.end()) {
                        bool existed = r->second; // kept: other watches may see the same rename
                        emit({{"type", existed ? "WRITE" : "CREATE"},
                              {"path", path},
                              {"name", name},
                              {"is_dir", false}});
                        continue;
                    }
                }
                if (ev->mask & (IN_CREATE | IN_MOVED_TO))
                    type = "CREATE";
                else if (ev->mask & IN_MODIFY)
                    type = "WRITE";
                else if (ev->mask & IN_DELETE)
                    type = "DELETE";
                else if (ev->mask & IN_MOVED_FROM)
                    type = "RENAME";
                if (!type) continue;
                if (is_dir && recursive && (ev->mask & (IN_CREATE | IN_MOVED_TO))) add_tree(path);
                emit({{"type", type}, {"path", path}, {"name", name}, {"is_dir", is_dir}});
            }
        }
    }

    ~Watch() {
        stopping = true;
        if (stop_pipe[1] >= 0) {
            char c = 1;
            (void)!write(stop_pipe[1], &c, 1);
        }
        if (thread.joinable()) thread.join();
        {
            std::lock_guard lk(mu);
            stream.reset();
        }
        if (fd >= 0) close(fd);
        for (int f : stop_pipe)
            if (f >= 0) close(f);
    }
};

class FsPlugin : public hangar::Plugin {
public:
    void stop() override {
        std::lock_guard lk(watches_mu_);
        watches_.clear();
    }

private:
    std::mutex watches_mu_;
    std::map<std::string, std::shared_ptr<Watch>> watches_;

    void start_server() override {
        for (const char *op :
             {"create_directory", "delete_directory", "delete_file", "move", "set_file_permissions", "write_file"})
            relay("PUT", op);
        for (const char *op : {"download_dir_zip", "file_info", "list_files", "read_file"})
            relay("GET", op);
        for (const char *op : {"upload", "upload_zip", "watch"})
            relay("POST", op);
        route(
            "GET", "/browsers/{id}/fs/watch/{watch_id}/events",
            [this](hangar::Request &req, hangar::Response &res) {
                relay_to_session(req, res, "/fs/watch/" + req.param("watch_id") + "/events");
            },
            HANGAR_ROUTE_STREAMING);
        route("DELETE", "/browsers/{id}/fs/watch/{watch_id}", [this](hangar::Request &req, hangar::Response &res) {
            relay_to_session(req, res, "/fs/watch/" + req.param("watch_id"));
        });
    }

    void relay(const char *method, const std::string &op) {
        std::string agent = "/fs/" + op;
        route(method, "/browsers/{id}/fs/" + op,
              [this, agent](hangar::Request &req, hangar::Response &res) { relay_to_session(req, res, agent); });
    }

    void start_instance() override {
        zip_limits.max_entries = static_cast<std::size_t>(config_int("max_zip_entries", 10000));
        zip_limits.max_bytes = static_cast<std::uint64_t>(config_int("max_zip_bytes", 256ll << 20));
        kMaxWatches = static_cast<std::size_t>(config_int("max_watches", 64));
        route("GET", "/fs/file_info", [](hangar::Request &req, hangar::Response &res) {
            std::string path = checked_path("path", required_query(req, "path"));
            struct stat st {};
            if (stat(path.c_str(), &st) != 0) throw_errno(errno, path);
            res.json(file_info(path, st));
        });
        route("GET", "/fs/list_files", [](hangar::Request &req, hangar::Response &res) {
            std::string path = checked_path("path", required_query(req, "path"));
            struct stat st {};
            if (stat(path.c_str(), &st) != 0) throw_errno(errno, path);
            if (!S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is not a folder");
            DIR *d = opendir(path.c_str());
            if (!d) throw_errno(errno, path);
            json out = json::array();
            while (dirent *e = readdir(d)) {
                std::string n = e->d_name;
                if (n == "." || n == "..") continue;
                std::string child = join_path(path, n);
                struct stat cst {};
                if (stat(child.c_str(), &cst) != 0 && lstat(child.c_str(), &cst) != 0) continue;
                out.push_back(file_info(child, cst));
            }
            closedir(d);
            std::sort(out.begin(), out.end(), [](const json &a, const json &b) { return a["name"] < b["name"]; });
            res.json(out);
        });
        route("GET", "/fs/read_file", [](hangar::Request &req, hangar::Response &res) {
            std::string path = checked_path("path", required_query(req, "path"));
            struct stat st {};
            if (stat(path.c_str(), &st) != 0) throw_errno(errno, path);
            if (S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is a folder");
            if (access(path.c_str(), R_OK) != 0) throw_errno(errno, path);
            if (S_ISREG(st.st_mode) && st.st_size > 0) return res.file("application/octet-stream", path);
            // Empty-looking or special files (/proc, FIFOs are refused): read what is there.
            if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
                throw Error::bad_request("path: " + path + " is not a regular file");
            int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            if (fd < 0) throw_errno(errno, path);
            std::string data;
            char buf[65536];
            ssize_t n;
            while (data.size() < (64u << 20) && (n = read(fd, buf, sizeof buf)) > 0)
                data.append(buf, static_cast<std::size_t>(n));
            close(fd);
            res.status(200);
            res.body("application/octet-stream", data);
        });
        route("GET", "/fs/download_dir_zip", [](hangar::Request &req, hangar::Response &res) {
            std::string path = checked_path("path", required_query(req, "path"));
            struct stat st {};
            if (stat(path.c_str(), &st) != 0) throw_errno(errno, path);
            if (!S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is not a folder");
            if (access(path.c_str(), R_OK | X_OK) != 0) throw_errno(errno, path);
            res.status(200);
            res.body("application/zip", zip_directory(path));
        });
        route("PUT", "/fs/write_file", [](hangar::Request &req, hangar::Response &res) {
            std::string path = checked_path("path", required_query(req, "path"));
            mode_t mode = parse_mode("mode", req.query("mode"), 0644);
            atomic_write("path", path, req.body(), mode);
            res.no_content();
        });
        route("PUT", "/fs/create_directory", [](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            std::string path = checked_path("path", body_string(body, "path"));
            std::optional<std::string> m;
            if (body.contains("mode") && !body["mode"].is_null()) m = body_string(body, "mode");
            mode_t mode = parse_mode("mode", m, 0755);
            struct stat st {};
            if (stat(path.c_str(), &st) == 0) {
                if (S_ISDIR(st.st_mode)) return res.no_content();
                throw Error::conflict(path + " exists and is not a folder");
            }
            std::string parent = writable_parent("path", path, true);
            std::string full = parent + "/" + stdfs::path(path).filename().string();
            if (mkdir(full.c_str(), mode) != 0 && errno != EEXIST) throw_errno(errno, path);
            chmod(full.c_str(), mode);
            res.no_content();
        });
        route("PUT", "/fs/delete_file", [](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            std::string path = checked_path("path", body_string(body, "path"));
            std::string parent = writable_parent("path", path, false);
            std::string full = parent + "/" + stdfs::path(path).filename().string();
            struct stat st {};
            if (lstat(full.c_str(), &st) != 0) throw_errno(errno, path);
            if (S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is a folder; use delete_directory");
            if (unlink(full.c_str()) != 0) throw_errno(errno, path);
            res.no_content();
        });
        route("PUT", "/fs/delete_directory", [](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            std::string path = checked_path("path", body_string(body, "path"));
            if (path == "/home/kernel" || path == "/tmp" || path == "/")
                throw Error::bad_request("path: " + path + " cannot be deleted");
            std::string parent = writable_parent("path", path, false);
            std::string full = parent + "/" + stdfs::path(path).filename().string();
            struct stat st {};
            if (lstat(full.c_str(), &st) != 0) throw_errno(errno, path);
            if (!S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is not a folder");
            std::error_code ec;
            stdfs::remove_all(full, ec); // does not follow symlinks inside
            if (ec) throw_errno(ec.value(), path);
            res.no_content();
        });
        route("PUT", "/fs/move", [](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            hangar::Validation v;
            std::string src, dst;
            try {
                src = checked_path("src_path", body_string(body, "src_path"));
            } catch (const Error &e) {
                v.fail("src_path", e.details().empty() ? e.what() : e.details()[0].message);
            }
            try {
                dst = checked_path("dest_path", body_string(body, "dest_path"));
            } catch (const Error &e) {
                v.fail("dest_path", e.details().empty() ? e.what() : e.details()[0].message);
            }
            v.throw_if_failed();
            std::string sp = writable_parent("src_path", src, false) + "/" + stdfs::path(src).filename().string();
            struct stat st {};
            if (lstat(sp.c_str(), &st) != 0) throw_errno(errno, src);
            std::string dp = writable_parent("dest_path", dst, true) + "/" + stdfs::path(dst).filename().string();
            if (rename(sp.c_str(), dp.c_str()) != 0) throw_errno(errno, "move " + src + " to " + dst);
            res.no_content();
        });
        route("PUT", "/fs/set_file_permissions", [](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            std::string path = checked_path("path", body_string(body, "path"));
            mode_t mode = parse_mode("mode", body_string(body, "mode"), 0);
            std::string owner = body_string(body, "owner", false), group = body_string(body, "group", false);
            uid_t uid = static_cast<uid_t>(-1);
            gid_t gid = static_cast<gid_t>(-1);
            if (!owner.empty()) {
                if (owner.find_first_not_of("0123456789") == std::string::npos)
                    uid = static_cast<uid_t>(numeric_id("owner", owner));
                else if (passwd *pw = getpwnam(owner.c_str()))
                    uid = pw->pw_uid;
                else
                    throw Error::invalid("owner", "unknown user " + owner);
            }
            if (!group.empty()) {
                if (group.find_first_not_of("0123456789") == std::string::npos)
                    gid = static_cast<gid_t>(numeric_id("group", group));
                else if (struct group *gr = getgrnam(group.c_str()))
                    gid = gr->gr_gid;
                else
                    throw Error::invalid("group", "unknown group " + group);
            }
            std::string full = writable_parent("path", path, false) + "/" + stdfs::path(path).filename().string();
            struct stat st {};
            if (lstat(full.c_str(), &st) != 0) throw_errno(errno, path);
            if (S_ISLNK(st.st_mode)) throw Error::bad_request("path: " + path + " is a symbolic link");
            if (chmod(full.c_str(), mode) != 0) throw_errno(errno, path);
            if ((uid != static_cast<uid_t>(-1) || gid != static_cast<gid_t>(-1)) && lchown(full.c_str(), uid, gid) != 0)
                throw_errno(errno, path);
            res.no_content();
        });
        route("POST", "/fs/upload", [](hangar::Request &req, hangar::Response &res) {
            auto parts = parse_multipart(req);
            auto files = hangar::indexed_parts(parts, "files");
            if (files.empty()) throw Error::invalid("files", "at least one file is required");
            hangar::Validation v;
            std::vector<std::pair<std::string, std::string_view>> todo;
            for (const auto &f : files) {
                const Part *file = f.fields.count("file") ? f.fields.at("file") : nullptr;
                const Part *dest_part = f.fields.count("dest_path") ? f.fields.at("dest_path") : nullptr;
                if (!file) v.fail(f.label + "[file]", "required");
                std::string dest;
                try {
                    dest =
                        checked_path(f.label + "[dest_path]", dest_part ? std::string(dest_part->data) : std::string());
                } catch (const Error &e) {
                    v.fail(f.label + "[dest_path]", e.details().empty() ? e.what() : e.details()[0].message);
                }
                if (file && !dest.empty()) todo.emplace_back(dest, file->data);
            }
            v.throw_if_failed();
            for (auto &[dest, data] : todo)
                atomic_write(dest, dest, data, 0644);
            res.no_content();
        });
        route("POST", "/fs/upload_zip", [](hangar::Request &req, hangar::Response &res) {
            auto parts = parse_multipart(req);
            const Part *zip = nullptr;
            std::optional<std::string> dest_raw;
            for (const auto &p : parts) {
                if (p.name == "zip_file")
                    zip = &p;
                else if (p.name == "dest_path")
                    dest_raw = std::string(p.data);
            }
            hangar::Validation v;
            if (!zip) v.fail("zip_file", "required");
            if (!dest_raw || dest_raw->empty()) v.fail("dest_path", "required");
            v.throw_if_failed();
            std::string dest = checked_path("dest_path", *dest_raw);
            read_zip(zip->data, zip_limits, nullptr); // validates every entry before anything is written
            // Create the destination, then write entries one at a time; files are written atomically.
            struct stat st {};
            if (stat(dest.c_str(), &st) != 0) {
                writable_parent("dest_path", dest + "/x", true);
            } else if (!S_ISDIR(st.st_mode)) {
                throw Error::bad_request("dest_path: " + dest + " is not a folder");
            }
            read_zip(zip->data, zip_limits, [&](hangar::ZipItem &&it) {
                std::string target = join_path(dest, it.rel);
                if (it.dir)
                    writable_parent("dest_path", target + "/x", true);
                else
                    atomic_write("zip entry " + it.rel, target, it.data, it.mode ? it.mode : 0644);
            });
            res.no_content();
        });
        route("POST", "/fs/watch", [this](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            std::string path = checked_path("path", body_string(body, "path"));
            bool recursive = false;
            if (body.contains("recursive") && !body["recursive"].is_null()) {
                if (!body["recursive"].is_boolean()) throw Error::invalid("recursive", "must be a boolean");
                recursive = body["recursive"].get<bool>();
            }
            struct stat st {};
            if (stat(path.c_str(), &st) != 0) throw_errno(errno, path);
            if (!S_ISDIR(st.st_mode)) throw Error::bad_request("path: " + path + " is not a folder");
            auto w = std::make_shared<Watch>();
            w->id = "watch_" + random_hex(16);
            w->root = path == "/" ? "" : path;
            w->recursive = recursive;
            w->fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
            if (w->fd < 0 || pipe2(w->stop_pipe, O_CLOEXEC) != 0) throw_errno(errno, "inotify");
            w->add_tree(path);
            if (w->wds.empty()) throw_errno(errno ? errno : EACCES, path);
            Watch *raw = w.get();
            w->thread = std::thread([raw] { raw->run(); });
            {
                std::lock_guard lk(watches_mu_);
                if (watches_.size() >= kMaxWatches)
                    throw Error(429, "rate_limited",
                                "too many active watches (" + std::to_string(kMaxWatches) + "); stop one first");
                watches_[w->id] = w;
            }
            res.json({{"watch_id", w->id}});
        });
        route(
            "GET", "/fs/watch/{watch_id}/events",
            [this](hangar::Request &req, hangar::Response &res) {
                std::shared_ptr<Watch> w;
                {
                    std::lock_guard lk(watches_mu_);
                    auto it = watches_.find(req.param("watch_id"));
                    if (it == watches_.end()) throw Error::not_found("watch " + req.param("watch_id") + " not found");
                    w = it->second;
                }
                auto stream = res.sse();
                std::lock_guard lk(w->mu);
                for (const auto &ev : w->pending)
                    stream->send(ev);
                w->pending.clear();
                w->stream = std::move(stream); // a new reader replaces the previous one
            },
            HANGAR_ROUTE_STREAMING);
        route("DELETE", "/fs/watch/{watch_id}", [this](hangar::Request &req, hangar::Response &res) {
            std::shared_ptr<Watch> w;
            {
                std::lock_guard lk(watches_mu_);
                auto it = watches_.find(req.param("watch_id"));
                if (it == watches_.end()) throw Error::not_found("watch " + req.param("watch_id") + " not found");
                w = it->second;
                watches_.erase(it);
            }
            w.reset(); // stops the thread and closes the stream (unless an event is in flight)
            res.no_content();
        });
    }
};

} // namespace

HANGAR_PLUGIN(FsPlugin, "fs", "0.1.0", "browsers", nullptr, 0)
