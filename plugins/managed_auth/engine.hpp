// The deterministic login flow engine: discovery over CDP, fill and submit from stored or
// submitted values, multi-step forms, TOTP, website errors, success detection. It sees the page
// through Page (operations the auth browser's agent performs) and the flow through FlowHost
// (publishing state, waiting for input, credential values), so it owns no thread or store.
#pragma once

#include "managed_auth_model.hpp"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace managed_auth {

// The auth browser's page.
class Page {
public:
    virtual ~Page() = default;
    virtual void navigate(const std::string &url) = 0;
    virtual void reload() = 0;
    // Runs an expression in the page; its JSON value (awaited when a promise).
    virtual json eval(const std::string &expression) = 0;
    // Focuses the input, clears it and types `value` as keyboard input would.
    virtual void fill(const std::string &selector, const std::string &value) = 0;
};

// Thrown through the engine when the flow was canceled, superseded or expired meanwhile.
class FlowEnded : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class FlowHost {
public:
    virtual ~FlowHost() = default;
    // Merges `patch` into the flow's public state (flow_step, discovered_fields, ...).
    virtual void publish(const json &patch) = 0;
    // Publishes `awaiting` (flow_step AWAITING_INPUT plus what is asked) and blocks until a submit
    // arrives; throws FlowEnded when the flow ends first.
    virtual Submit await_input(const json &awaiting) = 0;
    // Throws FlowEnded when the flow was ended from outside.
    virtual void check() = 0;
    // The stored credential's values (with a current totp_code when it has a TOTP secret);
    // `fresh` asks for a code of the next 30 s window. Empty when the connection has none.
    virtual json credential_values(bool fresh) = 0;
    // The SSO provider the stored credential names (its button is clicked first, then its values
    // go into the identity provider's page); empty when none.
    virtual std::string credential_sso_provider() { return {}; }
};

struct Outcome {
    bool success = false;
    std::string error_code, error_message, website_error;
    std::string post_login_url;
    json plan = json::object();    // learned steps: selectors and kinds, never values
    json learned = json::object(); // values the user typed that may be saved (no codes)
};

struct EngineSettings {
    std::string domain;
    std::vector<std::string> allowed_domains;
    std::string start_url;
    int settle_timeout_ms = 8000;
    int external_action_timeout_ms = 600000; // as long as a flow waits for input
    int max_steps = 12;
};

Outcome run_login(Page &page, FlowHost &host, const EngineSettings &settings);

// The discovery script's answer reduced to what a health check needs: whether the page shows a
// login form (identifier, password or code inputs).
bool shows_login_form(const json &discovery);
extern const char *const kDiscoverScript;

} // namespace managed_auth
