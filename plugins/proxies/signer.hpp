// The instance half of request signing: one CDP connection to this instance's Chromium, at the
// browser target, with Fetch interception on every request of every tab, worker and service
// worker. Each paused request goes on with Signature-Agent, Signature-Input and Signature added
// (HTTPS included: the headers are set before Chromium encrypts anything). The connection is
// re-made when Chromium restarts; while it is down, requests go out unsigned. WebSocket upgrade
// requests, which Fetch never pauses, are signed by Hangar's signer extension (signer_extension.hpp),
// which gets the key through this same interception.
#pragma once

#include "signing.hpp"

#include <hangar/plugin.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

namespace proxies {

struct SigningKey {
    std::string secret_key; // Ed25519, 64 bytes
    std::string keyid;
    std::string agent;
    int ttl_seconds = 3600;
    signing::AgentForm form = signing::AgentForm::string;
};

class Signer {
public:
    // `endpoint` answers Chromium's DevTools port and browser WebSocket path (throws while it
    // does not run).
    using Endpoint = std::function<std::pair<int, std::string>()>;
    // `extension`: this Chromium runs Hangar's signer extension (WebSockets), which asks for the
    // key through this interception, once per instance.
    Signer(Endpoint endpoint, bool extension);
    Signer(const Signer &) = delete;
    Signer &operator=(const Signer &) = delete;
    ~Signer();

    // Starts (or, with nullopt, stops) signing; returns once interception is on (or off), false
    // when Chromium did not take it within `timeout`.
    bool set_key(std::optional<SigningKey> key, std::chrono::milliseconds timeout);
    std::uint64_t signed_count() const;

private:
    void run(const std::stop_token &stop);
    void session(const std::stop_token &stop, std::uint64_t generation);

    Endpoint endpoint_;
    mutable std::mutex mutex_;
    std::condition_variable_any changed_;
    std::optional<SigningKey> key_;
    std::uint64_t generation_ = 0; // bumped when signing starts or stops
    std::uint64_t armed_ = 0;      // the generation whose interception is on
    std::uint64_t signed_ = 0;
    bool extension_ = false;
    bool handed_ = false; // the extension has had its key (never again: signer.cpp)
    std::jthread thread_;
};

} // namespace proxies
