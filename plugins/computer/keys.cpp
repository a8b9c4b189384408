#include "keys.hpp"

#include <hangar/text.hpp>

#include <X11/Xlib.h>
#include <X11/keysym.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>

namespace hangar::computer {

namespace {

struct Named {
    const char *alias; // lower case
    const char *keysym_name;
    const char *dom_key;
    const char *dom_code;
    int vk;
    int modifier;
};

// Modifier and editing keys by every spelling agents use; X keysym names are accepted as well.
constexpr std::array kNamed = {
    Named{"ctrl", "Control_L", "Control", "ControlLeft", 17, 2},
    Named{"control", "Control_L", "Control", "ControlLeft", 17, 2},
    Named{"control_l", "Control_L", "Control", "ControlLeft", 17, 2},
    Named{"control_r", "Control_R", "Control", "ControlRight", 17, 2},
    Named{"shift", "Shift_L", "Shift", "ShiftLeft", 16, 8},
    Named{"shift_l", "Shift_L", "Shift", "ShiftLeft", 16, 8},
    Named{"shift_r", "Shift_R", "Shift", "ShiftRight", 16, 8},
    Named{"alt", "Alt_L", "Alt", "AltLeft", 18, 1},
    Named{"alt_l", "Alt_L", "Alt", "AltLeft", 18, 1},
    Named{"alt_r", "Alt_R", "Alt", "AltRight", 18, 1},
    Named{"super", "Super_L", "Meta", "MetaLeft", 91, 4},
    Named{"super_l", "Super_L", "Meta", "MetaLeft", 91, 4},
    Named{"meta", "Super_L", "Meta", "MetaLeft", 91, 4},
    Named{"cmd", "Super_L", "Meta", "MetaLeft", 91, 4},
    Named{"win", "Super_L", "Meta", "MetaLeft", 91, 4},
    Named{"return", "Return", "Enter", "Enter", 13, 0},
    Named{"enter", "Return", "Enter", "Enter", 13, 0},
    Named{"kp_enter", "KP_Enter", "Enter", "NumpadEnter", 13, 0},
    Named{"tab", "Tab", "Tab", "Tab", 9, 0},
    Named{"backspace", "BackSpace", "Backspace", "Backspace", 8, 0},
    Named{"escape", "Escape", "Escape", "Escape", 27, 0},
    Named{"esc", "Escape", "Escape", "Escape", 27, 0},
    Named{"delete", "Delete", "Delete", "Delete", 46, 0},
    Named{"del", "Delete", "Delete", "Delete", 46, 0},
    Named{"insert", "Insert", "Insert", "Insert", 45, 0},
    Named{"home", "Home", "Home", "Home", 36, 0},
    Named{"end", "End", "End", "End", 35, 0},
    Named{"prior", "Prior", "PageUp", "PageUp", 33, 0},
    Named{"page_up", "Prior", "PageUp", "PageUp", 33, 0},
    Named{"pageup", "Prior", "PageUp", "PageUp", 33, 0},
    Named{"next", "Next", "PageDown", "PageDown", 34, 0},
    Named{"page_down", "Next", "PageDown", "PageDown", 34, 0},
    Named{"pagedown", "Next", "PageDown", "PageDown", 34, 0},
    Named{"left", "Left", "ArrowLeft", "ArrowLeft", 37, 0},
    Named{"up", "Up", "ArrowUp", "ArrowUp", 38, 0},
    Named{"right", "Right", "ArrowRight", "ArrowRight", 39, 0},
    Named{"down", "Down", "ArrowDown", "ArrowDown", 40, 0},
    Named{"space", "space", " ", "Space", 32, 0},
    Named{"menu", "Menu", "ContextMenu", "ContextMenu", 93, 0},
    Named{"caps_lock", "Caps_Lock", "CapsLock", "CapsLock", 20, 0},
};

Key from_named(const Named &n) {
    Key k;
    k.name = n.keysym_name;
    k.keysym = static_cast<std::uint32_t>(XStringToKeysym(n.keysym_name));
    k.dom_key = n.dom_key;
    k.dom_code = n.dom_code;
    k.virtual_key = n.vk;
    k.modifier = n.modifier;
    if (k.dom_key == " ") k.text = " ";
    if (k.dom_key == "Enter") k.text = "\r";
    return k;
}

Key named(std::string_view alias) {
    for (const auto &n : kNamed)
        if (alias == n.alias) return from_named(n);
    return {};
}

} // namespace

std::string codepoint_to_utf8(char32_t cp) {
    std::string out;
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return out;
}

std::u32string utf8_to_codepoints(std::string_view s) {
    std::u32string out;
    for (std::size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + static_cast<std::size_t>(len) > s.size()) {
            out.push_back(0xFFFD);
            ++i;
            continue;
        }
        char32_t cp = len == 1 ? c : c & (0x7F >> len);
        bool ok = true;
        for (int k = 1; k < len; ++k) {
            auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
            if ((cc & 0xC0) != 0x80) ok = false;
            cp = (cp << 6) | (cc & 0x3F);
        }
        out.push_back(ok ? cp : 0xFFFD);
        i += ok ? static_cast<std::size_t>(len) : 1;
    }
    return out;
}

