// The C function table plugins receive (hangar_host_v1), called directly as a plugin would:
// config, routes, store, blobs, services, timers, activity, tokens, and instance calls without
// a runtime. Everything here must fail softly (a status), never throw across the boundary.
#include "core.hpp"
#include "test_support.hpp"

#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <filesystem>

using namespace hangar::host;
using hangar::test::TempDir;
using nlohmann::json;

namespace {

hangar_str S(std::string_view s) {
    return {s.data(), s.size()};
}

// Owns a host buffer.
struct HBuf {
    explicit HBuf(const hangar_host_v1 *h) : host(h) {}
    ~HBuf() { host->buf_free(&buf); }
    std::string str() const { return buf.ptr ? std::string(buf.ptr, buf.len) : std::string(); }
    const hangar_host_v1 *host;
    hangar_buf buf{nullptr, 0};
};

} // namespace

class HostApiTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(HostApiTest);
    CPPUNIT_TEST(testTableHeader);
    CPPUNIT_TEST(testBuffers);
    CPPUNIT_TEST(testConfigLookup);
    CPPUNIT_TEST(testRouteAdd);
    CPPUNIT_TEST(testStoreExec);
    CPPUNIT_TEST(testStoreExecBatchIsAllOrNothing);
    CPPUNIT_TEST(testBlobs);
    CPPUNIT_TEST(testBlobKeysConfined);
    CPPUNIT_TEST(testServices);
    CPPUNIT_TEST(testTimers);
    CPPUNIT_TEST(testActivity);
    CPPUNIT_TEST(testTokens);
    CPPUNIT_TEST(testInstancesWithoutRuntime);
    CPPUNIT_TEST_SUITE_END();

    std::unique_ptr<TempDir> dir_;
    std::unique_ptr<Config> config_;
    std::unique_ptr<HostCore> core_;
    PluginRecord rec_;
    hangar_plugin_ctx ctx_{};
    const hangar_host_v1 *h_ = nullptr;

