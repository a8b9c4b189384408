// sdk/include/hangar/zip.hpp: symbolic links in an archive. Refused by default; with
// ZipLimits::inner_links, kept when they resolve inside the folder, however the archive's other
// links point (the zips are made here with libarchive's writer, as the Kernel CLI stores links).
#include "test_support.hpp"

#include <hangar/zip.hpp>

#include <archive.h>
#include <archive_entry.h>
#include <cppunit/extensions/HelperMacros.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

using hangar::test::TempDir;
namespace fs = std::filesystem;

namespace {

struct Entry {
    std::string name;
    std::string data; // a file's content
    std::string link; // or a link's target
};

std::string make_zip(const std::vector<Entry> &entries) {
    std::string out;
    archive *a = archive_write_new();
    archive_write_set_format_zip(a);
    archive_write_open(
        a, &out, nullptr,
        [](archive *, void *client, const void *buf, size_t n) -> la_ssize_t {
            static_cast<std::string *>(client)->append(static_cast<const char *>(buf), n);
            return static_cast<la_ssize_t>(n);
        },
        nullptr);
    for (const auto &e : entries) {
        archive_entry *entry = archive_entry_new();
        archive_entry_set_pathname(entry, e.name.c_str());
        if (!e.link.empty()) {
            archive_entry_set_filetype(entry, AE_IFLNK);
            archive_entry_set_symlink(entry, e.link.c_str());
            archive_entry_set_perm(entry, 0777);
            archive_entry_set_size(entry, 0);
            archive_write_header(a, entry);
        } else {
            archive_entry_set_filetype(entry, AE_IFREG);
            archive_entry_set_perm(entry, 0644);
            archive_entry_set_size(entry, static_cast<la_int64_t>(e.data.size()));
            archive_write_header(a, entry);
            archive_write_data(a, e.data.data(), e.data.size());
        }
        archive_entry_free(entry);
    }
    archive_write_close(a);
    archive_write_free(a);
    return out;
}

} // namespace

class SdkZipTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SdkZipTest);
    CPPUNIT_TEST(testLinksRefusedByDefault);
    CPPUNIT_TEST(testInnerLinksKept);
    CPPUNIT_TEST(testTargetRule);
    CPPUNIT_TEST(testEscapesRefused);
    CPPUNIT_TEST_SUITE_END();

public:
    void testLinksRefusedByDefault() {
        std::string zip = make_zip({{"a.txt", "x", ""}, {"l", "", "a.txt"}});
        TempDir dir;
        CPPUNIT_ASSERT_EQUAL(
            400, hangar::test::error_status([&] { hangar::unzip_to(zip, dir.path() + "/out", {}, "file"); }));
    }

    void testInnerLinksKept() {
        // node_modules/.bin as npm makes it, a link to a folder, and a file written before its link
        std::string zip = make_zip({{"node_modules/pkg/cli.js", "run", ""},
                                    {"node_modules/.bin/cli", "", "../pkg/cli.js"},
                                    {"current", "", "node_modules/pkg"}});
        TempDir dir;
        hangar::ZipLimits limits;
        limits.inner_links = true;
        std::string out = dir.path() + "/out";
        hangar::unzip_to(zip, out, limits, "file");
        CPPUNIT_ASSERT(fs::is_symlink(out + "/node_modules/.bin/cli"));
        std::ifstream in(out + "/node_modules/.bin/cli");
        std::string got((std::istreambuf_iterator<char>(in)), {});
        CPPUNIT_ASSERT_EQUAL(std::string("run"), got);
        CPPUNIT_ASSERT(fs::is_regular_file(out + "/current/cli.js"));
    }

    void testTargetRule() {
        using hangar::link_stays_inside;
        CPPUNIT_ASSERT(link_stays_inside("a/b/l", "../../x"));
        CPPUNIT_ASSERT(link_stays_inside("l", "sub/x"));
        CPPUNIT_ASSERT(link_stays_inside("a/l", "./x"));
        CPPUNIT_ASSERT(!link_stays_inside("l", "../x"));      // above the folder
        CPPUNIT_ASSERT(!link_stays_inside("a/l", "/etc"));    // absolute
        CPPUNIT_ASSERT(!link_stays_inside("a/y", "x/.."));    // ".." after a name: x may be a link
        CPPUNIT_ASSERT(!link_stays_inside("a/l", "../../x")); // deeper than its folders
        CPPUNIT_ASSERT(!link_stays_inside("a/l", ""));
    }

    void testEscapesRefused() {
        hangar::ZipLimits limits;
        limits.inner_links = true;
        struct Case {
            const char *why;
            std::vector<Entry> entries;
        };
        std::vector<Case> cases = {
            {"absolute", {{"l", "", "/etc/passwd"}}},
            {"up and out", {{"a/l", "", "../../secret"}}},
            // "deep/x" -> ".." is fine alone; "deep/y" -> "x/.." would leave through it
            {"through another link", {{"deep/x", "", ".."}, {"deep/y", "", "x/.."}}},
            // "deep/a" -> ".." makes "deep/a/c" sit in the folder, where "../../x" leaves it
            {"inside a link", {{"deep/a", "", ".."}, {"deep/a/c", "", "../../x"}}},
            {"a link over a file", {{"f/inner.txt", "x", ""}, {"f", "", "other"}}},
        };
        for (const auto &c : cases) {
            TempDir dir;
            std::string out = dir.path() + "/out";
            CPPUNIT_ASSERT_EQUAL_MESSAGE(c.why, 400, hangar::test::error_status([&] {
                                             hangar::unzip_to(make_zip(c.entries), out, limits, "file");
                                         }));
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SdkZipTest);
