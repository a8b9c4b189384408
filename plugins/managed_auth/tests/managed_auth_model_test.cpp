// Unit tests of the managed_auth plugin's model: request rules, the domain allow-list (with the
// built-in identity providers), classification of discovered inputs, MFA/SSO labels, credential
// values (one-time codes never from storage), submit rules and can_reauth.
#include "managed_auth_model.hpp"

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace managed_auth;

namespace {

PageField field(const char *type, const char *name, const char *label, const char *ac = "", const char *im = "",
                int maxlength = -1) {
    PageField f;
    f.html_type = type;
    f.name = name;
    f.label = label;
    f.autocomplete = ac;
    f.inputmode = im;
    f.maxlength = maxlength;
    f.selector = std::string("#") + name;
    return f;
}

int status_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const hangar::Error &e) {
        return e.status();
    }
    return 200;
}

std::string code_of(const std::function<void()> &fn) {
    try {
        fn();
    } catch (const hangar::Error &e) {
        return e.code();
    }
    return "";
}

} // namespace

class ManagedAuthModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ManagedAuthModelTest);
    CPPUNIT_TEST(settings);
    CPPUNIT_TEST(domains);
    CPPUNIT_TEST(classification);
    CPPUNIT_TEST(labels);
    CPPUNIT_TEST(values);
    CPPUNIT_TEST(submits);
    CPPUNIT_TEST(reauth);
    CPPUNIT_TEST(browser_config);
    CPPUNIT_TEST(browser_precedence);
    CPPUNIT_TEST(skill_mode);
    CPPUNIT_TEST(input_modes);
    CPPUNIT_TEST(hints);
    CPPUNIT_TEST(choices);
    CPPUNIT_TEST(reauth_0131);
    CPPUNIT_TEST(destination_selection);
    CPPUNIT_TEST_SUITE_END();

