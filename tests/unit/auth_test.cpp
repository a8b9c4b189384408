// Auth: bootstrap, hashed keys, the Authorization and X-Kernel-Project-Id rules.
#include "auth.hpp"
#include "test_support.hpp"
#include "util.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <filesystem>

using namespace hangar::host;
using hangar::test::TempDir;

namespace {

Caller ok(const std::variant<Caller, AuthFailure> &r) {
    if (auto *f = std::get_if<AuthFailure>(&r))
        CPPUNIT_FAIL("expected success, got " + std::to_string(f->status) + " " + f->code + ": " + f->message);
    return std::get<Caller>(r);
}

AuthFailure fail(const std::variant<Caller, AuthFailure> &r) {
    if (std::holds_alternative<Caller>(r)) CPPUNIT_FAIL("expected a refusal, got a caller");
    return std::get<AuthFailure>(r);
}

std::optional<std::string> bearer(const std::string &key) {
    return "Bearer " + key;
}

} // namespace

class AuthTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(AuthTest);
    CPPUNIT_TEST(testBootstrapCreatesOrgAndDefaultProject);
    CPPUNIT_TEST(testBootstrapKeyWorks);
    CPPUNIT_TEST(testGeneratedKeyFileIsPrivateAndWorks);
    CPPUNIT_TEST(testKeysStoredHashed);
    CPPUNIT_TEST(testMissingOrGarbageHeaderIs401);
    CPPUNIT_TEST(testOrgKeyWithoutHeaderGetsDefaultProject);
    CPPUNIT_TEST(testOrgKeyMaySelectAnyProjectOfItsOrg);
    CPPUNIT_TEST(testProjectOfAnotherOrgIs404);
    CPPUNIT_TEST(testScopedKeyWithoutHeaderGetsItsProject);
    CPPUNIT_TEST(testScopedKeyNamingAnotherProjectIs403);
    CPPUNIT_TEST(testRevokedKeyIs401);
    CPPUNIT_TEST(testCreateKeyForUnknownProjectThrows);
    CPPUNIT_TEST(testExpiredKeyIs401AtOnce);
    CPPUNIT_TEST(testKeyOfDeletedProjectIs401);
    CPPUNIT_TEST(testKeysAreMasked);
    CPPUNIT_TEST(testSessionCapOverrideDefaultOrgLimit);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TempDir> dir_;
    std::unique_ptr<Store> store_;
    std::unique_ptr<Auth> auth_;

    std::string default_project() {
        auto rows = store_->exec("SELECT id FROM projects WHERE is_default = 1 AND org_id = ?", {auth_->default_org()});
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), rows.size());
        return rows[0]["id"];
    }

