// Unit tests of audit-log export's pure logic (kernel-api-0131.md §1F): field rules, the cut of
// entries into objects (hour partitions, the settle window), keys, bodies and the S3 address.
#include "audit_export_model.hpp"

#include <hangar/gzip.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::audit_export;

namespace {
template <typename F> void expect_400(F &&f, const std::string &field) {
    try {
        f();
        CPPUNIT_FAIL("accepted, expected a 400 naming " + field);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT((std::string(e.what()) + e.details_json().dump()).find(field) != std::string::npos);
    }
}
} // namespace

class AuditExportModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(AuditExportModelTest);
    CPPUNIT_TEST(fieldRules);
    CPPUNIT_TEST(chunksStopAtHoursAndTheSettleWindow);
    CPPUNIT_TEST(keysAndBodies);
    CPPUNIT_TEST(s3Addresses);
    CPPUNIT_TEST(assumeRole);
    CPPUNIT_TEST_SUITE_END();

public:
    void fieldRules() {
        CPPUNIT_ASSERT_EQUAL(std::string("my-bucket.logs"), check_bucket("my-bucket.logs", "bucket"));
        for (const char *bad : {"ab", "My-Bucket", "-abc", "abc-", "a..b", "192.168.1.1", "a_b"})
            expect_400([&] { check_bucket(bad, "bucket"); }, "bucket");
        CPPUNIT_ASSERT_EQUAL(std::string("audit/hangar"), check_prefix("/audit/hangar/", "prefix"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), check_prefix("", "prefix"));
        for (const char *bad : {"a//b", "a/../b", "./a", "a\nb"})
            expect_400([&] { check_prefix(bad, "prefix"); }, "prefix");
        expect_400([] { check_prefix(42, "prefix"); }, "prefix");
        CPPUNIT_ASSERT_EQUAL(std::string("eu-west-1"), check_region("eu-west-1", "region"));
        expect_400([] { check_region("EU West", "region"); }, "region");
        CPPUNIT_ASSERT_EQUAL(std::string("aws:kms"), check_sse("aws:kms", "sse"));
        expect_400([] { check_sse("AES128", "sse"); }, "sse");
    }

    void chunksStopAtHoursAndTheSettleWindow() {
        const std::int64_t h = 1'780'000'000'000 / 3'600'000 * 3'600'000; // an hour's start
        std::vector<Entry> e = {{1, h + 10, {}}, {2, h + 20, {}}, {3, h + 3'600'000, {}}, {4, h + 3'600'010, {}}};
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, chunk_size(e, h + 10'000'000, 100)); // not past the hour
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, chunk_size(e, h + 15, 100));         // not past the settle time
        CPPUNIT_ASSERT_EQUAL(std::size_t{0}, chunk_size(e, h + 10, 100));         // the first is too young
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, chunk_size(e, h + 10'000'000, 1));   // at most max
        CPPUNIT_ASSERT_EQUAL(std::size_t{0}, chunk_size({}, h, 10));
        std::vector<Entry> next(e.begin() + 2, e.end());
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, chunk_size(next, h + 10'000'000, 100));
    }

    void keysAndBodies() {
        // 2026-05-01T13:20:00Z
        CPPUNIT_ASSERT_EQUAL(std::string("logs/destination_id=d1/org_id=o1/date=2026-05-01/hour=13/"
                                         "000000000007-000000000042.jsonl.gz"),
                             object_key("logs", "d1", "o1", 1'777'641'600'000, 7, 42));
        CPPUNIT_ASSERT(
            object_key("", "d1", "o1", 0, 1, 1).starts_with("destination_id=d1/org_id=o1/date=1970-01-01/hour=00/"));
        std::vector<Entry> e = {{7, 1, {{"method", "GET"}}}, {8, 2, {{"method", "POST"}}}, {9, 3, {}}};
        std::string lines = jsonl(e, 2);
        CPPUNIT_ASSERT_EQUAL(
            std::string("{\"event_id\":\"7\",\"method\":\"GET\"}\n{\"event_id\":\"8\",\"method\":\"POST\"}\n"), lines);
        std::string z = hangar::gzip(lines);
        CPPUNIT_ASSERT(z.size() > 2 && static_cast<unsigned char>(z[0]) == 0x1f &&
                       static_cast<unsigned char>(z[1]) == 0x8b);
        CPPUNIT_ASSERT_EQUAL(lines, hangar::gunzip(z));
        CPPUNIT_ASSERT_EQUAL(std::string("v1:42"), cursor_text(42));
    }

    void s3Addresses() {
        auto a = s3_address("http://127.0.0.1:9000/", "us-east-1", "bkt", "p/k.gz");
        CPPUNIT_ASSERT_EQUAL(std::string("http://127.0.0.1:9000"), a.scheme_host);
        CPPUNIT_ASSERT_EQUAL(std::string("127.0.0.1:9000"), a.host);
        CPPUNIT_ASSERT_EQUAL(std::string("/bkt/p/k.gz"), a.path);
        auto b = s3_address("https://minio.example/s3", "us-east-1", "bkt", "k");
        CPPUNIT_ASSERT_EQUAL(std::string("/s3/bkt/k"), b.path);
        CPPUNIT_ASSERT_EQUAL(std::string("minio.example"), b.host);
        auto c = s3_address("", "eu-west-1", "bkt", "k");
        CPPUNIT_ASSERT_EQUAL(std::string("https://bkt.s3.eu-west-1.amazonaws.com"), c.scheme_host);
        CPPUNIT_ASSERT_EQUAL(std::string("/k"), c.path);
        CPPUNIT_ASSERT(sse_headers("none", "").empty());
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, sse_headers("aws:kms", "key-1").size());
        CPPUNIT_ASSERT_EQUAL(std::string("AES256"), sse_headers("AES256", "").at(0).second);
    }

    void assumeRole() {
        CPPUNIT_ASSERT_EQUAL(std::string("arn:aws:iam::123456789012:role/audit/hangar-writer"),
                             check_role_arn("arn:aws:iam::123456789012:role/audit/hangar-writer", "role_arn"));
        for (const char *bad :
             {"", "arn:aws:iam::1234:role/x", "arn:aws:s3:::bucket", "arn:aws:iam::123456789012:user/x",
              "arn:aws:iam::123456789012:role/", "arn:aws:iam::123456789012:role/a b"})
            CPPUNIT_ASSERT_THROW_MESSAGE(bad, check_role_arn(bad, "role_arn"), hangar::Error);
        CPPUNIT_ASSERT_EQUAL(
            std::string("Action=AssumeRole&DurationSeconds=900&ExternalId=hangar-x%2By&RoleArn="
                        "arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fw&RoleSessionName=s&Version=2011-06-15"),
            assume_role_body("arn:aws:iam::123456789012:role/w", "s", "hangar-x+y", 900));
        const std::string ok = "<AssumeRoleResponse><AssumeRoleResult><Credentials><AccessKeyId>ASIA1</AccessKeyId>"
                               "<SecretAccessKey>sek</SecretAccessKey><SessionToken>tok</SessionToken>"
                               "<Expiration>2026-12-08T02:00:00Z</Expiration></Credentials></AssumeRoleResult>"
                               "</AssumeRoleResponse>";
        auto r = parse_assume_role(ok, 0);
        CPPUNIT_ASSERT(r.error_code.empty());
        CPPUNIT_ASSERT_EQUAL(std::string("ASIA1"), r.access_key_id);
        CPPUNIT_ASSERT_EQUAL(std::string("tok"), r.session_token);
        CPPUNIT_ASSERT_EQUAL(std::int64_t{1796695200000}, r.expires_ms);
        auto denied = parse_assume_role(
            "<ErrorResponse><Error><Code>AccessDenied</Code><Message>not authorized</Message></Error></ErrorResponse>",
            0);
        CPPUNIT_ASSERT_EQUAL(std::string("AccessDenied"), denied.error_code);
        CPPUNIT_ASSERT(denied.access_key_id.empty() && denied.session_token.empty());
        CPPUNIT_ASSERT_EQUAL(std::string("no_credentials"), parse_assume_role("garbage", 0).error_code);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(AuditExportModelTest);
