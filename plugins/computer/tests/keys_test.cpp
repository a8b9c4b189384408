// Unit tests of key names: Kernel's spellings (xdotool/X11 keysyms, combos) resolve to the X
// keysym XTest presses and the DOM key CDP sends; text becomes code points.
#include "keys.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::computer;

class KeysTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(KeysTest);
    CPPUNIT_TEST(names);
    CPPUNIT_TEST(combos);
    CPPUNIT_TEST(text);
    CPPUNIT_TEST_SUITE_END();

public:
    void names() {
        auto ret = parse_key("Return");
        CPPUNIT_ASSERT(ret && ret->keysym == 0xff0d && ret->dom_key == "Enter" && ret->virtual_key == 13);
        CPPUNIT_ASSERT_EQUAL(std::uint32_t(0xff0d), parse_key("enter")->keysym);
        auto ctrl = parse_key("Ctrl");
        CPPUNIT_ASSERT(ctrl && ctrl->keysym == 0xffe3 && ctrl->modifier == 2 && ctrl->dom_code == "ControlLeft");
        CPPUNIT_ASSERT_EQUAL(8, parse_key("shift")->modifier);
        CPPUNIT_ASSERT_EQUAL(std::uint32_t(0xffc2), parse_key("F5")->keysym);
        CPPUNIT_ASSERT_EQUAL(116, parse_key("F5")->virtual_key);
        auto a = parse_key("a");
        CPPUNIT_ASSERT(a && a->keysym == 'a' && a->dom_code == "KeyA" && a->virtual_key == 'A' && a->text == "a");
        CPPUNIT_ASSERT_EQUAL(std::uint32_t(0xffbe + 11), parse_key("F12")->keysym);
        CPPUNIT_ASSERT(parse_key("KP_Add")); // any X keysym name
        CPPUNIT_ASSERT(!parse_key("NoSuchKey"));
        CPPUNIT_ASSERT(!parse_key(""));
        CPPUNIT_ASSERT(!parse_key("F99"));
    }

    void combos() {
        auto c = parse_combo("Ctrl+Shift+Tab");
        CPPUNIT_ASSERT(c && c->size() == 3);
        CPPUNIT_ASSERT_EQUAL(std::string("Control_L"), (*c)[0].name);
        CPPUNIT_ASSERT_EQUAL(std::string("Shift_L"), (*c)[1].name);
        CPPUNIT_ASSERT_EQUAL(std::string("Tab"), (*c)[2].name);
        auto plus = parse_combo("Ctrl++");
        CPPUNIT_ASSERT(plus && plus->size() == 2 && (*plus)[1].keysym == '+');
        CPPUNIT_ASSERT(parse_combo("+") && parse_combo("+")->front().keysym == '+');
        CPPUNIT_ASSERT(!parse_combo("Ctrl+Nope"));
        CPPUNIT_ASSERT(!parse_combo("Ctrl+"));
    }

    void text() {
        auto cps = utf8_to_codepoints("aö✓😀");
        CPPUNIT_ASSERT(cps == (std::u32string{U'a', U'ö', U'✓', U'😀'}));
        CPPUNIT_ASSERT_EQUAL(std::string("😀"), codepoint_to_utf8(U'😀'));
        CPPUNIT_ASSERT(utf8_to_codepoints("\xff") == std::u32string{0xFFFD});
        CPPUNIT_ASSERT_EQUAL(std::uint32_t(0xf6), key_for_codepoint(U'ö').keysym);       // Latin-1
        CPPUNIT_ASSERT_EQUAL(std::uint32_t(0x01002713), key_for_codepoint(U'✓').keysym); // Unicode keysym
        CPPUNIT_ASSERT_EQUAL(std::string("Enter"), key_for_codepoint(U'\n').dom_key);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(KeysTest);
