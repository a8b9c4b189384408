// Unit tests of the config registry's pure decisions (kernel-api-0131.md §1D): targets, request
// rules, candidates in cost order and their batches, verdicts of a load, evidence, the cheapest
// working configuration, match scope and the seed file.
#include "config_registry_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::config_registry;
using hangar::json;

namespace {

template <typename F> void expect_400(F &&f, const std::string &named) {
    try {
        f();
        CPPUNIT_FAIL("accepted, expected 400 naming " + named);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT_MESSAGE(e.what(),
                               (std::string(e.what()) + e.details_json().dump()).find(named) != std::string::npos);
    }
}

Run run(const Candidate &c, Verdict v, std::int64_t at) {
    Run r;
    r.candidate = c;
    r.verdict = v;
    r.observed_at = at;
    return r;
}

} // namespace

class ConfigRegistryModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ConfigRegistryModelTest);
    CPPUNIT_TEST(normalizes_targets);
    CPPUNIT_TEST(refuses_bad_requests);
    CPPUNIT_TEST(candidates_cheapest_first);
    CPPUNIT_TEST(classifies_loads);
    CPPUNIT_TEST(aggregates_and_picks_cheapest_pass);
    CPPUNIT_TEST(scopes_and_seeds);
    CPPUNIT_TEST_SUITE_END();

