// Method + path pattern matching. Patterns are '/'-separated literals and `{name}` captures; a
// final `{name*}` captures the rest. Literal segments win over captures, so `/extensions/
// from_chrome_store` is found before `/extensions/{id_or_name}` whatever the registration order.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace hangar::host {

template <typename Target> class Router {
public:
    struct Match {
        const Target *target;
        std::map<std::string, std::string> params; // URL-decoded
        const std::string *pattern;                // as added, e.g. /browsers/{id}
    };
    enum class Miss { NoPath, WrongMethod };

    // Returns false when the same method + pattern is already taken.
    bool add(const std::string &method, const std::string &pattern, Target target);
    // `raw_path` is still percent-encoded; each segment is decoded after matching so an encoded
    // '/' inside an id stays inside its segment.
    std::variant<Match, Miss> find(const std::string &method, const std::string &raw_path) const;
    std::vector<std::string> allowed_methods(const std::string &raw_path) const;
    // Every method + pattern added, in order (for the route log that tests hold the OpenAPI
    // document against).
    const std::vector<std::pair<std::string, std::string>> &table() const { return table_; }

private:
    struct Handler {
        Target target;
        std::vector<std::string> names; // this route's capture names, in path order
        std::string pattern;
    };
    struct Node {
        std::map<std::string, std::unique_ptr<Node>> literals;
        std::unique_ptr<Node> capture;
        std::unique_ptr<Node> rest;
        std::map<std::string, Handler> handlers; // by method
    };
    const Node *walk(const Node &node, const std::vector<std::string> &segs, std::size_t i,
                     std::vector<std::string> &values) const;
    Node root_;
    std::vector<std::pair<std::string, std::string>> table_;
};

std::vector<std::string> path_segments(const std::string &path);

} // namespace hangar::host

#include "router_impl.hpp"
