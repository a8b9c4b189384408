// hangar/sigv4.hpp against AWS's published Signature Version 4 examples: the S3 GET Object and
// PUT Object examples of "Signature Calculations for the Authorization Header" (S3 API reference)
// and get-vanilla / post-vanilla-query of the SigV4 test suite. A signer that is off by one
// byte anywhere in the canonical request gives a different signature here.
#include <hangar/sigv4.hpp>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::sigv4;

class SdkSigv4Test : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkSigv4Test);
    CPPUNIT_TEST(s3GetObjectExample);
    CPPUNIT_TEST(s3PutObjectExample);
    CPPUNIT_TEST(testSuiteGetVanilla);
    CPPUNIT_TEST(testSuitePostVanillaQuery);
    CPPUNIT_TEST(encodingAndFormatting);
    CPPUNIT_TEST_SUITE_END();

    // The S3 examples' key pair.
    const Credentials s3{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
    // The test suite's.
    const Credentials vectors{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};

public:
    void s3GetObjectExample() {
        const std::string empty = sha256_hex("");
        CPPUNIT_ASSERT_EQUAL(std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"), empty);
        Request r{"GET",
                  "/test.txt",
                  {},
                  {{"Host", "examplebucket.s3.amazonaws.com"},
                   {"Range", "bytes=0-9"},
                   {"x-amz-content-sha256", empty},
                   {"x-amz-date", "20130524T000000Z"}},
                  empty};
        CPPUNIT_ASSERT_EQUAL(std::string("GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                                         "x-amz-content-sha256:" +
                                         empty +
                                         "\nx-amz-date:20130524T000000Z\n\n"
                                         "host;range;x-amz-content-sha256;x-amz-date\n" +
                                         empty),
                             canonical_request(r));
        CPPUNIT_ASSERT_EQUAL(std::string("AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
                                         "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"),
                             string_to_sign(r, "20130524T000000Z", "us-east-1", "s3"));
        CPPUNIT_ASSERT_EQUAL(std::string("AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/"
                                         "aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
                                         "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
                             authorization(r, s3, "20130524T000000Z", "us-east-1", "s3"));
    }

    void s3PutObjectExample() {
        const std::string body = "Welcome to Amazon S3.";
        const std::string hash = sha256_hex(body);
        CPPUNIT_ASSERT_EQUAL(std::string("44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"), hash);
        Request r{"PUT",
                  "/test$file.text",
                  {},
                  {{"Host", "examplebucket.s3.amazonaws.com"},
                   {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                   {"x-amz-date", "20130524T000000Z"},
                   {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                   {"x-amz-content-sha256", hash}},
                  hash};
        CPPUNIT_ASSERT(canonical_request(r).starts_with("PUT\n/test%24file.text\n\n"));
        CPPUNIT_ASSERT_EQUAL(std::string("98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"),
                             signature(r, s3, "20130524T000000Z", "us-east-1", "s3"));
    }

    void testSuiteGetVanilla() {
        Request r{
            "GET", "/", {}, {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}}, sha256_hex("")};
        CPPUNIT_ASSERT_EQUAL(std::string("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
                                         "aws4_request, SignedHeaders=host;x-amz-date, "
                                         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
                             authorization(r, vectors, "20150830T123600Z", "us-east-1", "service"));
    }

    void testSuitePostVanillaQuery() {
        Request r{"POST",
                  "/",
                  {{"Param1", "value1"}},
                  {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}},
                  sha256_hex("")};
        CPPUNIT_ASSERT_EQUAL(std::string("28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
                             signature(r, vectors, "20150830T123600Z", "us-east-1", "service"));
    }

    void encodingAndFormatting() {
        CPPUNIT_ASSERT_EQUAL(std::string("a%20b/c~d%2Be"), uri_encode("a b/c~d+e", true));
        CPPUNIT_ASSERT_EQUAL(std::string("a%2Fb"), uri_encode("a/b", false));
        CPPUNIT_ASSERT_EQUAL(std::string("%C3%A9"), uri_encode("\xc3\xa9", false));
        // Values are trimmed and inner runs of spaces collapsed; one name's values join with commas.
        Request r{"GET", "/", {}, {{"host", "h"}, {"My-Header", "  a   b  "}, {"my-header", "c"}}, "UNSIGNED-PAYLOAD"};
        CPPUNIT_ASSERT(canonical_request(r).find("my-header:a b,c\n") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::string("host;my-header"), signed_headers(r));
        CPPUNIT_ASSERT_EQUAL(std::string("20130524T000000Z"),
                             amz_date(std::chrono::system_clock::time_point(std::chrono::seconds(1369353600))));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkSigv4Test);
