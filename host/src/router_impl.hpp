#pragma once

#include "util.hpp"

#include <variant>

namespace hangar::host {

inline std::vector<std::string> path_segments(const std::string &path) {
    std::vector<std::string> out;
    for (auto &s : split(path, '/'))
        if (!s.empty()) out.push_back(std::move(s));
    return out;
}

template <typename Target>
bool Router<Target>::add(const std::string &method, const std::string &pattern, Target target) {
    Node *node = &root_;
    for (const auto &seg : path_segments(pattern)) {
        if (seg.size() > 3 && seg.front() == '{' && seg.ends_with("*}")) {
            if (!node->rest) node->rest = std::make_unique<Node>();
            node->rest_name = seg.substr(1, seg.size() - 3);
            node = node->rest.get();
            break;
        }
        if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
            if (!node->capture) node->capture = std::make_unique<Node>();
            node->capture_name = seg.substr(1, seg.size() - 2);
            node = node->capture.get();
        } else {
            auto &next = node->literals[seg];
            if (!next) next = std::make_unique<Node>();
            node = next.get();
        }
    }
    return node->handlers.emplace(method, std::move(target)).second;
}

template <typename Target>
const typename Router<Target>::Node *Router<Target>::walk(const Node &node, const std::vector<std::string> &segs,
                                                          std::size_t i,
                                                          std::map<std::string, std::string> &params) const {
    if (i == segs.size()) return node.handlers.empty() ? nullptr : &node;
    if (auto it = node.literals.find(url_decode(segs[i])); it != node.literals.end())
        if (auto *found = walk(*it->second, segs, i + 1, params)) return found;
    if (node.capture) {
        params[node.capture_name] = url_decode(segs[i]);
        if (auto *found = walk(*node.capture, segs, i + 1, params)) return found;
        params.erase(node.capture_name);
    }
    if (node.rest && !node.rest->handlers.empty()) {
        std::string rest;
        for (std::size_t j = i; j < segs.size(); ++j)
            rest += (j == i ? "" : "/") + url_decode(segs[j]);
        params[node.rest_name] = rest;
        return node.rest.get();
    }
    return nullptr;
}

template <typename Target>
std::variant<typename Router<Target>::Match, typename Router<Target>::Miss>
Router<Target>::find(const std::string &method, const std::string &raw_path) const {
    std::map<std::string, std::string> params;
    const Node *node = walk(root_, path_segments(raw_path), 0, params);
    if (!node) return Miss::NoPath;
    auto it = node->handlers.find(method);
    if (it == node->handlers.end() && method == "HEAD") it = node->handlers.find("GET");
    if (it == node->handlers.end()) return Miss::WrongMethod;
    return Match{&it->second, std::move(params)};
}

template <typename Target> std::vector<std::string> Router<Target>::allowed_methods(const std::string &raw_path) const {
    std::map<std::string, std::string> params;
    const Node *node = walk(root_, path_segments(raw_path), 0, params);
    std::vector<std::string> out;
    if (node)
        for (const auto &[m, _] : node->handlers)
            out.push_back(m);
    return out;
}

} // namespace hangar::host
