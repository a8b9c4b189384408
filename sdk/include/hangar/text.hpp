// Small text helpers more than one plugin needs, so each lives once (issue 49).
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace hangar {

// ASCII lower case (host names, schemes, header names, enum values): never the locale's.
inline std::string lower(std::string_view s) {
    std::string out(s);
    for (auto &c : out)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

// Lower-case hex of bytes (digests, signatures).
inline std::string hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char c : bytes) {
        out += digits[c >> 4];
        out += digits[c & 0xf];
    }
    return out;
}

// An HTTP header name in Go's canonical form ("content-type" → "Content-Type"), the form
// Kernel's Go services write header names in and the one to compare case-insensitive names by.
inline std::string canonical_header_name(std::string_view name) {
    std::string out(name);
    bool upper = true;
    for (auto &c : out) {
        c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                    : std::tolower(static_cast<unsigned char>(c)));
        upper = c == '-';
    }
    return out;
}

} // namespace hangar
