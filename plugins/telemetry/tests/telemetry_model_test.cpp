// Unit tests of the telemetry plugin's model: the configuration rules of kernel-api.md §2.5, the
// since/until formats, body truncation and the bounded ring with its monitor_dropped note.
#include "telemetry_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::telemetry;

namespace {

json parse(const char *text) {
    return json::parse(text);
}

Selection create(const char *text) {
    return apply_create(parse_request(parse(text)));
}

Selection update(const Selection &cur, const char *text) {
    return apply_update(cur, parse_request(parse(text)));
}

void expect_400(const char *text, const std::string &field) {
    try {
        parse_request(parse(text));
        CPPUNIT_FAIL(std::string("accepted: ") + text);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT_MESSAGE(e.what(), std::string(e.what()).find(field) != std::string::npos);
    }
}

} // namespace

class TelemetryModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TelemetryModelTest);
    CPPUNIT_TEST(createRules);
    CPPUNIT_TEST(updateRules);
    CPPUNIT_TEST(badRequests);
    CPPUNIT_TEST(rendering);
    CPPUNIT_TEST(timeBounds);
    CPPUNIT_TEST(truncation);
    CPPUNIT_TEST(ringDropsOldestAndSaysSo);
    CPPUNIT_TEST(oomCounterAndKernelLog);
    CPPUNIT_TEST(connectionHelpers);
    CPPUNIT_TEST(proxyErrors);
    CPPUNIT_TEST(eventFilter);
    CPPUNIT_TEST_SUITE_END();