public:
    void normalizes_targets() {
        auto t = normalize("HTTPS://Shop.Example.CO.UK:443/a/b?q=1#frag");
        CPPUNIT_ASSERT_EQUAL(std::string("https://shop.example.co.uk/a/b"), t.normalized);
        CPPUNIT_ASSERT_EQUAL(std::string("shop.example.co.uk"), t.host);
        CPPUNIT_ASSERT_EQUAL(std::string("example.co.uk"), t.domain);
        auto p = normalize("http://127.0.0.1:21050");
        CPPUNIT_ASSERT_EQUAL(std::string("http://127.0.0.1:21050/"), p.normalized);
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1"), p.domain);
        CPPUNIT_ASSERT(literal_non_public("127.0.0.1"));
        CPPUNIT_ASSERT(literal_non_public("10.0.0.8"));
        CPPUNIT_ASSERT(literal_non_public("localhost"));
        CPPUNIT_ASSERT(!literal_non_public("93.184.216.34"));
        CPPUNIT_ASSERT(!literal_non_public("example.com"));
    }

    void refuses_bad_requests() {
        expect_400([] { parse_lookup(json::object()); }, "url");
        expect_400([] { parse_lookup({{"url", "ftp://example.com/"}}); }, "url");
        expect_400([] { parse_lookup({{"url", "https://user:pw@example.com/"}}); }, "url");
        expect_400(
            [] {
                parse_lookup({{"url", "https://example.com/"}, {"allowed_proxy_countries", {"USA"}}});
            },
            "allowed_proxy_countries");
        auto l = parse_lookup({{"url", "https://example.com/"}, {"allowed_proxy_countries", {"us", "DE"}}});
        CPPUNIT_ASSERT(l.countries && (*l.countries)[0] == "US");
        expect_400([] { parse_resolve({{"url", "http://example.com/"}, {"intent", "buy a thing"}}); }, "intent");
        expect_400([] { parse_resolve({{"url", "https://example.com/"}, {"nope", 1}}); }, "nope");
        expect_400([] { parse_lookup({{"url", "https://example.com/"}, {"intent", "x"}}); }, "intent");
        CPPUNIT_ASSERT(parse_resolve({{"url", "https://example.com/"}, {"intent", "buy a thing"}}).intent);
    }

    void candidates_cheapest_first() {
        ProxyOffer p{"prx_1", "tiny", "custom", "http", "", json{{"host", "127.0.0.1"}, {"port", 3128}}};
        auto all = candidates({p}, true);
        CPPUNIT_ASSERT_EQUAL(std::size_t{8}, all.size());
        CPPUNIT_ASSERT_EQUAL(std::string("headless|plain|direct"), all[0].key());
        CPPUNIT_ASSERT_EQUAL(std::string("headless|stealth|direct"), all[1].key());
        CPPUNIT_ASSERT_EQUAL(std::string("headful|plain|direct"), all[2].key());
        CPPUNIT_ASSERT_EQUAL(std::string("headless|plain|proxy:prx_1"), all[4].key());
        CPPUNIT_ASSERT_EQUAL(std::string("managed"), all[4].proxy_recipe["mode"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("tiny"), all[4].proxy_recipe["create"]["name"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, candidates({}, false).size());
        auto b = batches(all, 3);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, b.size());
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, b[2].size());
    }

    void classifies_loads() {
        Load ok;
        ok.status = 200;
        ok.title = "Shop";
        CPPUNIT_ASSERT(classify(ok).verdict == Verdict::accessed);
        Load forbidden = ok;
        forbidden.status = 403;
        CPPUNIT_ASSERT(classify(forbidden).verdict == Verdict::blocked);
        Load limited = ok;
        limited.status = 429;
        CPPUNIT_ASSERT(classify(limited).verdict == Verdict::blocked);
        Load challenge = ok;
        challenge.title = "Just a moment...";
        CPPUNIT_ASSERT(classify(challenge).verdict == Verdict::blocked);
        Load said = ok;
        said.text = "Access denied: automated browser detected";
        CPPUNIT_ASSERT(classify(said).verdict == Verdict::blocked);
        Load verdict = ok;
        verdict.verdict = "bot";
        CPPUNIT_ASSERT(classify(verdict).verdict == Verdict::blocked);
        Load failed;
        failed.error = "net::ERR_CONNECTION_REFUSED";
        CPPUNIT_ASSERT(classify(failed).verdict == Verdict::inconclusive);
        Load down = ok;
        down.status = 502;
        CPPUNIT_ASSERT(classify(down).verdict == Verdict::inconclusive);
        auto l = load_from_json({{"status", 200}, {"title", std::string(5000, 'x')}, {"verdict", "HUMAN"}});
        CPPUNIT_ASSERT_EQUAL(std::size_t{200}, l.title.size());
        CPPUNIT_ASSERT(classify(l).verdict == Verdict::accessed);
    }

    void aggregates_and_picks_cheapest_pass() {
        auto all = candidates({ProxyOffer{"prx_1", "tiny", "custom", "http", "", json::object()}}, false);
        // all: headless plain, headless stealth, proxy plain, proxy stealth
        std::vector<std::vector<Run>> analyses = {
            {run(all[0], Verdict::blocked, 10), run(all[1], Verdict::accessed, 11)},
            {run(all[0], Verdict::blocked, 20), run(all[1], Verdict::accessed, 21), run(all[2], Verdict::accessed, 22)},
        };
        auto g = aggregate(analyses);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, g.size());
        CPPUNIT_ASSERT_EQUAL(2, g[1].accessed);
        CPPUNIT_ASSERT_EQUAL(2, g[1].run_count);
        CPPUNIT_ASSERT_EQUAL(std::int64_t{21}, g[1].last_supported_at);
        auto w = working(g, std::nullopt);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, w.size());
        CPPUNIT_ASSERT(w[0].candidate.stealth && w[0].candidate.proxy_id.empty());
        auto j = recommendation_json(w[0], "exact", "https://example.com/");
        CPPUNIT_ASSERT_EQUAL(std::string("recommendation"), j["type"].get<std::string>());
        CPPUNIT_ASSERT(j["browser"]["stealth"].get<bool>());
        CPPUNIT_ASSERT_EQUAL(1.0, j["evidence"]["success_rate"].get<double>());
        // A proxy of unknown country is not within allowed countries.
        auto only = working({g[2]}, std::vector<std::string>{"US"});
        CPPUNIT_ASSERT(only.empty());
        auto r = run_from_json(run_json(analyses[1][2]));
        CPPUNIT_ASSERT_EQUAL(all[2].key(), r.candidate.key());
        CPPUNIT_ASSERT(r.verdict == Verdict::accessed);
    }

    void scopes_and_seeds() {
        auto a = normalize("https://www.example.com/login");
        CPPUNIT_ASSERT_EQUAL(std::string("exact"), *match_scope(a, normalize("https://www.example.com/login")));
        CPPUNIT_ASSERT_EQUAL(std::string("host"), *match_scope(a, normalize("https://www.example.com/")));
        CPPUNIT_ASSERT_EQUAL(std::string("domain"), *match_scope(a, normalize("https://shop.example.com/")));
        CPPUNIT_ASSERT(!match_scope(a, normalize("https://example.org/")));
        auto seeds = parse_seed(json::parse(R"([{"target": "https://example.com/", "match": "domain",
            "browser": {"headless": false, "stealth": true}, "evidence": {"accessed": 3}}])"),
                                5);
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, seeds.size());
        CPPUNIT_ASSERT_EQUAL(3, seeds[0].candidate.cost);
        CPPUNIT_ASSERT_EQUAL(3, seeds[0].evidence.accessed);
        CPPUNIT_ASSERT_THROW(parse_seed(json::parse(R"([{"target": "ftp://x/"}])"), 0), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_seed(json::parse(R"([{"target": "https://x.com/", "match": "world"}])"), 0),
                             std::invalid_argument);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ConfigRegistryModelTest);
