#include "extension_install.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;

namespace hangar::extensions {

namespace {

std::string random_suffix() {
    unsigned char b[6];
    if (::getrandom(b, sizeof b, 0) != static_cast<ssize_t>(sizeof b)) throw std::runtime_error("getrandom failed");
    static constexpr char hex[] = "0123456789abcdef";
    std::string s;
    for (unsigned char c : b) {
        s += hex[c >> 4];
        s += hex[c & 15];
    }
    return s;
}

} // namespace

std::string extension_root(std::string_view zip, const hangar::ZipLimits &limits, const std::string &field) {
    std::set<std::string> top;
    bool root_manifest = false, nested_manifest = false;
    hangar::walk_zip(
        zip, limits,
        [&](const hangar::ZipEntry &it) -> hangar::ZipChunkSink {
            auto slash = it.rel.find('/');
            top.insert(it.rel.substr(0, slash));
            if (it.rel == "manifest.json") root_manifest = true;
            if (slash != std::string::npos && it.rel.substr(slash + 1) == "manifest.json") nested_manifest = true;
            return {};
        },
        field);
    if (root_manifest) return "";
    if (!nested_manifest || top.size() != 1)
        throw Error::invalid(field, "has no manifest.json at its root or in its one top-level folder");
    return *top.begin() + "/";
}

void install_extension(std::string_view zip, const std::string &dir, const std::string &name,
                       const hangar::ZipLimits &limits) {
    std::string strip = extension_root(zip, limits);
    fs::create_directories(dir);
    std::string staging = dir + "/.install-" + name + "-" + random_suffix();
    struct Cleanup {
        std::string path;
        ~Cleanup() {
            std::error_code ec;
            if (!path.empty()) fs::remove_all(path, ec);
        }
    } cleanup{staging};
    hangar::unzip_to(zip, staging, limits, "zip_file", strip);
    // The new folder takes the name in one rename; the old one (if any) is moved aside first.
    std::string final_path = dir + "/" + name;
    std::string old = dir + "/.old-" + name + "-" + random_suffix();
    bool had_old = fs::exists(final_path);
    if (had_old) fs::rename(final_path, old);
    try {
        fs::rename(staging, final_path);
    } catch (...) {
        if (had_old) fs::rename(old, final_path);
        throw;
    }
    cleanup.path.clear();
    std::error_code ec;
    if (had_old) fs::remove_all(old, ec);
}

std::vector<std::string> installed_extensions(const std::string &dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        auto name = e.path().filename().string();
        if (name.empty() || name[0] == '.') continue;
        if (e.is_directory(ec) && fs::exists(e.path() / "manifest.json", ec)) out.push_back(e.path().string());
    }
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace hangar::extensions
