// Unit tests of web search's pure decisions (kernel-api-0131.md §1C): request rules, strategy
// resolution against the operator's providers, the SearXNG mapping (native, emulated, dropped,
// refused under strict_params), defensive parsing of its answer, and retained content.
#include "search_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::search;

namespace {
template <typename F> void expect_status(int status, F &&f, const std::string &named) {
    try {
        f();
        CPPUNIT_FAIL("accepted, expected " + std::to_string(status) + " naming " + named);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(status, e.status());
        CPPUNIT_ASSERT_MESSAGE(e.what(),
                               (std::string(e.what()) + e.details_json().dump()).find(named) != std::string::npos);
    }
}
template <typename F> void expect_400(F &&f, const std::string &named) {
    expect_status(400, f, named);
}

Settings searxng_only() {
    Settings s;
    s.order = {"searxng", "brave"};
    s.searxng_url = "http://127.0.0.1:8888";
    s.searxng_cap = 20;
    return s;
}

bool has_warning(const json &warnings, const std::string &code) {
    for (const auto &w : warnings)
        if (w["code"] == code) return true;
    return false;
}

std::string param(const std::string &qs, const std::string &name) {
    for (std::size_t at = 0; at < qs.size();) {
        auto end = qs.find('&', at);
        auto kv = qs.substr(at, end == std::string::npos ? std::string::npos : end - at);
        if (kv.rfind(name + "=", 0) == 0) return kv.substr(name.size() + 1);
        if (end == std::string::npos) break;
        at = end + 1;
    }
    return "<none>";
}
} // namespace

class SearchModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SearchModelTest);
    CPPUNIT_TEST(requestRules);
    CPPUNIT_TEST(strategies);
    CPPUNIT_TEST(searxngMapping);
    CPPUNIT_TEST(strictParamsRefuses);
    CPPUNIT_TEST(parsingIsDefensive);
    CPPUNIT_TEST(contents);
    CPPUNIT_TEST(providerListing);
    CPPUNIT_TEST(browserContent);
    CPPUNIT_TEST_SUITE_END();

