// Unit tests of the headless live view's input lines: what a control viewer may make the
// instance's Chromium do is exactly these CDP input commands, with whitelisted, clamped fields.
#include "input.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using hangar::liveview::input_command;
using hangar::liveview::is_copy_request;
using hangar::liveview::view_request;

class LiveviewInputTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LiveviewInputTest);
    CPPUNIT_TEST(mouse);
    CPPUNIT_TEST(keys);
    CPPUNIT_TEST(refused);
    CPPUNIT_TEST_SUITE_END();

public:
    void mouse() {
        auto c = input_command(R"({"type":"mouse","action":"down","x":12.5,"y":40,"button":"left","buttons":1,)"
                               R"("clickCount":1,"modifiers":2,"evil":"x"})");
        CPPUNIT_ASSERT(c);
        CPPUNIT_ASSERT_EQUAL(std::string("Input.dispatchMouseEvent"), c->first);
        CPPUNIT_ASSERT_EQUAL(std::string("mousePressed"), c->second["type"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(12.5, c->second["x"].get<double>());
        CPPUNIT_ASSERT_EQUAL(std::string("left"), c->second["button"].get<std::string>());
        CPPUNIT_ASSERT(!c->second.contains("evil"));
        CPPUNIT_ASSERT(!c->second.contains("deltaY"));
        auto w = input_command(R"({"type":"mouse","action":"wheel","x":-5,"y":1e9,"deltaY":120,"button":"sideways"})");
        CPPUNIT_ASSERT(w);
        CPPUNIT_ASSERT_EQUAL(std::string("mouseWheel"), w->second["type"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(0.0, w->second["x"].get<double>());
        CPPUNIT_ASSERT_EQUAL(16384.0, w->second["y"].get<double>());
        CPPUNIT_ASSERT_EQUAL(120.0, w->second["deltaY"].get<double>());
        CPPUNIT_ASSERT_EQUAL(std::string("none"), w->second["button"].get<std::string>());
    }

    void keys() {
        auto a = input_command(R"({"type":"key","action":"down","key":"a","code":"KeyA","text":"a","keyCode":65})");
        CPPUNIT_ASSERT(a);
        CPPUNIT_ASSERT_EQUAL(std::string("Input.dispatchKeyEvent"), a->first);
        CPPUNIT_ASSERT_EQUAL(std::string("keyDown"), a->second["type"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("a"), a->second["text"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(65, a->second["windowsVirtualKeyCode"].get<int>());
        auto bs = input_command(R"({"type":"key","action":"down","key":"Backspace","code":"Backspace","keyCode":8})");
        CPPUNIT_ASSERT(bs && bs->second["type"] == "rawKeyDown" && !bs->second.contains("text"));
        auto up = input_command(R"({"type":"key","action":"up","key":"a","text":"a"})");
        CPPUNIT_ASSERT(up && up->second["type"] == "keyUp" && !up->second.contains("text"));
        auto t = input_command(R"({"type":"text","text":"pasted"})");
        CPPUNIT_ASSERT(t && t->first == "Input.insertText" && t->second["text"] == "pasted");
    }

    // Anything else is no command at all: other CDP methods cannot be reached through input.
    void refused() {
        CPPUNIT_ASSERT(!input_command("not json"));
        CPPUNIT_ASSERT(!input_command(R"(["mouse"])"));
        CPPUNIT_ASSERT(!input_command(R"({"type":"Runtime.evaluate","expression":"1"})"));
        CPPUNIT_ASSERT(!input_command(R"({"method":"Page.navigate","params":{"url":"http://x"}})"));
        CPPUNIT_ASSERT(!input_command(R"({"type":"mouse","action":"drag"})"));
        CPPUNIT_ASSERT(!input_command(R"({"type":"key","action":"press","key":"a"})"));
        CPPUNIT_ASSERT(!input_command(R"({"type":"text","text":""})"));
        // A copy request asks for the selection back; it is no input command.
        CPPUNIT_ASSERT(is_copy_request(R"({"type":"copy"})"));
        CPPUNIT_ASSERT(!input_command(R"({"type":"copy"})"));
        CPPUNIT_ASSERT(!is_copy_request(R"({"type":"key","action":"down","key":"c"})"));
        CPPUNIT_ASSERT(!is_copy_request("copy"));
        // A viewer's window size, clamped: it sizes the frames, and is no input command either.
        auto v = view_request(R"({"type":"view","width":800.4,"height":1e9})");
        CPPUNIT_ASSERT(v && v->first == 800 && v->second == 16384);
        auto tiny = view_request(R"({"type":"view","width":-5})");
        CPPUNIT_ASSERT(tiny && tiny->first == 64 && tiny->second == 64);
        CPPUNIT_ASSERT(!input_command(R"({"type":"view","width":800,"height":600})"));
        CPPUNIT_ASSERT(!view_request(R"({"type":"copy"})"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LiveviewInputTest);
