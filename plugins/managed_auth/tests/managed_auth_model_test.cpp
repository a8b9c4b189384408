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
};

CPPUNIT_TEST_SUITE_REGISTRATION(ManagedAuthModelTest);