public:
    void requestRules() {
        Query q = parse_query({{"query", "hangar"}});
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), q.strategy);
        CPPUNIT_ASSERT(!q.content);
        q = parse_query({{"query", "x"}, {"content", true}, {"country", "de"}, {"language", "en-US"}});
        CPPUNIT_ASSERT(q.content && q.content->source == "auto");
        CPPUNIT_ASSERT_EQUAL(std::string("DE"), *q.country);
        expect_400([] { parse_query(json::object()); }, "query");
        expect_400([] { parse_query({{"query", "  "}}); }, "query");
        expect_400([] { parse_query({{"query", std::string(2001, 'a')}}); }, "query");
        expect_400([] { parse_query({{"query", 5}}); }, "query");
        expect_400([] { parse_query({{"query", "x"}, {"max_results", 0}}); }, "max_results");
        expect_400([] { parse_query({{"query", "x"}, {"max_results", 101}}); }, "max_results");
        expect_400([] { parse_query({{"query", "x"}, {"country", "DEU"}}); }, "country");
        expect_400([] { parse_query({{"query", "x"}, {"language", "e"}}); }, "language");
        expect_400([] { parse_query({{"query", "x"}, {"language", "en--US"}}); }, "language");
        expect_400([] { parse_query({{"query", "x"}, {"recency", "decade"}}); }, "recency");
        expect_400([] { parse_query({{"query", "x"}, {"start_date", "2024-02-30"}}); }, "start_date");
        expect_400(
            [] {
                parse_query({{"query", "x"}, {"start_date", "2024-03-02"}, {"end_date", "2024-03-01"}});
            },
            "start_date");
        expect_400([] { parse_query({{"query", "x"}, {"include_domains", {"exa mple.com"}}}); }, "include_domains");
        expect_400([] { parse_query({{"query", "x"}, {"safe_search", "on"}}); }, "safe_search");
        expect_400([] { parse_query({{"query", "x"}, {"bogus", 1}}); }, "bogus");
        expect_400([] { parse_query({{"query", "x"}, {"content", {{"source", "browser"}}}}); }, "content.source");
        expect_400([] { parse_query({{"query", "x"}, {"content", {{"max_chars", 0}}}}); }, "content.max_chars");
        expect_400([] { parse_query({{"query", "x"}, {"strategy", {{"type", "pinned"}}}}); }, "strategy.provider");
        expect_400([] { parse_query({{"query", "x"}, {"strategy", {{"type", "best"}}}}); }, "strategy.type");
        expect_400(
            [] {
                parse_query({{"query", "x"}, {"strategy", {{"type", "pinned"}, {"provider", {{"provider", "bing"}}}}}});
            },
            "strategy.provider");
        expect_400(
            [] {
                parse_query(
                    {{"query", "x"},
                     {"strategy",
                      {{"type", "fallback"}, {"providers", {{{"provider", "searxng"}}, {{"provider", "searxng"}}}}}}});
            },
            "twice");
        expect_400(
            [] {
                parse_query({{"query", "x"}, {"strategy", {{"type", "auto"}, {"fallback_on", {"never"}}}}});
            },
            "fallback_on");
    }

    void strategies() {
        Settings s = searxng_only();
        Plan p = plan(parse_query({{"query", "x"}}), s);
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, p.attempts.size());
        CPPUNIT_ASSERT_EQUAL(std::string("searxng"), p.attempts[0].provider);
        // Pinned to a provider the operator gave no key: refused, naming it.
        expect_400(
            [&] {
                plan(parse_query(
                         {{"query", "x"}, {"strategy", {{"type", "pinned"}, {"provider", {{"provider", "brave"}}}}}}),
                     s);
            },
            "brave");
        // A keyed paid provider still has no client here: it cannot serve either.
        s.keyed.insert("tavily");
        expect_400(
            [&] {
                plan(parse_query(
                         {{"query", "x"}, {"strategy", {{"type", "pinned"}, {"provider", {{"provider", "tavily"}}}}}}),
                     s);
            },
            "no client");
        // A fallback chain passes over the ineligible with a warning.
        p = plan(
            parse_query({{"query", "x"},
                         {"strategy",
                          {{"type", "fallback"}, {"providers", {{{"provider", "exa"}}, {{"provider", "searxng"}}}}}}}),
            s);
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, p.attempts.size());
        CPPUNIT_ASSERT(has_warning(p.warnings, "provider_ineligible"));
        CPPUNIT_ASSERT_EQUAL(std::string("exa"), p.warnings[0]["provider"].get<std::string>());
        // auto restricted by provider_options to only unconfigured providers: nothing can serve.
        expect_400(
            [&] {
                plan(parse_query({{"query", "x"},
                                  {"strategy", {{"type", "auto"}, {"provider_options", {{{"provider", "exa"}}}}}}}),
                     s);
            },
            "exa");
        // auto with options for searxng carries them.
        p = plan(parse_query(
                     {{"query", "x"},
                      {"strategy",
                       {{"type", "auto"},
                        {"provider_options", {{{"provider", "searxng"}, {"options", {{"engines", "wikipedia"}}}}}}}}}),
                 s);
        CPPUNIT_ASSERT_EQUAL(std::string("wikipedia"), p.attempts[0].options["engines"].get<std::string>());
        // No SearXNG configured: nothing serves at all.
        s.searxng_url.clear();
        expect_400([&] { plan(parse_query({{"query", "x"}}), s); }, "configure");
    }

    void searxngMapping() {
        SearxngCall c = searxng_call(parse_query({{"query", "a b&c"},
                                                  {"language", "de-DE"},
                                                  {"safe_search", "strict"},
                                                  {"recency", "week"},
                                                  {"max_results", 5}}),
                                     json::object(), 20);
        CPPUNIT_ASSERT_EQUAL(std::string("json"), param(c.query_string, "format"));
        CPPUNIT_ASSERT_EQUAL(std::string("a%20b%26c"), param(c.query_string, "q"));
        CPPUNIT_ASSERT_EQUAL(std::string("de-DE"), param(c.query_string, "language"));
        CPPUNIT_ASSERT_EQUAL(std::string("2"), param(c.query_string, "safesearch"));
        CPPUNIT_ASSERT_EQUAL(std::string("week"), param(c.query_string, "time_range"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{5}, c.keep);
        CPPUNIT_ASSERT(c.warnings.empty());

        c = searxng_call(parse_query({{"query", "x"}, {"max_results", 50}}), json::object(), 20);
        CPPUNIT_ASSERT_EQUAL(std::size_t{20}, c.keep);
        CPPUNIT_ASSERT(has_warning(c.warnings, "max_results_clamped"));

        c = searxng_call(parse_query({{"query", "x"}, {"recency", "hour"}, {"start_date", "2024-01-01"}}),
                         json::object(), 20);
        CPPUNIT_ASSERT_EQUAL(std::string("day"), param(c.query_string, "time_range"));
        CPPUNIT_ASSERT(has_warning(c.warnings, "recency_emulated"));
        CPPUNIT_ASSERT(has_warning(c.warnings, "date_filter_overridden"));
        CPPUNIT_ASSERT_EQUAL(std::string("<none>"), param(c.query_string, "start_date"));

        c = searxng_call(
            parse_query(
                {{"query", "x"}, {"country", "FR"}, {"end_date", "2024-01-01"}, {"include_domains", {"example.org"}}}),
            {{"engines", "wikipedia,duckduckgo"}, {"pageno", 2}}, 20);
        CPPUNIT_ASSERT(has_warning(c.warnings, "param_unsupported"));
        CPPUNIT_ASSERT(has_warning(c.warnings, "filter_emulated"));
        CPPUNIT_ASSERT_EQUAL(std::string("2"), param(c.query_string, "pageno"));
        CPPUNIT_ASSERT(param(c.query_string, "engines").find("wikipedia") == 0);
        expect_400([] { searxng_call(parse_query({{"query", "x"}}), {{"count", 3}}, 20); }, "options.count");
    }

    void strictParamsRefuses() {
        auto strict = [](json body) {
            body["query"] = "x";
            body["strict_params"] = true;
            return parse_query(body);
        };
        expect_400([&] { searxng_call(strict({{"max_results", 21}}), json::object(), 20); }, "max_results");
        expect_400([&] { searxng_call(strict({{"country", "US"}}), json::object(), 20); }, "country");
        expect_400([&] { searxng_call(strict({{"start_date", "2024-01-01"}}), json::object(), 20); }, "start_date");
        expect_400([&] { searxng_call(strict({{"recency", "hour"}}), json::object(), 20); }, "recency");
        // What SearXNG honours exactly passes.
        searxng_call(strict({{"recency", "day"}, {"language", "en"}, {"include_domains", {"a.org"}}}), json::object(),
                     20);
    }

    void parsingIsDefensive() {
        int n = 0;
        auto ids = [&] { return "r" + std::to_string(++n); };
        SearxngCall call;
        call.keep = 3;
        for (const char *bad : {"", "not json", "[]", "{\"results\": 3}", "{\"query\": \"x\"}"}) {
            bool threw = false;
            try {
                parse_searxng(bad, call, ids, false);
            } catch (const std::invalid_argument &) {
                threw = true;
            }
            CPPUNIT_ASSERT_MESSAGE(bad, threw);
        }
        const json answer = {
            {"query", "x"},
            {"answers", {"forty-two"}},
            {"results",
             {{{"url", "javascript:alert(1)"}, {"title", "bad scheme"}},
              {{"title", "no url"}},
              {{"url", 7}},
              "not an object",
              {{"url", "https://a.example.org/1"}, {"title", "one"}, {"content", "first snippet"}, {"engine", "wiki"}},
              {{"url", "https://other.net/2"}, {"title", std::string(5000, 't')}},
              {{"url", "https://b.example.org/3"}, {"title", 3}, {"publishedDate", "2024-01-02T00:00:00"}},
              {{"url", "https://c.example.org/4"}}}}};
        Parsed p = parse_searxng(answer.dump(), call, ids, true);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, p.results.size());
        CPPUNIT_ASSERT_EQUAL(1, p.results[0]["rank"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("first snippet"), p.results[0]["snippet"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("wiki"), p.results[0]["source"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::size_t{1024}, p.results[1]["title"].get<std::string>().size());
        CPPUNIT_ASSERT(!p.results[2].contains("title"));
        CPPUNIT_ASSERT(p.content[0] && !p.content[1]);
        CPPUNIT_ASSERT_EQUAL(std::string("forty-two"), *p.answer);
        CPPUNIT_ASSERT(p.raw.is_object() && p.results[0].contains("raw"));

        call.keep = 10;
        call.include_domains = {"example.org"};
        call.exclude_domains = {"b.example.org"};
        p = parse_searxng(answer.dump(), call, ids, false);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, p.results.size());
        CPPUNIT_ASSERT_EQUAL(std::string("https://c.example.org/4"), p.results[1]["url"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(2, p.results[1]["rank"].get<int>());
        CPPUNIT_ASSERT(!p.results[0].contains("raw") && p.raw.is_null());
        CPPUNIT_ASSERT(host_matches("a.example.org", "example.org"));
        CPPUNIT_ASSERT(!host_matches("badexample.org", "example.org"));
    }

    void contents() {
        const json search = {{"id", "s"},
                             {"results",
                              {{{"id", "r1"}, {"url", "https://a/1"}},
                               {{"id", "r2"}, {"url", "https://a/2"}},
                               {{"id", "r3"}, {"url", "https://a/3"}}}}};
        auto r = parse_contents({{"limit", 2}}, search);
        CPPUNIT_ASSERT((r.result_ids == std::vector<std::string>{"r1", "r2"}));
        r = parse_contents({{"result_ids", {"r3", "r1"}}, {"content", {{"source", "provider"}, {"max_chars", 3}}}},
                           search);
        CPPUNIT_ASSERT((r.result_ids == std::vector<std::string>{"r3", "r1"}));
        expect_400([&] { parse_contents(json::object(), search); }, "result_ids");
        expect_400([&] { parse_contents({{"limit", 1}, {"result_ids", {"r1"}}}, search); }, "result_ids");
        expect_400([&] { parse_contents({{"result_ids", {"r9"}}}, search); }, "r9");
        expect_400([&] { parse_contents({{"limit", 0}}, search); }, "limit");
        expect_400(
            [&] {
                parse_contents({{"limit", 1}, {"content", {{"source", "provider"}, {"max_age_hours", 1}}}}, search);
            },
            "max_age_hours");

        json c = provider_content(std::string("h\xc3\xa9llo"), 0, r.options);
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), c["status"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("h\xc3\xa9l"), c["text"].get<std::string>());
        CPPUNIT_ASSERT(c["truncated"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(std::string("excerpt"), c["completeness"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("provider"), c["method"].get<std::string>());
        c = provider_content(std::nullopt, 0, r.options);
        CPPUNIT_ASSERT_EQUAL(std::string("unavailable"), c["status"].get<std::string>());
        CPPUNIT_ASSERT(!c.contains("text"));

        ContentOptions o;
        CPPUNIT_ASSERT(retained_serves(o, true, 0, 1000));
        CPPUNIT_ASSERT(!retained_serves(o, false, 0, 1000));
        o.max_age_hours = 0;
        CPPUNIT_ASSERT(!retained_serves(o, true, 0, 1000));
        o.max_age_hours = 1;
        CPPUNIT_ASSERT(retained_serves(o, true, 0, std::int64_t{3600} * 1000));
        CPPUNIT_ASSERT(!retained_serves(o, true, 0, std::int64_t{3600} * 1000 + 1));
        o = {};
        o.source = "browser";
        CPPUNIT_ASSERT(!retained_serves(o, true, 0, 0));
    }

    void providerListing() {
        Settings s = searxng_only();
        json e = provider_entry("searxng", s);
        CPPUNIT_ASSERT(e["available"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(20, e["max_results_cap"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("native"), e["params"]["language"]["support"].get<std::string>());
        e = provider_entry("brave", s);
        CPPUNIT_ASSERT(!e["available"].get<bool>());
        CPPUNIT_ASSERT(e["unavailable_reason"].get<std::string>().find("API key") != std::string::npos);
        for (const char *p : {"country", "end_date", "exclude_domains", "include_domains", "language", "recency",
                              "safe_search", "start_date"})
            CPPUNIT_ASSERT(e["params"].contains(p));
    }

    void browserContent() {
        ContentOptions o;
        o.max_chars = 5;
        const json page = {{"timed_out", false},
                           {"http_status", 200},
                           {"final_url", "https://a.example/b"},
                           {"content_type", "text/html"},
                           {"text", "hello"},
                           {"text_chars", 9},
                           {"readable", true},
                           {"extractor_version", "innertext-1"}};
        json c = browser_content(page, "render", o, 0);
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), c["status"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("browser_render"), c["method"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("full_page"), c["completeness"].get<std::string>());
        CPPUNIT_ASSERT(c["truncated"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(std::string("https://a.example/b"), c["final_url"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("bypass"), c["cache_status"].get<std::string>());
        auto status = [&](const json &changes, const char *mode = "curl") {
            json p = page;
            p.update(changes);
            json got = browser_content(p, mode, ContentOptions{}, 0);
            CPPUNIT_ASSERT(got["status"] == "ok" || !got.contains("text"));
            return got["status"].get<std::string>() + "/" + got.value("error", json::object()).value("code", "");
        };
        CPPUNIT_ASSERT_EQUAL(std::string("ok/"), status({{"readable", false}}));
        CPPUNIT_ASSERT_EQUAL(std::string("timeout/timeout"), status({{"timed_out", true}}));
        CPPUNIT_ASSERT_EQUAL(std::string("blocked/http_403"), status({{"http_status", 403}}));
        CPPUNIT_ASSERT_EQUAL(std::string("blocked/http_429"), status({{"http_status", 429}}));
        CPPUNIT_ASSERT_EQUAL(std::string("error/http_500"), status({{"http_status", 500}}));
        CPPUNIT_ASSERT_EQUAL(std::string("blocked/blocked"),
                             status({{"net_error", "net::ERR_TUNNEL_CONNECTION_FAILED"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("error/fetch_failed"), status({{"net_error", "net::ERR_CONNECTION_REFUSED"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("unsupported_type/unsupported_type"),
                             status({{"content_type", "application/pdf"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("unsupported_type/unsupported_type"),
                             status({{"content_type", "application/pdf"}, {"net_error", "net::ERR_ABORTED"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("extraction_failed/extraction_failed"), status({{"text", ""}}));
        CPPUNIT_ASSERT_EQUAL(std::string("browser_curl"),
                             browser_content(page, "curl", o, 0)["method"].get<std::string>());
        json unread = browser_content({{"timed_out", false},
                                       {"http_status", 200},
                                       {"content_type", "text/plain"},
                                       {"text", "x"},
                                       {"text_chars", 1}},
                                      "render", ContentOptions{}, 0);
        CPPUNIT_ASSERT_EQUAL(std::string("unknown"), unread["completeness"].get<std::string>());
        CPPUNIT_ASSERT(!unread["truncated"].get<bool>());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SearchModelTest);
