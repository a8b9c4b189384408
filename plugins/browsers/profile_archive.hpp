// A profile is Chromium's user-data folder as a zstd-compressed tar (Kernel's current format),
// without what Chromium rebuilds by itself (caches, crash dumps, the singleton lock).
#pragma once

#include <string>
#include <string_view>

namespace hangar::browsers {

// True for paths (relative to the user-data folder, '/'-separated) a saved profile leaves out.
bool profile_path_excluded(std::string_view relative);

// Archives `dir` (Chromium must not be running) into tar + zstd, in memory. Symlinks are stored
// as links, never followed; sockets and fifos are skipped. Throws std::runtime_error.
std::string pack_profile(const std::string &dir);

// Unpacks an archive written by pack_profile (or any tar, compressed or not) into `dir`, which
// must exist. Entries that would land outside `dir` (absolute, "..", through a symlink) are
// refused. Throws std::runtime_error naming the archive's problem.
void unpack_profile(const std::string &archive_path, const std::string &dir);

} // namespace hangar::browsers
