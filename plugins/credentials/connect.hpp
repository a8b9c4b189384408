// A client for 1Password Connect's REST API (the server an operator runs next to Hangar):
// GET /v1/vaults, /v1/vaults/{id}/items, /v1/vaults/{vid}/items/{iid}, with the Connect token as
// a Bearer token. Every call is bounded by one timeout (connect, send and receive each). The
// server dials it for a tenant, so its address is checked first (hangar/egress.hpp) and the
// checked address is the one connected to.
#pragma once

#include <hangar/egress.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <stdexcept>
#include <string>

namespace credentials {

// `status` is the HTTP status Connect answered, or 0 when it could not be reached. The message
// never carries the token. `refused`: the server would not connect to that address at all.
class ConnectError : public std::runtime_error {
public:
    ConnectError(int status, const std::string &message, bool refused = false)
        : std::runtime_error(message), status_(status), refused_(refused) {}
    int status() const { return status_; }
    bool refused() const { return refused_; }

private:
    int status_;
    bool refused_;
};

class ConnectClient {
public:
    // `base_url`: http(s)://host[:port][/prefix] of the Connect server.
    ConnectClient(std::string base_url, std::string token, std::chrono::milliseconds timeout,
                  hangar::egress::Policy policy);

    nlohmann::json vaults() const;                                                      // [{id, name, ...}]
    nlohmann::json items(const std::string &vault_id) const;                            // item summaries
    nlohmann::json item(const std::string &vault_id, const std::string &item_id) const; // FullItem

    // Once per process, before the first HTTPS call (Poco's OpenSSL set-up).
    static void initialize();
    static void uninitialize();

private:
    nlohmann::json get(const std::string &path) const;

    std::string base_url_;
    std::string token_;
    std::chrono::milliseconds timeout_;
    hangar::egress::Policy policy_;
};

} // namespace credentials
