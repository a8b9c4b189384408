// The dashboard's files, embedded by embed_dashboard.py at build time: name → bytes.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace org {
const std::map<std::string, std::string_view> &dashboard_files();
}
