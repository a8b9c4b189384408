// multipart/form-data bodies (what the SDK sends for file uploads), parsed in place: each part's
// data is a view into the request body, which outlives the handler's use of it.
#pragma once

#include <hangar/plugin.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace hangar {

struct Part {
    std::string name;
    std::string filename;
    std::string_view data;
};

inline std::vector<Part> parse_multipart(Request &req) {
    auto ct = req.header("Content-Type").value_or("");
    if (ct.find("multipart/form-data") == std::string::npos)
        throw Error::bad_request("the body must be multipart/form-data",
                                 {{"invalid_input", "body: not multipart/form-data"}});
    auto bpos = ct.find("boundary=");
    if (bpos == std::string::npos) throw Error::bad_request("multipart body without a boundary");
    std::string boundary = ct.substr(bpos + 9);
    if (auto semi = boundary.find(';'); semi != std::string::npos) boundary = boundary.substr(0, semi);
    if (boundary.size() >= 2 && boundary.front() == '"') boundary = boundary.substr(1, boundary.size() - 2);
    std::string_view body = req.body();
    std::string delim = "--" + boundary;
    std::vector<Part> parts;
    std::size_t pos = body.find(delim);
    if (pos == std::string_view::npos) throw Error::bad_request("malformed multipart body");
    while (true) {
        pos += delim.size();
        if (body.substr(pos, 2) == "--") break;
        if (body.substr(pos, 2) != "\r\n") throw Error::bad_request("malformed multipart body");
        pos += 2;
        auto hend = body.find("\r\n\r\n", pos);
        if (hend == std::string_view::npos) throw Error::bad_request("malformed multipart body");
        std::string_view headers = body.substr(pos, hend - pos);
        std::size_t dstart = hend + 4;
        auto next = body.find("\r\n" + delim, dstart);
        if (next == std::string_view::npos) throw Error::bad_request("malformed multipart body");
        Part p;
        p.data = body.substr(dstart, next - dstart);
        // Content-Disposition: form-data; name="..."; filename="..."
        std::string h(headers);
        std::string lower = h;
        for (auto &c : lower)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        auto param = [&](const std::string &key) -> std::string {
            std::size_t at = 0;
            while ((at = lower.find(key + "=\"", at)) != std::string::npos) {
                if (at > 0 && (std::isalnum(static_cast<unsigned char>(lower[at - 1])))) {
                    at += 1;
                    continue;
                }
                auto s = at + key.size() + 2;
                auto e = h.find('"', s);
                return e == std::string::npos ? std::string() : h.substr(s, e - s);
            }
            return {};
        };
        p.name = param("name");
        p.filename = param("filename");
        parts.push_back(std::move(p));
        pos = next + 2;
    }
    return parts;
}

// The first part named `name`, or nullptr.
inline const Part *find_part(const std::vector<Part> &parts, std::string_view name) {
    for (const auto &p : parts)
        if (p.name == name) return &p;
    return nullptr;
}

// The elements of an array of objects sent as parts, each a field → part map, in index order.
// Every encoding the Kernel SDKs use is read: `files[0][dest_path]` (TypeScript, Python),
// `files.0.dest_path` and `files[0].dest_path` (Go, indices), and the index-less `files.dest_path`
// (Go's default "comma" form) / `files[][dest_path]` (the Python SDK's brackets form), where the
// n-th occurrence of a field belongs to the n-th element. At most 6 index digits: a longer index is not an element.
struct IndexedElement {
    std::string label; // "files[0]", for error messages
    std::map<std::string, const Part *, std::less<>> fields;
};
inline std::vector<IndexedElement> indexed_parts(const std::vector<Part> &parts, std::string_view array) {
    std::map<long, IndexedElement> indexed;
    std::vector<IndexedElement> positional;
    std::map<std::string, std::size_t> seen;
    for (const auto &p : parts) {
        std::string_view n = p.name;
        if (n.substr(0, array.size()) != array) continue;
        n.remove_prefix(array.size());
        std::string index, field;
        auto digits = [](std::string_view d) {
            return !d.empty() && d.size() <= 6 &&
                   std::all_of(d.begin(), d.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
        };
        auto field_of = [](std::string_view rest) -> std::string {
            if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
                rest = rest.substr(1, rest.size() - 2);
            else if (rest.size() > 1 && rest.front() == '.')
                rest.remove_prefix(1);
            else
                return {};
            return rest.find_first_of("[].") == std::string_view::npos ? std::string(rest) : std::string();
        };
        if (n.size() > 1 && n.front() == '[') {
            auto close = n.find(']');
            if (close == std::string_view::npos) continue;
            index = std::string(n.substr(1, close - 1));
            field = field_of(n.substr(close + 1));
        } else if (n.size() > 1 && n.front() == '.') {
            auto dot = n.find_first_of(".[", 1);
            auto first = n.substr(1, dot == std::string_view::npos ? std::string_view::npos : dot - 1);
            if (digits(first) && dot != std::string_view::npos) {
                index = std::string(first);
                field = field_of(n.substr(dot));
            } else {
                field = field_of(n);
            }
        }
        if (field.empty()) continue;
        if (index.empty()) {
            // Index-less: the n-th occurrence of a field belongs to the n-th element, whether the
            // parts come interleaved (Go) or field by field (the Python SDK: data, then files).
            std::size_t n = seen[field]++;
            if (positional.size() <= n) positional.resize(n + 1);
            positional[n].fields[field] = &p;
        } else if (digits(index)) {
            auto &e = indexed[std::stol(index)];
            e.fields[field] = &p;
        }
    }
    std::vector<IndexedElement> out;
    for (auto &[i, e] : indexed) {
        e.label = std::string(array) + "[" + std::to_string(i) + "]";
        out.push_back(std::move(e));
    }
    for (auto &e : positional) {
        e.label = std::string(array) + "[" + std::to_string(out.size()) + "]";
        out.push_back(std::move(e));
    }
    return out;
}

} // namespace hangar
