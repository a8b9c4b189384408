// The fs plugin's path check (plugins/fs/paths.hpp). An accepted path is absolute, normalised,
// free of `..` and of a trailing slash, and checking it again gives it back unchanged.
#include "paths.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string raw(reinterpret_cast<const char *>(data), size);
    try {
        std::string p = hangar::fs::checked_path("path", raw);
        if (p.empty() || p.front() != '/') std::abort();
        if (p.size() > 1 && p.back() == '/') std::abort();
        for (const auto &part : std::filesystem::path(p))
            if (part == ".." || part == ".") std::abort();
        if (hangar::fs::checked_path("path", p) != p) std::abort();
    } catch (const hangar::Error &e) {
        if (e.status() != 400) std::abort();
    }
    return 0;
}
