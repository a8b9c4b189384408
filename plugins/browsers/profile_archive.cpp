#include "profile_archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace fs = std::filesystem;

namespace hangar::browsers {

namespace {

using ArchivePtr = std::unique_ptr<archive, int (*)(archive *)>;
using EntryPtr = std::unique_ptr<archive_entry, void (*)(archive_entry *)>;

[[noreturn]] void fail(archive *a, const std::string &what) {
    const char *msg = a ? archive_error_string(a) : nullptr;
    throw std::runtime_error(what + (msg ? std::string(": ") + msg : std::string()));
}

// Singleton* would make the next Chromium refuse the folder; the rest is rebuilt on demand and
// is most of a profile's size.
constexpr std::array kExcludedTopLevel = {"SingletonLock",     "SingletonSocket",       "SingletonCookie",
                                          "Crashpad",          "ShaderCache",           "GrShaderCache",
                                          "GraphiteDawnCache", "component_crx_cache",   "extensions_crx_cache",
                                          "BrowserMetrics",    "DeferredBrowserMetrics"};
constexpr std::array kExcludedAnywhere = {"Cache",        "Code Cache",        "GPUCache",
                                          "DawnCache",    "DawnGraphiteCache", "DawnWebGPUCache",
                                          "CacheStorage", "ScriptCache",       "blob_storage"};
// The last session's windows and tabs (Sessions/ since Chromium 100, the four files before it),
// in a profile folder (Default, Profile 1, ...): a profile carries who the agent is, not what the
// last agent had open. Restored, those tabs raced the next agent's first navigation.
constexpr std::array kExcludedInProfile = {"Sessions", "Current Session", "Current Tabs", "Last Session", "Last Tabs"};

} // namespace

bool profile_path_excluded(std::string_view relative) {
    auto slash = relative.find('/');
    std::string_view first = relative.substr(0, slash);
    for (const char *name : kExcludedTopLevel)
        if (first == name) return true;
    if (slash != std::string_view::npos) {
        std::string_view rest = relative.substr(slash + 1);
        std::string_view second = rest.substr(0, rest.find('/'));
        for (const char *name : kExcludedInProfile)
            if (second == name) return true;
    }
    while (!relative.empty()) {
        auto end = relative.find('/');
        std::string_view segment = relative.substr(0, end);
        for (const char *name : kExcludedAnywhere)
            if (segment == name) return true;
        if (end == std::string_view::npos) break;
        relative.remove_prefix(end + 1);
    }
    return false;
}

std::string pack_profile(const std::string &dir) {
    std::string out;
    ArchivePtr a(archive_write_new(), archive_write_free);
    if (!a || archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
        archive_write_add_filter_zstd(a.get()) != ARCHIVE_OK)
        fail(a.get(), "cannot create a tar.zst writer");
    archive_write_set_bytes_in_last_block(a.get(), 1);
    auto writer = [](archive *, void *user, const void *buf, size_t n) -> la_ssize_t {
        static_cast<std::string *>(user)->append(static_cast<const char *>(buf), n);
        return static_cast<la_ssize_t>(n);
    };
    if (archive_write_open(a.get(), &out, nullptr, writer, nullptr) != ARCHIVE_OK) fail(a.get(), "cannot open");

    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) throw std::runtime_error("cannot read " + dir + ": " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) throw std::runtime_error("cannot read " + dir + ": " + ec.message());
        std::string path = it->path().string();
        std::string rel = it->path().lexically_relative(dir).generic_string(); // never through links
        if (profile_path_excluded(rel)) {
            if (it->is_directory(ec) && !it->is_symlink(ec)) it.disable_recursion_pending();
            continue;
        }
        struct stat st {};
        if (::lstat(path.c_str(), &st) != 0) continue; // gone while we walked: nothing to keep
        EntryPtr e(archive_entry_new(), archive_entry_free);
        archive_entry_set_pathname(e.get(), rel.c_str());
        archive_entry_set_perm(e.get(), st.st_mode & 0777);
        archive_entry_set_mtime(e.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
        if (S_ISDIR(st.st_mode)) {
            archive_entry_set_filetype(e.get(), AE_IFDIR);
            if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) fail(a.get(), "cannot archive " + rel);
        } else if (S_ISLNK(st.st_mode)) {
            auto target = fs::read_symlink(it->path(), ec);
            if (ec) continue;
            archive_entry_set_filetype(e.get(), AE_IFLNK);
            archive_entry_set_symlink(e.get(), target.c_str());
            if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) fail(a.get(), "cannot archive " + rel);
        } else if (S_ISREG(st.st_mode)) {
            int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0) continue;
            struct Close {
                int fd;
                ~Close() { ::close(fd); }
            } closer{fd};
            if (::fstat(fd, &st) != 0) continue;
            archive_entry_set_filetype(e.get(), AE_IFREG);
            archive_entry_set_size(e.get(), st.st_size);
            if (archive_write_header(a.get(), e.get()) != ARCHIVE_OK) fail(a.get(), "cannot archive " + rel);
            // The header promised st_size bytes; a file that shrank meanwhile is padded by libarchive.
            char buf[65536];
            off_t left = st.st_size;
            while (left > 0) {
                ssize_t n = ::read(fd, buf, static_cast<size_t>(std::min<off_t>(left, sizeof buf)));
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) break;
                if (archive_write_data(a.get(), buf, static_cast<size_t>(n)) < 0)
                    fail(a.get(), "cannot archive " + rel);
                left -= n;
            }
        }
    }
    if (archive_write_close(a.get()) != ARCHIVE_OK) fail(a.get(), "cannot finish the profile archive");
    return out;
}

