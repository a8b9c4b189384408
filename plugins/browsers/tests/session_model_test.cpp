// Unit tests of the browsers plugin's pure logic: request validation, ids, list queries,
// BrowserSession rendering and the DevTools JSON rewrite.
#include "session_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <set>

using namespace hangar::browsers;
using hangar::Error;

namespace {

// Runs `fn`, expecting an Error with `status` whose details name `field`.
template <typename Fn> void expect_error(Fn fn, int status, const std::string &field = {}) {
    try {
        fn();
    } catch (const Error &e) {
        CPPUNIT_ASSERT_EQUAL(status, e.status());
        if (!field.empty()) {
            bool named = false;
            for (const auto &d : e.details())
                named = named || d.message.rfind(field + ":", 0) == 0;
            CPPUNIT_ASSERT_MESSAGE("details should name " + field + ", got: " + e.details_json().dump(), named);
            CPPUNIT_ASSERT_EQUAL(std::string("invalid_input"), e.details().front().code);
        }
        return;
    }
    CPPUNIT_FAIL("expected an error with status " + std::to_string(status));
}

json parse(const char *text) {
    return json::parse(text);
}

} // namespace

class SessionModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SessionModelTest);
    CPPUNIT_TEST(create_defaults);
    CPPUNIT_TEST(create_all_fields);
    CPPUNIT_TEST(create_wrong_types);
    CPPUNIT_TEST(create_ranges);
    CPPUNIT_TEST(create_collects_every_problem);
    CPPUNIT_TEST(create_viewport_rules);
    CPPUNIT_TEST(create_tags_limits);
    CPPUNIT_TEST(create_policy_rules);
    CPPUNIT_TEST(create_not_implemented_after_validation);
    CPPUNIT_TEST(profile_selector);
    CPPUNIT_TEST(create_null_means_absent);
    CPPUNIT_TEST(update_fields);
    CPPUNIT_TEST(update_not_implemented);
    CPPUNIT_TEST(ids);
    CPPUNIT_TEST(time_format);
    CPPUNIT_TEST(render_live_and_deleted);
    CPPUNIT_TEST(row_round_trip);
    CPPUNIT_TEST(urls);
    CPPUNIT_TEST(devtools_rewrite);
    CPPUNIT_TEST(tag_filters);
    CPPUNIT_TEST(list_query);
    CPPUNIT_TEST(like_escaping);
    CPPUNIT_TEST(timezones);
    CPPUNIT_TEST(locales);
    CPPUNIT_TEST(location_create_and_update);
    CPPUNIT_TEST(memory_sizes);
    CPPUNIT_TEST_SUITE_END();

