// hello: the Hangar SDK's example plugin.
//
// It shows every part of the plugin SDK a third party needs, and nothing else:
//   - routes           GET /hello, POST /hello/greetings, GET /hello/greetings, GET /hello/greet/{name}
//   - the caller       who the host authenticated (org, project, key); req.project() scopes data
//   - migrations       the table hello_greetings, created by the host before start()
//   - the store        sql() with bound parameters, rows back as JSON
//   - pagination       res.page(): a bare JSON array plus X-Has-More / X-Next-Offset
//   - wire errors      hangar::Error / hangar::Validation become {code, message, details}
//   - services         "hello.greet", callable by any plugin through the host's registry
//
// It builds out of tree against the SDK headers alone (see README.md); it links nothing of the
// host. Everything crosses the boundary through the C table in <hangar/plugin.h>.
#include <hangar/plugin.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>

namespace {

using hangar::Error;
using hangar::json;

// Each migration runs once per database, in version order; the host records which ran.
// Keep to SQL that both SQLite and PostgreSQL speak.
const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE hello_greetings ("
        "  id TEXT PRIMARY KEY,"
        "  project_id TEXT NOT NULL,"
        "  text TEXT NOT NULL,"
        "  created_at TEXT NOT NULL,"
        "  seq BIGINT NOT NULL"
        ");"
        "CREATE INDEX hello_greetings_project ON hello_greetings (project_id, seq)"},
};

std::string random_id() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    static const char *digits = "0123456789abcdefghijklmnopqrstuvwxyz";
    std::string id = "greet_";
    for (int i = 0; i < 16; ++i)
        id += digits[rng() % 36];
    return id;
}

// RFC 3339 in UTC with milliseconds, like every other timestamp on the wire.
std::string now_rfc3339(std::int64_t *micros_out) {
    auto now = std::chrono::system_clock::now();
    auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    if (micros_out) *micros_out = micros;
    std::time_t secs = static_cast<std::time_t>(micros / 1000000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[48];
    std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>((micros / 1000) % 1000));
    return out;
}

// A non-negative integer query parameter, or a 400 naming it.
std::int64_t int_query(const hangar::Request &req, const char *name, std::int64_t fallback, std::int64_t max) {
    auto v = req.query(name);
    if (!v || v->empty()) return fallback;
    std::size_t used = 0;
    long long n = -1;
    try {
        n = std::stoll(*v, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used != v->size() || n < 0 || n > max)
        throw Error::invalid(name, "must be an integer between 0 and " + std::to_string(max));
    return n;
}

class HelloPlugin : public hangar::Plugin {
public:
    void start() override {
        // The same library is loaded by `hangar serve` and by every `hangar agent`; this example
        // only has a public half.
        if (role() != HANGAR_ROLE_SERVER) return;

        greeting_word_ = config("greeting", "hello");

        route("GET", "/hello", [](hangar::Request &req, hangar::Response &res) {
            res.json({{"message", "hello from a plugin"}, {"caller", req.caller()}});
        });

        route("POST", "/hello/greetings", [this](hangar::Request &req, hangar::Response &res) {
            json body = req.json_body();
            hangar::Validation v;
            if (!body.contains("text") || !body["text"].is_string())
                v.fail("text", "required, a string");
            else if (body["text"].get<std::string>().empty() || body["text"].get<std::string>().size() > 280)
                v.fail("text", "must be 1 to 280 characters");
            v.throw_if_failed("invalid greeting");

            json greeting = {{"id", random_id()}, {"text", body["text"]}};
            std::int64_t seq = 0;
            greeting["created_at"] = now_rfc3339(&seq);
            sql("INSERT INTO hello_greetings (id, project_id, text, created_at, seq) VALUES (?, ?, ?, ?, ?)",
                json::array({greeting["id"], req.project(), greeting["text"], greeting["created_at"], seq}));
            res.json(greeting, 201);
        });

        route("GET", "/hello/greetings", [this](hangar::Request &req, hangar::Response &res) {
            std::int64_t offset = int_query(req, "offset", 0, 1'000'000'000);
            std::int64_t limit = int_query(req, "limit", 20, 100);
            if (limit == 0) limit = 20;
            // One row more than asked tells whether another page exists.
            json rows = sql("SELECT id, text, created_at FROM hello_greetings WHERE project_id = ? "
                            "ORDER BY seq, id LIMIT " +
                                std::to_string(limit + 1) + " OFFSET " + std::to_string(offset),
                            json::array({req.project()}));
            bool has_more = rows.size() > static_cast<std::size_t>(limit);
            if (has_more) rows.erase(rows.end() - 1);
            res.page(rows, offset, has_more);
        });

        // A route that goes through the service registry, as another plugin would.
        route("GET", "/hello/greet/{name}", [this](hangar::Request &req, hangar::Response &res) {
            res.json(call("hello.greet", {{"name", req.param("name")}}));
        });

        service("hello.greet", [this](const json &in) {
            if (!in.is_object() || !in.contains("name") || !in["name"].is_string() ||
                in["name"].get<std::string>().empty())
                throw Error::invalid("name", "required, a non-empty string");
            return json{{"greeting", greeting_word_ + ", " + in["name"].get<std::string>()}};
        });

        info("hello plugin started");
    }

private:
    std::string greeting_word_;
};

} // namespace

HANGAR_PLUGIN(HelloPlugin, "hello", "1.0.0", nullptr, kMigrations, sizeof(kMigrations) / sizeof(kMigrations[0]))
