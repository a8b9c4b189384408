#pragma once

#include <string>
#include <vector>

namespace hangar::host {

class Config;

// `hangar doctor`: prints one line per check and what to fix; returns the exit status.
int doctor(Config &cfg, const std::string &exe, const std::vector<std::string> &plugin_dirs,
           const std::string &chromium_path);

} // namespace hangar::host
