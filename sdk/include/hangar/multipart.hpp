// multipart/form-data bodies (what the SDK sends for file uploads), parsed in place: each part's
// data is a view into the request body, which outlives the handler's use of it.
#pragma once

#include <hangar/plugin.hpp>

#include <cctype>
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

} // namespace hangar
