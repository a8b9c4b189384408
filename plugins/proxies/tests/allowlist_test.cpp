// Unit tests of the egress allowlist (network.allowed_hosts): every entry form and refusal rule of
// kernel-api-0131 §2.1, and what the forwarder lets through.
#include "allowlist.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using hangar::json;
using proxies::Allowlist;
using proxies::PrivateHosts;

namespace {

// The 400's message for a one-entry list, or "" when it was accepted.
std::string refusal(const std::string &entry) {
    try {
        Allowlist::parse(json::array({entry}));
        return "";
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        return e.details_json().dump();
    }
}

bool refused_because(const std::string &entry, const std::string &why) {
    return refusal(entry).find(why) != std::string::npos;
}

} // namespace

class AllowlistTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(AllowlistTest);
    CPPUNIT_TEST(namesAndWildcards);
    CPPUNIT_TEST(addressesAndNetworks);
    CPPUNIT_TEST(refusals);
    CPPUNIT_TEST(urls);
    CPPUNIT_TEST(privateHostsGrammar);
    CPPUNIT_TEST(privateHostsMatching);
    CPPUNIT_TEST_SUITE_END();

public:
    void namesAndWildcards() {
        auto list = Allowlist::parse(json::array({"Example.com", "*.Shop.example.org", "localhost"}));
        CPPUNIT_ASSERT(list.allows("example.com"));
        CPPUNIT_ASSERT(list.allows("EXAMPLE.com."));
        CPPUNIT_ASSERT(!list.allows("www.example.com")); // exact means exact
        CPPUNIT_ASSERT(list.allows("a.shop.example.org"));
        CPPUNIT_ASSERT(list.allows("a.b.c.shop.example.org")); // any depth
        CPPUNIT_ASSERT(!list.allows("shop.example.org"));      // subdomains only
        CPPUNIT_ASSERT(!list.allows("evilshop.example.org"));
        CPPUNIT_ASSERT(!list.allows("example.com.evil.test"));
        CPPUNIT_ASSERT(list.allows("localhost"));
        CPPUNIT_ASSERT(!list.allows("127.0.0.1")); // names are not resolved
        CPPUNIT_ASSERT_EQUAL(std::string("*.shop.example.org"), list.entries()[1]);
    }

    void addressesAndNetworks() {
        auto list = Allowlist::parse(json::array({"8.8.8.8", "[2606:4700::1111]", "203.0.113.0/24", "2606:4700::/32"}));
        CPPUNIT_ASSERT(list.allows("8.8.8.8"));
        CPPUNIT_ASSERT(!list.allows("8.8.4.4"));
        CPPUNIT_ASSERT(list.allows("2606:4700:0::1111"));
        CPPUNIT_ASSERT(list.allows("[2606:4700::1111]"));
        CPPUNIT_ASSERT(list.allows("203.0.113.200"));
        CPPUNIT_ASSERT(!list.allows("203.0.114.1"));
        CPPUNIT_ASSERT(list.allows("2606:4700:ffff::1"));
        CPPUNIT_ASSERT(!list.allows("2606:4701::1"));
        CPPUNIT_ASSERT(!list.allows("dns.google"));
    }

    void refusals() {
        CPPUNIT_ASSERT(refused_because("*.com", "public suffix"));
        CPPUNIT_ASSERT(refused_because("*.co.uk", "public suffix"));
        CPPUNIT_ASSERT(refused_because("*.github.io", "public suffix")); // the list's private part too
        CPPUNIT_ASSERT(refused_because("*.localhost", "public suffix")); // an unlisted top-level name
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal("*.example.co.uk"));
        CPPUNIT_ASSERT(refused_because("https://example.com", "scheme"));
        CPPUNIT_ASSERT(refused_because("example.com:443", "port"));
        CPPUNIT_ASSERT(refused_because("[2606:4700::1111]:443", "port"));
        CPPUNIT_ASSERT(refused_because("example.com/path", "path"));
        CPPUNIT_ASSERT(refused_because("a.*.example.com", "'*'"));
        CPPUNIT_ASSERT(refused_because("*", "'*'"));
        CPPUNIT_ASSERT(refused_because("exa mple.com", "not a host"));
        CPPUNIT_ASSERT(refused_because("-bad.example.com", "not a host name"));
        CPPUNIT_ASSERT(refused_because("1.2.3", "not a host name"));
        CPPUNIT_ASSERT(refused_because("10.1.2.3", "private"));
        CPPUNIT_ASSERT(refused_because("127.0.0.1", "loopback"));
        CPPUNIT_ASSERT(refused_because("169.254.169.254", "link-local"));
        CPPUNIT_ASSERT(refused_because("[::1]", "loopback"));
        CPPUNIT_ASSERT(refused_because("[fd00::1]", "unique local"));
        CPPUNIT_ASSERT(refused_because("[::ffff:10.0.0.1]", "private")); // a mapped private address
        CPPUNIT_ASSERT(refused_because("2606:4700::1111", "brackets"));
        CPPUNIT_ASSERT(refused_because("10.0.0.0/8", "private"));
        CPPUNIT_ASSERT(refused_because("172.0.0.0/8", "private")); // holds 172.16.0.0/12
        CPPUNIT_ASSERT(refused_because("0.0.0.0/0", "reaches"));
        CPPUNIT_ASSERT(refused_because("203.0.113.1/24", "canonical form: its network is 203.0.113.0/24"));
        CPPUNIT_ASSERT(refused_because("203.0.113.0/33", "longer than the address"));
        CPPUNIT_ASSERT(refused_because("2000::/3", "wider than /32"));
        CPPUNIT_ASSERT(refused_because("fc00::/32", "unique local"));
        CPPUNIT_ASSERT_EQUAL(std::string(), refusal("[2606:4700::]/32"));
        try {
            Allowlist::parse(json::array());
            CPPUNIT_FAIL("an empty list was accepted");
        } catch (const hangar::Error &e) {
            CPPUNIT_ASSERT_EQUAL(400, e.status());
        }
        json many = json::array();
        for (std::size_t i = 0; i <= Allowlist::kMaxEntries; ++i)
            many.push_back("h" + std::to_string(i) + ".example.com");
        CPPUNIT_ASSERT_THROW(Allowlist::parse(many), hangar::Error);
        CPPUNIT_ASSERT_THROW(Allowlist::parse(json::array({1})), hangar::Error);
    }

    void urls() {
        auto list = Allowlist::parse(json::array({"example.com", "[2606:4700::1111]"}));
        CPPUNIT_ASSERT(list.allows_url("https://example.com/a?b#c"));
        CPPUNIT_ASSERT(list.allows_url("http://user:pw@example.com:8080/"));
        CPPUNIT_ASSERT(list.allows_url("wss://example.com/socket"));
        CPPUNIT_ASSERT(list.allows_url("http://[2606:4700::1111]:80/"));
        CPPUNIT_ASSERT(!list.allows_url("https://example.org/"));
        CPPUNIT_ASSERT(!list.allows_url("https://example.org/?u=http://example.com"));
        CPPUNIT_ASSERT(list.allows_url("about:blank"));
    }

    void privateHostsGrammar() {
        auto p = PrivateHosts::parse(json::parse(
            R"(["Preview.Internal","*.corp.example","10.1.30.63:8443","[fd00::1]:22","100.64.0.0/10","fd00::/8",
                "db.corp.example:5432"])"));
        CPPUNIT_ASSERT_EQUAL(std::string("preview.internal"), p.entries()[0]);
        CPPUNIT_ASSERT_EQUAL(std::size_t{7}, p.entries().size());
        CPPUNIT_ASSERT(PrivateHosts::parse(json::array()).entries().empty());
        auto refused = [](const char *entry, const char *why) {
            try {
                PrivateHosts::parse(json::array({entry}));
            } catch (const hangar::Error &e) {
                CPPUNIT_ASSERT_EQUAL(400, e.status());
                std::string text = e.details_json().dump();
                CPPUNIT_ASSERT_MESSAGE(text, text.find("network.private_hosts[0]") != std::string::npos);
                CPPUNIT_ASSERT_MESSAGE(text, text.find(why) != std::string::npos);
                return;
            }
            CPPUNIT_FAIL(std::string("accepted ") + entry);
        };
        refused("203.0.113.7", "not inside");     // public
        refused("127.0.0.1", "not inside");       // loopback
        refused("169.254.169.254", "not inside"); // link-local (cloud metadata)
        refused("10.0.0.0/7", "not inside");      // wider than the range
        refused("10.1.0.1/16", "canonical");
        refused("10.0.0.0/8:80", "network"); // a network has no port
        refused("fd00::1", "brackets");
        refused("*.co.uk", "wildcard");
        refused("*.internal", "wildcard"); // one label
        refused("a.example:0", "port");
        refused("https://a.example", "scheme");
    }

    void privateHostsMatching() {
        auto d = PrivateHosts::defaults();
        CPPUNIT_ASSERT(d.matches("10.2.3.4", 443) && d.matches("172.31.0.1", 80) && d.matches("192.168.1.1", 1));
        CPPUNIT_ASSERT(d.matches("100.100.100.100", 80) && d.matches("[fd12::1]", 80) && d.matches("fd12::1", 80));
        CPPUNIT_ASSERT(!d.matches("172.32.0.1", 80) && !d.matches("8.8.8.8", 53) && !d.matches("127.0.0.1", 80));
        // Names are never resolved to find a range they fall in.
        CPPUNIT_ASSERT(!d.matches("intranet.example", 80));
        auto p = PrivateHosts::parse(json::parse(R"(["*.corp.example","db.other.example:5432","10.1.30.63:8443"])"));
        CPPUNIT_ASSERT(p.matches("wiki.corp.example", 443) && p.matches("a.b.corp.example.", 80));
        CPPUNIT_ASSERT(!p.matches("corp.example", 443));
        CPPUNIT_ASSERT(p.matches("db.other.example", 5432) && !p.matches("db.other.example", 5433));
        CPPUNIT_ASSERT(p.matches("10.1.30.63", 8443) && !p.matches("10.1.30.63", 80));
        // An explicit list replaces the defaults; [] leaves nothing direct.
        CPPUNIT_ASSERT(!p.matches("10.2.3.4", 443));
        CPPUNIT_ASSERT(!PrivateHosts::parse(json::array()).matches("10.2.3.4", 443));
        // What the allowlist overlap check compares: names as an allowlist writes them, no ports.
        CPPUNIT_ASSERT((p.name_patterns() == std::vector<std::string>{"*.corp.example", "db.other.example"}));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(AllowlistTest);
