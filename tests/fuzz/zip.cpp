// hangar::read_zip (sdk/include/hangar/zip.hpp), through its public function only: the
// validation pass and the pass that hands entries on. Whatever the archive, an accepted entry
// is relative, has no `..` and stays within the limits; anything else is a 400.
#include <hangar/zip.hpp>

#include <cstdint>
#include <cstdlib>
#include <filesystem>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
    std::string_view bytes(reinterpret_cast<const char *>(data), size);
    hangar::ZipLimits limits;
    limits.max_entries = 64;
    limits.max_bytes = 1 << 20;
    try {
        hangar::read_zip(bytes, limits, {});
        std::size_t entries = 0;
        std::uint64_t total = 0;
        hangar::read_zip(bytes, limits, [&](hangar::ZipItem &&item) {
            ++entries;
            total += item.data.size();
            if (item.rel.empty() || item.rel.front() == '/') std::abort();
            for (const auto &part : std::filesystem::path(item.rel))
                if (part == "..") std::abort();
        });
        if (entries > limits.max_entries || total > limits.max_bytes) std::abort();
    } catch (const hangar::Error &e) {
        if (e.status() != 400) std::abort();
    }
    return 0;
}
