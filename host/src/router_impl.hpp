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
    std::vector<std::string> names; // each route names its own captures: /browsers/{id_or_name}
                                    // and /browsers/{id}/fs share the tree node, not the name
    for (const auto &seg : path_segments(pattern)) {
        if (seg.size() > 3 && seg.front() == '{' && seg.ends_with("*}")) {
            if (!node->rest) node->rest = std::make_unique<Node>();
            names.push_back(seg.substr(1, seg.size() - 3));
            node = node->rest.get();
            break;
        }
        if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
            if (!node->capture) node->capture = std::make_unique<Node>();
            names.push_back(seg.substr(1, seg.size() - 2));
            node = node->capture.get();
        } else {
            auto &next = node->literals[seg];
            if (!next) next = std::make_unique<Node>();
            node = next.get();
        }
    }
    if (!node->handlers.emplace(method, Handler{std::move(target), std::move(names), pattern}).second) return false;
    table_.emplace_back(method, pattern);
    return true;
}

template <typename Target>
const typename Router<Target>::Node *Router<Target>::walk(const Node &node, const std::vector<std::string> &segs,
                                                          std::size_t i, std::vector<std::string> &values) const {
    if (i == segs.size()) return node.handlers.empty() ? nullptr : &node;
    if (auto it = node.literals.find(url_decode(segs[i])); it != node.literals.end())
        if (auto *found = walk(*it->second, segs, i + 1, values)) return found;
    if (node.capture) {
        values.push_back(url_decode(segs[i]));
        if (auto *found = walk(*node.capture, segs, i + 1, values)) return found;
        values.pop_back();
    }
    if (node.rest && !node.rest->handlers.empty()) {
        std::string rest;
        for (std::size_t j = i; j < segs.size(); ++j)
            rest += (j == i ? "" : "/") + url_decode(segs[j]);
        values.push_back(std::move(rest));
        return node.rest.get();
    }
    return nullptr;
}

template <typename Target>
std::variant<typename Router<Target>::Match, typename Router<Target>::Miss>
Router<Target>::find(const std::string &method, const std::string &raw_path) const {
    std::vector<std::string> values;
    const Node *node = walk(root_, path_segments(raw_path), 0, values);
    if (!node) return Miss::NoPath;
    auto it = node->handlers.find(method);
    if (it == node->handlers.end() && method == "HEAD") it = node->handlers.find("GET");
    if (it == node->handlers.end()) return Miss::WrongMethod;
    Match match{&it->second.target, {}, &it->second.pattern};
    for (std::size_t k = 0; k < it->second.names.size() && k < values.size(); ++k)
        match.params[it->second.names[k]] = values[k];
    return match;
}

template <typename Target> std::vector<std::string> Router<Target>::allowed_methods(const std::string &raw_path) const {
    std::vector<std::string> values;
    const Node *node = walk(root_, path_segments(raw_path), 0, values);
    std::vector<std::string> out;
    if (node)
        for (const auto &[m, _] : node->handlers)
            out.push_back(m);
    return out;
}

} // namespace hangar::host