public:
    void settings() {
        Settings s = parse_settings(json{{"domain", "Example.COM."}, {"profile_name", "p-1"}}, true, 300);
        CPPUNIT_ASSERT_EQUAL(std::string("example.com"), *s.domain);
        CPPUNIT_ASSERT(!s.login_url);
        CPPUNIT_ASSERT_EQUAL(400, status_of([] { parse_settings(json::object(), true, 300); }));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] {
                                 parse_settings({{"domain", "a.com/x"}, {"profile_name", "p"}}, true, 300);
                             }));
        CPPUNIT_ASSERT_EQUAL(
            400, status_of([] {
                parse_settings({{"domain", "a.com"}, {"profile_name", "p"}, {"health_check_interval", 200}}, true, 300);
            }));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] {
                                 parse_settings({{"domain", "a.com"},
                                                 {"profile_name", "p"},
                                                 {"credential", {{"name", "x"}, {"path", "y"}}}},
                                                true, 300);
                             }));
        Settings u = parse_settings({{"login_url", ""}, {"allowed_domains", {"*.Okta.com", "idp.test"}}}, false, 300);
        CPPUNIT_ASSERT_EQUAL(std::string(""), *u.login_url);
        CPPUNIT_ASSERT_EQUAL(std::string("*.okta.com"), u.allowed_domains->at(0));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] { parse_settings({{"login_url", ""}}, true, 300); }));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] { parse_settings({{"proxy", {{"nick", "x"}}}}, false, 300); }));
    }

    void domains() {
        CPPUNIT_ASSERT_EQUAL(std::string("idp.test"), url_host("https://user@IdP.test:8443/a?b"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), url_host("about:blank"));
        std::vector<std::string> allowed = {"sso.test", "*.corp.test"};
        CPPUNIT_ASSERT(host_allowed("example.com", "example.com", allowed));
        CPPUNIT_ASSERT(host_allowed("login.example.com", "example.com", allowed));
        CPPUNIT_ASSERT(!host_allowed("badexample.com", "example.com", allowed));
        CPPUNIT_ASSERT(host_allowed("sso.test", "example.com", allowed));
        CPPUNIT_ASSERT(host_allowed("a.corp.test", "example.com", allowed));
        CPPUNIT_ASSERT(!host_allowed("corp.test", "example.com", allowed));
        CPPUNIT_ASSERT(host_allowed("accounts.google.com", "example.com", {}));
        CPPUNIT_ASSERT(host_allowed("acme.okta.com", "example.com", {}));
        CPPUNIT_ASSERT(!host_allowed("okta.com", "example.com", {}));
        CPPUNIT_ASSERT(!host_allowed("evil.test", "example.com", allowed));
    }

    void classification() {
        CPPUNIT_ASSERT(classify(field("password", "pw", "Password")) == Kind::Password);
        CPPUNIT_ASSERT(classify(field("email", "e", "E")) == Kind::Identifier);
        CPPUNIT_ASSERT(classify(field("text", "identifier", "Email or username", "username")) == Kind::Identifier);
        CPPUNIT_ASSERT(classify(field("text", "otp", "Authenticator app code", "one-time-code")) == Kind::Totp);
        CPPUNIT_ASSERT(classify(field("text", "otp", "Code we sent by SMS", "one-time-code")) == Kind::Code);
        CPPUNIT_ASSERT(classify(field("text", "pin", "PIN", "", "numeric", 6)) == Kind::Totp);
        CPPUNIT_ASSERT(classify(field("text", "q", "Search")) == Kind::Text);
        PageField f = field("text", "otp", "Code we sent by SMS", "one-time-code");
        CPPUNIT_ASSERT_EQUAL(std::string("code"), discovered_type(Kind::Code, f));
        CPPUNIT_ASSERT_EQUAL(std::string("code"), field_type(Kind::Code));
        CPPUNIT_ASSERT_EQUAL(std::string("totp_code"), field_type(Kind::Totp));
        CPPUNIT_ASSERT_EQUAL(std::string("text:q"), field_id(Kind::Text, field("text", "q", "Search")));
    }

    void labels() {
        CPPUNIT_ASSERT_EQUAL(std::string("totp"), mfa_type_of_label("Use your authenticator app"));
        CPPUNIT_ASSERT_EQUAL(std::string("sms"), mfa_type_of_label("Text message to ***-0199"));
        CPPUNIT_ASSERT_EQUAL(std::string("push"), mfa_type_of_label("Approve on your phone"));
        CPPUNIT_ASSERT_EQUAL(std::string("switch"), mfa_type_of_label("Try another method"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), mfa_type_of_label("Forgot password?"));
        CPPUNIT_ASSERT_EQUAL(std::string("github"), sso_provider_of_label("Continue with GitHub"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), sso_provider_of_label("Google"));
        CPPUNIT_ASSERT_EQUAL(
            std::string("We sent a notification to your phone. Tap Approve to sign in."),
            external_action_prompt("Sign in\nWe sent a notification to your phone. Tap Approve to sign in."));
        CPPUNIT_ASSERT_EQUAL(std::string("Check your phone to continue."),
                             external_action_prompt("Almost there\nCheck your phone to continue.\nHelp"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), external_action_prompt("Welcome alice. Signed in to one. Sign out"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), external_action_prompt("Download our app for your phone."));
    }

    void values() {
        json v = {{"email", "a@b.c"}, {"password", "pw"}, {"totp_code", "123456"}, {"code", "999"}, {"q", "x"}};
        PageField f = field("text", "q", "Search");
        CPPUNIT_ASSERT_EQUAL(std::string("a@b.c"), *credential_value(v, Kind::Identifier, f));
        CPPUNIT_ASSERT_EQUAL(std::string("pw"), *credential_value(v, Kind::Password, f));
        CPPUNIT_ASSERT_EQUAL(std::string("123456"), *credential_value(v, Kind::Totp, f));
        CPPUNIT_ASSERT(!credential_value(v, Kind::Code, f));
        CPPUNIT_ASSERT_EQUAL(std::string("x"), *credential_value(v, Kind::Text, f));
    }

    void submits() {
        CPPUNIT_ASSERT(parse_submit({{"fields", {{"a", "b"}}}}).what == Submit::What::Fields);
        CPPUNIT_ASSERT(parse_submit({{"mfa_option_id", "sms"}, {"fields", nullptr}}).what == Submit::What::MfaOption);
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_submit"), code_of([] { parse_submit(json::object()); }));
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_submit"), code_of([] {
                                 parse_submit({{"fields", {{"a", "b"}}}, {"selected_choice_id", "x"}});
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_submit"), code_of([] {
                                 parse_submit({{"sso_provider", "google"}, {"sso_button_selector", "//a"}});
                             }));
        CPPUNIT_ASSERT_EQUAL(std::string("invalid_submit"), code_of([] { parse_submit({{"fields", {{"a", 1}}}}); }));
    }

    void reauth() {
        CPPUNIT_ASSERT_EQUAL(std::string("no_credential"), reauth_status(nullptr, false, nullptr).reason);
        CPPUNIT_ASSERT(reauth_status({{"name", "x"}}, false, nullptr).can);
        CPPUNIT_ASSERT_EQUAL(std::string("has_credential"), reauth_status({{"name", "x"}}, false, nullptr).reason);
        CPPUNIT_ASSERT_EQUAL(std::string("viable_plans_found"),
                             reauth_status({{"name", "x"}}, true, json::object()).reason);
        CPPUNIT_ASSERT_EQUAL(std::string("external_credential"),
                             reauth_status({{"provider", "op"}, {"auto", true}}, false, nullptr).reason);
        Reauth r = reauth_status({{"name", "x"}}, true, {{"needs_code", true}});
        CPPUNIT_ASSERT(!r.can);
        CPPUNIT_ASSERT_EQUAL(std::string("requires_sms_code"), r.reason);
    }

    // `browser` on create / update / login: its four properties, their shapes, and the rest refused.
    void browser_config() {
        Settings s = parse_settings({{"domain", "a.com"},
                                     {"profile_name", "p"},
                                     {"browser",
                                      {{"proxy", {{"mode", "direct"}}},
                                       {"region", "us-east"},
                                       {"stealth", false},
                                       {"telemetry", {{"enabled", true}}}}}},
                                    true, 300);
        CPPUNIT_ASSERT_EQUAL(json({{"mode", "direct"}}), s.browser->at("proxy"));
        CPPUNIT_ASSERT_EQUAL(false, s.browser->at("stealth").get<bool>());
        auto bad = [](const json &browser) {
            return status_of([&] { parse_settings({{"browser", browser}}, false, 300); });
        };
        CPPUNIT_ASSERT_EQUAL(400, bad(json::array()));
        CPPUNIT_ASSERT_EQUAL(400, bad({{"proxy", json::object()}}));                    // {} is invalid
        CPPUNIT_ASSERT_EQUAL(400, bad({{"proxy", {{"mode", "direct"}, {"id", "x"}}}})); // exactly one
        CPPUNIT_ASSERT_EQUAL(400, bad({{"proxy", {{"mode", "fast"}}}}));                // the enum
        CPPUNIT_ASSERT_EQUAL(400, bad({{"region", "mars-1"}}));                         // Kernel's four
        CPPUNIT_ASSERT_EQUAL(400, bad({{"stealth", "yes"}}));
        CPPUNIT_ASSERT_EQUAL(400, bad({{"telemetry", 1}}));
        CPPUNIT_ASSERT_EQUAL(400, bad({{"headless", true}})); // managed by the flow: refused, not dropped
        // null telemetry is kept (it clears); other nulls are "not given"
        Settings u = parse_settings({{"browser", {{"telemetry", nullptr}, {"region", nullptr}}}}, false, 300);
        CPPUNIT_ASSERT(u.browser->contains("telemetry") && u.browser->at("telemetry").is_null());
        CPPUNIT_ASSERT(!u.browser->contains("region"));
    }

    // The deprecated fields are browser's properties under old names; a login's browser layers
    // onto the connection's.
    void destination_selection() {
        auto by = [](const json &dest) {
            return json{{"browser", {{"telemetry", {{"export", {{"otlp", {{"destination", dest}}}}}}}}}};
        };
        CPPUNIT_ASSERT_EQUAL(std::string("id"), managed_auth::destination_selection(by({{"id", "d1"}}), "d1", "n"));
        CPPUNIT_ASSERT_EQUAL(std::string("name"),
                             managed_auth::destination_selection(by({{"name", "Live"}}), "d1", "live"));
        CPPUNIT_ASSERT_EQUAL(std::string(), managed_auth::destination_selection(by({{"name", "other"}}), "d1", "live"));
        CPPUNIT_ASSERT_EQUAL(std::string(), managed_auth::destination_selection(by({{"id", "d2"}}), "d1", "live"));
        // The pre-0.131 field is the same setting.
        json legacy = {{"browser_telemetry", {{"export", {{"otlp", {{"destination", {{"id", "d1"}}}}}}}}}};
        CPPUNIT_ASSERT_EQUAL(std::string("id"), managed_auth::destination_selection(legacy, "d1", "live"));
        CPPUNIT_ASSERT_EQUAL(std::string(), managed_auth::destination_selection(json::object(), "d1", "live"));
        CPPUNIT_ASSERT_EQUAL(
            std::string(), managed_auth::destination_selection(json{{"browser", {{"telemetry", nullptr}}}}, "d1", "x"));
    }

    void browser_precedence() {
        // browser_telemetry alone becomes browser.telemetry; both equal are one; different is 400
        Settings a = parse_settings({{"browser_telemetry", {{"enabled", true}}}}, false, 300);
        CPPUNIT_ASSERT_EQUAL(json({{"enabled", true}}), a.browser->at("telemetry"));
        CPPUNIT_ASSERT(!a.browser_telemetry);
        Settings b = parse_settings(
            {{"browser_telemetry", {{"enabled", true}}}, {"browser", {{"telemetry", {{"enabled", true}}}}}}, false,
            300);
        CPPUNIT_ASSERT_EQUAL(json({{"enabled", true}}), b.browser->at("telemetry"));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] {
                                 parse_settings({{"browser_telemetry", {{"enabled", true}}},
                                                 {"browser", {{"telemetry", {{"enabled", false}}}}}},
                                                false, 300);
                             }));
        Settings c = parse_settings({{"browser_telemetry", nullptr}}, false, 300);
        CPPUNIT_ASSERT(c.browser->at("telemetry").is_null());
        // proxies compared once resolved
        CPPUNIT_ASSERT_EQUAL(json({{"id", "p1"}}),
                             *supersede(json{{"id", "p1"}}, "proxy", std::nullopt, "browser.proxy"));
        CPPUNIT_ASSERT_EQUAL(json({{"id", "p1"}}),
                             *supersede(json{{"id", "p1"}}, "proxy", json{{"id", "p1"}}, "browser.proxy"));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] {
                                 supersede(json{{"id", "p1"}}, "proxy", json{{"mode", "direct"}}, "browser.proxy");
                             }));
        CPPUNIT_ASSERT(!supersede(std::nullopt, "proxy", std::nullopt, "browser.proxy"));

        // what Hangar stored before 0.131 reads as the config
        json old = {{"proxy_id", "p9"}, {"browser_telemetry", {{"enabled", true}}}};
        CPPUNIT_ASSERT_EQUAL(json({{"proxy", {{"id", "p9"}}}, {"telemetry", {{"enabled", true}}}}),
                             stored_browser(old));
        CPPUNIT_ASSERT_EQUAL(json({{"proxy", {{"mode", "direct"}}}}),
                             stored_browser({{"proxy_id", "p9"}, {"browser", {{"proxy", {{"mode", "direct"}}}}}}));

        // a login's override: given properties win, omitted ones are the connection's, null clears
        json conn = {{"proxy", {{"id", "p1"}}}, {"stealth", false}, {"telemetry", {{"enabled", true}}}};
        json eff = layer_browser(conn, {{"stealth", true}, {"telemetry", nullptr}});
        CPPUNIT_ASSERT_EQUAL(json({{"proxy", {{"id", "p1"}}}, {"stealth", true}}), eff);
        // what the auth browser is created with: stealth unless said otherwise
        CPPUNIT_ASSERT_EQUAL(json({{"stealth", true}}), browser_create_fields(json::object()));
        CPPUNIT_ASSERT_EQUAL(json({{"stealth", false},
                                   {"proxy", {{"id", "p1"}}},
                                   {"region", "us-east"},
                                   {"telemetry", {{"enabled", true}}}}),
                             browser_create_fields({{"stealth", false},
                                                    {"proxy", {{"id", "p1"}}},
                                                    {"region", "us-east"},
                                                    {"telemetry", {{"enabled", true}}}}));
        // the answer says stealth and region always
        CPPUNIT_ASSERT_EQUAL(json({{"stealth", true}, {"region", "eu-west"}}),
                             render_browser(json::object(), "eu-west"));
        CPPUNIT_ASSERT(known_region("ap-southeast") && !known_region("eu-central"));
    }

    void skill_mode() {
        CPPUNIT_ASSERT(parse_skill_mode(json::object()));
        CPPUNIT_ASSERT(parse_skill_mode({{"skill_mode", "enabled"}}));
        CPPUNIT_ASSERT(!parse_skill_mode({{"skill_mode", "disabled"}}));
        CPPUNIT_ASSERT_EQUAL(400, status_of([] { parse_skill_mode({{"skill_mode", "off"}}); }));
        // automatic re-auths follow the last accepted login's choice
        CPPUNIT_ASSERT(inherited_skill_mode(json::object()));
        CPPUNIT_ASSERT(inherited_skill_mode({{"skill_mode", "enabled"}}));
        CPPUNIT_ASSERT(!inherited_skill_mode({{"skill_mode", "disabled"}}));
        // a login replaying the plan is a re-auth; without reading it (disabled), a login; an
        // automatic re-auth is one either way
        CPPUNIT_ASSERT_EQUAL(std::string("REAUTH"), flow_type(false, true, true));
        CPPUNIT_ASSERT_EQUAL(std::string("LOGIN"), flow_type(false, false, true));
        CPPUNIT_ASSERT_EQUAL(std::string("LOGIN"), flow_type(false, true, false));
        CPPUNIT_ASSERT_EQUAL(std::string("REAUTH"), flow_type(true, false, true));
    }

    void input_modes() {
        CPPUNIT_ASSERT_EQUAL(std::string("numeric"), input_mode(field("text", "otp", "Code", "one-time-code")));
        CPPUNIT_ASSERT_EQUAL(std::string("numeric"), input_mode(field("text", "pin", "PIN", "", "numeric")));
        CPPUNIT_ASSERT_EQUAL(std::string("numeric"), input_mode(field("text", "amt", "A", "", "decimal")));
        CPPUNIT_ASSERT_EQUAL(std::string("numeric"), input_mode(field("number", "n", "N")));
        CPPUNIT_ASSERT_EQUAL(std::string("email"), input_mode(field("email", "e", "E")));
        CPPUNIT_ASSERT_EQUAL(std::string("email"), input_mode(field("text", "u", "U", "email")));
        CPPUNIT_ASSERT_EQUAL(std::string("tel"), input_mode(field("tel", "p", "Phone")));
        CPPUNIT_ASSERT_EQUAL(std::string("tel"), input_mode(field("text", "p", "Phone", "tel-national")));
        // inputmode wins over type: a text keyboard for an email-typed input if the page says so
        CPPUNIT_ASSERT_EQUAL(std::string("text"), input_mode(field("email", "e", "E", "", "text")));
        CPPUNIT_ASSERT_EQUAL(std::string("text"), input_mode(field("password", "pw", "Password", "current-password")));
    }

    void hints() {
        CPPUNIT_ASSERT_EQUAL(std::string("***-***-0199"), masked_destination("We sent a code to ***-***-0199."));
        CPPUNIT_ASSERT_EQUAL(std::string("(***) ***-**92"),
                             masked_destination("Enter the phone ending in (***) ***-**92"));
        CPPUNIT_ASSERT_EQUAL(std::string("+1 \u2022\u2022\u2022 \u2022\u2022\u2022 1234"),
                             masked_destination("Text +1 \u2022\u2022\u2022 \u2022\u2022\u2022 1234"));
        CPPUNIT_ASSERT_EQUAL(std::string("j***@example.com"), masked_destination("Email j***@example.com"));
        CPPUNIT_ASSERT_EQUAL(std::string("a\u2022\u2022\u2022e@g\u2022\u2022\u2022.com"),
                             masked_destination("to a\u2022\u2022\u2022e@g\u2022\u2022\u2022.com now"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), masked_destination("alexx@example.com"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), masked_destination("Use your authenticator app"));

        // aria-describedby first, then a hint element, then (codes) the page's masked destination line
        CPPUNIT_ASSERT_EQUAL(std::string("Six digits"), field_hint(Kind::Code, " Six\n digits ", "other", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("other"), field_hint(Kind::Code, "", "other", ""));
        CPPUNIT_ASSERT_EQUAL(std::string("We texted ***-***-1234."),
                             field_hint(Kind::Code, "", "", "Verify\nWe texted ***-***-1234.\nResend"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), field_hint(Kind::Password, "", "", "We texted ***-***-1234."));
        CPPUNIT_ASSERT_EQUAL(std::size_t(200), field_hint(Kind::Text, std::string(500, 'a'), "", "").size());
        // the hint tells a sent code from an authenticator code
        PageField f = field("text", "otp", "Verification code", "one-time-code");
        CPPUNIT_ASSERT(classify(f) == Kind::Totp);
        f.described = "We texted a code to ***-***-1234";
        CPPUNIT_ASSERT(classify(f) == Kind::Code);
    }

    void choices() {
        ChoiceDetails sms = choice_details("Text message to\n ***-***-0199", "How do you want to get your code?");
        CPPUNIT_ASSERT_EQUAL(std::string("sms"), sms.mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string("***-***-0199"), sms.masked_destination);
        CPPUNIT_ASSERT_EQUAL(std::string("Text message to ***-***-0199"), sms.display_text);
        CPPUNIT_ASSERT_EQUAL(std::string("How do you want to get your code?"), sms.context);
        ChoiceDetails app = choice_details("Use your authenticator app", "Use your authenticator app");
        CPPUNIT_ASSERT_EQUAL(std::string("totp"), app.mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string(""), app.masked_destination);
        CPPUNIT_ASSERT_EQUAL(std::string(""), app.context); // its own words are no context
        CPPUNIT_ASSERT_EQUAL(std::string("email"), choice_details("Email a code to j***@example.com", "").mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string("call"), choice_details("Call me at ***-**12", "").mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string("push"), choice_details("Approve a notification on your phone", "").mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string("switch"), choice_details("Try another way", "").mfa_type);
        CPPUNIT_ASSERT_EQUAL(std::string(""), choice_details("Work account", "Choose an account").mfa_type);
    }

    // 0.131's can_reauth_reason values, from what the last login's plan recorded.
    void reauth_0131() {
        json cred = {{"name", "x"}};
        Reauth totp = reauth_status(cred, true, {{"totp", "secret"}});
        CPPUNIT_ASSERT(totp.can);
        CPPUNIT_ASSERT_EQUAL(std::string("totp_reauth_allowed"), totp.reason);
        Reauth typed = reauth_status(cred, true, {{"totp", "user"}});
        CPPUNIT_ASSERT(!typed.can);
        CPPUNIT_ASSERT_EQUAL(std::string("requires_totp_without_secret"), typed.reason);
        Reauth chose = reauth_status(cred, true, {{"needs_customer_input", true}});
        CPPUNIT_ASSERT(!chose.can);
        CPPUNIT_ASSERT_EQUAL(std::string("requires_customer_input"), chose.reason);
        CPPUNIT_ASSERT_EQUAL(std::string("requires_email_code"),
                             reauth_status(cred, true, {{"needs_code", true}, {"code_channel", "email"}}).reason);
        CPPUNIT_ASSERT_EQUAL(std::string("requires_sms_code"),
                             reauth_status(cred, true, {{"needs_code", true}, {"code_channel", "sms"}}).reason);
        // a code sent to the user outweighs a TOTP from the secret
        CPPUNIT_ASSERT_EQUAL(std::string("requires_sms_code"),
                             reauth_status(cred, true, {{"needs_code", true}, {"totp", "secret"}}).reason);
        // an org provider's credential stays external_credential
        CPPUNIT_ASSERT_EQUAL(std::string("external_credential"),
                             reauth_status({{"provider", "op"}, {"path", "a/b"}}, true, {{"totp", "secret"}}).reason);
        // skill_mode disabled reads no plan: the credential alone decides
        CPPUNIT_ASSERT_EQUAL(std::string("has_credential"), reauth_status(cred, false, nullptr).reason);
        // never said: Hangar makes no optimistic TOTP attempt
        for (const json &plan : {json::object(), json{{"totp", "user"}}, json{{"totp", "secret"}}})
            CPPUNIT_ASSERT(reauth_status(cred, true, plan).reason != "optimistic_totp_attempt");

        CPPUNIT_ASSERT_EQUAL(std::string("no_auth_check_url"), health_check_unavailable_reason(true, false));
        CPPUNIT_ASSERT_EQUAL(std::string(""), health_check_unavailable_reason(true, true));
        CPPUNIT_ASSERT_EQUAL(std::string(""), health_check_unavailable_reason(false, false));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ManagedAuthModelTest);
