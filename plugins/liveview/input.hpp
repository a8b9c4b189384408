// The headless live view's input: one newline-delimited JSON line from the viewer page becomes
// one CDP input command. Pure logic, unit-tested (tests/input_test.cpp).
//
// Lines: {"type":"mouse","action":"move|down|up|wheel","x","y","button","buttons","clickCount",
// "modifiers","deltaX","deltaY"}, {"type":"key","action":"down|up","key","code","text","keyCode",
// "location","modifiers"}, {"type":"text","text"}; and {"type":"copy"} and {"type":"view"}, which
// are no input.
#pragma once

#include <hangar/plugin.hpp>

#include <optional>
#include <string>
#include <utility>

namespace hangar::liveview {

// The CDP command ({method, params}) for one input line, or nothing for a line that is not valid
// input. Only whitelisted fields pass, numbers clamped: the viewer is a person's browser.
std::optional<std::pair<std::string, json>> input_command(const std::string &line);

// Whether the line is the viewer's {"type":"copy"}: it wants the page's selection back.
bool is_copy_request(const std::string &line);

// The frame size a viewer's {"type":"view","width","height"} asks for (device pixels of its
// window), clamped to [64, 16384]; nothing for any other line.
std::optional<std::pair<int, int>> view_request(const std::string &line);

} // namespace hangar::liveview
