// Unit tests of the vaults plugin's model: item spec validation, PATCH application in the
// contract's order with its clearing rules, the operations an item offers, JSON pointer binding,
// the fill result object, provider configs, and the vault key with JWE ECDH-ES + A256GCM.
#include "vaults_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace vaults;

namespace {

// The field a 400 names (the first detail's), or "" when `fn` did not throw.
template <typename Fn> std::string rejected(Fn fn, int status = 400) {
    try {
        fn();
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(status, e.status());
        if (e.details().empty()) return e.code();
        const std::string &m = e.details().front().message;
        return m.substr(0, m.find(':'));
    }
    return "";
}

std::string passkey_json() {
    VaultKey k = generate_key();
    json p = {{"credentialId", base64url_encode("cred-1")},
              {"userHandle", base64url_encode("user-1")},
              {"key", base64url_encode(k.private_pkcs8)},
              {"rpId", "localhost"},
              {"username", "ada"}};
    return p.dump();
}

std::vector<FieldDef> login_defs() {
    return {{"username", "text", std::nullopt, true, false},
            {"password", "password", std::nullopt, true, true},
            {"otp", "totp", std::nullopt, false, true}};
}

} // namespace

class VaultsModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(VaultsModelTest);
    CPPUNIT_TEST(vaultNames);
    CPPUNIT_TEST(kernelSpec);
    CPPUNIT_TEST(kernelSpecRejects);
    CPPUNIT_TEST(values);
    CPPUNIT_TEST(patchOrderAndClearing);
    CPPUNIT_TEST(patchRejects);
    CPPUNIT_TEST(otherSpecs);
    CPPUNIT_TEST(managedAuthFields);
    CPPUNIT_TEST(operations);
    CPPUNIT_TEST(collectionForms);
    CPPUNIT_TEST(passkeyForms);
    CPPUNIT_TEST(pointers);
    CPPUNIT_TEST(fillRequestsAndResults);
    CPPUNIT_TEST(webmcpRequests);
    CPPUNIT_TEST(providerConfigs);
    CPPUNIT_TEST(jwe);
    CPPUNIT_TEST_SUITE_END();