Key key_for_codepoint(char32_t cp) {
    Key k;
    k.text = codepoint_to_utf8(cp);
    k.dom_key = k.text;
    k.keysym = cp < 0x100 ? static_cast<std::uint32_t>(cp) : 0x01000000U | static_cast<std::uint32_t>(cp);
    if (cp == '\n' || cp == '\r') {
        return named("return");
    }
    if (cp == '\t') return named("tab");
    if (cp < 0x80) {
        char c = static_cast<char>(cp);
        if (std::isalpha(static_cast<unsigned char>(c))) {
            k.dom_code = std::string("Key") + static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            k.virtual_key = std::toupper(static_cast<unsigned char>(c));
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
            k.dom_code = std::string("Digit") + c;
            k.virtual_key = static_cast<unsigned char>(c);
        } else if (c == ' ') {
            return named("space");
        }
    }
    if (k.keysym >= 0x01000000U) {
        // Xlib allocates the name of a Unicode keysym (and never frees it): spell it ourselves.
        char buf[16];
        std::snprintf(buf, sizeof buf, "U%04X", static_cast<unsigned>(cp));
        k.name = buf;
    } else {
        const char *name = XKeysymToString(static_cast<KeySym>(k.keysym)); // a static table entry
        k.name = name ? name : k.text;
    }
    return k;
}

std::optional<Key> parse_key(std::string_view name) {
    if (name.empty()) return std::nullopt;
    std::string l = lower(name);
    for (const auto &n : kNamed)
        if (l == n.alias) return from_named(n);
    // F1..F24
    if (l.size() >= 2 && l[0] == 'f' && std::all_of(l.begin() + 1, l.end(), ::isdigit)) {
        int n = std::stoi(l.substr(1));
        if (n >= 1 && n <= 24) {
            Key k;
            k.name = "F" + std::to_string(n);
            k.keysym = static_cast<std::uint32_t>(XStringToKeysym(k.name.c_str()));
            k.dom_key = k.dom_code = k.name;
            k.virtual_key = 111 + n;
            return k;
        }
    }
    auto cps = utf8_to_codepoints(name);
    if (cps.size() == 1) return key_for_codepoint(cps[0]);
    // Any other X keysym name (e.g. "plus", "KP_Add", "XF86AudioMute"): XTest can press it.
    std::string exact(name);
    KeySym sym = XStringToKeysym(exact.c_str());
    if (sym == NoSymbol) return std::nullopt;
    Key k;
    k.name = exact;
    k.keysym = static_cast<std::uint32_t>(sym);
    k.dom_key = exact;
    k.dom_code = exact;
    return k;
}

std::optional<std::vector<Key>> parse_combo(std::string_view combo) {
    std::vector<Key> keys;
    // "+" alone, or a trailing "+" as in "Ctrl++", names the plus key.
    if (combo == "+") {
        keys.push_back(key_for_codepoint('+'));
        return keys;
    }
    std::size_t start = 0;
    while (start <= combo.size()) {
        auto plus = combo.find('+', start);
        if (plus == start && plus + 1 == combo.size()) plus = std::string_view::npos; // "Ctrl++"
        std::string_view part =
            combo.substr(start, plus == std::string_view::npos ? combo.size() - start : plus - start);
        auto k = parse_key(part);
        if (!k) return std::nullopt;
        keys.push_back(*k);
        if (plus == std::string_view::npos) break;
        start = plus + 1;
    }
    return keys;
}

} // namespace hangar::computer
