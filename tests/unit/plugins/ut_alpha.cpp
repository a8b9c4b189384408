// ut_alpha: a C++ test plugin (plugin.hpp) with migrations, routes, a service and a declared
// dependency on ut_beta. Loaded by plugins_test.cpp and http_test.cpp.
#include <hangar/plugin.hpp>

#include <string>

namespace {

using hangar::Error;
using hangar::json;

const hangar_migration kMigrations[] = {
    {1, "CREATE TABLE ut_alpha_notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL)"},
    {2, "ALTER TABLE ut_alpha_notes ADD COLUMN source TEXT NOT NULL DEFAULT 'migration';"
        "INSERT INTO ut_alpha_notes (text) VALUES ('seeded by migration 2')"},
};

class Alpha : public hangar::Plugin {
public:
    void start() override {
        // Dependencies start first, so ut_beta's service already answers here. If it did not,
        // call() throws and this plugin refuses to start.
        auto beta = call("beta.echo", {{"from", "ut_alpha.start"}});
        sql("INSERT INTO ut_alpha_notes (text, source) VALUES (?, 'start')", {beta.dump()});

        route("GET", "/ut/alpha/hello/{name}", [this](hangar::Request &req, hangar::Response &res) {
            auto notes = sql("SELECT COUNT(*) AS n FROM ut_alpha_notes");
            res.header("X-Alpha", "yes");
            res.json({{"name", req.param("name")},
                      {"caller", req.caller()},
                      {"q", req.query("q").value_or("")},
                      {"notes", notes[0]["n"]}});
        });
        route("POST", "/ut/alpha/echo", [](hangar::Request &req, hangar::Response &res) {
            auto body = req.body();
            res.json({{"size", body.size()}}, 201);
        });
        route("GET", "/ut/alpha/conflict",
              [](hangar::Request &, hangar::Response &) { throw Error::conflict("alpha is busy"); });
        route("POST", "/ut/alpha/validate", [](hangar::Request &req, hangar::Response &res) {
            auto body = req.json_body();
            hangar::Validation v;
            if (!body.contains("name") || !body["name"].is_string()) v.fail("name", "must be a string");
            v.throw_if_failed();
            res.no_content();
        });
        route("GET", "/ut/alpha/boom",
              [](hangar::Request &, hangar::Response &) -> void { throw std::runtime_error("kaboom"); });
        route(
            "GET", "/ut/alpha/public",
            [](hangar::Request &req, hangar::Response &res) {
                res.json({{"caller", req.caller()}});
            },
            HANGAR_ROUTE_PUBLIC);
        route(
            "GET", "/ut/alpha/events",
            [](hangar::Request &, hangar::Response &res) {
                auto stream = res.sse();
                for (int i = 0; i < 3; ++i)
                    stream->send({{"n", i}});
                // The stream closes (after flushing) when `stream` goes out of scope.
            },
            HANGAR_ROUTE_STREAMING);

        // A per-browser route: the host counts it as activity on session {id} while it runs.
        route("GET", "/browsers/{id}/ut_probe", [this](hangar::Request &req, hangar::Response &res) {
            res.json({{"idle_ms_during_call", idle_ms(req.param("id"))}});
        });
        // Relays to 127.0.0.1:{port}/{rest}; upgrades and SSE are spliced in the host's event loop.
        auto relay = [this](hangar::Request &req, hangar::Response &res) {
            auto port = static_cast<std::uint16_t>(std::stoi(req.param("port")));
            relay_tcp(req, res, "127.0.0.1", port, "/" + req.param("rest"), "relay-" + req.param("port"));
        };
        route("GET", "/ut/alpha/relay/{port}/{rest*}", relay, HANGAR_ROUTE_STREAMING);
        route("POST", "/ut/alpha/relay/{port}/{rest*}", relay, HANGAR_ROUTE_STREAMING);

        service("alpha.hello", [this](const json &in) {
            if (!in.is_object() || !in.contains("name")) throw Error::bad_request("name is required");
            return json{{"hello", in["name"]}, {"beta", call("beta.echo", in)}};
        });
    }
};

} // namespace

// ut_absent? is an optional dependency that is never there: it must not stop the load.
HANGAR_PLUGIN(Alpha, "ut_alpha", "1.2.3", "ut_beta, ut_absent?", kMigrations, 2)
