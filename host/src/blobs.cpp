#include "blobs.hpp"

#include "store.hpp"
#include "util.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;

namespace hangar::host {

namespace {

const std::vector<Store::Migration> kBlobMigrations = {
    {1, "CREATE TABLE host_blobs (owner TEXT NOT NULL, blob_key TEXT NOT NULL, oid BIGINT NOT NULL, "
        "size_bytes BIGINT NOT NULL, generation TEXT NOT NULL, updated_at BIGINT NOT NULL, "
        "PRIMARY KEY (owner, blob_key))"},
};

std::string read_marker(const std::string &path) {
    std::ifstream in(path);
    std::string text;
    std::getline(in, text);
    return text;
}

void remove_quietly(const std::string &path) {
    std::error_code ec;
    fs::remove(path, ec);
}

} // namespace

Blobs::Blobs(Store &store, const std::string &data_dir, const std::string &shared_dir)
    : Blobs(store, data_dir, shared_dir, CacheLimits{}) {}

Blobs::Blobs(Store &store, const std::string &data_dir, const std::string &shared_dir, CacheLimits limits)
    : store_(store),
      root_(shared_dir.empty() ? data_dir + "/blobs" : fs::absolute(shared_dir).lexically_normal().string()),
      markers_(data_dir + "/blob-generations"), in_store_(shared_dir.empty() && store.has_large_objects()),
      limits_(limits) {
    fs::create_directories(root_);
    if (in_store_) store_.migrate("host.blobs", kBlobMigrations);
}

void Blobs::trim_cache() {
    if (!in_store_ || limits_.bytes == 0) return;
    struct Copy {
        fs::file_time_type used;
        std::string marker, file;
        std::uint64_t size;
    };
    std::vector<Copy> copies;
    std::uint64_t total = 0;
    std::error_code ec;
    // Walked after each download or write rather than tallied in memory: the folder is the truth
    // across restarts and beside a plugin's own files, and a stat per cached blob is small next to
    // the transfer that came before. Only copies with a marker: the store holds them. A file
    // without one is a plugin's own (being written, or not committed): never ours to remove.
    for (auto it = fs::recursive_directory_iterator(markers_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        auto file = root_ + "/" + fs::relative(it->path(), markers_, ec).string();
        auto size = fs::file_size(file, ec);
        if (ec) {
            ec.clear();
            continue;
        }
        auto used = fs::last_write_time(it->path(), ec);
        if (ec) {
            ec.clear();
            continue;
        }
        copies.push_back({used, it->path().string(), file, size});
        total += size;
    }
    if (total <= limits_.bytes) return;
    std::sort(copies.begin(), copies.end(), [](const Copy &a, const Copy &b) { return a.used < b.used; });
    const auto recent = fs::file_time_type::clock::now() - limits_.idle_before_eviction;
    for (const auto &copy : copies) {
        if (total <= limits_.bytes || copy.used > recent) break;
        std::error_code stale;
        if (fs::last_write_time(copy.marker, stale) > recent) continue; // used while we looked
        // The marker first: a copy without its marker is fetched again, never served as current.
        remove_quietly(copy.marker);
        remove_quietly(copy.file);
        total -= copy.size;
    }
}

std::optional<std::string> Blobs::file_of(const std::string &owner, const std::string &key) const {
    static const std::regex segment("^[A-Za-z0-9._-]+$");
    if (key.empty()) return std::nullopt;
    for (const auto &seg : split(key, '/'))
        if (seg.empty() || seg == "." || seg == ".." || !std::regex_match(seg, segment)) return std::nullopt;
    return root_ + "/" + owner + "/" + key;
}

std::string Blobs::marker_of(const std::string &owner, const std::string &key) const {
    return markers_ + "/" + owner + "/" + key;
}

std::optional<std::string> Blobs::path(const std::string &owner, const std::string &key) {
    auto file = file_of(owner, key);
    if (!file) return std::nullopt;
    fs::create_directories(fs::path(*file).parent_path());
    if (!in_store_) return file;
    const auto marker = marker_of(owner, key);
    auto rows = store_.exec("SELECT generation FROM host_blobs WHERE owner = ? AND blob_key = ?", {owner, key});
    if (rows.empty()) {
        // A copy this node fetched or kept, of a blob since deleted; a file without a marker is
        // one the plugin is still writing.
        if (fs::exists(marker)) {
            remove_quietly(*file);
            remove_quietly(marker);
        }
        return file;
    }
    const auto generation = rows[0].at("generation").get<std::string>();
    if (read_marker(marker) == generation && fs::exists(*file)) {
        std::error_code ec;
        fs::last_write_time(marker, fs::file_time_type::clock::now(), ec); // used now: evicted last
        return file;
    }

    std::lock_guard lock(fetching_);
    if (read_marker(marker) == generation && fs::exists(*file)) return file; // fetched meanwhile
    const auto partial = *file + ".fetch-" + random_token(8);
    try {
        // FOR SHARE: a replace or delete on another node waits until the object is read.
        auto fetched = store_.transaction([&] {
            auto current = store_.exec(
                "SELECT oid, generation FROM host_blobs WHERE owner = ? AND blob_key = ? FOR SHARE", {owner, key});
            if (current.empty()) return std::string();
            store_.large_object_export(current[0].at("oid").get<long long>(), partial);
            return current[0].at("generation").get<std::string>();
        });
        if (fetched.empty()) { // deleted meanwhile
            remove_quietly(*file);
            remove_quietly(marker);
            return file;
        }
        fs::permissions(partial, fs::perms::owner_read | fs::perms::owner_write);
        fs::rename(partial, *file);
        fs::create_directories(fs::path(marker).parent_path());
        write_file_atomic(marker, fetched, 0600);
    } catch (...) {
        remove_quietly(partial);
        throw;
    }
    trim_cache();
    return file;
}

std::string Blobs::keep(const std::string &owner, const std::string &key, const std::string &file) {
    auto generation = random_token(16);
    const auto size = static_cast<long long>(fs::file_size(file));
    store_.transaction([&] {
        auto oid = store_.large_object_import(file);
        auto old = store_.exec("SELECT oid FROM host_blobs WHERE owner = ? AND blob_key = ? FOR UPDATE", {owner, key});
        if (old.empty()) {
            store_.exec("INSERT INTO host_blobs (owner, blob_key, oid, size_bytes, generation, updated_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        {owner, key, oid, size, generation, now_ms()});
        } else {
            store_.exec("UPDATE host_blobs SET oid = ?, size_bytes = ?, generation = ?, updated_at = ? "
                        "WHERE owner = ? AND blob_key = ?",
                        {oid, size, generation, now_ms(), owner, key});
            store_.exec("SELECT lo_unlink(?)", nlohmann::json::array({old[0].at("oid")}));
        }
        return 0;
    });
    return generation;
}

void Blobs::put(const std::string &owner, const std::string &key, std::string_view data) {
    auto file = file_of(owner, key);
    if (!file) throw std::runtime_error("invalid blob key");
    fs::create_directories(fs::path(*file).parent_path());
    if (!in_store_) return write_file_atomic(*file, data, 0600);
    // Into the store first: when that fails, the cached copy and its marker still agree.
    const auto staged = *file + ".put-" + random_token(8);
    try {
        write_file_atomic(staged, data, 0600);
        auto generation = keep(owner, key, staged);
        fs::rename(staged, *file);
        const auto marker = marker_of(owner, key);
        fs::create_directories(fs::path(marker).parent_path());
        write_file_atomic(marker, generation, 0600);
    } catch (...) {
        remove_quietly(staged);
        throw;
    }
    std::lock_guard lock(fetching_);
    trim_cache();
}

void Blobs::commit(const std::string &owner, const std::string &key) {
    auto file = file_of(owner, key);
    if (!file) throw std::runtime_error("invalid blob key");
    if (!in_store_) return;
    if (!fs::is_regular_file(*file)) throw std::runtime_error("no file to keep for blob " + key);
    const auto marker = marker_of(owner, key);
    remove_quietly(marker); // until the store has it, this file is this node's alone
    auto generation = keep(owner, key, *file);
    fs::create_directories(fs::path(marker).parent_path());
    write_file_atomic(marker, generation, 0600);
    std::lock_guard lock(fetching_);
    trim_cache();
}

bool Blobs::remove(const std::string &owner, const std::string &key) {
    auto file = file_of(owner, key);
    if (!file) return false;
    bool existed = false;
    if (in_store_) {
        existed = store_.transaction([&] {
            auto gone =
                store_.exec("DELETE FROM host_blobs WHERE owner = ? AND blob_key = ? RETURNING oid", {owner, key});
            for (const auto &row : gone)
                store_.exec("SELECT lo_unlink(?)", nlohmann::json::array({row.at("oid")}));
            return !gone.empty();
        });
        remove_quietly(marker_of(owner, key));
    }
    std::error_code ec;
    return fs::remove(*file, ec) || existed;
}

} // namespace hangar::host
