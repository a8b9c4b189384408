// `download?format=tar`: the tar inside a profile's tar.zst, undone on the server. The archive
// was written by the session's agent, inside a sandbox a tenant can run commands in, so it is
// treated as hostile: a few kilobytes of zstd can stand for terabytes of zeros, and a tar can
// name /etc/passwd or ../../x. The tar is streamed to a file (never held in memory) while its
// size is counted, then read entry by entry before anything of it is sent.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace profiles {

struct TarLimits {
    std::uint64_t max_bytes = std::uint64_t{2} << 30; // the tar, and the sum of its entries' sizes
    std::uint64_t max_entries = 200'000;
};

// The archive passes a limit or names a path outside the folder it unpacks into.
class TarRefused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Whether an entry name (or a link's target) stays inside the folder it unpacks into: relative,
// no ".." component, no NUL.
bool contained_path(std::string_view name);

// Writes the tar inside the compressed archive at `compressed` to `tar_path` within `limits`.
// Throws TarRefused past a limit or for an escaping name (`tar_path` is then removed), and
// std::runtime_error when the archive cannot be read.
void extract_tar_bounded(const std::string &compressed, const std::string &tar_path, const TarLimits &limits);

} // namespace profiles
