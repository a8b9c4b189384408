// What the computer endpoints act on: the instance's X display through XTest (headful) or the
// first page through CDP input events (headless). Both keep their connection open between calls.
#pragma once

#include "keys.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace hangar::computer {

enum class Button { Left, Middle, Right, Back, Forward };

struct Size {
    int width = 0;
    int height = 0;
};

struct Region {
    int x = 0, y = 0, width = 0, height = 0;
};

class Screen {
public:
    virtual ~Screen() = default;
    virtual Size size() = 0;
    virtual void move(int x, int y) = 0;
    virtual void button(Button b, bool down) = 0;
    // Wheel clicks at the pointer: positive dy scrolls down, positive dx right.
    virtual void wheel(int dx, int dy) = 0;
    virtual void key(const Key &k, bool down) = 0;
    // Types one code point (unicode included), as a tap.
    virtual void type_char(char32_t cp) = 0;
    // PNG bytes of the whole screen or a region inside it.
    virtual std::string screenshot(const std::optional<Region> &region) = 0;
    virtual std::pair<int, int> pointer() = 0;
    virtual void cursor_hidden(bool hidden) = 0;
    virtual std::string clipboard_read() = 0;
    virtual void clipboard_write(const std::string &text) = 0;
};

// Where Chromium and its display are now (the browsers plugin's `browsers.chromium` service).
struct ChromiumInfo {
    std::optional<int> display; // headful: the X display number
    int port = 0;               // DevTools port
};

std::unique_ptr<Screen> make_x11_screen(int display);
// `locate` is asked again whenever the connection broke (Chromium restarted on a new port).
std::unique_ptr<Screen> make_cdp_screen(std::function<ChromiumInfo()> locate);

} // namespace hangar::computer
