// The headless live view's input lines → CDP input commands (see input.hpp).
#include "input.hpp"

#include <algorithm>
#include <map>

namespace hangar::liveview {

std::optional<std::pair<std::string, json>> input_command(const std::string &line) {
    json in = json::parse(line, nullptr, false);
    if (!in.is_object()) return std::nullopt;
    auto num = [&](const char *k, double lo, double hi) {
        auto it = in.find(k);
        double v = it != in.end() && it->is_number() ? it->get<double>() : 0.0;
        return std::clamp(v, lo, hi);
    };
    auto str = [&](const char *k, std::size_t max) {
        auto it = in.find(k);
        std::string v = it != in.end() && it->is_string() ? it->get<std::string>() : std::string();
        return v.size() > max ? std::string() : v;
    };
    std::string type = str("type", 16), action = str("action", 16);
    int modifiers = static_cast<int>(num("modifiers", 0, 15));
    if (type == "mouse") {
        static const std::map<std::string, std::string> kinds = {
            {"move", "mouseMoved"}, {"down", "mousePressed"}, {"up", "mouseReleased"}, {"wheel", "mouseWheel"}};
        auto kind = kinds.find(action);
        if (kind == kinds.end()) return std::nullopt;
        std::string button = str("button", 8);
        if (button != "left" && button != "middle" && button != "right") button = "none";
        json p = {{"type", kind->second},
                  {"x", num("x", 0, 16384)},
                  {"y", num("y", 0, 16384)},
                  {"modifiers", modifiers},
                  {"button", button},
                  {"buttons", static_cast<int>(num("buttons", 0, 31))},
                  {"clickCount", static_cast<int>(num("clickCount", 0, 3))}};
        if (action == "wheel") {
            p["deltaX"] = num("deltaX", -10000, 10000);
            p["deltaY"] = num("deltaY", -10000, 10000);
        }
        return std::pair{std::string("Input.dispatchMouseEvent"), std::move(p)};
    }
    if (type == "key") {
        if (action != "down" && action != "up") return std::nullopt;
        std::string text = str("text", 16);
        int code = static_cast<int>(num("keyCode", 0, 255));
        json p = {{"type", action == "up" ? "keyUp"
                           : text.empty() ? "rawKeyDown"
                                          : "keyDown"},
                  {"key", str("key", 32)},
                  {"code", str("code", 32)},
                  {"modifiers", modifiers},
                  {"windowsVirtualKeyCode", code},
                  {"nativeVirtualKeyCode", code},
                  {"location", static_cast<int>(num("location", 0, 3))}};
        if (action == "down" && !text.empty()) {
            p["text"] = text;
            p["unmodifiedText"] = text;
        }
        return std::pair{std::string("Input.dispatchKeyEvent"), std::move(p)};
    }
    if (type == "text") {
        std::string text = str("text", 1u << 20);
        if (text.empty()) return std::nullopt;
        return std::pair{std::string("Input.insertText"), json{{"text", text}}};
    }
    return std::nullopt;
}

bool is_copy_request(const std::string &line) {
    json in = json::parse(line, nullptr, false);
    return in.is_object() && in.value("type", json()) == "copy";
}

std::optional<std::pair<int, int>> view_request(const std::string &line) {
    json in = json::parse(line, nullptr, false);
    if (!in.is_object() || in.value("type", json()) != "view") return std::nullopt;
    auto side = [&](const char *k) {
        auto it = in.find(k);
        double v = it != in.end() && it->is_number() ? it->get<double>() : 0.0;
        return static_cast<int>(std::clamp(v, 64.0, 16384.0));
    };
    return std::pair{side("width"), side("height")};
}

} // namespace hangar::liveview
