// The secrets service (sdk/include/hangar/secrets.hpp) and its rotation (host/src/secrets.cpp):
// round trip, a wrong key or an altered value refused, key files, rotation in one transaction.
#include "secrets.hpp"
#include "store.hpp"
#include "test_support.hpp"

#include <hangar/secrets.hpp>

#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <fstream>
#include <iterator>

using hangar::test::TempDir;
using nlohmann::json;
namespace secrets = hangar::secrets;

namespace {

std::string read_all(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A plugin's table with one declared secret column, as a plugin migration would make it.
void plugin_table(hangar::host::Store &store) {
    hangar::host::migrate_secret_registry(store);
    store.migrate("ut", {{1, "CREATE TABLE ut_things (id TEXT PRIMARY KEY, secret TEXT, note TEXT);"
                             "INSERT INTO secret_columns (owner, table_name, id_column, column_name)"
                             " VALUES ('ut', 'ut_things', 'id', 'secret')"}});
}

} // namespace

class SecretsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(SecretsTest);
    CPPUNIT_TEST(testRoundTripWithFreshNonces);
    CPPUNIT_TEST(testSha256Hex);
    CPPUNIT_TEST(testWrongKeyFails);
    CPPUNIT_TEST(testTamperedValueFails);
    CPPUNIT_TEST(testKeyFileCreatedOnceWith0600);
    CPPUNIT_TEST(testKeyFilePath);
    CPPUNIT_TEST(testRotationResealsEverythingAndKeepsPrevious);
    CPPUNIT_TEST(testRotationFollowedByARunningSecrets);
    CPPUNIT_TEST(testRotationWithADamagedValueChangesNothing);
    CPPUNIT_TEST_SUITE_END();

public:
    // FIPS 180-2 test vectors: how keys are stored and archives checksummed (apps, org).
    void testSha256Hex() {
        CPPUNIT_ASSERT_EQUAL(std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
                             hangar::secrets::sha256_hex(""));
        CPPUNIT_ASSERT_EQUAL(std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
                             hangar::secrets::sha256_hex("abc"));
    }

    void testRoundTripWithFreshNonces() {
        secrets::Keyring ring(secrets::Key::generate());
        std::string a = ring.seal("p4ssw0rd"), b = ring.seal("p4ssw0rd");
        CPPUNIT_ASSERT(a != b); // a random nonce per value
        CPPUNIT_ASSERT(a.find("p4ssw0rd") == std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::string("hs1:" + ring.current().id() + ":"), a.substr(0, 13));
        CPPUNIT_ASSERT_EQUAL(std::string("p4ssw0rd"), ring.open(a));
        CPPUNIT_ASSERT_EQUAL(std::string("p4ssw0rd"), ring.open(b));
        CPPUNIT_ASSERT_EQUAL(std::string(), ring.open(ring.seal("")));
        std::string binary("\0\x01\xff", 3);
        CPPUNIT_ASSERT_EQUAL(binary, ring.open(ring.seal(binary)));
    }

    void testWrongKeyFails() {
        secrets::Keyring mine(secrets::Key::generate()), other(secrets::Key::generate());
        std::string sealed = mine.seal("value");
        CPPUNIT_ASSERT(!other.knows(sealed));
        CPPUNIT_ASSERT_THROW(other.open(sealed), secrets::Error);
        // Same key id claimed, different key: the MAC refuses it.
        auto forged = "hs1:" + other.current().id() + sealed.substr(12);
        CPPUNIT_ASSERT_THROW(other.open(forged), secrets::Error);
    }

    void testTamperedValueFails() {
        secrets::Keyring ring(secrets::Key::generate());
        std::string sealed = ring.seal("value");
        auto raw = *secrets::unbase64(sealed.substr(13));
        raw.back() = static_cast<char>(raw.back() ^ 1);
        CPPUNIT_ASSERT_THROW(ring.open(sealed.substr(0, 13) + secrets::base64(raw)), secrets::Error);
        CPPUNIT_ASSERT_THROW(ring.open("value"), secrets::Error);
        CPPUNIT_ASSERT_THROW(ring.open(sealed.substr(0, 20)), secrets::Error);
        try {
            ring.open(sealed.substr(0, 13) + secrets::base64(raw));
        } catch (const secrets::Error &e) {
            CPPUNIT_ASSERT(std::string(e.what()).find("value") == std::string::npos);
        }
    }

