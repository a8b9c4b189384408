"""Writes a C++ file defining org::dashboard_files() from the files given (name -> bytes)."""
import sys

out, files = sys.argv[1], sys.argv[2:]
lines = ['#include "dashboard.hpp"', "", "namespace org {", "",
         "const std::map<std::string, std::string_view> &dashboard_files() {",
         "    static const std::map<std::string, std::string_view> files = {"]
for path in files:
    name = path.rsplit("/", 1)[-1]
    data = open(path, "rb").read()
    body = ", ".join(str(b) for b in data)
    lines.append('        {"%s", [] {' % name)
    lines.append("             static const unsigned char bytes[] = {%s};" % (body or "0"))
    lines.append("             return std::string_view(reinterpret_cast<const char *>(bytes), %d);" % len(data))
    lines.append("         }()},")
lines += ["    };", "    return files;", "}", "", "} // namespace org", ""]
open(out, "w").write("\n".join(lines))
