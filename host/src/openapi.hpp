// GET /openapi.json: the host's embedded base document plus the fragment each loaded plugin
// installs beside its library (<dir>/<name>.openapi.json), so the document lists exactly the
// routes this server has.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace hangar::host {

struct OpenApiFragment {
    std::string plugin; // for messages
    nlohmann::json doc; // {paths?, components?}
};

// Merges the fragments into the base document. A path + method or a component that two parts
// define differently keeps the first definition and adds a line to `conflicts`.
nlohmann::json merge_openapi(nlohmann::json base, const std::vector<OpenApiFragment> &fragments,
                             std::vector<std::string> &conflicts);

// The host's own part (host/openapi.yaml, converted at build time).
nlohmann::json openapi_base();

// Reads <dir of library>/<name>.openapi.json; an empty object when there is none.
nlohmann::json read_openapi_fragment(const std::string &library_file, const std::string &name);

} // namespace hangar::host
