// Unit tests of unpacking an extension zip into the instance's extension folder: the root is where
// manifest.json is, a reinstall replaces the folder whole, a bad zip leaves the old one as it was,
// and only folders holding a manifest.json count as installed.
#include "extension_install.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using namespace hangar::extensions;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "hangar-extension-test-XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::string read(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A zip of (name, contents) files, in memory.
std::string zip_of(const std::vector<std::pair<std::string, std::string>> &files) {
    std::unique_ptr<archive, int (*)(archive *)> a(archive_write_new(), archive_write_free);
    archive_write_set_format_zip(a.get());
    std::vector<char> buf(1 << 20);
    std::size_t used = 0;
    archive_write_open_memory(a.get(), buf.data(), buf.size(), &used);
    for (const auto &[name, text] : files) {
        std::unique_ptr<archive_entry, void (*)(archive_entry *)> e(archive_entry_new(), archive_entry_free);
        archive_entry_set_pathname(e.get(), name.c_str());
        archive_entry_set_filetype(e.get(), AE_IFREG);
        archive_entry_set_perm(e.get(), 0644);
        archive_entry_set_size(e.get(), static_cast<la_int64_t>(text.size()));
        archive_write_header(a.get(), e.get());
        archive_write_data(a.get(), text.data(), text.size());
    }
    archive_write_close(a.get());
    return {buf.data(), used};
}

} // namespace

class ExtensionInstallTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ExtensionInstallTest);
    CPPUNIT_TEST(testManifestAtTheRoot);
    CPPUNIT_TEST(testOneTopLevelFolderIsStripped);
    CPPUNIT_TEST(testNoManifestIsA400AndKeepsTheOldFolder);
    CPPUNIT_TEST(testReinstallReplacesTheWholeFolder);
    CPPUNIT_TEST(testInstalledListsOnlyFoldersWithAManifest);
    CPPUNIT_TEST_SUITE_END();

public:
    void testManifestAtTheRoot() {
        TempDir t;
        install_extension(zip_of({{"manifest.json", "{}"}, {"js/c.js", "x"}}), t.path.string(), "one", {});
        CPPUNIT_ASSERT_EQUAL(std::string("{}"), read(t.path / "one/manifest.json"));
        CPPUNIT_ASSERT_EQUAL(std::string("x"), read(t.path / "one/js/c.js"));
    }

    void testOneTopLevelFolderIsStripped() {
        TempDir t;
        install_extension(zip_of({{"ext/manifest.json", "{}"}, {"ext/c.js", "y"}}), t.path.string(), "two", {});
        CPPUNIT_ASSERT(fs::exists(t.path / "two/manifest.json"));
        CPPUNIT_ASSERT_EQUAL(std::string("y"), read(t.path / "two/c.js"));
        CPPUNIT_ASSERT(!fs::exists(t.path / "two/ext"));
    }

    void testNoManifestIsA400AndKeepsTheOldFolder() {
        TempDir t;
        install_extension(zip_of({{"manifest.json", "old"}}), t.path.string(), "e", {});
        for (const auto &bad : {zip_of({{"c.js", "x"}}), zip_of({{"a/manifest.json", "{}"}, {"b/manifest.json", "{}"}}),
                                std::string("not a zip")}) {
            try {
                install_extension(bad, t.path.string(), "e", {});
                CPPUNIT_FAIL("a zip without one manifest root was installed");
            } catch (const hangar::Error &err) {
                CPPUNIT_ASSERT_EQUAL(400, err.status());
            }
            CPPUNIT_ASSERT_EQUAL(std::string("old"), read(t.path / "e/manifest.json"));
        }
        // Nothing half-written is left beside it.
        std::vector<std::string> names;
        for (const auto &entry : fs::directory_iterator(t.path))
            names.push_back(entry.path().filename().string());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), names.size());
    }

    void testReinstallReplacesTheWholeFolder() {
        TempDir t;
        install_extension(zip_of({{"manifest.json", "1"}, {"gone.js", "x"}}), t.path.string(), "e", {});
        install_extension(zip_of({{"manifest.json", "2"}}), t.path.string(), "e", {});
        CPPUNIT_ASSERT_EQUAL(std::string("2"), read(t.path / "e/manifest.json"));
        CPPUNIT_ASSERT(!fs::exists(t.path / "e/gone.js"));
    }

    void testInstalledListsOnlyFoldersWithAManifest() {
        TempDir t;
        CPPUNIT_ASSERT(installed_extensions((t.path / "missing").string()).empty());
        install_extension(zip_of({{"manifest.json", "{}"}}), t.path.string(), "b", {});
        install_extension(zip_of({{"manifest.json", "{}"}}), t.path.string(), "a", {});
        fs::create_directories(t.path / "empty");
        fs::create_directories(t.path / ".install-x");
        std::ofstream(t.path / ".install-x/manifest.json") << "{}";
        auto got = installed_extensions(t.path.string());
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), got.size());
        CPPUNIT_ASSERT_EQUAL((t.path / "a").string(), got[0]);
        CPPUNIT_ASSERT_EQUAL((t.path / "b").string(), got[1]);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ExtensionInstallTest);
