#include "tar_bounds.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace profiles {

namespace {

using ArchivePtr = std::unique_ptr<archive, int (*)(archive *)>;

void write_all(int fd, const char *p, std::size_t n) {
    while (n > 0) {
        auto w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error(std::string("cannot write the tar: ") + std::strerror(errno));
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

// The zstd layer undone into `tar_path`, stopping past max_bytes.
void decompress(const std::string &compressed, const std::string &tar_path, const TarLimits &limits) {
    ArchivePtr a(archive_read_new(), archive_read_free);
    archive_read_support_filter_all(a.get());
    archive_read_support_format_raw(a.get());
    archive_entry *entry = nullptr;
    if (archive_read_open_filename(a.get(), compressed.c_str(), 65536) != ARCHIVE_OK ||
        archive_read_next_header(a.get(), &entry) != ARCHIVE_OK)
        throw std::runtime_error("the stored profile archive cannot be read");
    int fd = ::open(tar_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error(std::string("cannot create the tar: ") + std::strerror(errno));
    struct Close {
        int fd;
        ~Close() { ::close(fd); }
    } closer{fd};
    std::uint64_t total = 0;
    char buf[65536];
    la_ssize_t n = 0;
    while ((n = archive_read_data(a.get(), buf, sizeof buf)) > 0) {
        total += static_cast<std::uint64_t>(n);
        if (total > limits.max_bytes)
            throw TarRefused("the profile's tar is larger than " + std::to_string(limits.max_bytes) + " bytes");
        write_all(fd, buf, static_cast<std::size_t>(n));
    }
    if (n < 0) throw std::runtime_error("the stored profile archive is damaged");
}

// Every entry of the tar at `tar_path` within the limits, with names that stay inside.
void check_entries(const std::string &tar_path, const TarLimits &limits) {
    ArchivePtr a(archive_read_new(), archive_read_free);
    archive_read_support_filter_none(a.get());
    archive_read_support_format_tar(a.get());
    if (archive_read_open_filename(a.get(), tar_path.c_str(), 65536) != ARCHIVE_OK)
        throw std::runtime_error("the profile's tar cannot be read");
    archive_entry *entry = nullptr;
    std::uint64_t entries = 0, declared = 0;
    int rc = ARCHIVE_OK;
    while ((rc = archive_read_next_header(a.get(), &entry)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
        if (++entries > limits.max_entries)
            throw TarRefused("the profile's tar has more than " + std::to_string(limits.max_entries) + " entries");
        const char *name = archive_entry_pathname(entry);
        if (!name || !contained_path(name))
            throw TarRefused(std::string("the profile's tar names a path outside its folder: ") + (name ? name : ""));
        for (const char *target : {archive_entry_hardlink(entry), archive_entry_symlink(entry)})
            if (target && !contained_path(target))
                throw TarRefused(std::string("the profile's tar links ") + name + " outside its folder: " + target);
        // Sizes as declared: a sparse entry unpacks to its size, whatever the tar holds of it.
        if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0)
            declared += static_cast<std::uint64_t>(archive_entry_size(entry));
        if (declared > limits.max_bytes)
            throw TarRefused("the profile's tar unpacks to more than " + std::to_string(limits.max_bytes) + " bytes");
        if (archive_read_data_skip(a.get()) != ARCHIVE_OK) throw std::runtime_error("the profile's tar is damaged");
    }
    if (rc != ARCHIVE_EOF) throw std::runtime_error("the profile's tar is damaged");
}

} // namespace

bool contained_path(std::string_view name) {
    if (name.empty() || name.front() == '/' || name.find('\0') != std::string_view::npos) return false;
    while (!name.empty()) {
        auto slash = name.find('/');
        std::string_view part = name.substr(0, slash);
        if (part == "..") return false;
        name = slash == std::string_view::npos ? std::string_view() : name.substr(slash + 1);
    }
    return true;
}

void extract_tar_bounded(const std::string &compressed, const std::string &tar_path, const TarLimits &limits) {
    try {
        decompress(compressed, tar_path, limits);
        check_entries(tar_path, limits);
    } catch (...) {
        ::unlink(tar_path.c_str());
        throw;
    }
}

} // namespace profiles
