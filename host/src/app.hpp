// The `hangar` command: `serve` (the public API), `agent` (inside one instance's sandbox) and
// `admin` (projects and API keys).
#pragma once

#include <string>
#include <vector>

namespace hangar::host {

int run_main(int argc, char **argv);

// Path helpers shared with tests.
std::string find_config_file(const std::string &explicit_path, const std::string &exe);
std::string executable_path();

} // namespace hangar::host
