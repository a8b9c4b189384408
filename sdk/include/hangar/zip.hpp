// Reading zip uploads safely (libarchive: a plugin that includes this links `archive`). Every entry
// is checked before it is handed on: no absolute or `..` paths, no links or devices, an entry
// count and a real uncompressed-size limit. Problems are Error 400 naming the request field.
#pragma once

#include <hangar/plugin.hpp>

#include <archive.h>
#include <archive_entry.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hangar {

struct ZipLimits {
    std::size_t max_entries = 10000;
    std::uint64_t max_bytes = 256ull << 20; // uncompressed, all entries together
    // Symbolic links whose target stays in the archive's folder (see link_stays_inside);
    // refused otherwise, as every link is by default.
    bool inner_links = false;
};

struct ZipItem {
    std::string rel;
    bool dir;
    mode_t mode;
    std::string data;
};

// libarchive's message for its last error; it has none (NULL) for some malformed archives.
inline std::string archive_message(archive *a) {
    const char *text = archive_error_string(a);
    return text ? text : "malformed archive";
}

struct ZipEntry {
    std::string rel; // normalised, no trailing slash
    bool dir;
    mode_t mode;
    std::string link; // a symbolic link's target (ZipLimits::inner_links), else empty
};

// Whether a link at `rel` (a normalised path in the archive) pointing at `target` resolves inside
// the archive's folder however the other links in it point. A lexical check alone is not enough:
// with "a/x" -> ".." and "a/y" -> "x/..", "a/y" looks like "a" but leaves the folder. So the target
// is relative, its ".." come first only (they climb real folders: the link's parents, which
// links can never be, see unzip_to) and no further than the link's depth, and the rest only
// descends.
inline bool link_stays_inside(const std::string &rel, const std::string &target) {
    if (target.empty() || target[0] == '/' || target.find('\\') != std::string::npos) return false;
    const std::filesystem::path folder = std::filesystem::path(rel).parent_path(); // one object: its iterators pair
    auto depth = std::distance(folder.begin(), folder.end());
    bool descending = false;
    std::ptrdiff_t ups = 0;
    for (const auto &part : std::filesystem::path(target)) {
        std::string p = part.string();
        if (p.empty() || p == ".") continue;
        if (p == "..") {
            if (descending) return false;
            if (++ups > depth) return false;
            continue;
        }
        descending = true;
    }
    return true;
}

// Receives a file entry's bytes in order, chunk by chunk.
using ZipChunkSink = std::function<void(std::string_view)>;
// Called for every entry once its name and type passed the checks. For a file, the returned sink
// (if any) gets its content; an empty one skips it (still read, so the size limit still counts).
using ZipEntrySink = std::function<ZipChunkSink(const ZipEntry &)>;

// Walks every entry, checking names, types, the entry count and the real uncompressed size, in
// constant memory: content is read 64 KiB at a time and never kept here. A bomb is refused at the
// limit, whatever its entry sizes.
inline void walk_zip(std::string_view bytes, const ZipLimits &limits, const ZipEntrySink &sink,
                     const std::string &field = "zip_file") {
    archive *a = archive_read_new();
    archive_read_support_format_zip(a);
    std::unique_ptr<archive, int (*)(archive *)> guard(a, archive_read_free);
    if (archive_read_open_memory(a, bytes.data(), bytes.size()) != ARCHIVE_OK)
        throw Error::invalid(field, "not a readable zip: " + archive_message(a));
    std::size_t count = 0;
    std::uint64_t total = 0;
    archive_entry *e;
    int r;
    while ((r = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
        const char *pn = archive_entry_pathname(e);
        std::string name = pn ? pn : "";
        if (++count > limits.max_entries)
            throw Error::invalid(field, "more than " + std::to_string(limits.max_entries) + " entries (entry limit)");
        if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos)
            throw Error::invalid(field, "entry '" + name + "' has an absolute or invalid path");
        for (const auto &part : std::filesystem::path(name))
            if (part == "..") throw Error::invalid(field, "entry '" + name + "' escapes the destination folder");
        auto type = archive_entry_filetype(e);
        if (type == AE_IFLNK && !limits.inner_links)
            throw Error::invalid(field, "entry '" + name + "' is a symbolic link, which is refused");
        ZipEntry entry;
        entry.rel = std::filesystem::path(name).lexically_normal().string();
        while (!entry.rel.empty() && entry.rel.back() == '/')
            entry.rel.pop_back();
        if (entry.rel.empty() || entry.rel == ".") continue;
        if (type == AE_IFLNK) {
            const char *t = archive_entry_symlink(e);
            entry.link = t ? t : "";
            if (!link_stays_inside(entry.rel, entry.link))
                throw Error::invalid(field, "entry '" + name + "' is a symbolic link to '" + entry.link +
                                                "', which leaves the folder");
            entry.dir = false;
            entry.mode = 0777;
            if (sink) sink(entry);
            continue;
        }
        entry.dir = type == AE_IFDIR || name.back() == '/';
        entry.mode = archive_entry_perm(e) & 0777;
        if (!entry.dir && type != AE_IFREG && type != 0)
            throw Error::invalid(field, "entry '" + name + "' is not a regular file or folder");
        ZipChunkSink chunks = sink ? sink(entry) : ZipChunkSink{};
        if (entry.dir) continue;
        char buf[65536];
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof buf)) > 0) {
            total += static_cast<std::uint64_t>(n);
            if (total > limits.max_bytes)
                throw Error::invalid(field, "uncompressed size exceeds " + std::to_string(limits.max_bytes) +
                                                " bytes (size limit)");
            if (chunks) chunks(std::string_view(buf, static_cast<std::size_t>(n)));
        }
        if (n < 0) throw Error::invalid(field, "entry '" + name + "' could not be read: " + archive_message(a));
    }
    if (r != ARCHIVE_EOF) throw Error::invalid(field, "not a readable zip: " + archive_message(a));
}

