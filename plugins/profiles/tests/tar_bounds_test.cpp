// The bounded extraction behind `download?format=tar`: an archive a sandboxed instance wrote is
// refused, and leaves no file behind, when it unpacks to too much (a zstd bomb), has too many
// entries, or names a path or link outside its folder; a fair one comes out byte for byte.
#include "tar_bounds.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace profiles;
namespace fs = std::filesystem;

namespace {

struct Entry {
    std::string name;
    std::size_t size = 0; // zeros, written in pieces
    std::string link;     // a symbolic link's target instead
};

class Scratch {
public:
    Scratch() {
        std::string tmpl = (fs::temp_directory_path() / "hangar-tar.XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path_ = tmpl;
    }
    ~Scratch() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    std::string operator/(const std::string &name) const { return path_ + "/" + name; }

private:
    std::string path_;
};

// A tar.zst as the agent writes one (pax, zstd).
void make_archive(const std::string &path, const std::vector<Entry> &entries) {
    archive *a = archive_write_new();
    archive_write_add_filter_zstd(a);
    archive_write_set_format_pax_restricted(a);
    archive_write_open_filename(a, path.c_str());
    const std::string zeros(1 << 20, '\0');
    for (const auto &e : entries) {
        archive_entry *entry = archive_entry_new();
        archive_entry_set_pathname(entry, e.name.c_str());
        archive_entry_set_perm(entry, 0644);
        if (!e.link.empty()) {
            archive_entry_set_filetype(entry, AE_IFLNK);
            archive_entry_set_symlink(entry, e.link.c_str());
            archive_entry_set_size(entry, 0);
            archive_write_header(a, entry);
        } else {
            archive_entry_set_filetype(entry, AE_IFREG);
            archive_entry_set_size(entry, static_cast<la_int64_t>(e.size));
            archive_write_header(a, entry);
            for (std::size_t left = e.size; left > 0;) {
                std::size_t n = std::min(left, zeros.size());
                archive_write_data(a, zeros.data(), n);
                left -= n;
            }
        }
        archive_entry_free(entry);
    }
    archive_write_close(a);
    archive_write_free(a);
}

bool refused(const std::string &archive_path, const std::string &out, const TarLimits &limits) {
    try {
        extract_tar_bounded(archive_path, out, limits);
    } catch (const TarRefused &) {
        return !fs::exists(out);
    }
    return false;
}

} // namespace

class TarBoundsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TarBoundsTest);
    CPPUNIT_TEST(bombRefused);
    CPPUNIT_TEST(tooManyEntries);
    CPPUNIT_TEST(escapingNames);
    CPPUNIT_TEST(fairArchive);
    CPPUNIT_TEST(pathRule);
    CPPUNIT_TEST_SUITE_END();

public:
    void bombRefused() {
        Scratch s;
        // 256 MiB of zeros is a few kilobytes of zstd.
        make_archive(s / "bomb.tar.zst", {{"Default/big", std::size_t{256} << 20, ""}});
        CPPUNIT_ASSERT(fs::file_size(s / "bomb.tar.zst") < (std::size_t{1} << 20));
        TarLimits limits;
        limits.max_bytes = std::size_t{16} << 20;
        CPPUNIT_ASSERT(refused(s / "bomb.tar.zst", s / "out.tar", limits));
    }

    void tooManyEntries() {
        Scratch s;
        std::vector<Entry> many;
        many.reserve(50);
        for (int i = 0; i < 50; ++i)
            many.push_back({"f" + std::to_string(i), 1, ""});
        make_archive(s / "many.tar.zst", many);
        TarLimits limits;
        limits.max_entries = 10;
        CPPUNIT_ASSERT(refused(s / "many.tar.zst", s / "out.tar", limits));
        limits.max_entries = 50;
        extract_tar_bounded(s / "many.tar.zst", s / "out.tar", limits);
    }

    void escapingNames() {
        Scratch s;
        const std::vector<std::vector<Entry>> bad = {
            {{"../outside", 1, ""}}, {{"Default/../../outside", 1, ""}}, {{"/etc/cron.d/x", 1, ""}},
            {{"etc", 0, "/etc"}},    {{"up", 0, "../../home"}},
        };
        for (std::size_t i = 0; i < bad.size(); ++i) {
            std::string path = s / ("bad" + std::to_string(i) + ".tar.zst");
            make_archive(path, bad[i]);
            CPPUNIT_ASSERT_MESSAGE(bad[i][0].name, refused(path, s / "out.tar", {}));
        }
    }

    void fairArchive() {
        Scratch s;
        make_archive(s / "ok.tar.zst", {{"Default/Cookies", 4096, ""}, {"Local State", 10, ""}, {"lnk", 0, "Default"}});
        extract_tar_bounded(s / "ok.tar.zst", s / "out.tar", {});
        // What came out is the tar itself: libarchive reads it back, entries in order.
        archive *a = archive_read_new();
        archive_read_support_format_tar(a);
        CPPUNIT_ASSERT_EQUAL(ARCHIVE_OK, archive_read_open_filename(a, (s / "out.tar").c_str(), 65536));
        std::vector<std::string> names;
        archive_entry *e = nullptr;
        while (archive_read_next_header(a, &e) == ARCHIVE_OK)
            names.emplace_back(archive_entry_pathname(e));
        archive_read_free(a);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, names.size());
        CPPUNIT_ASSERT_EQUAL(std::string("Default/Cookies"), names[0]);
    }

    void pathRule() {
        CPPUNIT_ASSERT(contained_path("Default/Cookies"));
        CPPUNIT_ASSERT(contained_path("a..b/..c"));
        CPPUNIT_ASSERT(contained_path("./x"));
        CPPUNIT_ASSERT(!contained_path(""));
        CPPUNIT_ASSERT(!contained_path(".."));
        CPPUNIT_ASSERT(!contained_path("a/../../b"));
        CPPUNIT_ASSERT(!contained_path("/abs"));
        CPPUNIT_ASSERT(!contained_path(std::string_view("a\0b", 3)));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TarBoundsTest);
