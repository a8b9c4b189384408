// sdk/include/hangar/egress.hpp: the addresses a server-side fetch for a tenant may not reach
// (loopback, private, link-local, CGNAT, ULA and their IPv4-in-IPv6 forms), the operator's
// allow-list, and that a name is resolved once and checked whole.
#include <hangar/egress.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <string>

using hangar::egress::Address;
using hangar::egress::Policy;

namespace {

Address addr(const std::string &text) {
    Address a;
    if (text.find(':') != std::string::npos) {
        auto *in6 = reinterpret_cast<sockaddr_in6 *>(&a.storage);
        in6->sin6_family = AF_INET6;
        if (::inet_pton(AF_INET6, text.c_str(), &in6->sin6_addr) != 1) throw std::invalid_argument(text);
        a.length = sizeof(sockaddr_in6);
    } else {
        auto *in4 = reinterpret_cast<sockaddr_in *>(&a.storage);
        in4->sin_family = AF_INET;
        if (::inet_pton(AF_INET, text.c_str(), &in4->sin_addr) != 1) throw std::invalid_argument(text);
        a.length = sizeof(sockaddr_in);
    }
    return a;
}

bool refused(const Policy &p, const std::string &text, std::uint16_t port = 443) {
    return p.problem(addr(text), port).has_value();
}

} // namespace

class SdkEgressTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkEgressTest);
    CPPUNIT_TEST(specialRanges);
    CPPUNIT_TEST(privateNetworksAllowed);
    CPPUNIT_TEST(allowList);
    CPPUNIT_TEST(resolvesOnceAndWhole);
    CPPUNIT_TEST_SUITE_END();

public:
    void specialRanges() {
        Policy p;
        for (const char *bad : {"127.0.0.1",
                                "127.255.0.9",
                                "0.0.0.0",
                                "10.1.2.3",
                                "172.16.0.1",
                                "172.31.255.255",
                                "192.168.1.1",
                                "100.64.0.1",
                                "100.127.255.255",
                                "169.254.169.254",
                                "224.0.0.1",
                                "255.255.255.255",
                                "::1",
                                "::",
                                "::ffff:127.0.0.1",
                                "::ffff:10.0.0.1",
                                "::ffff:169.254.169.254",
                                "::127.0.0.1",
                                "64:ff9b::a9fe:a9fe",
                                "2002:7f00:1::",
                                "fc00::1",
                                "fd12:3456::1",
                                "fe80::1",
                                "ff02::1"})
            CPPUNIT_ASSERT_MESSAGE(bad, refused(p, bad));
        for (const char *good : {"1.1.1.1", "8.8.8.8", "172.32.0.1", "100.128.0.1", "192.169.0.1", "2606:4700::1111",
                                 "::ffff:8.8.8.8", "2002:0808:0808::"})
            CPPUNIT_ASSERT_MESSAGE(good, !refused(p, good));
    }

    void privateNetworksAllowed() {
        Policy p = Policy::parse("", true);
        CPPUNIT_ASSERT(!refused(p, "10.1.2.3"));
        CPPUNIT_ASSERT(!refused(p, "fd00::1"));
        CPPUNIT_ASSERT(!refused(p, "169.254.1.1"));
        // Loopback and "this host" stay refused: they are the server itself.
        CPPUNIT_ASSERT(refused(p, "127.0.0.1"));
        CPPUNIT_ASSERT(refused(p, "::ffff:127.0.0.1"));
        CPPUNIT_ASSERT(refused(p, "0.0.0.0"));
    }

    void allowList() {
        Policy p = Policy::parse("127.0.0.1:21000-21199, [::1]:8080 connect.internal:443", false);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, p.allow.size());
        CPPUNIT_ASSERT(!refused(p, "127.0.0.1", 21000));
        CPPUNIT_ASSERT(!refused(p, "127.0.0.1", 21199));
        CPPUNIT_ASSERT(refused(p, "127.0.0.1", 21200));
        CPPUNIT_ASSERT(!refused(p, "::1", 8080));
        CPPUNIT_ASSERT(refused(p, "::1", 8081));
        CPPUNIT_ASSERT(p.listed("Connect.Internal", 443));
        CPPUNIT_ASSERT(!p.listed("connect.internal", 444));
        for (const char *bad : {"127.0.0.1", "127.0.0.1:0", "x:70000", "x:5-3", ":80", "[::1:80", "x:8a"})
            CPPUNIT_ASSERT_THROW_MESSAGE(bad, Policy::parse(bad, false), std::invalid_argument);
    }

    void resolvesOnceAndWhole() {
        Policy p;
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("127.0.0.1", 80, p), hangar::egress::Refused);
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("localhost", 80, p), hangar::egress::Refused);
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("::ffff:127.0.0.1", 80, p), hangar::egress::Refused);
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("[::1]", 80, p), hangar::egress::Refused);
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("0x7f.1", 80, p), hangar::egress::Refused); // inet_aton forms
        CPPUNIT_ASSERT_THROW(hangar::egress::resolve("no-such-host.invalid", 80, p), hangar::egress::ResolveError);
        auto listed = hangar::egress::resolve("127.0.0.1", 21000, Policy::parse("127.0.0.1:21000", false));
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1"), listed.at(0).text());
        // The server's own non-loopback addresses are refused too, whatever range they are in.
        ifaddrs *list = nullptr;
        if (::getifaddrs(&list) == 0) {
            for (ifaddrs *i = list; i; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
                    Address a;
                    std::memcpy(&a.storage, i->ifa_addr, sizeof(sockaddr_in));
                    a.length = sizeof(sockaddr_in);
                    CPPUNIT_ASSERT_MESSAGE(a.text(), Policy::parse("", true).problem(a, 80).has_value());
                }
            ::freeifaddrs(list);
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkEgressTest);
