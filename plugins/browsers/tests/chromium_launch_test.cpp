// Unit tests of the instance half's pure launch logic: spec parsing, command lines, the
// readiness line and the stealth user agent.
#include "chromium_launch.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>

using namespace hangar::browsers;

namespace {

bool has(const std::vector<std::string> &args, const std::string &arg) {
    return std::find(args.begin(), args.end(), arg) != args.end();
}

bool has_prefix(const std::vector<std::string> &args, const std::string &prefix) {
    return std::any_of(args.begin(), args.end(), [&](const std::string &a) { return a.rfind(prefix, 0) == 0; });
}

} // namespace

class ChromiumLaunchTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ChromiumLaunchTest);
    CPPUNIT_TEST(spec_parsing);
    CPPUNIT_TEST(common_flags);
    CPPUNIT_TEST(headless_and_headful);
    CPPUNIT_TEST(stealth);
    CPPUNIT_TEST(pulseaudio_command_line);
    CPPUNIT_TEST(url_is_never_a_switch);
    CPPUNIT_TEST(webmcp_feature_merges_with_operator_features);
    CPPUNIT_TEST(omnibox_webui_stays_off_with_operator_features);
    CPPUNIT_TEST(chromiums_own_requests_stay_off);
    CPPUNIT_TEST(xvfb);
    CPPUNIT_TEST(devtools_line);
    CPPUNIT_TEST(user_agent);
    CPPUNIT_TEST(flags_split);
    CPPUNIT_TEST(location_flags);
    CPPUNIT_TEST_SUITE_END();