public:
    void create_defaults() {
        auto o = parse_create(json::object());
        CPPUNIT_ASSERT_EQUAL(60, o.timeout_seconds);
        CPPUNIT_ASSERT(!o.headless && !o.stealth && !o.kiosk_mode);
        CPPUNIT_ASSERT(o.viewport == (Viewport{1920, 1080, 25}));
        CPPUNIT_ASSERT(!o.name && !o.tags && !o.start_url && !o.chrome_policy);
    }

    void create_all_fields() {
        auto o = parse_create(parse(R"({"name":"my-browser","tags":{"team":"backend"},"timeout_seconds":300,
            "headless":true,"stealth":true,"kiosk_mode":true,"viewport":{"width":1280,"height":800,"refresh_rate":60},
            "start_url":"https://example.com","chrome_policy":{"PasswordManagerEnabled":false},
            "extensions":[],"proxy_id":"","telemetry":{"enabled":false},"gpu":false,"some_future_field":1})"));
        CPPUNIT_ASSERT_EQUAL(std::string("my-browser"), *o.name);
        CPPUNIT_ASSERT_EQUAL(std::string("backend"), o.tags->at("team"));
        CPPUNIT_ASSERT_EQUAL(300, o.timeout_seconds);
        CPPUNIT_ASSERT(o.headless && o.stealth && o.kiosk_mode);
        CPPUNIT_ASSERT(o.viewport == (Viewport{1280, 800, 60}));
        CPPUNIT_ASSERT_EQUAL(std::string("https://example.com"), *o.start_url);
        CPPUNIT_ASSERT_EQUAL(false, o.chrome_policy->at("PasswordManagerEnabled").get<bool>());
    }

    void create_wrong_types() {
        expect_error([] { parse_create(parse(R"({"headless":"true"})")); }, 400, "headless");
        expect_error([] { parse_create(parse(R"({"stealth":1})")); }, 400, "stealth");
        expect_error([] { parse_create(parse(R"({"timeout_seconds":"60"})")); }, 400, "timeout_seconds");
        expect_error([] { parse_create(parse(R"({"timeout_seconds":60.5})")); }, 400, "timeout_seconds");
        expect_error([] { parse_create(parse(R"({"name":5})")); }, 400, "name");
        expect_error([] { parse_create(parse(R"({"tags":["a"]})")); }, 400, "tags");
        expect_error([] { parse_create(parse(R"({"tags":{"a":1}})")); }, 400, "tags.a");
        expect_error([] { parse_create(parse(R"({"viewport":"1920x1080"})")); }, 400, "viewport");
        expect_error([] { parse_create(parse(R"({"start_url":{}})")); }, 400, "start_url");
        expect_error([] { parse_create(parse(R"({"chrome_policy":[]})")); }, 400, "chrome_policy");
        expect_error([] { parse_create(parse(R"({"profile":"name"})")); }, 400, "profile");
        expect_error([] { parse_create(parse(R"({"extensions":{}})")); }, 400, "extensions");
        expect_error([] { parse_create(parse(R"({"telemetry":{"enabled":"yes"}})")); }, 400, "telemetry.enabled");
        expect_error([] { parse_create(parse(R"({"gpu":"no"})")); }, 400, "gpu");
        expect_error([] { parse_create(parse("[1]")); }, 400, "body");
        // Integral floats are integers on the wire (JSON has only numbers).
        CPPUNIT_ASSERT_EQUAL(60, parse_create(parse(R"({"timeout_seconds":60.0})")).timeout_seconds);
    }

    void create_ranges() {
        expect_error([] { parse_create(parse(R"({"timeout_seconds":9})")); }, 400, "timeout_seconds");
        expect_error([] { parse_create(parse(R"({"timeout_seconds":259201})")); }, 400, "timeout_seconds");
        CPPUNIT_ASSERT_EQUAL(10, parse_create(parse(R"({"timeout_seconds":10})")).timeout_seconds);
        CPPUNIT_ASSERT_EQUAL(259200, parse_create(parse(R"({"timeout_seconds":259200})")).timeout_seconds);
        expect_error([] { parse_create(parse(R"({"name":"abcdefghijklmnopqrstuvwx"})")); }, 400, "name");
        expect_error([] { parse_create(parse(R"({"name":"a\nb"})")); }, 400, "name");
        expect_error([] { parse_create(json{{"name", std::string(256, 'a')}}); }, 400, "name");
        expect_error([] { parse_create(parse(R"({"start_url":"http://x/\u0000"})")); }, 400, "start_url");
    }

    void create_collects_every_problem() {
        try {
            parse_create(parse(R"({"headless":1,"timeout_seconds":1,"viewport":{"width":0,"height":"x"}})"));
            CPPUNIT_FAIL("expected 400");
        } catch (const Error &e) {
            CPPUNIT_ASSERT_EQUAL(400, e.status());
            CPPUNIT_ASSERT_EQUAL(std::string("bad_request"), e.code());
            CPPUNIT_ASSERT_EQUAL(std::size_t(4), e.details().size());
        }
    }

    void create_viewport_rules() {
        expect_error([] { parse_create(parse(R"({"viewport":{"width":1920}})")); }, 400, "viewport.height");
        expect_error([] { parse_create(parse(R"({"viewport":{"width":319,"height":600}})")); }, 400, "viewport.width");
        expect_error([] { parse_create(parse(R"({"viewport":{"width":800,"height":239}})")); }, 400, "viewport.height");
        expect_error([] { parse_create(parse(R"({"viewport":{"width":7681,"height":600}})")); }, 400, "viewport.width");
        expect_error([] { parse_create(parse(R"({"viewport":{"width":800,"height":600,"refresh_rate":0}})")); }, 400,
                     "viewport.refresh_rate");
        // A missing rate is derived from the size: bigger screens get lower rates.
        CPPUNIT_ASSERT_EQUAL(60,
                             parse_create(parse(R"({"viewport":{"width":1024,"height":768}})")).viewport.refresh_rate);
        CPPUNIT_ASSERT_EQUAL(25,
                             parse_create(parse(R"({"viewport":{"width":1920,"height":1080}})")).viewport.refresh_rate);
        CPPUNIT_ASSERT_EQUAL(10,
                             parse_create(parse(R"({"viewport":{"width":2560,"height":1440}})")).viewport.refresh_rate);
        CPPUNIT_ASSERT(parse_create(parse(R"({"viewport":{"width":390,"height":844,"refresh_rate":60}})")).viewport ==
                       (Viewport{390, 844, 60}));
    }

    void create_tags_limits() {
        json tags = json::object();
        for (int i = 0; i < 50; ++i)
            tags["k" + std::to_string(i)] = "v";
        CPPUNIT_ASSERT_EQUAL(std::size_t(50), parse_create(json{{"tags", tags}}).tags->size());
        tags["one-more"] = "v";
        expect_error([&] { parse_create(json{{"tags", tags}}); }, 400, "tags");
        expect_error([] { parse_create(parse(R"({"tags":{"":"v"}})")); }, 400, "tags.");
    }

    void create_policy_rules() {
        for (const char *managed :
             {"ExtensionInstallForcelist", "ExtensionSettings", "BlockExternalExtensions", "ProxySettings", "ProxyMode",
              "RemoteDebuggingAllowed", "DeveloperToolsAvailability"}) {
            json body = {{"chrome_policy", {{managed, 1}}}};
            expect_error([&] { parse_create(body); }, 400, std::string("chrome_policy.") + managed);
        }
        expect_error([] { parse_create(parse(R"({"chrome_policy":{"bad name":1}})")); }, 400, "chrome_policy.bad name");
        // URL block lists are the user's business, even ones that block devtools.
        auto o = parse_create(parse(R"({"chrome_policy":{"URLBlocklist":["devtools://*"],"HomepageLocation":"x"}})"));
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), o.chrome_policy->size());
        json big = {{"chrome_policy", {{"HomepageLocation", std::string(std::size_t{5} * 1024 * 1024, 'a')}}}};
        expect_error([&] { parse_create(big); }, 400, "chrome_policy");
    }

    void create_not_implemented_after_validation() {
        // A proxy_id is taken as it is; the proxies plugin checks it is the project's.
        CPPUNIT_ASSERT_EQUAL(std::string("abc"), *parse_create(parse(R"({"proxy_id":"abc"})")).proxy_id);
        CPPUNIT_ASSERT(!parse_create(parse(R"({"proxy_id":""})")).proxy_id);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), parse_create(parse(R"({"extensions":[{"name":"x"}]})")).extensions.size());
        expect_error([] { parse_create(parse(R"({"extensions":[{}]})")); }, 400, "extensions[0]");
        // The built-in signing extension sets `sign`; one with an id is an uploaded extension.
        CPPUNIT_ASSERT(parse_create(parse(R"({"extensions":[{"name":"web-bot-auth"}]})")).sign);
        CPPUNIT_ASSERT(!parse_create(parse(R"({"extensions":[{"id":"x","name":"web-bot-auth"}]})")).sign);
        CPPUNIT_ASSERT(!parse_create(parse(R"({"extensions":[{"name":"x"}]})")).sign);
        // Telemetry is the telemetry plugin's: the model only says whether it would capture.
        CPPUNIT_ASSERT(parse_create(parse(R"({"telemetry":{"enabled":true}})")).telemetry_captures);
        CPPUNIT_ASSERT(parse_create(parse(R"({"telemetry":{"browser":{"console":{}}}})")).telemetry_captures);
        // An invocation id is taken as it is; the apps plugin checks it is the project's and running.
        CPPUNIT_ASSERT_EQUAL(std::string("inv"), *parse_create(parse(R"({"invocation_id":"inv"})")).invocation_id);
        expect_error([] { parse_create(parse(R"({"persistence":{"id":"p"}})")); }, 400); // retired by Kernel
        expect_error([] { parse_create(parse(R"({"gpu":true})")); }, 501);
        // 0.131 fields nothing serves yet are refused, not dropped; null is "not asked".
        expect_error([] { parse_create(json{{"video_memory", json::object()}}); }, 501);
        // vaults: [{id} | {name}], resolved by the vaults plugin.
        CPPUNIT_ASSERT_EQUAL(std::size_t{2},
                             parse_create(parse(R"({"vaults":[{"id":"v1"},{"name":"shop"}]})")).vaults->size());
        CPPUNIT_ASSERT(!parse_create(parse(R"({"vaults":[]})")).vaults);
        expect_error([] { parse_create(parse(R"({"vaults":{"id":"v1"}})")); }, 400, "vaults");
        expect_error([] { parse_create(parse(R"({"vaults":[{"id":"v1","name":"shop"}]})")); }, 400, "vaults[0]");
        expect_error([] { parse_create(parse(R"({"vaults":[{}]})")); }, 400, "vaults[0]");
        // proxy: exactly one of mode, id, name; never with proxy_id.
        CPPUNIT_ASSERT_EQUAL(std::string("direct"), *parse_create(parse(R"({"proxy":{"mode":"direct"}})")).proxy->mode);
        CPPUNIT_ASSERT_EQUAL(std::string("p1"), *parse_create(parse(R"({"proxy":{"id":"p1"}})")).proxy->id);
        CPPUNIT_ASSERT_EQUAL(std::string("eu"),
                             *parse_create(parse(R"({"proxy":{"name":"eu","id":null}})")).proxy->name);
        expect_error([] { parse_create(parse(R"({"proxy":{}})")); }, 400, "proxy");
        expect_error([] { parse_create(parse(R"({"proxy":{"id":"p1","name":"eu"}})")); }, 400, "proxy");
        expect_error([] { parse_create(parse(R"({"proxy":{"mode":"stealth"}})")); }, 400, "proxy.mode");
        expect_error([] { parse_create(parse(R"({"proxy":{"host":"x"}})")); }, 400, "proxy.host");
        expect_error([] { parse_create(parse(R"({"proxy":{"id":"p1"},"proxy_id":"p2"})")); }, 400, "proxy");
        // network: the allowlist, proxy routes and private hosts are taken (the proxies plugin
        // judges their hosts).
        CPPUNIT_ASSERT_EQUAL(json::array({"a.example"}),
                             *parse_create(parse(R"({"network":{"allowed_hosts":["a.example"]}})")).allowed_hosts);
        CPPUNIT_ASSERT(!parse_create(parse(R"({"network":{}})")).allowed_hosts);
        expect_error([] { parse_create(parse(R"({"network":{"allowed_hosts":[]}})")); }, 400, "network.allowed_hosts");
        expect_error([] { parse_create(parse(R"({"network":{"allowed_hosts":"a.example"}})")); }, 400,
                     "network.allowed_hosts");
        expect_error([] { parse_create(parse(R"({"network":{"hosts":["a"]}})")); }, 400, "network.hosts");
        expect_error([] { parse_create(parse(R"({"network":["a"]})")); }, 400, "network");
        CPPUNIT_ASSERT_EQUAL(json::array(), *parse_create(parse(R"({"network":{"private_hosts":[]}})")).private_hosts);
        expect_error([] { parse_create(parse(R"({"network":{"private_hosts":"a"}})")); }, 400, "network.private_hosts");
        CPPUNIT_ASSERT(!parse_create(parse(R"({"network":{"proxy_routes":[]}})")).proxy_routes);
        CPPUNIT_ASSERT_EQUAL(
            std::size_t{1},
            parse_create(parse(R"({"network":{"proxy_routes":[{"hosts":["a.example"],"proxy":{"name":"p"}}]}})"))
                .proxy_routes->size());
        expect_error([] { parse_create(parse(R"({"network":{"proxy_routes":{"hosts":["a"]}}})")); }, 400,
                     "network.proxy_routes");
        expect_error([] { parse_create(parse(R"({"network":{"proxy_routes":[{"hosts":[],"proxy":{"id":"p"}}]}})")); },
                     400, "network.proxy_routes[0].hosts");
        expect_error(
            [] { parse_create(parse(R"({"network":{"proxy_routes":[{"hosts":["a"],"proxy":{"mode":"direct"}}]}})")); },
            400, "network.proxy_routes[0].proxy");
        expect_error(
            [] { parse_create(parse(R"({"network":{"proxy_routes":[{"hosts":["a"],"proxy":{"id":"p"},"via":1}]}})")); },
            400, "network.proxy_routes[0].via");
        parse_create(parse(R"({"network":null,"proxy":null,"vaults":null,"video_memory":null})"));
        // Telemetry that would capture nothing is fine.
        CPPUNIT_ASSERT(!parse_create(parse(R"({"telemetry":{}})")).telemetry_captures);
        CPPUNIT_ASSERT(
            !parse_create(parse(R"({"telemetry":{"browser":{"console":{"enabled":false}}}})")).telemetry_captures);
        // A bad field elsewhere wins over 501: nothing to do until the request is valid.
        expect_error([] { parse_create(parse(R"({"proxy_id":"abc","headless":"x"})")); }, 400, "headless");
        expect_error([] { parse_create(parse(R"({"telemetry":{"enabled":false,"browser":{"console":{}}}})")); }, 400,
                     "telemetry");
    }

    void profile_selector() {
        auto o = parse_create(parse(R"({"profile":{"name":"p","save_changes":true}})"));
        CPPUNIT_ASSERT(o.profile && o.profile->name == std::optional<std::string>("p") && !o.profile->id);
        CPPUNIT_ASSERT(o.profile->save_changes);
        auto u = parse_update(parse(R"({"profile":{"id":"abc"}})"));
        CPPUNIT_ASSERT(u.profile && u.profile->id == std::optional<std::string>("abc") && !u.profile->save_changes);
        expect_error([] { parse_create(parse(R"({"profile":{}})")); }, 400, "profile");
        expect_error([] { parse_create(parse(R"({"profile":"p"})")); }, 400, "profile");
        expect_error([] { parse_create(parse(R"({"profile":{"id":""}})")); }, 400, "profile.id");
        expect_error([] { parse_create(parse(R"({"profile":{"name":"p","save_changes":1}})")); }, 400,
                     "profile.save_changes");
        // A profile brings no tabs back: the session starts on about:blank (or its start_url).
        CPPUNIT_ASSERT(!make_instance_spec("x", o).contains("restore_session"));
    }

    void create_null_means_absent() {
        auto o = parse_create(parse(R"({"name":null,"tags":null,"viewport":null,"telemetry":null,"profile":null,
            "headless":null,"timeout_seconds":null,"start_url":"","chrome_policy":null})"));
        CPPUNIT_ASSERT(!o.name && !o.tags && !o.start_url && !o.chrome_policy);
        CPPUNIT_ASSERT_EQUAL(60, o.timeout_seconds);
    }

    void update_fields() {
        auto o =
            parse_update(parse(R"({"name":"n","tags":{"a":"b"},"viewport":{"width":800,"height":600,"force":true}})"));
        CPPUNIT_ASSERT(o.name && *o.name && **o.name == "n");
        CPPUNIT_ASSERT_EQUAL(std::string("b"), o.tags->at("a"));
        CPPUNIT_ASSERT(*o.viewport == (Viewport{800, 600, 60}));
        CPPUNIT_ASSERT(o.force);

        auto clear = parse_update(parse(R"({"name":"","tags":{}})"));
        CPPUNIT_ASSERT(clear.name && !*clear.name);
        CPPUNIT_ASSERT(clear.tags && clear.tags->empty());
        auto clear_null = parse_update(parse(R"({"name":null,"tags":null})"));
        CPPUNIT_ASSERT(clear_null.name && !*clear_null.name);
        CPPUNIT_ASSERT(clear_null.tags && clear_null.tags->empty());

        auto none = parse_update(json::object());
        CPPUNIT_ASSERT(!none.name && !none.tags && !none.viewport && !none.force);

        expect_error([] { parse_update(parse(R"({"viewport":{"width":800,"height":600,"force":"yes"}})")); }, 400,
                     "viewport.force");
        expect_error([] { parse_update(parse(R"({"tags":"x"})")); }, 400, "tags");
    }

    void update_not_implemented() {
        // proxy_id swaps live; "" goes direct.
        CPPUNIT_ASSERT_EQUAL(std::string("p"), *parse_update(parse(R"({"proxy_id":"p"})")).proxy_id);
        CPPUNIT_ASSERT_EQUAL(std::string(""), *parse_update(parse(R"({"proxy_id":""})")).proxy_id);
        CPPUNIT_ASSERT(
            parse_update(parse(R"({"telemetry":{"browser":{"page":{"enabled":true}}}})")).telemetry_captures);
        expect_error([] { parse_update(parse(R"({"disable_default_proxy":true})")); }, 501);
        // start_url: opened after the update; "" leaves the tabs; control characters are refused.
        CPPUNIT_ASSERT_EQUAL(std::string("https://a.example/"),
                             *parse_update(parse(R"({"start_url":"https://a.example/"})")).start_url);
        CPPUNIT_ASSERT(!parse_update(parse(R"({"start_url":""})")).start_url);
        expect_error([] { parse_update(parse(R"({"start_url":"https://a.example/\n"})")); }, 400, "start_url");
        CPPUNIT_ASSERT_EQUAL(std::string("default"),
                             *parse_update(parse(R"({"proxy":{"mode":"default"}})")).proxy->mode);
        expect_error([] { parse_update(parse(R"({"proxy":{"mode":"direct"},"disable_default_proxy":true})")); }, 400,
                     "proxy");
        // network: replace or lift the allowlist, optionally conditional.
        auto n =
            parse_update(
                parse(
                    R"({"network":{"allowed_hosts":["a.example"],"expected_allowlist_revision":"r1","mutation_id":"m1"}})"))
                .network;
        CPPUNIT_ASSERT(n && n->allowed_hosts == json::array({"a.example"}));
        CPPUNIT_ASSERT_EQUAL(std::string("r1"), *n->expected_revision);
        CPPUNIT_ASSERT_EQUAL(std::string("m1"), *n->mutation_id);
        CPPUNIT_ASSERT(parse_update(parse(R"({"network":{"allowed_hosts":null}})")).network->allowed_hosts.is_null());
        expect_error([] { parse_update(parse(R"({"network":{}})")); }, 400, "network.allowed_hosts");
        expect_error([] { parse_update(parse(R"({"network":{"allowed_hosts":[]}})")); }, 400, "network.allowed_hosts");
        expect_error([] { parse_update(parse(R"({"network":{"allowed_hosts":null,"private_hosts":[]}})")); }, 400,
                     "network.private_hosts");
        expect_error([] { parse_update(parse(R"({"network":{"allowed_hosts":null,"mutation_id":7}})")); }, 400,
                     "network.mutation_id");
        // Removing what is not there, or leaving telemetry unchanged, is fine.
        parse_update(parse(R"({"proxy_id":"","telemetry":{},"disable_default_proxy":false})"));
        parse_update(parse(R"({"proxy_id":null,"telemetry":null})"));
        expect_error([] { parse_update(parse(R"({"disable_default_proxy":"x"})")); }, 400, "disable_default_proxy");
    }

    void ids() {
        std::set<std::string> seen;
        for (int i = 0; i < 1000; ++i) {
            auto id = new_session_id();
            CPPUNIT_ASSERT(looks_like_session_id(id));
            seen.insert(id);
        }
        CPPUNIT_ASSERT_EQUAL(std::size_t(1000), seen.size());
        CPPUNIT_ASSERT(looks_like_session_id("htzv5orfit78e1m2biiifpbv"));
        CPPUNIT_ASSERT(!looks_like_session_id("htzv5orfit78e1m2biiifpb"));
        CPPUNIT_ASSERT(!looks_like_session_id("Htzv5orfit78e1m2biiifpbv"));
        CPPUNIT_ASSERT(!looks_like_session_id("htzv5orfit78e1m2biiifp-v"));
    }

    void time_format() {
        CPPUNIT_ASSERT_EQUAL(std::string("1970-01-01T00:00:00.000Z"), rfc3339(0));
        CPPUNIT_ASSERT_EQUAL(std::string("2025-01-02T03:04:05.123Z"), rfc3339(1735787045123));
    }

    void render_live_and_deleted() {
        Session s;
        s.id = "htzv5orfit78e1m2biiifpbv";
        s.created_ms = 1000;
        s.headless = true;
        Links links{"ws://h:1/browser/cdp?jwt=t", "ws://h:1/browser/webdriver?jwt=w"};
        json live = render_session(s, links, 6000);
        CPPUNIT_ASSERT_EQUAL(s.id, live["session_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(links.cdp_ws_url, live["cdp_ws_url"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(links.webdriver_ws_url, live["webdriver_ws_url"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("1970-01-01T00:00:01.000Z"), live["created_at"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(true, live["headless"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(false, live["stealth"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(60, live["timeout_seconds"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::int64_t(5000), live["usage"]["uptime_ms"].get<std::int64_t>());
        CPPUNIT_ASSERT_EQUAL(1920, live["viewport"]["width"].get<int>());
        // Never base_url: the SDK would route curl/telemetry straight to it (contract §1.11).
        for (const char *absent :
             {"base_url", "deleted_at", "name", "tags", "start_url", "chrome_policy", "browser_live_view_url"})
            CPPUNIT_ASSERT_MESSAGE(absent, !live.contains(absent));

        s.deleted_ms = 3000;
        s.name = "n";
        s.tags = Tags{{"a", "b"}};
        s.start_url = "https://x";
        s.chrome_policy = json{{"P", 1}};
        json dead = render_session(s, links, 999999);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(2000), dead["usage"]["uptime_ms"].get<std::int64_t>());
        CPPUNIT_ASSERT_EQUAL(std::string("1970-01-01T00:00:03.000Z"), dead["deleted_at"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("n"), dead["name"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("b"), dead["tags"]["a"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(1, dead["chrome_policy"]["P"].get<int>());
    }

    void row_round_trip() {
        json row = {{"id", "htzv5orfit78e1m2biiifpbv"},
                    {"org_id", "org"},
                    {"project_id", "proj"},
                    {"name", "n"},
                    {"created_at", 10},
                    {"deleted_at", nullptr},
                    {"timeout_seconds", 120},
                    {"headless", 1},
                    {"stealth", 0},
                    {"kiosk_mode", 1},
                    {"viewport_width", 800},
                    {"viewport_height", 600},
                    {"viewport_refresh_rate", 60},
                    {"start_url", nullptr},
                    {"tags", R"({"a":"b"})"},
                    {"chrome_policy", R"({"P":true})"}};
        Session s = session_from_row(row);
        CPPUNIT_ASSERT(s.active());
        CPPUNIT_ASSERT_EQUAL(std::string("proj"), s.project_id);
        CPPUNIT_ASSERT_EQUAL(120, s.timeout_seconds);
        CPPUNIT_ASSERT(s.headless && !s.stealth && s.kiosk_mode);
        CPPUNIT_ASSERT(s.viewport == (Viewport{800, 600, 60}));
        CPPUNIT_ASSERT(!s.start_url);
        CPPUNIT_ASSERT_EQUAL(std::string("b"), s.tags->at("a"));
        CPPUNIT_ASSERT_EQUAL(true, s.chrome_policy->at("P").get<bool>());
        row["deleted_at"] = 20;
        CPPUNIT_ASSERT(!session_from_row(row).active());
    }

    void urls() {
        CPPUNIT_ASSERT_EQUAL(std::string("ws://127.0.0.1:8080"), ws_base("http://127.0.0.1:8080"));
        CPPUNIT_ASSERT_EQUAL(std::string("wss://hangar.example"), ws_base("https://hangar.example/"));
        CPPUNIT_ASSERT_EQUAL(std::string("ws://h/browser/cdp?jwt=T"), cdp_ws_url("ws://h", "T"));
        CPPUNIT_ASSERT_EQUAL(std::string("ws://h/browser/webdriver?jwt=T"), webdriver_ws_url("ws://h", "T"));
        CPPUNIT_ASSERT_EQUAL(std::string("ws://h/browser/cdp/T/devtools/page/AB"),
                             target_ws_url("ws://h", "T", "/devtools/page/AB"));
        auto spec = make_instance_spec("id1", parse_create(parse(R"({"headless":true,"start_url":"https://x"})")));
        CPPUNIT_ASSERT_EQUAL(std::string("id1"), spec["id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(true, spec["headless"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(std::string("https://x"), spec["start_url"].get<std::string>());
    }

    void devtools_rewrite() {
        json version =
            parse(R"({"Browser":"Chrome/156","webSocketDebuggerUrl":"ws://127.0.0.1:4242/devtools/browser/u-u"})");
        json v = rewrite_devtools_json(version, "ws://hangar:8080", "TOK");
        CPPUNIT_ASSERT_EQUAL(std::string("ws://hangar:8080/browser/cdp?jwt=TOK"),
                             v["webSocketDebuggerUrl"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("Chrome/156"), v["Browser"].get<std::string>());

        json list = parse(R"([{"id":"P1","type":"page","devtoolsFrontendUrl":"/devtools/inspector.html?ws=x",
            "webSocketDebuggerUrl":"ws://localhost:4242/devtools/page/P1"},{"id":"X","type":"other"}])");
        json l = rewrite_devtools_json(list, "ws://hangar:8080", "TOK");
        CPPUNIT_ASSERT_EQUAL(std::string("ws://hangar:8080/browser/cdp/TOK/devtools/page/P1"),
                             l[0]["webSocketDebuggerUrl"].get<std::string>());
        CPPUNIT_ASSERT(!l[0].contains("devtoolsFrontendUrl"));
        CPPUNIT_ASSERT_EQUAL(std::string("X"), l[1]["id"].get<std::string>());
    }

    void tag_filters() {
        // The SDK's qs encodes brackets; other clients send them raw.
        auto t = parse_tag_filters("tags%5Bteam%5D=backend&tags[env]=staging%20eu&limit=5&tags%5Bk%20x%5D=a+b");
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), t.size());
        CPPUNIT_ASSERT(t[0] == std::make_pair(std::string("team"), std::string("backend")));
        CPPUNIT_ASSERT(t[1] == std::make_pair(std::string("env"), std::string("staging eu")));
        CPPUNIT_ASSERT(t[2] == std::make_pair(std::string("k x"), std::string("a b")));
        CPPUNIT_ASSERT(parse_tag_filters("").empty());
        CPPUNIT_ASSERT(parse_tag_filters("tags=&status=all").empty()); // qs sends null as "tags="
        expect_error([] { parse_tag_filters("tags%5Ba%5D%5Bb%5D=1"); }, 400, "tags");
        expect_error([] { parse_tag_filters("tags[]=1"); }, 400, "tags");
        CPPUNIT_ASSERT_EQUAL(std::string("a/b c%"), hangar::url_decode("a%2Fb%20c%", false));
    }

    void list_query() {
        std::map<std::string, std::string> params;
        QueryLookup lookup = [&](std::string_view k) -> std::optional<std::string> {
            auto it = params.find(std::string(k));
            return it == params.end() ? std::nullopt : std::optional<std::string>(it->second);
        };
        auto q = parse_list_query(lookup, "");
        CPPUNIT_ASSERT(q.status == StatusFilter::Active);
        CPPUNIT_ASSERT_EQUAL(20, q.limit);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), q.offset);

        params = {{"include_deleted", "true"}};
        CPPUNIT_ASSERT(parse_list_query(lookup, "").status == StatusFilter::All);
        params = {{"include_deleted", "true"}, {"status", "deleted"}};
        CPPUNIT_ASSERT(parse_list_query(lookup, "").status == StatusFilter::Deleted);
        params = {{"limit", "500"}, {"offset", "40"}, {"query", "abc"}};
        q = parse_list_query(lookup, "tags%5Ba%5D=b");
        CPPUNIT_ASSERT_EQUAL(100, q.limit);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(40), q.offset);
        CPPUNIT_ASSERT_EQUAL(std::string("abc"), *q.query);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), q.tags.size());

        params = {{"status", "paused"}};
        expect_error([&] { parse_list_query(lookup, ""); }, 400, "status");
        params = {{"limit", "0"}};
        expect_error([&] { parse_list_query(lookup, ""); }, 400, "limit");
        params = {{"offset", "-1"}};
        expect_error([&] { parse_list_query(lookup, ""); }, 400, "offset");
        params = {{"limit", "ten"}};
        expect_error([&] { parse_list_query(lookup, ""); }, 400, "limit");
        params = {{"include_deleted", "maybe"}};
        expect_error([&] { parse_list_query(lookup, ""); }, 400, "include_deleted");
    }

    void like_escaping() { CPPUNIT_ASSERT_EQUAL(std::string("%a\\%b\\_c\\\\%"), like_contains("a%b_c\\")); }

    void timezones() {
        for (const char *ok : {"UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+5", "Asia/Tokyo"})
            CPPUNIT_ASSERT_MESSAGE(ok, known_timezone(ok));
        for (const char *bad : {"", "Mars/Olympus", "../etc/passwd", "/usr/share/zoneinfo/UTC", "Europe/../UTC",
                                "posix/Europe/Berlin", "right/UTC", "posixrules", "localtime", "zone.tab",
                                "Europe/Berlin ", "Europe//Berlin", "Europe/Berlin,x"})
            CPPUNIT_ASSERT_MESSAGE(bad, !known_timezone(bad));
    }

    void locales() {
        CPPUNIT_ASSERT_EQUAL(std::string("en-US"), *canonical_locale("EN-us"));
        CPPUNIT_ASSERT_EQUAL(std::string("fr"), *canonical_locale("fr"));
        CPPUNIT_ASSERT_EQUAL(std::string("zh-Hant-TW"), *canonical_locale("zh-hant-tw"));
        CPPUNIT_ASSERT_EQUAL(std::string("es-419"), *canonical_locale("es-419"));
        CPPUNIT_ASSERT_EQUAL(std::string("de-CH-1901"), *canonical_locale("de-CH-1901"));
        for (const char *bad : {"", "e", "en_US", "en-US,de", "en US", "en-US-abcdefghij", "verylonglanguage", "en-",
                                "-US", "en-US-x-a", "en-u-ca-buddhist", "--lang=x"})
            CPPUNIT_ASSERT_MESSAGE(bad, !canonical_locale(bad));
    }

    void location_create_and_update() {
        auto o = parse_create(parse(R"({"location": {"timezone": "Asia/Tokyo", "locale": "fr-fr"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("Asia/Tokyo"), *o.location.timezone);
        CPPUNIT_ASSERT_EQUAL(std::string("fr-FR"), *o.location.locale);
        CPPUNIT_ASSERT_EQUAL(std::string(R"({"locale":"fr-FR","timezone":"Asia/Tokyo"})"),
                             make_instance_spec("x", o).at("location").dump());
        CPPUNIT_ASSERT(!make_instance_spec("x", parse_create(json::object())).contains("location"));
        expect_error([] { parse_create(parse(R"({"location": {"timezone": "Nowhere/Land"}})")); }, 400,
                     "location.timezone");
        expect_error([] { parse_create(parse(R"({"location": {"locale": "en_US"}})")); }, 400, "location.locale");
        expect_error([] { parse_create(parse(R"({"location": "Berlin"})")); }, 400, "location");
        expect_error([] { parse_create(parse(R"({"memory": "3GiB"})")); }, 400, "memory");

        auto u = parse_update(parse(R"({"location": {"timezone": null, "locale": "de-DE"}})"));
        CPPUNIT_ASSERT(u.timezone.has_value() && !u.timezone->has_value());
        CPPUNIT_ASSERT_EQUAL(std::string("de-DE"), **u.locale);
        CPPUNIT_ASSERT(!parse_update(parse(R"({"name": "a"})")).changes_location());

        Session s;
        s.location.locale = "de-DE";
        s.region = "us-east";
        s.memory = "4GiB";
        json out = render_session(s, {}, 0);
        CPPUNIT_ASSERT_EQUAL(
            std::string(
                R"({"locale":"de-DE","locale_source":"override","timezone":"UTC","timezone_source":"default"})"),
            out.at("location").dump());
        CPPUNIT_ASSERT_EQUAL(std::string("us-east"), out.at("region").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("4GiB"), out.at("memory").get<std::string>());
        auto back = session_from_row({{"id", "x"}, {"location_timezone", "Asia/Tokyo"}, {"region", "eu-west"}});
        CPPUNIT_ASSERT_EQUAL(std::string("Asia/Tokyo"), *back.location.timezone);
        CPPUNIT_ASSERT(!back.location.locale);
        CPPUNIT_ASSERT_EQUAL(std::string("eu-west"), back.region);
    }

    void memory_sizes() {
        CPPUNIT_ASSERT_EQUAL(std::string("4GiB"), memory_name(std::uint64_t{4096} << 20));
        CPPUNIT_ASSERT_EQUAL(std::string("4GiB"), memory_name(std::uint64_t{5000} << 20));
        CPPUNIT_ASSERT_EQUAL(std::string("6GiB"), memory_name(std::uint64_t{7} << 30));
        CPPUNIT_ASSERT_EQUAL(std::string("16GiB"), memory_name(std::uint64_t{64} << 30));
        CPPUNIT_ASSERT_EQUAL(std::string("1GiB"), memory_name(std::uint64_t{512} << 20));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{8} << 30, *memory_request_bytes("8GiB"));
        CPPUNIT_ASSERT(!memory_request_bytes("6GiB")); // a response size only (GPU machines)
        CPPUNIT_ASSERT(!memory_request_bytes("4gib"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SessionModelTest);
