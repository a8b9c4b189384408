// Path checks of the fs API, apart so tests/fuzz can drive them without the plugin.
#pragma once

#include <hangar/plugin.hpp>

#include <filesystem>
#include <string>

namespace hangar::fs {

// An absolute, normalised path with no `..` component and no trailing slash (400 otherwise).
inline std::string checked_path(const std::string &field, const std::string &raw) {
    if (raw.empty()) throw Error::invalid(field, "required");
    if (raw[0] != '/') throw Error::invalid(field, "must be an absolute path");
    if (raw.find('\0') != std::string::npos) throw Error::invalid(field, "contains a NUL byte");
    for (const auto &part : std::filesystem::path(raw))
        if (part == "..") throw Error::invalid(field, "must not contain '..'");
    std::string norm = std::filesystem::path(raw).lexically_normal().string();
    while (norm.size() > 1 && norm.back() == '/')
        norm.pop_back();
    return norm;
}

} // namespace hangar::fs
