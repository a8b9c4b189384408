// API keys, organisations and projects: who is calling, and on behalf of which project.
#pragma once

#include "store.hpp"

#include <hangar/key_policy.hpp>

#include <optional>
#include <string>
#include <variant>

namespace hangar::host {

struct Caller {
    std::string org_id;
    std::string project_id;
    std::string project_name;
    std::string key_id;
    bool project_scoped = false;
    // Features the administrator switched off for the org or the project ({"extensions": false});
    // the project's setting wins over the org's.
    nlohmann::json entitlements = nlohmann::json::object();
    // The project's concurrent-browser cap (override ▸ org default ▸ none, never above the
    // operator's org limit); 0 = uncapped.
    long long max_concurrent_sessions = 0;
    // A statement-scoped key's policy (kernel-api-0131 §2.8): only what it names is allowed
    // (key_scope.hpp). Absent for an ordinary key and for a browser's capability token.
    std::optional<std::vector<key_policy::Statement>> policy;
    nlohmann::json to_json() const;
};

// A refusal with its HTTP status and wire code.
struct AuthFailure {
    int status;
    std::string code;
    std::string message;
};

// "hgr_****wxyz": what lists show of a key whose plaintext is gone.
std::string mask_key(const std::string &plaintext);
std::string new_key_plaintext();

class Auth {
public:
    explicit Auth(Store &store);

    // Creates the default org and project when missing. With `bootstrap_key` set, that key is
    // (re)registered as an org-wide key; otherwise one is generated on first start. Returns the
    // generated key when one was made (to print once), or an empty string.
    std::string bootstrap(const std::string &bootstrap_key, const std::string &key_file);

    // Resolves `Authorization` and `X-Kernel-Project-Id` to a caller, or says why not.
    std::variant<Caller, AuthFailure> authenticate(const std::optional<std::string> &authorization,
                                                   const std::optional<std::string> &project_header) const;

    // The caller a browser's capability token stands for: its project, no key (direct-to-browser
    // routes, direct_vm.cpp). Nullopt when the project is gone.
    std::optional<Caller> caller_for_project(const std::string &project_id) const;

    // Admin operations (the `hangar admin` command).
    std::string create_project(const std::string &name, const std::string &org_id = "");
    // Returns the plaintext key; only its hash is stored.
    std::string create_key(const std::string &name, const std::string &project_id = "");
    // Turns a feature on or off for an org ("org_...") or a project ("proj_..."); throws when the
    // id names neither.
    void set_entitlement(const std::string &org_or_project, const std::string &feature, bool enabled);
    std::string default_org() const;

    // The operator's org-wide cap on concurrent browsers (hangar.ini
    // browsers.max_browsers_per_project / HANGAR_MAX_BROWSERS_PER_PROJECT); 0 = none.
    void set_org_session_limit(long long limit) { org_session_limit_ = limit; }
    long long org_session_limit() const { return org_session_limit_; }
    // Override ▸ org default ▸ none, clamped to the org limit; 0 = uncapped.
    long long effective_session_cap(const nlohmann::json &project_cap, const nlohmann::json &org_default) const;

private:
    void complete(Caller &caller) const; // project name, cap and entitlements
    // The same from a row holding name, own, fallback, org_entitlements and project_entitlements.
    void fill_project(Caller &caller, const nlohmann::json &row) const;
    std::string insert_key(const std::string &id, const std::string &org, const std::string &project,
                           const std::string &name, const std::string &plaintext);
    Store &store_;
    long long org_session_limit_ = 0;
};

} // namespace hangar::host
