#include "openapi.hpp"

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace hangar::host {

extern const char kOpenApiBase[];

using json = nlohmann::json;

namespace {

void merge_path(json &paths, const std::string &path, const json &item, const std::string &plugin,
                std::vector<std::string> &conflicts) {
    auto [it, fresh] = paths.emplace(path, item);
    if (fresh) return;
    // Two plugins under one path (rare: different methods): join their operations.
    for (const auto &[key, value] : item.items()) {
        auto [op, added] = it->emplace(key, value);
        if (!added && *op != value)
            conflicts.push_back(
                std::string(plugin).append(": ").append(path).append(" ").append(key).append(" is already defined"));
    }
}

} // namespace

json merge_openapi(json base, const std::vector<OpenApiFragment> &fragments, std::vector<std::string> &conflicts) {
    auto &paths = base["paths"];
    auto &components = base["components"];
    for (const auto &f : fragments) {
        if (!f.doc.is_object()) continue;
        if (auto p = f.doc.find("paths"); p != f.doc.end() && p->is_object())
            for (const auto &[path, item] : p->items())
                merge_path(paths, path, item, f.plugin, conflicts);
        if (auto c = f.doc.find("components"); c != f.doc.end() && c->is_object())
            for (const auto &[section, entries] : c->items())
                for (const auto &[name, value] : entries.items()) {
                    auto [it, added] = components[section].emplace(name, value);
                    if (!added && *it != value)
                        conflicts.push_back(std::string(f.plugin)
                                                .append(": components/")
                                                .append(section)
                                                .append("/")
                                                .append(name)
                                                .append(" differs from an earlier definition"));
                }
    }
    return base;
}

json openapi_base() {
    return json::parse(kOpenApiBase);
}

json read_openapi_fragment(const std::string &library_file, const std::string &name) {
    auto file = std::filesystem::path(library_file).parent_path() / (name + ".openapi.json");
    std::ifstream in(file);
    if (!in) return json::object();
    auto doc = json::parse(in, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) throw std::runtime_error(file.string() + " is not a JSON object");
    return doc;
}

} // namespace hangar::host