public:
    void setUp() override {
        dir_ = std::make_unique<TempDir>();
        hangar::test::write_text(*dir_ / "etc/hangar.ini", "[server]\npublic_url = https://h.example\n"
                                                           "[ut_api]\ngreeting = from main\n");
        hangar::test::write_text(*dir_ / "etc/plugins.d/ut_api.ini", "[ut_api]\nenabled = true\ngreeting = hi\n");
        config_ = std::make_unique<Config>(*dir_ / "etc/hangar.ini", std::map<std::string, std::string>{});
        core_ = std::make_unique<HostCore>(HANGAR_ROLE_SERVER, *config_);
        core_->data_dir = *dir_ / "data";
        std::filesystem::create_directories(core_->data_dir);
        core_->store = std::make_unique<Store>(core_->data_dir + "/hangar.db");
        core_->blobs = std::make_unique<Blobs>(*core_->store, core_->data_dir, "");
        core_->tokens = std::make_unique<Tokens>(core_->data_dir + "/token.secret");
        rec_.name = "ut_api";
        rec_.logger = &Poco::Logger::get("plugin.ut_api");
        ctx_ = hangar_plugin_ctx{core_.get(), &rec_};
        h_ = core_->api();
    }
    void tearDown() override {
        core_.reset();
        config_.reset();
        dir_.reset();
    }

    void testTableHeader() {
        CPPUNIT_ASSERT_EQUAL(HANGAR_ABI_VERSION, h_->abi_version);
        CPPUNIT_ASSERT_EQUAL(static_cast<std::uint32_t>(sizeof(hangar_host_v1)), h_->struct_size);
        // Every slot is filled: a null function pointer would crash a plugin that trusts the size.
        auto *slots = reinterpret_cast<void *const *>(reinterpret_cast<const char *>(h_) + 2 * sizeof(std::uint32_t));
        std::size_t n = (sizeof(hangar_host_v1) - 2 * sizeof(std::uint32_t)) / sizeof(void *);
        for (std::size_t i = 0; i < n; ++i)
            CPPUNIT_ASSERT_MESSAGE("slot " + std::to_string(i), slots[i] != nullptr);
        CPPUNIT_ASSERT_EQUAL(HANGAR_ROLE_SERVER, h_->role(&ctx_));
    }

    void testBuffers() {
        hangar_buf b{nullptr, 0};
        CPPUNIT_ASSERT_EQUAL(0, h_->buf_alloc(&b, "abc\0def", 7));
        CPPUNIT_ASSERT_EQUAL(std::size_t(7), b.len);
        CPPUNIT_ASSERT_EQUAL(0, std::memcmp(b.ptr, "abc\0def", 7));
        CPPUNIT_ASSERT_EQUAL('\0', b.ptr[7]); // NUL-terminated for C callers
        h_->buf_free(&b);
        CPPUNIT_ASSERT(b.ptr == nullptr);
        CPPUNIT_ASSERT_EQUAL(std::size_t(0), b.len);
        h_->buf_free(&b); // twice is harmless
        h_->buf_free(nullptr);
        CPPUNIT_ASSERT_EQUAL(0, h_->buf_alloc(&b, "", 0));
        CPPUNIT_ASSERT(b.ptr != nullptr);
        h_->buf_free(&b);
    }

    void testConfigLookup() {
        HBuf a(h_), b(h_), c(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->config_get(&ctx_, S("greeting"), &a.buf));
        CPPUNIT_ASSERT_EQUAL(std::string("hi"), a.str()); // plugins.d beats the main file
        CPPUNIT_ASSERT_EQUAL(0, h_->config_get(&ctx_, S("server.public_url"), &b.buf));
        CPPUNIT_ASSERT_EQUAL(std::string("https://h.example"), b.str());
        CPPUNIT_ASSERT_EQUAL(-1, h_->config_get(&ctx_, S("nothing.here"), &c.buf));
    }

    void testRouteAdd() {
        auto fn = [](void *, hangar_request *, hangar_response *) {};
        CPPUNIT_ASSERT_EQUAL(0, h_->route_add(&ctx_, S("get"), S("/ut/api/{id}"), 0, fn, nullptr));
        CPPUNIT_ASSERT_EQUAL(-1, h_->route_add(&ctx_, S("GET"), S("/ut/api/{id}"), 0, fn, nullptr));
        CPPUNIT_ASSERT_EQUAL(0, h_->route_add(&ctx_, S("Post"), S("/ut/api/{id}"), HANGAR_ROUTE_PUBLIC, fn, &rec_));
        auto found = core_->router.find("POST", "/ut/api/7");
        auto &m = std::get<Router<RouteTarget>::Match>(found);
        CPPUNIT_ASSERT_EQUAL(static_cast<std::uint32_t>(HANGAR_ROUTE_PUBLIC), m.target->flags);
        CPPUNIT_ASSERT(m.target->user == &rec_);
        CPPUNIT_ASSERT(m.target->plugin == &rec_);
        CPPUNIT_ASSERT(std::holds_alternative<Router<RouteTarget>::Match>(core_->router.find("GET", "/ut/api/7")));
    }

    void testStoreExec() {
        HBuf out(h_), err(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->store_exec(&ctx_, S("CREATE TABLE ut_api_t (a, b)"), S(""), &out.buf, &err.buf));
        CPPUNIT_ASSERT_EQUAL(std::string("[]"), out.str());
        HBuf o2(h_), e2(h_);
        CPPUNIT_ASSERT_EQUAL(
            0, h_->store_exec(&ctx_, S("INSERT INTO ut_api_t VALUES (?, ?)"), S(R"([1, "x"])"), &o2.buf, &e2.buf));
        HBuf o3(h_), e3(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->store_exec(&ctx_, S("SELECT a, b FROM ut_api_t"), S("[]"), &o3.buf, &e3.buf));
        CPPUNIT_ASSERT_EQUAL(json::parse(R"([{"a":1,"b":"x"}])"), json::parse(o3.str()));
        // Failures come back as -1 with a message, never as an exception.
        HBuf o4(h_), e4(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->store_exec(&ctx_, S("SELECT * FROM nope"), S("[]"), &o4.buf, &e4.buf));
        CPPUNIT_ASSERT_MESSAGE(e4.str(), e4.str().find("nope") != std::string::npos);
        HBuf o5(h_), e5(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->store_exec(&ctx_, S("SELECT ?"), S("[1,"), &o5.buf, &e5.buf));
        CPPUNIT_ASSERT(!e5.str().empty());
        HBuf o6(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->store_exec(&ctx_, S("SELECT ?"), S("{}"), &o6.buf, nullptr)); // err optional
    }

    void testStoreExecBatchIsAllOrNothing() {
        HBuf o1(h_), e1(h_);
        CPPUNIT_ASSERT_EQUAL(
            0, h_->store_exec(&ctx_, S("CREATE TABLE ut_api_b (k TEXT PRIMARY KEY, v TEXT)"), S(""), &o1.buf, &e1.buf));
        const std::string insert_and_read =
            json::array({{{"sql", "INSERT INTO ut_api_b VALUES (?, ?)"}, {"params", {"a", "1"}}},
                         {{"sql", "SELECT v FROM ut_api_b WHERE k = ?"}, {"params", {"a"}}}})
                .dump();
        HBuf o2(h_), e2(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->store_exec_batch(&ctx_, S(insert_and_read), &o2.buf, &e2.buf));
        CPPUNIT_ASSERT_EQUAL(json::parse(R"([[], [{"v": "1"}]])"), json::parse(o2.str()));
        // The second statement breaks the key: the first is rolled back with it.
        const std::string update_then_fail =
            json::array({{{"sql", "UPDATE ut_api_b SET v = ? WHERE k = ?"}, {"params", {"2", "a"}}},
                         {{"sql", "INSERT INTO ut_api_b VALUES (?, ?)"}, {"params", {"a", "3"}}}})
                .dump();
        HBuf o3(h_), e3(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->store_exec_batch(&ctx_, S(update_then_fail), &o3.buf, &e3.buf));
        CPPUNIT_ASSERT(!e3.str().empty());
        HBuf o4(h_), e4(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->store_exec(&ctx_, S("SELECT v FROM ut_api_b"), S("[]"), &o4.buf, &e4.buf));
        CPPUNIT_ASSERT_EQUAL(json::parse(R"([{"v": "1"}])"), json::parse(o4.str()));
        HBuf o5(h_), e5(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->store_exec_batch(&ctx_, S(R"({"sql": "SELECT 1"})"), &o5.buf, &e5.buf));
    }

    void testBlobs() {
        HBuf err(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->blob_put(&ctx_, S("zips/ext-1.zip"), S(std::string("PK\0\3", 4)), &err.buf));
        auto file = core_->blobs->root() + "/ut_api/zips/ext-1.zip";
        CPPUNIT_ASSERT(std::filesystem::exists(file));
        CPPUNIT_ASSERT_EQUAL(std::string("PK\0\3", 4), read_file(file));
        struct stat st {};
        CPPUNIT_ASSERT_EQUAL(0, ::stat(file.c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0600u, static_cast<unsigned>(st.st_mode & 0777));
        HBuf path(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->blob_path(&ctx_, S("zips/ext-1.zip"), &path.buf));
        CPPUNIT_ASSERT_EQUAL(file, path.str());
        CPPUNIT_ASSERT_EQUAL(0, h_->blob_delete(&ctx_, S("zips/ext-1.zip")));
        CPPUNIT_ASSERT(!std::filesystem::exists(file));
        CPPUNIT_ASSERT_EQUAL(-1, h_->blob_delete(&ctx_, S("zips/ext-1.zip")));
        // blob_path for a new key creates its folder so the plugin can write there.
        HBuf fresh(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->blob_path(&ctx_, S("videos/r1.mp4"), &fresh.buf));
        CPPUNIT_ASSERT(std::filesystem::is_directory(core_->blobs->root() + "/ut_api/videos"));
    }

    void testBlobKeysConfined() {
        for (const char *key :
             {"", "../escape", "a/../../b", "/abs", "a//b", "./a", "a/.", "..", "sp ace", "a\\b", "new\nline", "a/"}) {
            HBuf err(h_), path(h_);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(key, -1, h_->blob_put(&ctx_, S(key), S("x"), &err.buf));
            CPPUNIT_ASSERT_MESSAGE(key, !err.str().empty());
            CPPUNIT_ASSERT_EQUAL_MESSAGE(key, -1, h_->blob_path(&ctx_, S(key), &path.buf));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(key, -1, h_->blob_delete(&ctx_, S(key)));
        }
        CPPUNIT_ASSERT(!std::filesystem::exists(*dir_ / "escape"));
        CPPUNIT_ASSERT(!std::filesystem::exists(*dir_ / "data/escape"));
        CPPUNIT_ASSERT(!std::filesystem::exists(*dir_ / "data/blobs/escape"));
    }

    void testServices() {
        auto fn = [](void *user, hangar_str in, hangar_buf *out) {
            auto *h = static_cast<const hangar_host_v1 *>(user);
            std::string reply = "{\"len\":" + std::to_string(in.len) + "}";
            h->buf_alloc(out, reply.data(), reply.size());
            return 200;
        };
        CPPUNIT_ASSERT_EQUAL(0, h_->service_add(&ctx_, S("ut_api.len"), fn, const_cast<hangar_host_v1 *>(h_)));
        CPPUNIT_ASSERT_EQUAL(-1, h_->service_add(&ctx_, S("ut_api.len"), fn, nullptr));
        HBuf out(h_);
        CPPUNIT_ASSERT_EQUAL(200, h_->service_call(&ctx_, S("ut_api.len"), S("[1,2,3]"), &out.buf));
        CPPUNIT_ASSERT_EQUAL(std::string("{\"len\":7}"), out.str());
        HBuf missing(h_);
        CPPUNIT_ASSERT_EQUAL(404, h_->service_call(&ctx_, S("ut_api.nope"), S("{}"), &missing.buf));
        CPPUNIT_ASSERT_EQUAL(std::string("not_found"), json::parse(missing.str())["code"].get<std::string>());
    }

    void testTimers() {
        std::atomic<int> ticks{0};
        auto *t = h_->timer_start(
            &ctx_, 10, [](void *user) { ++*static_cast<std::atomic<int> *>(user); }, &ticks);
        CPPUNIT_ASSERT(t != nullptr);
        CPPUNIT_ASSERT(hangar::test::eventually([&] { return ticks.load() >= 3; }, 2000));
        h_->timer_cancel(t);
        int after = ticks.load();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        CPPUNIT_ASSERT_EQUAL(after, ticks.load());
        h_->timer_cancel(nullptr);
    }

    void testActivity() {
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-1), h_->activity_idle_ms(&ctx_, S("sess_1")));
        auto *a = h_->activity_begin(&ctx_, S("sess_1"));
        auto *b = h_->activity_begin(&ctx_, S("sess_1"));
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), h_->activity_idle_ms(&ctx_, S("sess_1")));
        h_->activity_end(a);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(0), h_->activity_idle_ms(&ctx_, S("sess_1"))); // b still holds it
        h_->activity_end(b);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto idle = h_->activity_idle_ms(&ctx_, S("sess_1"));
        CPPUNIT_ASSERT_MESSAGE(std::to_string(idle), idle >= 15 && idle < 5000);
        CPPUNIT_ASSERT_EQUAL(std::int64_t(-1), h_->activity_idle_ms(&ctx_, S("sess_2")));
        h_->activity_end(nullptr);
    }

    void testTokens() {
        HBuf token(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->token_sign(&ctx_, S(R"({"sub":"b1","scope":"cdp"})"), 60, &token.buf));
        HBuf claims(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->token_verify(&ctx_, S(token.str()), &claims.buf));
        auto c = json::parse(claims.str());
        CPPUNIT_ASSERT_EQUAL(std::string("b1"), c["sub"].get<std::string>());
        CPPUNIT_ASSERT(c.contains("exp"));
        HBuf bad(h_), bad2(h_), bad3(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->token_verify(&ctx_, S(token.str() + "x0"), &bad.buf));
        CPPUNIT_ASSERT_EQUAL(-1, h_->token_sign(&ctx_, S("not json"), 60, &bad2.buf));
        CPPUNIT_ASSERT_EQUAL(-1, h_->token_sign(&ctx_, S("[1,2]"), 60, &bad3.buf));
    }

    void testInstancesWithoutRuntime() {
        HBuf out(h_), err(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->instance_start(&ctx_, S(R"({"id":"i1"})"), &out.buf, &err.buf));
        CPPUNIT_ASSERT(!err.str().empty());
        CPPUNIT_ASSERT_EQUAL(-1, h_->instance_stop(&ctx_, S("i1")));
        int status = 0;
        HBuf body(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->instance_call(&ctx_, S("i1"), S("GET"), S("/x"), S(""), 100, &status, &body.buf));
        CPPUNIT_ASSERT_EQUAL(502, status);
        HBuf sock(h_), spec(h_);
        CPPUNIT_ASSERT_EQUAL(-1, h_->instance_socket(&ctx_, S("i1"), &sock.buf));
        CPPUNIT_ASSERT_EQUAL(-1, h_->instance_spec(&ctx_, &spec.buf));
        // In the instance role the spec comes from the instance folder.
        core_->instance_dir = *dir_ / "inst";
        hangar::test::write_text(core_->instance_dir + "/spec.json", R"({"id":"i1","headless":true})");
        HBuf spec2(h_);
        CPPUNIT_ASSERT_EQUAL(0, h_->instance_spec(&ctx_, &spec2.buf));
        CPPUNIT_ASSERT_EQUAL(true, json::parse(spec2.str())["headless"].get<bool>());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(HostApiTest);
