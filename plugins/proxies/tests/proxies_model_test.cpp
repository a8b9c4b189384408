// Unit tests of the proxies plugin's model: create validation (each bad field named), the
// bypass-host rule and matching, upstream lines of proxies.ini and geo matching with suggestions.
#include "proxies_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace proxies;

namespace {

// The field a 400 names, or "" when parse_create accepted the body.
std::string rejected_field(const char *body) {
    try {
        parse_create(json::parse(body));
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT(!e.details().empty());
        const std::string &m = e.details().front().message;
        return m.substr(0, m.find(':'));
    }
    return "";
}

} // namespace

class ProxiesModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ProxiesModelTest);
    CPPUNIT_TEST(customValid);
    CPPUNIT_TEST(customInvalid);
    CPPUNIT_TEST(managedConfig);
    CPPUNIT_TEST(bypassRule);
    CPPUNIT_TEST(bypassMatching);
    CPPUNIT_TEST(upstreamLines);
    CPPUNIT_TEST(poolMatching);
    CPPUNIT_TEST(exitAddresses);
    CPPUNIT_TEST(urls);
    CPPUNIT_TEST_SUITE_END();

public:
    void customValid() {
        auto p = parse_create(json::parse(R"({"type":"custom","name":"  office ","protocol":"http",
            "bypass_hosts":["Example.com","*.internal.test"],
            "config":{"host":"Proxy.Example.com","port":3128,"username":"u","password":"secret1"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("office"), *p.name);
        CPPUNIT_ASSERT_EQUAL(std::string("http"), p.protocol);
        CPPUNIT_ASSERT_EQUAL(std::string("proxy.example.com"), p.config["host"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(3128, p.config["port"].get<int>());
        CPPUNIT_ASSERT(p.config["has_password"].get<bool>());
        CPPUNIT_ASSERT(!p.config.contains("password"));
        CPPUNIT_ASSERT_EQUAL(std::string("secret1"), *p.password);
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), p.bypass_hosts[0]);
        // protocol defaults to https (TLS to the proxy), as Kernel's does
        CPPUNIT_ASSERT_EQUAL(
            std::string("https"),
            parse_create(json::parse(R"({"type":"custom","config":{"host":"10.0.0.1","port":1}})")).protocol);
    }

    void customInvalid() {
        CPPUNIT_ASSERT_EQUAL(std::string("type"), rejected_field(R"({})"));
        CPPUNIT_ASSERT_EQUAL(std::string("type"), rejected_field(R"({"type":"vpn"})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.host"), rejected_field(R"({"type":"custom","config":{"port":80}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.port"), rejected_field(R"({"type":"custom","config":{"host":"h"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.port"),
                             rejected_field(R"({"type":"custom","config":{"host":"h","port":70000}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.port"),
                             rejected_field(R"({"type":"custom","config":{"host":"h","port":0}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.password"),
                             rejected_field(R"({"type":"custom","config":{"host":"h","port":1,"password":"abcd"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.host"),
                             rejected_field(R"({"type":"custom","config":{"host":"http://h","port":1}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.ca_bundle"),
                             rejected_field(R"({"type":"custom","config":{"host":"h","port":1,"ca_bundle":"x"}})"));
        std::string big = R"({"type":"custom","config":{"host":"h","port":1,"ca_bundle":"-----BEGIN CERTIFICATE-----)" +
                          std::string(70000, 'A') + "\"}}";
        CPPUNIT_ASSERT_EQUAL(std::string("config.ca_bundle"), rejected_field(big.c_str()));
        CPPUNIT_ASSERT_EQUAL(std::string("protocol"),
                             rejected_field(R"({"type":"custom","protocol":"socks","config":{"host":"h","port":1}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("bypass_hosts[1]"),
                             rejected_field(R"({"type":"datacenter","bypass_hosts":["a.com","10.0.0.1"]})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.zip"),
                             rejected_field(R"({"type":"custom","config":{"host":"h","port":1,"zip":"1"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), rejected_field(R"({"type":"custom","config":{"host":"h","port":1}})"));
    }

    void managedConfig() {
        CPPUNIT_ASSERT_EQUAL(std::string("US"),
                             parse_create(json::parse(R"({"type":"isp"})")).config["country"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("EU"),
                             parse_create(json::parse(R"({"type":"datacenter","config":{"country":"eu"}})"))
                                 .config["country"]
                                 .get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("config.country"),
                             rejected_field(R"({"type":"datacenter","config":{"country":"USA"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.country"),
                             rejected_field(R"({"type":"residential","config":{"city":"berlin"}})"));
        CPPUNIT_ASSERT_EQUAL(
            std::string("config.city"),
            rejected_field(R"({"type":"residential","config":{"country":"US","city":"san francisco"}})"));
        CPPUNIT_ASSERT_EQUAL(
            std::string("config.zip"),
            rejected_field(R"({"type":"residential","config":{"country":"US","state":"CA","zip":"94107"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.asn"),
                             rejected_field(R"({"type":"residential","config":{"country":"US","asn":"x1"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("config.host"), rejected_field(R"({"type":"isp","config":{"host":"h"}})"));
        auto r = parse_create(json::parse(R"({"type":"residential","config":{"country":"us","asn":"7922"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("AS7922"), r.config["asn"].get<std::string>());
    }

    void bypassRule() {
        CPPUNIT_ASSERT(!bypass_problem("example.com"));
        CPPUNIT_ASSERT(!bypass_problem("*.example.com"));
        CPPUNIT_ASSERT(!bypass_problem("localhost"));
        CPPUNIT_ASSERT(bypass_problem("127.0.0.1"));
        CPPUNIT_ASSERT(bypass_problem("::1"));
        CPPUNIT_ASSERT(bypass_problem("example.com:443"));
        CPPUNIT_ASSERT(bypass_problem("example.com/path"));
        CPPUNIT_ASSERT(bypass_problem("https://example.com"));
        CPPUNIT_ASSERT(bypass_problem("a.*.com"));
        CPPUNIT_ASSERT(bypass_problem(""));
        CPPUNIT_ASSERT(bypass_problem(std::string(254, 'a')));
    }

    void bypassMatching() {
        std::vector<std::string> b = {"example.com", "*.corp.test"};
        CPPUNIT_ASSERT(bypassed(b, "EXAMPLE.com"));
        CPPUNIT_ASSERT(bypassed(b, "example.com."));
        CPPUNIT_ASSERT(!bypassed(b, "www.example.com"));
        CPPUNIT_ASSERT(bypassed(b, "a.corp.test"));
        CPPUNIT_ASSERT(bypassed(b, "a.b.corp.test"));
        CPPUNIT_ASSERT(!bypassed(b, "corp.test"));
        CPPUNIT_ASSERT(!bypassed(b, "evilcorp.test"));
    }

    void upstreamLines() {
        auto pool = parse_pool("http://user:p%40ss@127.0.0.1:3128 country=us city=Berlin, socks5://[::1]:1080,"
                               " https://proxy.example:443 asn=7922");
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), pool.size());
        CPPUNIT_ASSERT_EQUAL(std::string("user"), pool[0].username);
        CPPUNIT_ASSERT_EQUAL(std::string("p@ss"), pool[0].password);
        CPPUNIT_ASSERT_EQUAL(std::string("us"), pool[0].tags.at("country"));
        CPPUNIT_ASSERT_EQUAL(std::string("berlin"), pool[0].tags.at("city"));
        CPPUNIT_ASSERT_EQUAL(std::string("::1"), pool[1].host);
        CPPUNIT_ASSERT_EQUAL(std::uint16_t(1080), pool[1].port);
        CPPUNIT_ASSERT_EQUAL(std::string("as7922"), pool[2].tags.at("asn"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://127.0.0.1:3128"), pool[0].display());
        CPPUNIT_ASSERT(parse_pool("").empty());
        CPPUNIT_ASSERT_THROW(parse_pool("ftp://h:1"), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_pool("http://h"), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(parse_pool("http://h:1 colour=red"), std::invalid_argument);
        // The error never quotes credentials.
        try {
            parse_pool("http://u:topsecret@h");
        } catch (const std::invalid_argument &e) {
            CPPUNIT_ASSERT(std::string(e.what()).find("topsecret") == std::string::npos);
        }
        auto back = Upstream::from_json(pool[0].to_json());
        CPPUNIT_ASSERT_EQUAL(pool[0].password, back.password);
    }

    void poolMatching() {
        auto pool = parse_pool("http://a:1 country=US state=ca city=sanfrancisco, http://b:1 country=US state=ny,"
                               " http://c:1 country=DE city=berlin, http://d:1 country=DE city=munich");
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), match_pool(pool, {{"country", "US"}}).upstreams.size());
        auto sf = match_pool(pool, {{"country", "US"}, {"city", "sanfrancisco"}});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), sf.upstreams.size());
        CPPUNIT_ASSERT_EQUAL(std::string("a"), sf.upstreams[0].host);
        auto none = match_pool(pool, {{"country", "DE"}, {"city", "hamburg"}});
        CPPUNIT_ASSERT(none.upstreams.empty());
        // Same country first.
        CPPUNIT_ASSERT_EQUAL(std::string("country=DE city=berlin"), none.suggestions.at(0));
        CPPUNIT_ASSERT_EQUAL(std::string("country=DE city=munich"), none.suggestions.at(1));
        CPPUNIT_ASSERT_EQUAL(std::size_t(4), none.suggestions.size());
        // An upstream without tags serves any country, not a city it was not tagged with.
        auto any = parse_pool("http://x:1");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), match_pool(any, {{"country", "FR"}}).upstreams.size());
        CPPUNIT_ASSERT(match_pool(any, {{"country", "FR"}, {"city", "paris"}}).upstreams.empty());
        // At most 10 suggestions.
        std::string many;
        for (int i = 0; i < 15; ++i)
            many += (i ? "," : "") + std::string("http://h:1 country=US city=c") + static_cast<char>('a' + i);
        CPPUNIT_ASSERT_EQUAL(std::size_t(10), match_pool(parse_pool(many), {{"country", "JP"}}).suggestions.size());
    }

    void exitAddresses() {
        CPPUNIT_ASSERT_EQUAL(std::string("203.0.113.7"), *exit_address(" 203.0.113.7\n"));
        CPPUNIT_ASSERT_EQUAL(std::string("2001:db8::1"), *exit_address(R"({"ip":"2001:db8::1"})"));
        CPPUNIT_ASSERT_EQUAL(std::string("198.51.100.2"), *exit_address(R"({"origin":"198.51.100.2"})"));
        CPPUNIT_ASSERT(!exit_address("<html>hello</html>"));
        CPPUNIT_ASSERT(!exit_address(R"({"ip":"not an ip"})"));
    }

    void urls() {
        auto u = parse_url("http://Example.com:8080/a?b=1#frag");
        CPPUNIT_ASSERT(u);
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), u->host);
        CPPUNIT_ASSERT_EQUAL(std::uint16_t(8080), u->port);
        CPPUNIT_ASSERT_EQUAL(std::string("/a?b=1"), u->target);
        CPPUNIT_ASSERT_EQUAL(std::uint16_t(443), parse_url("https://h")->port);
        CPPUNIT_ASSERT_EQUAL(std::string("/"), parse_url("https://h")->target);
        CPPUNIT_ASSERT(!parse_url("ftp://h/"));
        CPPUNIT_ASSERT(!parse_url("http://"));
        CPPUNIT_ASSERT(!parse_url("http://u:p@h/"));
        CPPUNIT_ASSERT(!parse_url("http://h:99999/"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ProxiesModelTest);
