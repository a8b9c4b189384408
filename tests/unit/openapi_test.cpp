// The /openapi.json assembly: the embedded base is a 3.1 document, fragments add their paths and
// components, and two parts disagreeing keep the first and say so. Router::table lists routes.
#include <variant>

#include "openapi.hpp"
#include "router.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <filesystem>
#include <fstream>

using hangar::host::merge_openapi;
using hangar::host::openapi_base;
using json = nlohmann::json;

class OpenApiTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(OpenApiTest);
    CPPUNIT_TEST(testBaseIsAnOpenApi31Document);
    CPPUNIT_TEST(testFragmentsAddPathsAndComponents);
    CPPUNIT_TEST(testConflictsKeepTheFirstAndAreReported);
    CPPUNIT_TEST(testFragmentFileBesideTheLibrary);
    CPPUNIT_TEST(testRouterTableListsAddedRoutesOnce);
    CPPUNIT_TEST_SUITE_END();

public:
    void testBaseIsAnOpenApi31Document() {
        json base = openapi_base();
        CPPUNIT_ASSERT_EQUAL(std::string("3.1.0"), base.at("openapi").get<std::string>());
        CPPUNIT_ASSERT(base["paths"].contains("/openapi.json"));
        CPPUNIT_ASSERT(base["components"]["schemas"].contains("Error"));
        CPPUNIT_ASSERT(base["components"]["schemas"].contains("BrowserSession"));
    }

    void testFragmentsAddPathsAndComponents() {
        std::vector<std::string> conflicts;
        json doc = merge_openapi(
            openapi_base(),
            {{"a",
              {{"paths", {{"/a", {{"get", {{"operationId", "a"}}}}}}},
               {"components", {{"schemas", {{"A", {{"type", "object"}}}}}}}}},
             {"b", {{"paths", {{"/a", {{"post", {{"operationId", "b"}}}}}, {"/b", {{"get", json::object()}}}}}}}},
            conflicts);
        CPPUNIT_ASSERT(conflicts.empty());
        CPPUNIT_ASSERT(doc["paths"]["/a"].contains("get") && doc["paths"]["/a"].contains("post"));
        CPPUNIT_ASSERT(doc["paths"].contains("/b") && doc["paths"].contains("/healthz"));
        CPPUNIT_ASSERT(doc["components"]["schemas"].contains("A") && doc["components"]["schemas"].contains("Error"));
    }

    void testConflictsKeepTheFirstAndAreReported() {
        std::vector<std::string> conflicts;
        json doc = merge_openapi(openapi_base(),
                                 {{"a", {{"paths", {{"/x", {{"get", {{"operationId", "first"}}}}}}}}},
                                  {"b",
                                   {{"paths", {{"/x", {{"get", {{"operationId", "second"}}}}}}},
                                    {"components", {{"schemas", {{"Error", {{"type", "string"}}}}}}}}}},
                                 conflicts);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, conflicts.size());
        CPPUNIT_ASSERT(conflicts[0].find("b: /x get") == 0);
        CPPUNIT_ASSERT_EQUAL(std::string("first"), doc["paths"]["/x"]["get"]["operationId"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("object"), doc["components"]["schemas"]["Error"]["type"].get<std::string>());
    }

    void testFragmentFileBesideTheLibrary() {
        auto dir = std::filesystem::temp_directory_path() / "hangar-openapi-test";
        std::filesystem::create_directories(dir);
        CPPUNIT_ASSERT(hangar::host::read_openapi_fragment((dir / "p.so").string(), "p").empty());
        std::ofstream(dir / "p.openapi.json") << R"({"paths":{"/p":{}}})";
        CPPUNIT_ASSERT(hangar::host::read_openapi_fragment((dir / "p.so").string(), "p")["paths"].contains("/p"));
        std::ofstream(dir / "p.openapi.json") << "[1]";
        CPPUNIT_ASSERT_THROW(hangar::host::read_openapi_fragment((dir / "p.so").string(), "p"), std::runtime_error);
        std::filesystem::remove_all(dir);
    }

    void testRouterTableListsAddedRoutesOnce() {
        hangar::host::Router<int> r;
        CPPUNIT_ASSERT(r.add("GET", "/a/{id}", 1));
        CPPUNIT_ASSERT(!r.add("GET", "/a/{id}", 2));
        CPPUNIT_ASSERT(r.add("GET", "/b/{rest*}", 3));
        using Row = std::pair<std::string, std::string>;
        std::vector<Row> want{{"GET", "/a/{id}"}, {"GET", "/b/{rest*}"}};
        CPPUNIT_ASSERT(r.table() == want);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(OpenApiTest);
