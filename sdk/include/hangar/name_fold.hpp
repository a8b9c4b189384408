// Names that users type and look up again ("Café Export", "cafe export"): the one key they are
// compared by, case- and accent-insensitive, the same on SQLite and PostgreSQL (whose LOWER()
// differ beyond ASCII). Unicode case folding and mark stripping are utf8proc's (Debian
// libutf8proc-dev): a plugin including this links PkgConfig::UTF8PROC.
#pragma once

#include <utf8proc.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

namespace hangar {

// NFKD, case-folded, combining marks dropped, recomposed: "Ǆémo ÉXPORT" → "dzemo export".
// Text that is not UTF-8 is folded as ASCII only (never an exception: a name is data).
inline std::string fold_name(std::string_view name) {
    utf8proc_uint8_t *out = nullptr;
    const auto options = static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE |
                                                        UTF8PROC_CASEFOLD | UTF8PROC_STRIPMARK);
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(name.data()),
                                            static_cast<utf8proc_ssize_t>(name.size()), &out, options);
    std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
    if (n < 0) {
        std::string ascii(name);
        for (char &c : ascii)
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        return ascii;
    }
    return {reinterpret_cast<const char *>(out), static_cast<std::size_t>(n)};
}

} // namespace hangar