public:
    void spec_parsing() {
        auto s = parse_launch_spec(json::parse(R"({"id":"x","headless":true,"stealth":true,"kiosk_mode":false,
            "viewport":{"width":1280,"height":720,"refresh_rate":30},"start_url":"https://a","chrome_policy":{"P":1}})"));
        CPPUNIT_ASSERT(s.headless && s.stealth && !s.kiosk_mode);
        CPPUNIT_ASSERT(s.viewport == (Viewport{1280, 720, 30}));
        CPPUNIT_ASSERT_EQUAL(std::string("https://a"), *s.start_url);
        CPPUNIT_ASSERT(s.chrome_policy);

        auto d = parse_launch_spec(json::parse(R"({"id":"x"})"));
        CPPUNIT_ASSERT(!d.headless && d.viewport == Viewport{} && !d.start_url && !d.chrome_policy);

        CPPUNIT_ASSERT_THROW(parse_launch_spec(json::parse(R"({"headless":"yes"})")), hangar::Error);
        CPPUNIT_ASSERT_THROW(parse_viewport(json::parse(R"({"width":10,"height":600})")), hangar::Error);
        CPPUNIT_ASSERT(parse_viewport(json::parse(R"({"width":1024,"height":768})")) == (Viewport{1024, 768, 60}));
    }

    void location_flags() {
        auto s = parse_launch_spec(json::parse(R"({"id":"x","location":{"timezone":"Asia/Tokyo","locale":"fr-fr"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("Asia/Tokyo"), chromium_timezone(s));
        auto a = chromium_args(ChromiumSettings{}, s, "", "https://a");
        CPPUNIT_ASSERT(has(a, "--lang=fr-FR") && has(a, "--accept-lang=fr-FR"));
        // Before "--": a location never becomes the URL, and the URL never a switch.
        auto dashes = std::find(a.begin(), a.end(), std::string("--"));
        CPPUNIT_ASSERT(std::find(a.begin(), a.end(), "--lang=fr-FR") < dashes);

        LaunchSpec plain;
        CPPUNIT_ASSERT_EQUAL(std::string("UTC"), chromium_timezone(plain));
        CPPUNIT_ASSERT(!has_prefix(chromium_args(ChromiumSettings{}, plain, "", ""), "--lang="));
        // The default too: Chromium would otherwise keep an earlier run's languages (its prefs).
        CPPUNIT_ASSERT(has(chromium_args(ChromiumSettings{}, plain, "", ""), "--accept-lang=en-US,en"));
        // The agent checks again what would reach TZ or a flag.
        CPPUNIT_ASSERT_THROW(parse_launch_spec(json::parse(R"({"location":{"timezone":"../../x"}})")), hangar::Error);
        CPPUNIT_ASSERT_THROW(parse_launch_spec(json::parse(R"({"location":{"locale":"en,--x"}})")), hangar::Error);
    }

    void common_flags() {
        ChromiumSettings settings;
        auto a = chromium_args(settings, LaunchSpec{}, "", "");
        for (const char *f :
             {"--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "--remote-allow-origins=*",
              "--user-data-dir=/home/kernel/user-data", "--no-sandbox", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
              "--password-store=basic", "--window-size=1920,1080"})
            CPPUNIT_ASSERT_MESSAGE(f, has(a, f));
        CPPUNIT_ASSERT_EQUAL(std::string("about:blank"), a.back());
        CPPUNIT_ASSERT(!has(a, "--enable-automation"));
    }

    void headless_and_headful() {
        ChromiumSettings settings;
        LaunchSpec headless;
        headless.headless = true;
        headless.kiosk_mode = true;
        headless.viewport = {1280, 800, 60};
        auto h = chromium_args(settings, headless, "", "");
        CPPUNIT_ASSERT_EQUAL(std::string("--headless=new"), h.front());
        // page == window == screen: a screen of the viewport's size and no toolbar
        CPPUNIT_ASSERT(has(h, "--screen-info={1280x800}") && has(h, "--kiosk") && has(h, "--window-size=1280,800"));
        CPPUNIT_ASSERT(!has(h, "--window-position=0,0"));

        LaunchSpec headful;
        headful.kiosk_mode = true;
        headful.viewport = {1280, 800, 60};
        auto g = chromium_args(settings, headful, "", "");
        CPPUNIT_ASSERT(!has_prefix(g, "--headless"));
        CPPUNIT_ASSERT(has(g, "--kiosk") && has(g, "--window-position=0,0") && has(g, "--window-size=1280,800"));
        // Muted unless it has the instance's audio sink to play into.
        CPPUNIT_ASSERT(has(h, "--mute-audio") && has(g, "--mute-audio"));
        auto sounding = chromium_args(settings, headful, "", "", true);
        CPPUNIT_ASSERT(!has(sounding, "--mute-audio") && !has(sounding, "--disable-audio-output"));
    }

    void pulseaudio_command_line() {
        auto a = pulseaudio_args("/run/hangar/pulse/native");
        for (const char *f : {"--daemonize=no", "--system=no", "--exit-idle-time=-1", "-n",
                              "--disallow-module-loading=yes", "--use-pid-file=no"})
            CPPUNIT_ASSERT_MESSAGE(f, has(a, f));
        CPPUNIT_ASSERT(has(a, "module-null-sink sink_name=hangar rate=48000 channels=2"));
        CPPUNIT_ASSERT(has(a, "module-native-protocol-unix auth-anonymous=1 socket=/run/hangar/pulse/native"));
    }

    void stealth() {
        ChromiumSettings settings;
        LaunchSpec s;
        s.stealth = true;
        auto a = chromium_args(settings, s, "UA/1", "");
        CPPUNIT_ASSERT(has(a, "--disable-blink-features=AutomationControlled"));
        CPPUNIT_ASSERT(has(a, "--user-agent=UA/1"));
        auto plain = chromium_args(settings, LaunchSpec{}, "UA/1", "");
        CPPUNIT_ASSERT(!has_prefix(plain, "--user-agent") && !has_prefix(plain, "--disable-blink-features"));
    }

    void url_is_never_a_switch() {
        ChromiumSettings settings;
        settings.extra_flags = {"--lang=de"};
        auto a = chromium_args(settings, LaunchSpec{}, "", "--utility-cmd-prefix=evil");
        CPPUNIT_ASSERT_EQUAL(std::string("--utility-cmd-prefix=evil"), a.back());
        CPPUNIT_ASSERT_EQUAL(std::string("--"), a[a.size() - 2]);
        CPPUNIT_ASSERT(has(a, "--lang=de"));
        CPPUNIT_ASSERT(std::find(a.begin(), a.end(), "--lang=de") < std::find(a.begin(), a.end(), "--"));
    }

    // WebMCP is on in every instance, and an operator's own feature list keeps it on: Chromium
    // honours only the last --enable-features.
    void webmcp_feature_merges_with_operator_features() {
        ChromiumSettings settings;
        CPPUNIT_ASSERT(has(chromium_args(settings, LaunchSpec{}, "", ""), "--enable-features=WebMCP"));
        settings.extra_flags = {"--enable-features=Foo,Bar"};
        auto a = chromium_args(settings, LaunchSpec{}, "", "");
        CPPUNIT_ASSERT(has(a, "--enable-features=WebMCP,Foo,Bar"));
        CPPUNIT_ASSERT_EQUAL(std::ptrdiff_t(1), std::count_if(a.begin(), a.end(), [](const std::string &f) {
                                 return f.rfind("--enable-features=", 0) == 0;
                             }));
    }

    // The omnibox's WebUI popups stay off (a renderer each at start), and an operator's own
    // --disable-features list keeps them off: Chromium honours only the last one.
    void omnibox_webui_stays_off_with_operator_features() {
        ChromiumSettings settings;
        CPPUNIT_ASSERT(has(chromium_args(settings, LaunchSpec{}, "", ""),
                           "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,NetworkTimeServiceQuerying"));
        settings.extra_flags = {"--disable-features=Translate"};
        auto a = chromium_args(settings, LaunchSpec{}, "", "");
        CPPUNIT_ASSERT(
            has(a, "--disable-features=WebUIOmniboxPopup,WebUIOmniboxAimPopup,NetworkTimeServiceQuerying,Translate"));
        CPPUNIT_ASSERT_EQUAL(std::ptrdiff_t(1), std::count_if(a.begin(), a.end(), [](const std::string &f) {
                                 return f.rfind("--disable-features=", 0) == 0;
                             }));
    }

    // Chromium's own requests (network time, the model manifest, GAIA's ListAccounts) and the
    // signer extension's key hand-off never reach a proxy: Hangar's own names are past the proxy,
    // whatever bypass list the instance gives, and resolve to nothing. signing.test.mjs checks the outcome on a real
    // Chromium.
    void chromiums_own_requests_stay_off() {
        ChromiumSettings settings;
        auto plain = chromium_args(settings, LaunchSpec{}, "", "");
        CPPUNIT_ASSERT(has(plain, "--component-updater=url-source=file:///nonexistent/"));
        CPPUNIT_ASSERT(has(plain, "--gaia-url=https://gaia.hangar.invalid/"));
        CPPUNIT_ASSERT(has(plain, "--host-resolver-rules=MAP *.hangar.invalid ~NOTFOUND"));
        CPPUNIT_ASSERT(!has_prefix(plain, "--proxy-bypass-list"));
        settings.extra_flags = {"--proxy-server=http://127.0.0.1:4000", "--proxy-bypass-list=<-loopback>"};
        auto proxied = chromium_args(settings, LaunchSpec{}, "", "");
        CPPUNIT_ASSERT(has(proxied, "--proxy-bypass-list=<-loopback>;*.hangar.invalid"));
        CPPUNIT_ASSERT(!has(proxied, "--proxy-bypass-list=<-loopback>"));
    }

    void xvfb() {
        auto a = xvfb_args({1280, 800, 60}, 3);
        CPPUNIT_ASSERT(has(a, "1280x800x24") && has(a, "-displayfd") && has(a, "3"));
        CPPUNIT_ASSERT(has(a, "tcp") && has(a, "local"));
    }

    void devtools_line() {
        auto e = parse_devtools_line("DevTools listening on ws://127.0.0.1:35095/devtools/browser/385a1489-b143\n");
        CPPUNIT_ASSERT(e);
        CPPUNIT_ASSERT_EQUAL(std::uint16_t(35095), e->port);
        CPPUNIT_ASSERT_EQUAL(std::string("/devtools/browser/385a1489-b143"), e->ws_path);
        CPPUNIT_ASSERT(!parse_devtools_line("[7802:7821:ERROR:dbus/bus.cc:405] Failed to connect to the bus"));
        CPPUNIT_ASSERT(!parse_devtools_line("DevTools listening on ws://127.0.0.1:0/devtools/browser/x"));
        CPPUNIT_ASSERT(!parse_devtools_line("DevTools listening on ws://127.0.0.1:99999/devtools/browser/x"));
        CPPUNIT_ASSERT(!parse_devtools_line("DevTools listening on ws://127.0.0.1:80/json"));
    }

    void user_agent() {
        auto ua = stealth_user_agent("Chromium 156.0.8078.79 built on Debian GNU/Linux 12 (bookworm)\n");
        CPPUNIT_ASSERT(ua);
        CPPUNIT_ASSERT_EQUAL(std::string("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
                                         "Chrome/156.0.0.0 Safari/537.36"),
                             *ua);
        CPPUNIT_ASSERT(ua->find("Headless") == std::string::npos);
        CPPUNIT_ASSERT(!stealth_user_agent("no version here"));
    }

    void flags_split() {
        auto f = split_flags("  --a=1\t--b  --c=x y \n");
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), f.size());
        CPPUNIT_ASSERT_EQUAL(std::string("--a=1"), f[0]);
        CPPUNIT_ASSERT(split_flags("").empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ChromiumLaunchTest);