    void testKeyFileCreatedOnceWith0600() {
        TempDir dir;
        std::string path = dir / "secrets.key";
        auto key = secrets::load_or_create_key(path);
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat(path.c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0600u, static_cast<unsigned>(st.st_mode & 0777));
        CPPUNIT_ASSERT_EQUAL(std::size_t(32), read_all(path).size());
        CPPUNIT_ASSERT_EQUAL(key.id(), secrets::load_or_create_key(path).id());
        hangar::Secrets a(path), b(path);
        CPPUNIT_ASSERT_EQUAL(std::string("x"), b.open(a.seal("x")));
        hangar::test::write_text(dir / "short.key", "too short");
        CPPUNIT_ASSERT_THROW(secrets::load_or_create_key(dir / "short.key"), secrets::Error);
    }

    void testKeyFilePath() {
        CPPUNIT_ASSERT_EQUAL(std::string("/d/secrets.key"), secrets::key_file(std::nullopt, std::string("/d")));
        CPPUNIT_ASSERT_EQUAL(std::string("/k"), secrets::key_file(std::string("/k"), std::string("/d")));
        CPPUNIT_ASSERT_EQUAL(std::string("/d/secrets.key"), secrets::key_file(std::string(""), std::string("/d")));
    }

    void testRotationResealsEverythingAndKeepsPrevious() {
        TempDir dir;
        std::string key = dir / "secrets.key";
        hangar::host::Store store(dir / "db.sqlite");
        plugin_table(store);
        hangar::Secrets before(key);
        std::string old_id = secrets::load_or_create_key(key).id();
        store.exec("INSERT INTO ut_things (id, secret, note) VALUES ('a', ?, 'n1'), ('b', ?, 'n2'), ('c', NULL, 'n3')",
                   {before.seal("alpha"), before.seal("beta")});
        std::string old_a = store.exec("SELECT secret FROM ut_things WHERE id = 'a'")[0]["secret"];

        auto r = hangar::host::rotate_secrets_key(store, key);
        CPPUNIT_ASSERT_EQUAL(std::size_t(2), r.values);
        CPPUNIT_ASSERT(r.key_id != old_id);
        CPPUNIT_ASSERT_EQUAL(r.key_id, secrets::load_or_create_key(key).id());
        CPPUNIT_ASSERT_EQUAL(old_id, secrets::load_or_create_key(key + ".previous").id());

        // A keyring of the new key alone opens every value: nothing is left under the old one.
        secrets::Keyring fresh(secrets::load_or_create_key(key));
        auto rows = store.exec("SELECT id, secret, note FROM ut_things ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(std::string("alpha"), fresh.open(rows[0]["secret"].get<std::string>()));
        CPPUNIT_ASSERT_EQUAL(std::string("beta"), fresh.open(rows[1]["secret"].get<std::string>()));
        CPPUNIT_ASSERT(rows[2]["secret"].is_null());
        CPPUNIT_ASSERT_EQUAL(std::string("n1"), rows[0]["note"].get<std::string>());
        // A value sealed under the old key while the rotation ran still opens (previous key).
        CPPUNIT_ASSERT_EQUAL(std::string("alpha"), secrets::load_keyring(key).open(old_a));
        CPPUNIT_ASSERT_THROW(fresh.open(old_a), secrets::Error);
    }

    void testRotationFollowedByARunningSecrets() {
        TempDir dir;
        std::string key = dir / "secrets.key";
        hangar::host::Store store(dir / "db.sqlite");
        plugin_table(store);
        hangar::Secrets running(key);
        store.exec("INSERT INTO ut_things (id, secret) VALUES ('a', ?)", {running.seal("alpha")});
        hangar::host::rotate_secrets_key(store, key);
        std::string resealed = store.exec("SELECT secret FROM ut_things")[0]["secret"];
        CPPUNIT_ASSERT_EQUAL(std::string("alpha"), running.open(resealed));
        std::string sealed_after = running.seal("gamma");
        CPPUNIT_ASSERT_EQUAL(std::string("hs1:" + secrets::load_or_create_key(key).id()), sealed_after.substr(0, 12));
    }

    void testRotationWithADamagedValueChangesNothing() {
        TempDir dir;
        std::string key = dir / "secrets.key";
        hangar::host::Store store(dir / "db.sqlite");
        plugin_table(store);
        hangar::Secrets s(key);
        std::string good = s.seal("alpha");
        store.exec("INSERT INTO ut_things (id, secret) VALUES ('a', ?), ('b', 'not sealed')", {good});
        std::string id_before = secrets::load_or_create_key(key).id();
        CPPUNIT_ASSERT_THROW(hangar::host::rotate_secrets_key(store, key), secrets::Error);
        CPPUNIT_ASSERT_EQUAL(good,
                             store.exec("SELECT secret FROM ut_things WHERE id = 'a'")[0]["secret"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(id_before, secrets::load_or_create_key(key).id());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(SecretsTest);
