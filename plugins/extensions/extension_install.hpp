// Unpacked Chromium extensions in the instance: /home/kernel/extensions/<name>/manifest.json.
#pragma once

#include <hangar/zip.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace hangar::extensions {

// The folder of `zip` that holds manifest.json ("" for the root, else "<top>/" for its one
// top-level folder), once every entry passed the zip checks. Reads names only, so it holds nothing
// of the content whatever its size. Error 400 on `field` when there is no such manifest.
std::string extension_root(std::string_view zip, const hangar::ZipLimits &limits,
                           const std::string &field = "zip_file");

// Unpacks `zip` (an unpacked extension: manifest.json at its root or in its one top-level folder)
// to <dir>/<name>, replacing what was there in one rename: a failure leaves the old folder as it
// was. Throws Error 400 for a bad archive, std::runtime_error for the file system.
void install_extension(std::string_view zip, const std::string &dir, const std::string &name,
                       const hangar::ZipLimits &limits);

// The extension folders under `dir` that hold a manifest.json, sorted by name.
std::vector<std::string> installed_extensions(const std::string &dir);

} // namespace hangar::extensions