public:
    void vaultNames() {
        CPPUNIT_ASSERT_EQUAL(std::string("shop-1"), parse_vault_name(json{{"name", "shop-1"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("name"), rejected([] { parse_vault_name(json::object()); }));
        CPPUNIT_ASSERT_EQUAL(std::string("name"), rejected([] { parse_vault_name(json{{"name", "a b"}}); }));
        CPPUNIT_ASSERT_EQUAL(std::string("extra"), rejected([] {
                                 parse_vault_name(json{{"name", "a"}, {"extra", 1}});
                             }));
    }

    void kernelSpec() {
        auto s = parse_kernel_credential(json::parse(R"({"provider":"kernel","description":"Log in",
            "fields":[{"name":"username","type":"email","sensitive":false,"required":true,"value":"a@b.c"},
                      {"name":"password","type":"password","required":true,"label":"Password"},
                      {"name":"otp","type":"totp","encrypted_value":"x.y.z"}]})"));
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, s.fields.size());
        CPPUNIT_ASSERT(!s.fields[0].sensitive);
        CPPUNIT_ASSERT(s.fields[1].sensitive); // the default
        CPPUNIT_ASSERT_EQUAL(std::string("Password"), *s.fields[1].label);
        CPPUNIT_ASSERT_EQUAL(std::string("a@b.c"), *s.values.at("username").value);
        CPPUNIT_ASSERT(!s.values.count("password"));
        CPPUNIT_ASSERT_EQUAL(std::string("x.y.z"), *s.values.at("otp").encrypted_value);
        CPPUNIT_ASSERT_EQUAL(std::string("Log in"), *s.description);
        // Round trip of the definitions as stored.
        CPPUNIT_ASSERT(field_defs_from_json(field_defs_json(s.fields)) == s.fields);
        CPPUNIT_ASSERT_EQUAL(std::string("pending_collection"), credential_status(s.fields, {"username"}));
        CPPUNIT_ASSERT_EQUAL(std::string("ready"), credential_status(s.fields, {"username", "password"}));
    }

    void kernelSpecRejects() {
        auto spec = [](const char *fields) {
            return [fields] {
                parse_kernel_credential(json::parse(std::string(R"({"provider":"kernel","fields":)") + fields + "}"));
            };
        };
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields"), rejected(spec("[]")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[0].type"), rejected(spec(R"([{"name":"a","type":"pin"}])")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[0].sensitive"),
                             rejected(spec(R"([{"name":"a","type":"password","sensitive":false}])")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[1].name"),
                             rejected(spec(R"([{"name":"a","type":"text"},{"name":"a","type":"text"}])")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[0].value"),
                             rejected(spec(R"([{"name":"a","type":"text","value":""}])")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[0].value"),
                             rejected(spec(R"([{"name":"a","type":"text","value":"v","encrypted_value":"e"}])")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields[0].label"),
                             rejected(spec(R"([{"name":"a","type":"text","label":"line\nbreak"}])")));
        std::string many = "[";
        for (int i = 0; i < 33; ++i)
            many += std::string(i ? "," : "") + R"({"name":"f)" + std::to_string(i) + R"(","type":"text"})";
        many += "]";
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields"), rejected(spec(many.c_str())));
    }

    void values() {
        FieldDef email{"e", "email", std::nullopt, false, false}, text{"t", "text", std::nullopt, false, false},
            totp{"o", "totp", std::nullopt, false, true}, pk{"p", "passkey", std::nullopt, false, true};
        CPPUNIT_ASSERT_EQUAL(std::string("fields.e"), rejected([&] { check_value(email, "not-an-address"); }));
        check_value(email, "ada@example.com");
        // Card data never goes into a credential; a long number that fails Luhn is fine.
        CPPUNIT_ASSERT(looks_like_card_number("4242 4242 4242 4242"));
        CPPUNIT_ASSERT(!looks_like_card_number("4242 4242 4242 4241"));
        CPPUNIT_ASSERT_EQUAL(std::string("fields.t"), rejected([&] { check_value(text, "4242-4242-4242-4242"); }));
        CPPUNIT_ASSERT_EQUAL(std::string("fields.o"),
                             rejected([&] { check_value(totp, "otpauth://totp/x?secret=A"); }));
        check_value(pk, passkey_json());
        CPPUNIT_ASSERT_EQUAL(std::string("fields.p"), rejected([&] { check_value(pk, "{}"); }));
        json bad = json::parse(passkey_json());
        bad["rpId"] = "Example.COM";
        CPPUNIT_ASSERT_EQUAL(std::string("fields.p"), rejected([&] { check_value(pk, bad.dump()); }));
        bad = json::parse(passkey_json());
        bad["key"] = base64url_encode("not a key");
        CPPUNIT_ASSERT_EQUAL(std::string("fields.p"), rejected([&] { check_value(pk, bad.dump()); }));
        bad = json::parse(passkey_json());
        bad["userHandle"] = base64url_encode(std::string(65, 'u'));
        CPPUNIT_ASSERT_EQUAL(std::string("fields.p"), rejected([&] { check_value(pk, bad.dump()); }));
    }

    void patchOrderAndClearing() {
        auto defs = login_defs();
        // remove_fields, then add_fields, then values: a field removed and added again in one
        // update is redefined, and a value for it lands on the new definition.
        auto u = parse_credential_update(json::parse(R"({"remove_fields":["username"],
            "add_fields":[{"name":"username","type":"email","sensitive":false,"required":true}],
            "fields":{"username":{"value":"ada@example.com"},"password":{"value":null}}})"));
        auto a = apply_update(defs, {"username", "password"}, u);
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, a.defs.size());
        CPPUNIT_ASSERT_EQUAL(std::string("email"), a.defs.back().type);
        CPPUNIT_ASSERT_EQUAL(std::string("ada@example.com"), *a.set.at("username"));
        CPPUNIT_ASSERT(!a.set.at("password")); // null clears
        CPPUNIT_ASSERT_EQUAL(std::string("username"), a.dropped.front());
        // Clearing a required password reopens collection.
        CPPUNIT_ASSERT_EQUAL(std::string("pending_collection"), credential_status(a.defs, {"username"}));
        // "" clears too; omitted values are kept (not in `set`).
        auto b = apply_update(defs, {"username", "password", "otp"},
                              parse_credential_update(json::parse(R"({"fields":{"otp":{"value":""}}})")));
        CPPUNIT_ASSERT(!b.set.at("otp"));
        CPPUNIT_ASSERT(!b.set.count("username"));
        // description "" clears.
        CPPUNIT_ASSERT_EQUAL(std::string(), *parse_credential_update(json::parse(R"({"description":""})")).description);
    }

    void patchRejects() {
        auto defs = login_defs();
        auto apply = [&](const char *spec) {
            return [spec, &defs] { apply_update(defs, {}, parse_credential_update(json::parse(spec))); };
        };
        CPPUNIT_ASSERT_EQUAL(std::string("spec.remove_fields"), rejected(apply(R"({"remove_fields":["nope"]})")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.remove_fields"),
                             rejected(apply(R"({"remove_fields":["username","password","otp"]})")));
        // A definition is not edited in place.
        CPPUNIT_ASSERT_EQUAL(std::string("spec.add_fields"),
                             rejected(apply(R"({"add_fields":[{"name":"username","type":"email"}]})")));
        // add_fields carry no values.
        CPPUNIT_ASSERT_EQUAL(std::string("spec.add_fields[0].value"),
                             rejected(apply(R"({"add_fields":[{"name":"x","type":"text","value":"v"}]})")));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields.nope"), rejected(apply(R"({"fields":{"nope":{"value":"v"}}})")));
        // A required totp or passkey cannot be cleared.
        std::vector<FieldDef> with_totp = {{"otp", "totp", std::nullopt, true, true}};
        CPPUNIT_ASSERT_EQUAL(std::string("spec.fields.otp"), rejected([&] {
                                 apply_update(
                                     with_totp, {"otp"},
                                     parse_credential_update(json::parse(R"({"fields":{"otp":{"value":null}}})")));
                             }));
    }

    void managedAuthFields() {
        // Names and types of the saved credential's values, as fill uses them; the seed never.
        CPPUNIT_ASSERT_EQUAL(
            json::parse(R"({"username":{"type":"text"},"Email":{"type":"email"},
            "newPassword":{"type":"password"},"totp":{"type":"totp"}})"),
            managed_auth_fields(json::parse(R"(["username","Email","newPassword","totp_secret"])"), true));
        CPPUNIT_ASSERT_EQUAL(json::object(), managed_auth_fields(json::array(), false));
        CPPUNIT_ASSERT_EQUAL(json::object(), managed_auth_fields(json(nullptr), false));
        CPPUNIT_ASSERT(!managed_auth_usable("totp_secret"));
        CPPUNIT_ASSERT(managed_auth_usable("password"));
    }

    void otherSpecs() {
        auto ma = parse_other_spec("credential", json::parse(R"({"provider":"managed_auth","connection_id":"c1"})"));
        CPPUNIT_ASSERT_EQUAL(std::string("c1"), ma.shown.at("connection_id").get<std::string>());
        // 1Password: the token is a secret, never shown; website is the single-login shorthand.
        auto op = parse_other_spec("credential", json::parse(R"({"provider":"1password","access_token":"tok",
            "website":"https://example.com"})"));
        CPPUNIT_ASSERT(!op.shown.contains("access_token"));
        CPPUNIT_ASSERT_EQUAL(std::string("tok"), op.secrets.at("access_token").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(2, op.shown.at("requests").at("version").get<int>());
        CPPUNIT_ASSERT_EQUAL(
            std::string("spec.account"),
            rejected([] { parse_other_spec("credential", json::parse(R"({"provider":"1password","website":"w"})")); }));
        // Wallets: a customer-managed Link client names its config and imports tokens.
        auto link = parse_other_spec("wallet", json::parse(R"({"provider":"link","authorization":{"method":"oauth",
            "client":{"type":"customer_managed","provider_config":{"name":"ours"}},
            "tokens":{"access_token":"a","refresh_token":"r"}}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("ours"), link.provider_config->at("name").get<std::string>());
        CPPUNIT_ASSERT(link.shown.dump().find("refresh_token") == std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::string("spec.authorization.tokens"), rejected([] {
                                 parse_other_spec("wallet", json::parse(R"({"provider":"link","authorization":{
                                     "method":"oauth","client":{"type":"kernel_managed"},"tokens":{}}})"));
                             }));
        // Cards: Kernel cards' amount cap, currencies and merchant category code.
        const char *kernel_card = R"({"provider":"kernel","wallet":"w","amount":1000,"currency":"usd",
            "merchant_name":"Shop","merchant_url":"https://shop.example"})";
        parse_other_spec("card", json::parse(kernel_card));
        json over = json::parse(kernel_card);
        over["amount"] = 1000001;
        CPPUNIT_ASSERT_EQUAL(std::string("spec.amount"), rejected([&] { parse_other_spec("card", over); }));
        json cur = json::parse(kernel_card);
        cur["currency"] = "xyz";
        CPPUNIT_ASSERT_EQUAL(std::string("spec.currency"), rejected([&] { parse_other_spec("card", cur); }));
        json mcc = json::parse(kernel_card);
        mcc["merchant_category_code"] = "0000";
        CPPUNIT_ASSERT_EQUAL(std::string("spec.merchant_category_code"),
                             rejected([&] { parse_other_spec("card", mcc); }));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.amount"), rejected([] {
                                 parse_other_spec("card", json::parse(R"({"provider":"link","wallet":"w",
                                     "payment_method_id":"pm","amount":50001,"currency":"usd","merchant_name":"m",
                                     "merchant_url":"https://m","context":"c"})"));
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.authorization"), rejected([] {
                                 parse_other_spec("credential_account",
                                                  json::parse(R"({"provider":"1password","authorization":{}})"));
                             }));
        // Members of the wrong JSON type are 400s, never type errors.
        CPPUNIT_ASSERT_EQUAL(std::string("spec.requests"), rejected([] {
                                 parse_other_spec("credential", json::parse(R"({"provider":"1password","account":"a",
                                     "requests":{"version":"2","entries":[]}})"));
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.requests.entries[0]"), rejected([] {
                                 parse_other_spec("credential", json::parse(R"({"provider":"1password","account":"a",
                                     "requests":{"version":2,"entries":[{"type":1}]}})"));
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("spec.authorization"), rejected([] {
                                 parse_other_spec("wallet",
                                                  json::parse(R"({"provider":"link","authorization":{"method":1}})"));
                             }));
    }

    void operations() {
        auto defs = login_defs();
        auto types = [](const std::vector<Operation> &ops) {
            std::string out;
            for (const auto &o : ops)
                out += o.type + " ";
            return out;
        };
        CPPUNIT_ASSERT_EQUAL(
            std::string("fill webmcp_invoke collect "),
            types(available_operations("credential", "kernel", "ready", defs, {"username", "password"})));
        CPPUNIT_ASSERT_EQUAL(
            std::string("collect "),
            types(available_operations("credential", "kernel", "pending_collection", defs, {"username"})));
        CPPUNIT_ASSERT_EQUAL(std::string("fill "),
                             types(available_operations("credential", "managed_auth", "ready", {}, {})));
        CPPUNIT_ASSERT_EQUAL(std::string(),
                             types(available_operations("credential", "managed_auth", "unavailable", {}, {})));
        CPPUNIT_ASSERT_EQUAL(std::string(), types(available_operations("wallet", "link", "degraded", {}, {})));
        // What Hangar cannot perform is named, never faked.
        CPPUNIT_ASSERT(unsupported_operation("authorize", "card", "link")->find("no payment is made") !=
                       std::string::npos);
        CPPUNIT_ASSERT(unsupported_operation("1pw_fill", "credential", "1password"));
        CPPUNIT_ASSERT(!unsupported_operation("collect", "credential", "kernel"));
        CPPUNIT_ASSERT(unsupported_operation("collect", "credential", "1password"));
        CPPUNIT_ASSERT(unsupported_operation("1pw_fill", "credential", "kernel"));
        CPPUNIT_ASSERT(!unsupported_operation("fill", "credential", "kernel"));
        CPPUNIT_ASSERT(!unsupported_operation("webmcp_invoke", "credential", "kernel"));
        CPPUNIT_ASSERT(!unsupported_operation("dance", "credential", "kernel"));
        // Passkey fields: arm what is stored, register into what is empty, disarm either way.
        std::vector<FieldDef> keys = {{"stored", "passkey", std::nullopt, false, true},
                                      {"empty", "passkey", std::nullopt, true, true}};
        CPPUNIT_ASSERT_EQUAL(
            std::string("arm_passkey register_passkey disarm_passkey "),
            types(available_operations("credential", "kernel", "pending_collection", keys, {"stored"})));
        CPPUNIT_ASSERT_EQUAL(std::string("arm_passkey disarm_passkey "),
                             types(available_operations("credential", "kernel", "ready", keys, {"stored", "empty"})));
        CPPUNIT_ASSERT(!unsupported_operation("arm_passkey", "credential", "kernel"));
        CPPUNIT_ASSERT(unsupported_operation("arm_passkey", "credential", "managed_auth"));
    }

    void collectionForms() {
        auto defs = login_defs();
        defs[0].sensitive = false;
        json values = {{"username", "ada"}};
        // The password is required and empty: a form without it is refused, naming it.
        CPPUNIT_ASSERT_EQUAL(std::string("fields.password"), rejected([&] {
                                 form_changes(defs, values, {{"f.username", "ada"}});
                             }));
        // The unchanged non-sensitive value is not a change; the TOTP field is never taken.
        auto c = form_changes(defs, values, {{"f.username", "ada"}, {"f.password", "pw"}, {"f.otp", "JBSWY3DP"}});
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, c.size());
        CPPUNIT_ASSERT_EQUAL(std::string("pw"), c.at("password"));
        c = form_changes(defs, {{"username", "ada"}, {"password", "old"}},
                         {{"f.username", "grace"}, {"f.password", ""}});
        CPPUNIT_ASSERT_EQUAL(std::string("grace"), c.at("username"));
        CPPUNIT_ASSERT(!c.count("password")); // empty keeps the stored secret
        CPPUNIT_ASSERT(form_field(defs[1]) && !form_field(defs[2]));
    }

    void passkeyForms() {
        std::string cxf = passkey_json();
        json cdp = passkey_to_cdp(cxf);
        CPPUNIT_ASSERT_EQUAL(std::string("localhost"), cdp["rpId"].get<std::string>());
        CPPUNIT_ASSERT(cdp["isResidentCredential"].get<bool>());
        CPPUNIT_ASSERT(cdp["privateKey"].get<std::string>().find_first_of("-_") == std::string::npos);
        CPPUNIT_ASSERT_EQUAL(0u, static_cast<unsigned>(cdp["credentialId"].get<std::string>().size() % 4));
        // And back: the same CXF fields (the username as the authenticator reports it).
        json back = json::parse(passkey_from_cdp(cdp));
        json orig = json::parse(cxf);
        for (const char *k : {"credentialId", "userHandle", "key", "rpId"})
            CPPUNIT_ASSERT_EQUAL(orig[k].get<std::string>(), back[k].get<std::string>());
        FieldDef pk{"p", "passkey", std::nullopt, false, true};
        check_value(pk, back.dump());
        CPPUNIT_ASSERT_EQUAL(std::string("browser_id"), rejected([] { parse_passkey(json::object()); }));
        CPPUNIT_ASSERT_EQUAL(std::string("p"), *parse_passkey(json{{"browser_id", "b"}, {"field", "p"}}).field);
    }

    void pointers() {
        CPPUNIT_ASSERT((*parse_pointer("/a~1b/c~0d/0") == std::vector<std::string>{"a/b", "c~d", "0"}));
        CPPUNIT_ASSERT(!parse_pointer("a/b"));
        CPPUNIT_ASSERT(!parse_pointer(""));
        CPPUNIT_ASSERT(!parse_pointer("/a~2"));
        json doc = json::parse(R"({"login":{"user":null,"pass":null},"list":[null,1],"set":"x"})");
        bind_pointer(doc, "/login/user", "ada", "b");
        bind_pointer(doc, "/list/0", "v", "b");
        CPPUNIT_ASSERT_EQUAL(std::string("ada"), doc["login"]["user"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("v"), doc["list"][0].get<std::string>());
        // Only an existing null slot takes a value.
        CPPUNIT_ASSERT_EQUAL(std::string("b"), rejected([&] { bind_pointer(doc, "/set", "v", "b"); }));
        CPPUNIT_ASSERT_EQUAL(std::string("b"), rejected([&] { bind_pointer(doc, "/login/user", "v", "b"); }));
        CPPUNIT_ASSERT_EQUAL(std::string("b"), rejected([&] { bind_pointer(doc, "/missing", "v", "b"); }));
        CPPUNIT_ASSERT_EQUAL(std::string("b"), rejected([&] { bind_pointer(doc, "/list/5", "v", "b"); }));
        CPPUNIT_ASSERT_EQUAL(std::string("b"), rejected([&] { bind_pointer(doc, "/list/01", "v", "b"); }));
        // The error never carries the value.
        try {
            bind_pointer(doc, "/set", "s3cr3t-value", "b");
        } catch (const hangar::Error &e) {
            CPPUNIT_ASSERT(std::string(e.what()).find("s3cr3t") == std::string::npos);
        }
    }

    void fillRequestsAndResults() {
        auto f = parse_fill(json::parse(R"({"type":"fill","browser_id":"b1","page_url":"http://x/",
            "fields":[{"field":"username","selector":"#u"}]})"));
        CPPUNIT_ASSERT_EQUAL(std::string("b1"), f.browser_id);
        CPPUNIT_ASSERT_EQUAL(std::string("#u"), f.fields->front().selector);
        CPPUNIT_ASSERT(!parse_fill(json::parse(R"({"browser_id":"b1"})")).fields);
        CPPUNIT_ASSERT_EQUAL(std::string("browser_id"), rejected([] { parse_fill(json::object()); }));
        CPPUNIT_ASSERT_EQUAL(std::string("fields[0].selector"), rejected([] {
                                 parse_fill(json::parse(R"({"browser_id":"b","fields":[{"field":"u"}]})"));
                             }));
        json done = fill_result(2, {"filled", "filled"});
        CPPUNIT_ASSERT_EQUAL(std::string("completed"), done["status"].get<std::string>());
        json failed = fill_result(3, {"filled", "element_not_found"});
        CPPUNIT_ASSERT_EQUAL(std::string("failed"), failed["status"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("element_not_found"), failed["fields"][1]["error_code"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("not_attempted"), failed["fields"][2]["status"].get<std::string>());
        json unknown = fill_result(2, {"unknown"});
        CPPUNIT_ASSERT_EQUAL(std::string("unknown"), unknown["status"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("not_attempted"), unknown["fields"][1]["status"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(1, unknown["fields"][1]["index"].get<int>());
    }

    void webmcpRequests() {
        auto w = parse_webmcp(json::parse(R"({"type":"webmcp_invoke","browser_id":"b","page_url":"http://x/",
            "tool_ref":"t","input":{"u":null},"bindings":[{"field":"username","input_path":"/u"}],"timeout_sec":5})"));
        CPPUNIT_ASSERT_EQUAL(std::string("/u"), w.bindings.front().input_path);
        CPPUNIT_ASSERT_EQUAL(5, *w.timeout_sec);
        CPPUNIT_ASSERT_EQUAL(std::string("bindings[0].input_path"), rejected([] {
                                 parse_webmcp(json::parse(R"({"browser_id":"b","page_url":"p","tool_ref":"t",
                                     "input":{},"bindings":[{"field":"u","input_path":"u"}]})"));
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("input"), rejected([] {
                                 parse_webmcp(json::parse(R"({"browser_id":"b","page_url":"p","tool_ref":"t",
                                     "input":[],"bindings":[{"field":"u","input_path":"/u"}]})"));
                             }));
    }

    void providerConfigs() {
        auto c = parse_provider_config_create(json::parse(R"({"provider":"link","name":"ours",
            "credentials":{"client_id":"id","client_secret":"s","publishable_key":"pk"}})"));
        CPPUNIT_ASSERT_EQUAL(std::string("pk"), *c.publishable_key);
        CPPUNIT_ASSERT_EQUAL(std::string("credentials.publishable_key"), rejected([] {
                                 parse_provider_config_create(json::parse(R"({"provider":"agentcard","name":"a",
                                     "credentials":{"client_id":"id","client_secret":"s","publishable_key":"pk"}})"));
                             }));
        CPPUNIT_ASSERT_EQUAL(
            std::string("provider"), rejected([] {
                parse_provider_config_create(json::parse(
                    R"({"provider":"stripe","name":"a","credentials":{"client_id":"i","client_secret":"s"}})"));
            }));
        CPPUNIT_ASSERT_EQUAL(std::string("credentials.client_id"), rejected([] {
                                 parse_provider_config_update(json::parse(R"({"credentials":{"client_id":"new"}})"),
                                                              "link");
                             }));
    }

    void jwe() {
        VaultKey k = generate_key();
        CPPUNIT_ASSERT_EQUAL(std::size_t{43}, k.x.size()); // 32 bytes, unpadded base64url
        VaultKey again = key_from_pkcs8(k.private_pkcs8);
        CPPUNIT_ASSERT_EQUAL(k.x, again.x);
        CPPUNIT_ASSERT_EQUAL(k.y, again.y);
        std::string compact = jwe_encrypt("hunter2 ✓", k, "vk_1");
        CPPUNIT_ASSERT_EQUAL(std::string("vk_1"), *jwe_kid(compact));
        CPPUNIT_ASSERT_EQUAL(std::string("hunter2 ✓"), jwe_decrypt(compact, k.private_pkcs8));
        // Another vault's key does not open it; a flipped byte does not verify.
        VaultKey other = generate_key();
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_request"),
                             rejected([&] { jwe_decrypt(compact, other.private_pkcs8); }));
        std::string tampered = compact;
        tampered[tampered.size() - 30] = tampered[tampered.size() - 30] == 'A' ? 'B' : 'A';
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_request"), rejected([&] { jwe_decrypt(tampered, k.private_pkcs8); }));
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_request"), rejected([&] { jwe_decrypt("a.b.c", k.private_pkcs8); }));
        std::string typed = base64url_encode(R"({"alg":1,"enc":2,"epk":{"kty":3}})") + "..aaaa.aaaa.aaaa";
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_request"), rejected([&] { jwe_decrypt(typed, k.private_pkcs8); }));
        CPPUNIT_ASSERT(!jwe_kid("not a jwe"));
        CPPUNIT_ASSERT_EQUAL(std::string("aGk"), base64url_encode("hi"));
        CPPUNIT_ASSERT_EQUAL(std::string("hi"), *base64url_decode("aGk"));
        CPPUNIT_ASSERT(!base64url_decode("a+b/"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(VaultsModelTest);
