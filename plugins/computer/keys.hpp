// Key names as the Kernel contract spells them (xdotool/X11 keysym names such as Return, F5,
// Ctrl, or combos such as Ctrl+Shift+Tab), resolved once into what both backends need: the X
// keysym for XTest and the DOM key/code/virtual key code for CDP input events.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::computer {

struct Key {
    std::string name;         // as resolved, e.g. "Control_L", "a", "Return"
    std::uint32_t keysym = 0; // X11 keysym
    std::string dom_key;      // KeyboardEvent.key: "Control", "a", "Enter"
    std::string dom_code;     // KeyboardEvent.code: "ControlLeft", "KeyA", "Enter"
    int virtual_key = 0;      // windowsVirtualKeyCode for CDP
    std::string text;         // what typing it inserts ("" for non-printing keys)
    int modifier = 0;         // CDP modifier bit (Alt 1, Ctrl 2, Meta 4, Shift 8), 0 if none
};

// One key by name; nullopt when the name means nothing.
std::optional<Key> parse_key(std::string_view name);
// "Ctrl+Shift+t" -> [Control_L, Shift_L, t]; nullopt when any part means nothing.
std::optional<std::vector<Key>> parse_combo(std::string_view combo);
// The key that types one Unicode code point (keysym = Latin-1 value or 0x01000000 | cp).
Key key_for_codepoint(char32_t cp);
// UTF-8 to code points; invalid bytes become U+FFFD.
std::u32string utf8_to_codepoints(std::string_view s);
std::string codepoint_to_utf8(char32_t cp);

} // namespace hangar::computer
