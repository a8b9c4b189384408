// Unit tests of profile archives: a round trip keeps files, folders and links, leaves caches
// and Chromium's singleton files out, and unpacking refuses entries that leave their folder.
#include "profile_archive.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

namespace fs = std::filesystem;
using namespace hangar::browsers;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "hangar-profile-test-XXXXXX").string();
        path = ::mkdtemp(tmpl.data());
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

void write(const fs::path &p, const std::string &text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

std::string read(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A tar.zst with one regular file named `name`, written the way a hostile archive would be.
void write_archive_with(const fs::path &out, const std::string &name) {
    std::unique_ptr<archive, int (*)(archive *)> a(archive_write_new(), archive_write_free);
    archive_write_set_format_pax_restricted(a.get());
    archive_write_add_filter_zstd(a.get());
    archive_write_open_filename(a.get(), out.c_str());
    std::unique_ptr<archive_entry, void (*)(archive_entry *)> e(archive_entry_new(), archive_entry_free);
    archive_entry_set_pathname(e.get(), name.c_str());
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_perm(e.get(), 0644);
    archive_entry_set_size(e.get(), 2);
    archive_write_header(a.get(), e.get());
    archive_write_data(a.get(), "hi", 2);
    archive_write_close(a.get());
}

} // namespace

class ProfileArchiveTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ProfileArchiveTest);
    CPPUNIT_TEST(round_trip);
    CPPUNIT_TEST(caches_are_left_out);
    CPPUNIT_TEST(last_session_is_left_out_and_not_restored);
    CPPUNIT_TEST(escaping_entries_are_refused);
    CPPUNIT_TEST_SUITE_END();

public:
    void round_trip() {
        TempDir src, dst, tmp;
        write(src.path / "Default/Cookies", std::string("sqlite\0data", 11));
        write(src.path / "Default/Local Storage/leveldb/000003.log", "ls");
        write(src.path / "Local State", "{}");
        fs::create_symlink("Default/Cookies", src.path / "link");
        std::string packed = pack_profile(src.path);
        CPPUNIT_ASSERT(packed.size() > 4 && static_cast<unsigned char>(packed[0]) == 0x28 &&
                       static_cast<unsigned char>(packed[1]) == 0xb5); // zstd magic
        std::ofstream(tmp.path / "p.tar.zst", std::ios::binary) << packed;
        unpack_profile(tmp.path / "p.tar.zst", dst.path);
        CPPUNIT_ASSERT_EQUAL(std::string("sqlite\0data", 11), read(dst.path / "Default/Cookies"));
        CPPUNIT_ASSERT_EQUAL(std::string("ls"), read(dst.path / "Default/Local Storage/leveldb/000003.log"));
        CPPUNIT_ASSERT_EQUAL(std::string("{}"), read(dst.path / "Local State"));
        CPPUNIT_ASSERT(fs::is_symlink(dst.path / "link"));
        CPPUNIT_ASSERT_EQUAL(std::string("Default/Cookies"), fs::read_symlink(dst.path / "link").string());
    }

    void caches_are_left_out() {
        CPPUNIT_ASSERT(profile_path_excluded("SingletonLock"));
        CPPUNIT_ASSERT(profile_path_excluded("Default/Cache/Cache_Data/index"));
        CPPUNIT_ASSERT(profile_path_excluded("Default/Code Cache"));
        CPPUNIT_ASSERT(profile_path_excluded("Default/Service Worker/CacheStorage/x"));
        CPPUNIT_ASSERT(profile_path_excluded("ShaderCache"));
        CPPUNIT_ASSERT(!profile_path_excluded("Default/Cookies"));
        CPPUNIT_ASSERT(!profile_path_excluded("Default/Local Storage/leveldb/CURRENT"));
        CPPUNIT_ASSERT(!profile_path_excluded("Default/IndexedDB/x"));

        TempDir src, dst, tmp;
        write(src.path / "Default/Cache/Cache_Data/data_0", "big");
        write(src.path / "Default/Preferences", "{}");
        std::ofstream(tmp.path / "p.tar.zst", std::ios::binary) << pack_profile(src.path);
        unpack_profile(tmp.path / "p.tar.zst", dst.path);
        CPPUNIT_ASSERT(fs::exists(dst.path / "Default/Preferences"));
        CPPUNIT_ASSERT(!fs::exists(dst.path / "Default/Cache"));
    }

    // A profile carries cookies, storage and logins, never the last session's tabs: left out of
    // what is saved, and skipped when an archive saved before that still holds them.
    void last_session_is_left_out_and_not_restored() {
        for (const char *rel : {"Default/Sessions/Session_13370000", "Default/Sessions", "Default/Current Session",
                                "Default/Last Tabs", "Profile 1/Sessions/Tabs_1"})
            CPPUNIT_ASSERT_MESSAGE(rel, profile_path_excluded(rel));
        CPPUNIT_ASSERT(!profile_path_excluded("Sessions"));
        CPPUNIT_ASSERT(!profile_path_excluded("Default/Session Storage/000003.log"));

        TempDir src, dst, tmp;
        write(src.path / "Default/Sessions/Session_1", "tabs");
        write(src.path / "Default/Cookies", "c");
        std::ofstream(tmp.path / "p.tar.zst", std::ios::binary) << pack_profile(src.path);
        unpack_profile(tmp.path / "p.tar.zst", dst.path);
        CPPUNIT_ASSERT(fs::exists(dst.path / "Default/Cookies"));
        CPPUNIT_ASSERT(!fs::exists(dst.path / "Default/Sessions"));

        TempDir old;
        write_archive_with(tmp.path / "old.tar.zst", "Default/Current Session");
        unpack_profile(tmp.path / "old.tar.zst", old.path);
        CPPUNIT_ASSERT(!fs::exists(old.path / "Default/Current Session"));
    }

    void escaping_entries_are_refused() {
        for (const std::string name : {"../outside", "a/../../outside", "/abs/outside"}) {
            TempDir root;
            fs::create_directories(root.path / "dir");
            write_archive_with(root.path / "evil.tar.zst", name);
            CPPUNIT_ASSERT_THROW(unpack_profile(root.path / "evil.tar.zst", root.path / "dir"), std::runtime_error);
            CPPUNIT_ASSERT(!fs::exists(root.path / "outside"));
            CPPUNIT_ASSERT(!fs::exists("/abs/outside"));
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ProfileArchiveTest);
