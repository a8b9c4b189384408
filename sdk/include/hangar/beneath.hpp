// Files in a folder a sandbox can write, opened from the server side.
//
// Everything in an instance's folder (logs, recordings, what an app writes) is under the control
// of the code running in that instance: any component of a path there can be replaced at any time
// by a symlink, a hard link, a FIFO or another file system. A check before the open (lstat,
// realpath) races with that replacement; only the kernel resolving the whole path under the folder
// with no symlink at all cannot be raced. So every server-side open of such a path goes through
// here: openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
// RESOLVE_NO_XDEV, then a check of what was opened (a plain file with one link, never a FIFO or a
// device, which could block or read host state). Header-only, for the host and plugins alike.
#pragma once

#include <hangar/process.hpp>

#include <linux/openat2.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>

namespace hangar::beneath {

// `rel` opened under the folder `root` (a path the server chose, not one a sandbox can change)
// with the kernel refusing any symlink, "..", absolute path or mount crossing on the way; an
// invalid Fd (errno set) otherwise. `flags` are open(2)'s; O_CLOEXEC is always added.
inline proc::Fd open(const std::string &root, std::string_view rel, int flags, mode_t mode = 0) {
    proc::Fd dir(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) return proc::Fd();
    std::string path(rel);
    open_how how{};
    // openat2 refuses flags that mean nothing with O_PATH (O_NOCTTY among them).
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | ((flags & O_PATH) ? 0 : O_NOCTTY));
    how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    long fd = ::syscall(SYS_openat2, dir.get(), path.c_str(), &how, sizeof how);
    return proc::Fd(fd < 0 ? -1 : static_cast<int>(fd));
}

// A plain file under `root` opened for reading: refused (invalid Fd) unless it is a regular file
// with exactly one link (a hard link could name a file the sandbox may not otherwise show). Never
// blocks on a FIFO: it is opened non-blocking and refused as not regular.
inline proc::Fd open_plain_file(const std::string &root, std::string_view rel, struct stat *st_out = nullptr) {
    proc::Fd fd = open(root, rel, O_RDONLY | O_NONBLOCK);
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) return proc::Fd();
    int flags = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    if (st_out) *st_out = st;
    return fd;
}

// At most the last `max` bytes of a plain file under `root`; "" when there is none.
inline std::string read_tail(const std::string &root, std::string_view rel, std::size_t max) {
    struct stat st {};
    proc::Fd fd = open_plain_file(root, rel, &st);
    if (!fd) return {};
    off_t from = st.st_size > static_cast<off_t>(max) ? st.st_size - static_cast<off_t>(max) : 0;
    std::string out(static_cast<std::size_t>(st.st_size - from), '\0');
    ssize_t n = ::pread(fd.get(), out.data(), out.size(), from);
    out.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    return out;
}

// Moves the plain file `rel` under `root` to `dst` (a server path): renamed when both are on one
// file system, else copied in the kernel and the source unlinked. The file moved is the one that
// was checked: the rename goes through the folder's own descriptor, and is undone unless the
// inode that arrived is the inode that was opened. False (nothing at `dst`) when it is not a
// plain file or cannot be moved.
inline bool move_out(const std::string &root, std::string_view rel, const std::string &dst) {
    auto slash = rel.find_last_of('/');
    std::string_view folder = slash == std::string_view::npos ? std::string_view() : rel.substr(0, slash);
    std::string name(rel.substr(slash == std::string_view::npos ? 0 : slash + 1));
    if (name.empty() || name == "." || name == "..") return false;
    proc::Fd parent = folder.empty() ? proc::Fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC))
                                     : open(root, folder, O_PATH | O_DIRECTORY);
    struct stat st {};
    proc::Fd in = open_plain_file(root, rel, &st);
    if (!parent || !in) return false;
    std::string dst_folder = dst.substr(0, dst.find_last_of('/') + 1);
    struct stat dir {};
    if (::stat(dst_folder.empty() ? "." : dst_folder.c_str(), &dir) == 0 && dir.st_dev == st.st_dev) {
        if (::renameat(parent.get(), name.c_str(), AT_FDCWD, dst.c_str()) != 0) return false;
        struct stat moved {};
        if (::lstat(dst.c_str(), &moved) == 0 && S_ISREG(moved.st_mode) && moved.st_ino == st.st_ino &&
            moved.st_dev == st.st_dev && moved.st_nlink == 1)
            return true;
        ::unlink(dst.c_str());
        return false;
    }
    std::string part = dst + ".part";
    proc::Fd out(::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640));
    if (!out) return false;
    // sendfile copies in the kernel between any two file systems (copy_file_range does not).
    bool ok = true;
    for (off_t left = st.st_size; ok && left > 0;) {
        ssize_t n = ::sendfile(out.get(), in.get(), nullptr, static_cast<std::size_t>(left));
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        left -= n > 0 ? n : 0;
    }
    ok = ok && ::fsync(out.get()) == 0 && ::rename(part.c_str(), dst.c_str()) == 0;
    if (!ok) {
        ::unlink(part.c_str());
        return false;
    }
    ::unlinkat(parent.get(), name.c_str(), 0);
    return true;
}

} // namespace hangar::beneath
