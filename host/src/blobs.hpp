// Plugin blobs (profile archives, extension zips, replay videos, deployment bundles): files a
// plugin reads by path, kept where every node that may serve them can read them.
//
// - One machine (SQLite store), or `[blobs] dir` naming a folder all nodes share: plain files
//   under that folder, as before.
// - A PostgreSQL store without `[blobs] dir`: the store holds each blob as a large object (streamed
//   in and out in chunks by libpq, never whole in memory), and each node keeps the files it has
//   used under <data_dir>/blobs as a cache. A generation per blob, recorded in the store and beside
//   each cached copy, tells a node that another one replaced or deleted it. The cache is capped
//   (`[blobs] cache_mb`): past the cap, the copies used longest ago go, never one used within the
//   last `idle_before_eviction` (a plugin may be about to open the path it was given) and never a
//   file the store does not hold yet; the next use fetches it again.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace hangar::host {

class Store;

class Blobs {
public:
    struct CacheLimits {
        std::uint64_t bytes = 10ULL << 30; // 0: no cap
        std::chrono::seconds idle_before_eviction{15 * 60};
    };
    // `store` keeps the blobs when it has large objects and `shared_dir` is empty.
    Blobs(Store &store, const std::string &data_dir, const std::string &shared_dir);
    Blobs(Store &store, const std::string &data_dir, const std::string &shared_dir, CacheLimits limits);

    // The folder plugin files live under (instances may bind its subfolders).
    const std::string &root() const { return root_; }
    bool kept_in_store() const { return in_store_; }

    // The file for `owner`'s `key`: relative segments of [A-Za-z0-9._-], or nullopt. Its folder is
    // created; on a store that keeps blobs, the current copy is fetched first when it is missing
    // or stale (or removed, when the blob was deleted on another node).
    std::optional<std::string> path(const std::string &owner, const std::string &key);
    // Replaces the blob's contents (atomically: readers see the old or the new file).
    void put(const std::string &owner, const std::string &key, std::string_view data);
    // The plugin wrote the file at path(key) itself: keep it (into the store, when it holds blobs).
    void commit(const std::string &owner, const std::string &key);
    // Whether there was anything to remove.
    bool remove(const std::string &owner, const std::string &key);

private:
    std::optional<std::string> file_of(const std::string &owner, const std::string &key) const;
    std::string marker_of(const std::string &owner, const std::string &key) const;
    // Streams `file` into the store as the blob's new contents; returns its generation.
    std::string keep(const std::string &owner, const std::string &key, const std::string &file);
    // Past the cap, removes the cached copies used longest ago (their markers' times say when).
    void trim_cache();

    Store &store_;
    std::string root_;
    std::string markers_; // generation of each cached copy, a tree beside root_
    bool in_store_ = false;
    CacheLimits limits_;
    std::mutex fetching_; // one download (or eviction) at a time per node: two requests for one blob share it
};

} // namespace hangar::host
