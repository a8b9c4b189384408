// Small helpers shared by the host's parts.
#pragma once

#include <hangar/plugin.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::host {

// Random lowercase alphanumerics from the OS CSPRNG (ids, keys, secrets).
std::string random_token(std::size_t length);
std::string sha256_hex(std::string_view data);
// One implementation for the host and plugins: the SDK's.
using hangar::iequals;
using hangar::url_decode;
std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);
std::int64_t now_ms();    // wall clock, ms since the epoch
std::int64_t steady_ms(); // monotonic, ms
std::string rfc3339(std::int64_t epoch_ms);

// Reads a whole file; throws on failure.
std::string read_file(const std::string &path);
// Writes a file atomically (temp file in the same folder, then rename).
void write_file_atomic(const std::string &path, std::string_view data, unsigned mode = 0600);

} // namespace hangar::host