void unpack_profile(const std::string &archive_path, const std::string &dir) {
    ArchivePtr in(archive_read_new(), archive_read_free);
    archive_read_support_filter_all(in.get());
    archive_read_support_format_tar(in.get());
    if (archive_read_open_filename(in.get(), archive_path.c_str(), 65536) != ARCHIVE_OK)
        fail(in.get(), "cannot read the profile archive");
    ArchivePtr out(archive_write_disk_new(), archive_write_free);
    archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                  ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT |
                                                  ARCHIVE_EXTRACT_UNLINK);
    archive_entry *e = nullptr;
    while (true) {
        int r = archive_read_next_header(in.get(), &e);
        if (r == ARCHIVE_EOF) break;
        if (r != ARCHIVE_OK) fail(in.get(), "the profile archive is damaged");
        std::string rel = archive_entry_pathname(e);
        auto type = archive_entry_filetype(e);
        // Hard links could name any file of the sandbox; pack_profile never writes them.
        if ((type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) || archive_entry_hardlink(e)) continue;
        if (rel.empty() || rel.front() == '/' || rel == ".." || rel.starts_with("../") ||
            rel.find("/../") != std::string::npos || rel.ends_with("/.."))
            throw std::runtime_error("the profile archive has an entry outside its folder: " + rel);
        // Archives saved before pack_profile left these out still hold them.
        if (profile_path_excluded(rel)) continue;
        // The target is absolute, so the relative-path checks above stand in for libarchive's
        // SECURE_NOABSOLUTEPATHS; SECURE_SYMLINKS still refuses to write through a link.
        std::string target = dir;
        target.append("/").append(rel);
        archive_entry_set_pathname(e, target.c_str());
        if (archive_write_header(out.get(), e) != ARCHIVE_OK) fail(out.get(), "cannot unpack " + rel);
        const void *buf = nullptr;
        size_t size = 0;
        la_int64_t offset = 0;
        while ((r = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK)
            if (archive_write_data_block(out.get(), buf, size, offset) != ARCHIVE_OK)
                fail(out.get(), "cannot unpack " + rel);
        if (r != ARCHIVE_EOF) fail(in.get(), "the profile archive is damaged at " + rel);
        if (archive_write_finish_entry(out.get()) != ARCHIVE_OK) fail(out.get(), "cannot unpack " + rel);
    }
    if (archive_write_close(out.get()) != ARCHIVE_OK) fail(out.get(), "cannot finish unpacking the profile");
}

} // namespace hangar::browsers