// walk_zip handing each entry to `sink` whole, data included (one entry in memory at a time);
// with `sink` empty, the checks alone.
inline void read_zip(std::string_view bytes, const ZipLimits &limits, const std::function<void(ZipItem &&)> &sink,
                     const std::string &field = "zip_file") {
    if (!sink) return walk_zip(bytes, limits, nullptr, field);
    std::optional<ZipItem> pending;
    auto flush = [&] {
        if (pending) sink(std::move(*pending));
        pending.reset();
    };
    walk_zip(
        bytes, limits,
        [&](const ZipEntry &entry) -> ZipChunkSink {
            flush();
            if (!entry.link.empty()) throw Error::invalid(field, "entry '" + entry.rel + "' is a symbolic link");
            pending = ZipItem{entry.rel, entry.dir, entry.mode, {}};
            return [&](std::string_view chunk) { pending->data.append(chunk); };
        },
        field);
    flush();
}

// walk_zip writing every entry under `dest` (created), each file as it is read, 64 KiB at a
// time; entries outside `strip` (a leading folder, with its slash) are skipped and the prefix
// is cut from the others. Files keep their archive's execute bits and are readable by all (an
// instance's unprivileged user reads them); folders are 0755.
inline void unzip_to(std::string_view bytes, const std::string &dest, const ZipLimits &limits,
                     const std::string &field = "zip_file", const std::string &strip = "") {
    namespace fs = std::filesystem;
    fs::create_directories(dest);
    std::ofstream out;
    fs::path target;
    mode_t mode = 0644;
    // Links are made after every file and folder, so no entry is ever written through one.
    std::vector<std::pair<fs::path, std::string>> links;
    auto close_file = [&] {
        if (!out.is_open()) return;
        out.close();
        if (!out) throw std::runtime_error("cannot write " + target.string());
        fs::permissions(target, static_cast<fs::perms>((mode & 0755) | 0644), fs::perm_options::replace);
    };
    walk_zip(
        bytes, limits,
        [&](const ZipEntry &it) -> ZipChunkSink {
            close_file();
            if (!strip.empty() && it.rel.rfind(strip, 0) != 0) return {};
            std::string rel = it.rel.substr(strip.size());
            if (rel.empty()) return {};
            target = fs::path(dest) / rel;
            if (!it.link.empty()) {
                links.emplace_back(target, it.link);
                return {};
            }
            if (it.dir) {
                fs::create_directories(target);
                return {};
            }
            fs::create_directories(target.parent_path());
            out.open(target, std::ios::binary | std::ios::trunc);
            if (!out) throw std::runtime_error("cannot write " + target.string());
            mode = it.mode;
            return [&](std::string_view chunk) {
                out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
                if (!out) throw std::runtime_error("cannot write " + target.string());
            };
        },
        field);
    close_file();
    for (const auto &[path, to] : links) {
        std::error_code ec;
        // Its folders must be real folders: link_stays_inside counts its ".." against them.
        for (fs::path up = path.parent_path(); up.string().size() > dest.size(); up = up.parent_path())
            if (fs::is_symlink(fs::symlink_status(up, ec)) ||
                std::any_of(links.begin(), links.end(), [&](const auto &l) { return l.first == up; }))
                throw Error::invalid(field, "entry '" + path.lexically_relative(dest).string() +
                                                "' is inside a symbolic link");
        if (fs::exists(fs::symlink_status(path, ec)))
            throw Error::invalid(field, "entry '" + path.lexically_relative(dest).string() +
                                            "' is a symbolic link where the archive also has a file or folder");
        fs::create_directories(path.parent_path());
        fs::create_symlink(to, path);
    }
}

} // namespace hangar