public:
    void createRules() {
        CPPUNIT_ASSERT(create("null").empty());
        CPPUNIT_ASSERT(create("{}").empty());
        CPPUNIT_ASSERT(create(R"({"enabled":false})").empty());
        CPPUNIT_ASSERT(default_selection() == create(R"({"enabled":true})"));
        // Categories layer onto the defaults, with or without enabled:true.
        Selection s = create(R"({"browser":{"console":{},"control":{"enabled":false}}})");
        CPPUNIT_ASSERT(s == Selection({"captcha", "connection", "console", "system"}));
        CPPUNIT_ASSERT(create(R"({"enabled":true,"browser":{"network":{"enabled":true}}})").count("network"));
        // Every default explicitly off: nothing is captured.
        CPPUNIT_ASSERT(create(R"({"browser":{"control":{"enabled":false},"connection":{"enabled":false},
                                  "system":{"enabled":false},"captcha":{"enabled":false}}})")
                           .empty());
    }

    void updateRules() {
        Selection cur = create(R"({"browser":{"console":{}}})");
        CPPUNIT_ASSERT(update(cur, "{}") == cur);   // unchanged
        CPPUNIT_ASSERT(update(cur, "null") == cur); // unchanged
        CPPUNIT_ASSERT(update(cur, R"({"enabled":false})").empty());
        // Merged onto the current selection.
        Selection merged = update(cur, R"({"browser":{"network":{}}})");
        CPPUNIT_ASSERT(merged.count("console") && merged.count("network") && merged.count("control"));
        // enabled:true resets to defaults + given.
        Selection reset = update(cur, R"({"enabled":true,"browser":{"page":{}}})");
        CPPUNIT_ASSERT(!reset.count("console") && reset.count("page") && reset.count("control"));
        // Nothing active: categories merge onto the defaults.
        CPPUNIT_ASSERT(update({}, R"({"browser":{"page":{}}})") ==
                       Selection({"captcha", "connection", "control", "page", "system"}));
        // Disabling everything stops capture.
        Selection only = {"console"};
        CPPUNIT_ASSERT(update(only, R"({"browser":{"console":{"enabled":false}}})").empty());
    }

    void badRequests() {
        expect_400(R"({"browser":{"keyboard":{}}})", "telemetry.browser.keyboard");
        expect_400(R"({"enabled":false,"browser":{"console":{}}})", "telemetry");
        expect_400(R"({"enabled":"yes"})", "telemetry.enabled");
        expect_400(R"({"browser":{"console":true}})", "telemetry.browser.console");
        expect_400(R"({"browser":{"console":{"enabled":1}}})", "telemetry.browser.console.enabled");
        expect_400(R"({"browser":[]})", "telemetry.browser");
        expect_400(R"("on")", "telemetry");
        expect_400(R"({"verbose":true})", "telemetry.verbose");
    }

    void rendering() {
        CPPUNIT_ASSERT(render({}).is_null());
        json r = render({"console", "control"});
        CPPUNIT_ASSERT_EQUAL(true, r["browser"]["console"]["enabled"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(false, r["browser"]["network"]["enabled"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(std::size_t(10), r["browser"].size());
        CPPUNIT_ASSERT_EQUAL(false, r["browser"]["platform"]["enabled"].get<bool>()); // 0.131, opt-in
        CPPUNIT_ASSERT(selection_from_json(r) == Selection({"console", "control"}));
    }

    void eventFilter() {
        // Comma-joined and repeated, `x[]` too; empty items are nothing.
        auto query =
            hangar::query_pairs("category=page,network&type=page_load,&type[]=proxy_error&category[]=platform");
        hangar::Validation v;
        std::set<std::string> cats, types;
        parse_event_filter(query, v, &cats, types);
        CPPUNIT_ASSERT(v.ok());
        CPPUNIT_ASSERT((cats == std::set<std::string>{"network", "page", "platform"}));
        CPPUNIT_ASSERT((types == std::set<std::string>{"page_load", "proxy_error"}));
        // The stream filters by type only: a category there is not read at all.
        std::set<std::string> stream_types;
        hangar::Validation sv;
        parse_event_filter(hangar::query_pairs("category=bogus&type=console_log"), sv, nullptr, stream_types);
        CPPUNIT_ASSERT(sv.ok() && stream_types == std::set<std::string>{"console_log"});
        for (const char *bad : {"type=Page_Load", "type=page-load", "category=pages"}) {
            hangar::Validation bv;
            std::set<std::string> c, t;
            parse_event_filter(hangar::query_pairs(bad), bv, &c, t);
            CPPUNIT_ASSERT_MESSAGE(bad, !bv.ok());
        }
        // platform was appended: the stored batches' masks of the older categories keep their bits.
        CPPUNIT_ASSERT_EQUAL(std::int64_t{1} << 8, category_bit("system"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t{1} << 9, category_bit("platform"));
    }

    void timeBounds() {
        const std::int64_t now = 1'800'000'000'000'000;
        CPPUNIT_ASSERT_EQUAL(now - 300'000'000, *parse_time_bound("5m", now));
        CPPUNIT_ASSERT_EQUAL(now - 5'400'000'000, *parse_time_bound("1h30m", now));
        CPPUNIT_ASSERT_EQUAL(now - 250'000, *parse_time_bound("250ms", now));
        CPPUNIT_ASSERT_EQUAL(now - 1'500'000, *parse_time_bound("1.5s", now));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'700'000'000'000'000), *parse_time_bound("2023-11-14T22:13:20Z", now));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'700'000'000'123'000), *parse_time_bound("2023-11-14T22:13:20.123Z", now));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(1'700'000'000'000'000), *parse_time_bound("2023-11-15T00:13:20+02:00", now));
        for (const char *bad : {"", "5", "5x", "m", "yesterday", "2023-11-14T22:13:20", "2023-13-14T22:13:20Z",
                                "2023-11-14T22:13:20Zjunk"})
            CPPUNIT_ASSERT_MESSAGE(bad, !parse_time_bound(bad, now));
    }

    void truncation() {
        std::string big(10000, 'a');
        auto json_body = truncate_body("application/json; charset=utf-8", big);
        CPPUNIT_ASSERT(json_body && json_body->truncated);
        CPPUNIT_ASSERT_EQUAL(kStructuredBodyLimit, json_body->text.size());
        auto html = truncate_body("text/html", big);
        CPPUNIT_ASSERT(html && html->truncated && html->text.size() == kTextBodyLimit);
        CPPUNIT_ASSERT(!truncate_body("image/png", big));
        CPPUNIT_ASSERT(!truncate_body("application/octet-stream", "x"));
        auto small = truncate_body("application/problem+json", "{}");
        CPPUNIT_ASSERT(small && !small->truncated && small->text == "{}");
        // A multi-byte character across the limit is left out whole.
        std::string text(kTextBodyLimit - 1, 'a');
        text += "\xC3\xA9tail";
        auto cut = truncate_body("text/plain", text);
        CPPUNIT_ASSERT_EQUAL(kTextBodyLimit - 1, cut->text.size());
    }

    void ringDropsOldestAndSaysSo() {
        Ring ring(4);
        for (int i = 0; i < 4; ++i)
            ring.push(make_event("console", "console_log", i, "cdp"), 0);
        CPPUNIT_ASSERT_EQUAL(std::uint64_t(4), ring.last_seq());
        ring.ack(2); // 1 and 2 were archived: losing them is no drop
        ring.push(make_event("console", "console_log", 5, "cdp"), 0);
        ring.push(make_event("console", "console_log", 6, "cdp"), 0);
        CPPUNIT_ASSERT_EQUAL(std::uint64_t(0), ring.dropped_total());
        ring.push(make_event("console", "console_log", 7, "cdp"), 0); // drops 3 (not archived)
        CPPUNIT_ASSERT_EQUAL(std::uint64_t(1), ring.dropped_total());
        ring.push(make_event("console", "console_log", 8, "cdp"), 0); // note first, then the event
        auto all = ring.after(0, 100);
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), all.size());
        bool noted = false;
        for (const auto &e : all)
            if (e["event"]["type"] == "monitor_dropped") {
                noted = true;
                CPPUNIT_ASSERT_EQUAL(std::uint64_t(1), e["event"]["data"]["count"].get<std::uint64_t>());
            }
        CPPUNIT_ASSERT(noted);
        // Seqs stay increasing with gaps where events were dropped; after() resumes by seq.
        auto tail = ring.after(all[1]["seq"].get<std::uint64_t>(), 100);
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), tail.size());
        CPPUNIT_ASSERT_EQUAL(all[2]["seq"], tail[0]["seq"]);
    }

    void oomCounterAndKernelLog() {
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{3}, oom_kill_count("low 0\nhigh 0\nmax 12\noom 3\noom_kill 3\n").value());
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{1}, oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n").value());
        CPPUNIT_ASSERT(!oom_kill_count("oom_kill_disable 0\nunder_oom 0\n"));
        std::map<long, KernelOomKill> kills;
        CPPUNIT_ASSERT(!parse_kernel_oom_line("6,100,5,-;eth0: link up", kills));
        CPPUNIT_ASSERT(parse_kernel_oom_line(
            "6,101,5,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
            "oom_memcg=/hangar/abc,task_memcg=/hangar/abc,task=python3,pid=4242,uid=1000",
            kills));
        CPPUNIT_ASSERT_EQUAL(-1L, kills[4242].rss_kb);
        CPPUNIT_ASSERT(parse_kernel_oom_line(
            "3,102,5,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:900000kB, "
            "anon-rss:500000kB, file-rss:2000kB, shmem-rss:0kB, UID:1000 pgtables:1200kB oom_score_adj:0",
            kills));
        const auto &k = kills.at(4242);
        CPPUNIT_ASSERT_EQUAL(std::string("python3"), k.name);
        CPPUNIT_ASSERT_EQUAL(std::string("memcg"), k.constraint);
        CPPUNIT_ASSERT_EQUAL(std::string("/hangar/abc"), k.task_memcg);
        CPPUNIT_ASSERT_EQUAL(502000L, k.rss_kb);
    }

    void connectionHelpers() {
        CPPUNIT_ASSERT_EQUAL(std::string("client_close"), disconnect_reason("client_close"));
        CPPUNIT_ASSERT_EQUAL(std::string("client_close"), disconnect_reason("client_error"));
        CPPUNIT_ASSERT_EQUAL(std::string("upstream_changed"), disconnect_reason("upstream_close"));
        CPPUNIT_ASSERT_EQUAL(std::string("upstream_error"), disconnect_reason("upstream_error"));
        CPPUNIT_ASSERT_EQUAL(std::string("context_cancelled"), disconnect_reason("shutdown"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{16}, digest_hex("/browser/live/abc/ws").size());
        CPPUNIT_ASSERT_EQUAL(digest_hex("/browser/live/abc/ws"), digest_hex("/browser/live/abc/ws"));
        CPPUNIT_ASSERT(digest_hex("/browser/live/abc/ws") != digest_hex("/browser/live/abd/ws"));
    }

    void proxyErrors() {
        std::string raw = "left over";
        CPPUNIT_ASSERT_EQUAL(std::string("upstream_connect_failed"),
                             proxy_error_code(" upstream_connect_failed ", raw));
        CPPUNIT_ASSERT(raw.empty());
        CPPUNIT_ASSERT_EQUAL(std::string("unknown"), proxy_error_code("Weird-Code <script>", raw));
        CPPUNIT_ASSERT_EQUAL(std::string("weird_code__script_"), raw);
        proxy_error_code(std::string(200, 'x'), raw);
        CPPUNIT_ASSERT_EQUAL(std::size_t{64}, raw.size());

        auto e = url_endpoint("https://Example.COM/path?q");
        CPPUNIT_ASSERT(e && e->first == "example.com" && e->second == 443);
        e = url_endpoint("http://user:pw@127.0.0.1:8080/x");
        CPPUNIT_ASSERT(e && e->first == "127.0.0.1" && e->second == 8080);
        e = url_endpoint("wss://[::1]:9443");
        CPPUNIT_ASSERT(e && e->first == "::1" && e->second == 9443);
        e = url_endpoint("ws://h");
        CPPUNIT_ASSERT(e && e->second == 80);
        CPPUNIT_ASSERT(!url_endpoint("data:text/plain,hi"));
        CPPUNIT_ASSERT(!url_endpoint("http://h:99999/"));
        CPPUNIT_ASSERT(!url_endpoint("chrome://newtab/"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TelemetryModelTest);
