// ut_services: a test plugin that lets an end-to-end test call any plugin's service over HTTP:
// POST /ut/services/{name} with the service's JSON input answers {status, body}. The caller's
// org_id and project_id are filled in when the input leaves them out, as a calling plugin would.
// Built into build/test-plugins only; never installed (tests/e2e/credentials.test.mjs uses it).
#include <hangar/plugin.hpp>

namespace {

class Services : public hangar::Plugin {
public:
    void start_server() override {
        route("POST", "/ut/services/{name}", [this](hangar::Request &req, hangar::Response &res) {
            hangar::json in = req.json_body(true);
            hangar::json caller = req.caller();
            for (const char *k : {"org_id", "project_id"})
                if (!in.contains(k)) in[k] = caller.value(k, "");
            try {
                res.json({{"status", 200}, {"body", call(req.param("name"), in)}});
            } catch (const hangar::Error &e) {
                res.json({{"status", e.status()}, {"body", {{"code", e.code()}, {"message", e.what()}}}});
            }
        });
    }
};

} // namespace

HANGAR_PLUGIN(Services, "ut_services", "0.1.0", nullptr, nullptr, 0)