public:
    void setUp() override {
        dir_ = std::make_unique<TempDir>();
        store_ = std::make_unique<Store>(*dir_ / "hangar.db");
        auth_ = std::make_unique<Auth>(*store_);
    }
    void tearDown() override {
        auth_.reset();
        store_.reset();
        dir_.reset();
    }

    void testBootstrapCreatesOrgAndDefaultProject() {
        CPPUNIT_ASSERT_EQUAL(std::string(), auth_->default_org());
        auth_->bootstrap("k-123456789", *dir_ / "key");
        auto orgs = store_->exec("SELECT id, name FROM orgs");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), orgs.size());
        std::string org = orgs[0]["id"];
        CPPUNIT_ASSERT(org.rfind("org_", 0) == 0);
        CPPUNIT_ASSERT_EQUAL(org, auth_->default_org());
        auto projects = store_->exec("SELECT id, org_id, is_default FROM projects");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), projects.size());
        CPPUNIT_ASSERT_EQUAL(org, projects[0]["org_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(1, projects[0]["is_default"].get<int>());
        CPPUNIT_ASSERT(projects[0]["id"].get<std::string>().rfind("proj_", 0) == 0);
        // Idempotent: a second start adds neither org, project nor key.
        auth_->bootstrap("k-123456789", *dir_ / "key");
        Auth again(*store_);
        again.bootstrap("k-123456789", *dir_ / "key");
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT id FROM orgs").size());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT id FROM projects").size());
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT id FROM api_keys").size());
    }

    void testBootstrapKeyWorks() {
        CPPUNIT_ASSERT_EQUAL(std::string(), auth_->bootstrap("my-bootstrap-key", *dir_ / "key"));
        CPPUNIT_ASSERT(!std::filesystem::exists(*dir_ / "key")); // nothing generated
        auto c = ok(auth_->authenticate(bearer("my-bootstrap-key"), std::nullopt));
        CPPUNIT_ASSERT_EQUAL(auth_->default_org(), c.org_id);
        CPPUNIT_ASSERT_EQUAL(default_project(), c.project_id);
        CPPUNIT_ASSERT(!c.project_scoped);
        CPPUNIT_ASSERT(c.key_id.rfind("key_", 0) == 0);
        // Scheme is case-insensitive and surrounding blanks are tolerated.
        ok(auth_->authenticate(std::string("bearer my-bootstrap-key"), std::nullopt));
        ok(auth_->authenticate(std::string("  BEARER   my-bootstrap-key  "), std::nullopt));
        auto j = c.to_json();
        CPPUNIT_ASSERT_EQUAL(c.project_id, j["project_id"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(false, j["project_scoped"].get<bool>());
        // Another bootstrap key later (operator changed HANGAR_API_KEY) also works.
        auth_->bootstrap("second-key-abc", *dir_ / "key");
        ok(auth_->authenticate(bearer("second-key-abc"), std::nullopt));
        ok(auth_->authenticate(bearer("my-bootstrap-key"), std::nullopt));
    }

    void testGeneratedKeyFileIsPrivateAndWorks() {
        auto file = *dir_ / "bootstrap-api-key";
        std::string key = auth_->bootstrap("", file);
        CPPUNIT_ASSERT(!key.empty());
        CPPUNIT_ASSERT(key.rfind("hgr_", 0) == 0);
        CPPUNIT_ASSERT(key.size() >= 40);
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat(file.c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0600u, static_cast<unsigned>(st.st_mode & 0777));
        CPPUNIT_ASSERT_EQUAL(key + "\n", read_file(file));
        auto c = ok(auth_->authenticate(bearer(key), std::nullopt));
        CPPUNIT_ASSERT_EQUAL(default_project(), c.project_id);
        // The next start finds the file and generates nothing.
        CPPUNIT_ASSERT_EQUAL(std::string(), auth_->bootstrap("", file));
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT id FROM api_keys").size());
        CPPUNIT_ASSERT_EQUAL(key + "\n", read_file(file));
    }

    void testKeysStoredHashed() {
        auth_->bootstrap("plain-bootstrap-key", *dir_ / "key");
        auto project = auth_->create_project("second");
        std::string scoped = auth_->create_key("ci", project);
        std::string org_key = auth_->create_key("admin");
        CPPUNIT_ASSERT(scoped.rfind("hgr_", 0) == 0);
        CPPUNIT_ASSERT(scoped != org_key);
        auto rows = store_->exec("SELECT * FROM api_keys");
        CPPUNIT_ASSERT_EQUAL(std::size_t(3), rows.size());
        auto dump = rows.dump();
        for (const auto &plain : {std::string("plain-bootstrap-key"), scoped, org_key}) {
            CPPUNIT_ASSERT_MESSAGE("plaintext key found in api_keys", dump.find(plain) == std::string::npos);
            CPPUNIT_ASSERT_EQUAL(
                std::size_t(1), store_->exec("SELECT id FROM api_keys WHERE key_hash = ?", {sha256_hex(plain)}).size());
        }
        // Nor anywhere else in the database file's tables.
        for (auto &t : store_->exec("SELECT name FROM sqlite_master WHERE type = 'table'")) {
            auto all = store_->exec("SELECT * FROM " + t["name"].get<std::string>()).dump();
            CPPUNIT_ASSERT(all.find(scoped) == std::string::npos);
        }
    }

    void testMissingOrGarbageHeaderIs401() {
        auth_->bootstrap("the-real-key", *dir_ / "key");
        const std::vector<std::optional<std::string>> bad = {
            std::nullopt,
            std::string(""),
            std::string("the-real-key"),
            std::string("Bearer"),
            std::string("Bearer "),
            std::string("Bearer    "),
            std::string("Basic dGhlLXJlYWwta2V5"),
            std::string("Bearer the-real-ke"),
            std::string("Bearer the-real-key2"),
            std::string("Bearerthe-real-key"),
            std::string("Token the-real-key"),
            std::string("Bearer \xff\xfe garbage"),
        };
        for (const auto &h : bad) {
            auto f = fail(auth_->authenticate(h, std::nullopt));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(h.value_or("<none>"), 401, f.status);
            CPPUNIT_ASSERT_EQUAL(std::string("unauthorized"), f.code);
            CPPUNIT_ASSERT(!f.message.empty());
        }
        // A bad key is refused before the project header is looked at.
        auto f = fail(auth_->authenticate(std::string("Bearer nope"), default_project()));
        CPPUNIT_ASSERT_EQUAL(401, f.status);
    }

    void testOrgKeyWithoutHeaderGetsDefaultProject() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auth_->create_project("other");
        auto c = ok(auth_->authenticate(bearer("org-key-1"), std::nullopt));
        CPPUNIT_ASSERT_EQUAL(default_project(), c.project_id);
        auto blank = ok(auth_->authenticate(bearer("org-key-1"), std::string("  ")));
        CPPUNIT_ASSERT_EQUAL(default_project(), blank.project_id);
    }

    void testOrgKeyMaySelectAnyProjectOfItsOrg() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto other = auth_->create_project("other");
        auto c = ok(auth_->authenticate(bearer("org-key-1"), other));
        CPPUNIT_ASSERT_EQUAL(other, c.project_id);
        CPPUNIT_ASSERT(!c.project_scoped);
        auto unknown = fail(auth_->authenticate(bearer("org-key-1"), std::string("proj_doesnotexist")));
        CPPUNIT_ASSERT_EQUAL(404, unknown.status);
        CPPUNIT_ASSERT_EQUAL(std::string("not_found"), unknown.code);
    }

    void testProjectOfAnotherOrgIs404() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        store_->exec("INSERT INTO orgs (id, name, created_at) VALUES ('org_other', 'other', ?)", {rfc3339(now_ms())});
        store_->exec("INSERT INTO projects (id, org_id, name, is_default, created_at) "
                     "VALUES ('proj_foreign', 'org_other', 'default', 1, ?)",
                     {rfc3339(now_ms())});
        auto f = fail(auth_->authenticate(bearer("org-key-1"), std::string("proj_foreign")));
        CPPUNIT_ASSERT_EQUAL(404, f.status);
        CPPUNIT_ASSERT_EQUAL(std::string("not_found"), f.code);
        CPPUNIT_ASSERT(f.message.find("proj_foreign") != std::string::npos);
        // A scoped key of our org gets the same 404 (not a 403 that would confirm it exists).
        auto scoped = auth_->create_key("s", default_project());
        auto g = fail(auth_->authenticate(bearer(scoped), std::string("proj_foreign")));
        CPPUNIT_ASSERT_EQUAL(404, g.status);
    }

    void testScopedKeyWithoutHeaderGetsItsProject() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto project = auth_->create_project("ci");
        auto key = auth_->create_key("ci-key", project);
        auto c = ok(auth_->authenticate(bearer(key), std::nullopt));
        CPPUNIT_ASSERT_EQUAL(project, c.project_id);
        CPPUNIT_ASSERT(c.project_scoped);
        CPPUNIT_ASSERT_EQUAL(auth_->default_org(), c.org_id);
        // Naming its own project explicitly is fine.
        CPPUNIT_ASSERT_EQUAL(project, ok(auth_->authenticate(bearer(key), project)).project_id);
    }

    void testScopedKeyNamingAnotherProjectIs403() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto project = auth_->create_project("ci");
        auto key = auth_->create_key("ci-key", project);
        auto f = fail(auth_->authenticate(bearer(key), default_project()));
        CPPUNIT_ASSERT_EQUAL(403, f.status);
        CPPUNIT_ASSERT_EQUAL(std::string("forbidden"), f.code);
        CPPUNIT_ASSERT(f.message.find(project) != std::string::npos);
    }

    void testRevokedKeyIs401() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto key = auth_->create_key("temp");
        ok(auth_->authenticate(bearer(key), std::nullopt));
        store_->exec("UPDATE api_keys SET revoked_at = ? WHERE key_hash = ?", {rfc3339(now_ms()), sha256_hex(key)});
        CPPUNIT_ASSERT_EQUAL(401, fail(auth_->authenticate(bearer(key), std::nullopt)).status);
        ok(auth_->authenticate(bearer("org-key-1"), std::nullopt));
    }

    void testExpiredKeyIs401AtOnce() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto key = auth_->create_key("temp");
        store_->exec("UPDATE api_keys SET expires_at = ? WHERE key_hash = ?",
                     {rfc3339(now_ms() + 60000), sha256_hex(key)});
        ok(auth_->authenticate(bearer(key), std::nullopt));
        store_->exec("UPDATE api_keys SET expires_at = ? WHERE key_hash = ?", {rfc3339(now_ms()), sha256_hex(key)});
        CPPUNIT_ASSERT_EQUAL(401, fail(auth_->authenticate(bearer(key), std::nullopt)).status);
    }

    void testKeyOfDeletedProjectIs401() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto project = auth_->create_project("gone");
        auto key = auth_->create_key("scoped", project);
        CPPUNIT_ASSERT_EQUAL(project, ok(auth_->authenticate(bearer(key), std::nullopt)).project_id);
        store_->exec("UPDATE projects SET deleted_at = ? WHERE id = ?", {rfc3339(now_ms()), project});
        CPPUNIT_ASSERT_EQUAL(401, fail(auth_->authenticate(bearer(key), std::nullopt)).status);
        // An org-wide key naming the deleted project: it is not found.
        CPPUNIT_ASSERT_EQUAL(404, fail(auth_->authenticate(bearer("org-key-1"), project)).status);
    }

    void testKeysAreMasked() {
        auth_->bootstrap("sk_test_0123456789", *dir_ / "key");
        auto key = auth_->create_key("masked");
        auto rows = store_->exec("SELECT masked_key FROM api_keys WHERE key_hash = ?", {sha256_hex(key)});
        CPPUNIT_ASSERT_EQUAL("hgr_****" + key.substr(key.size() - 4), rows[0]["masked_key"].get<std::string>());
        rows = store_->exec("SELECT masked_key FROM api_keys WHERE key_hash = ?", {sha256_hex("sk_test_0123456789")});
        CPPUNIT_ASSERT_EQUAL(std::string("****6789"), rows[0]["masked_key"].get<std::string>());
    }

    void testSessionCapOverrideDefaultOrgLimit() {
        using nlohmann::json;
        auth_->set_org_session_limit(10);
        CPPUNIT_ASSERT_EQUAL(10LL, auth_->effective_session_cap(json(), json()));
        CPPUNIT_ASSERT_EQUAL(4LL, auth_->effective_session_cap(json(), json(4)));
        CPPUNIT_ASSERT_EQUAL(2LL, auth_->effective_session_cap(json(2), json(4)));
        CPPUNIT_ASSERT_EQUAL(10LL, auth_->effective_session_cap(json(20), json(4))); // never above the org limit
        auth_->set_org_session_limit(0);
        CPPUNIT_ASSERT_EQUAL(0LL, auth_->effective_session_cap(json(), json()));
        CPPUNIT_ASSERT_EQUAL(20LL, auth_->effective_session_cap(json(20), json(4)));

        auth_->set_org_session_limit(10);
        auth_->bootstrap("org-key-1", *dir_ / "key");
        auto project = auth_->create_project("capped");
        store_->exec("UPDATE projects SET max_concurrent_sessions = 3 WHERE id = ?", {project});
        auto c = ok(auth_->authenticate(bearer("org-key-1"), project));
        CPPUNIT_ASSERT_EQUAL(3LL, c.max_concurrent_sessions);
        CPPUNIT_ASSERT_EQUAL(std::string("capped"), c.project_name);
        CPPUNIT_ASSERT_EQUAL(10LL, ok(auth_->authenticate(bearer("org-key-1"), std::nullopt)).max_concurrent_sessions);
    }

    void testCreateKeyForUnknownProjectThrows() {
        auth_->bootstrap("org-key-1", *dir_ / "key");
        CPPUNIT_ASSERT_THROW(auth_->create_key("x", "proj_missing"), std::runtime_error);
        CPPUNIT_ASSERT_EQUAL(std::size_t(1), store_->exec("SELECT id FROM api_keys").size());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(AuthTest);
