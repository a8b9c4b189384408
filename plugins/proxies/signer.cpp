#include "signer.hpp"

#include "proxies_model.hpp"
#include "signing.hpp"

#include <hangar/cdp.hpp>

#include <sodium.h>

#include <chrono>

namespace proxies {

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string nonce() {
    std::string raw(64, '\0');
    randombytes_buf(raw.data(), raw.size());
    return signing::base64(raw);
}

// The paused request's headers with ours instead of any of the same name a page set.
hangar::json signed_headers(const hangar::json &request, const SigningKey &key) {
    hangar::json out = hangar::json::array();
    if (auto it = request.find("headers"); it != request.end() && it->is_object())
        for (const auto &[name, value] : it->items()) {
            auto n = lower(name);
            if (n == "signature" || n == "signature-input" || n == "signature-agent") continue;
            out.push_back({{"name", name}, {"value", value.is_string() ? value.get<std::string>() : value.dump()}});
        }
    std::string authority = signing::authority(request.value("url", ""));
    if (authority.empty()) return out;
    signing::Params p;
    p.form = key.form;
    p.keyid = key.keyid;
    p.agent = key.agent;
    p.created = unix_seconds();
    p.expires = p.created + key.ttl_seconds;
    p.nonce = nonce();
    auto h = signing::sign(key.secret_key, authority, p);
    out.push_back({{"name", "Signature-Agent"}, {"value", h.signature_agent}});
    out.push_back({{"name", "Signature-Input"}, {"value", h.signature_input}});
    out.push_back({{"name", "Signature"}, {"value", h.signature}});
    return out;
}

} // namespace

Signer::Signer(Endpoint endpoint) : endpoint_(std::move(endpoint)) {
    thread_ = std::jthread([this](const std::stop_token &stop) { run(stop); });
}

Signer::~Signer() {
    thread_.request_stop();
    changed_.notify_all();
}

bool Signer::set_key(std::optional<SigningKey> key, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    bool was = key_.has_value();
    key_ = std::move(key);
    // A new key on a running interception is only a swap; starting or stopping re-makes it.
    if (was != key_.has_value()) ++generation_;
    changed_.notify_all();
    if (!key_) return true;
    return changed_.wait_for(lock, timeout, [this] { return armed_ == generation_; });
}

std::uint64_t Signer::signed_count() const {
    std::lock_guard lock(mutex_);
    return signed_;
}

void Signer::run(const std::stop_token &stop) {
    while (!stop.stop_requested()) {
        std::uint64_t generation = 0;
        {
            std::unique_lock lock(mutex_);
            changed_.wait(lock, stop, [this] { return key_.has_value(); });
            if (stop.stop_requested()) return;
            generation = generation_;
        }
        try {
            session(stop, generation);
        } catch (const std::exception &) {
            // Chromium restarted or is not up yet: try again shortly.
        }
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, stop, 250ms, [&] { return generation_ != generation; });
    }
}

void Signer::session(const std::stop_token &stop, std::uint64_t generation) {
    auto [port, path] = endpoint_();
    hangar::cdp::Connection c(port, path, 5s);
    c.call("Fetch.enable", {{"patterns", hangar::json::array({{{"urlPattern", "*"}, {"requestStage", "Request"}}})}});
    {
        std::lock_guard lock(mutex_);
        if (generation_ != generation) return;
        armed_ = generation;
    }
    changed_.notify_all();
    for (;;) {
        std::optional<SigningKey> key;
        {
            std::lock_guard lock(mutex_);
            if (stop.stop_requested() || generation_ != generation) return; // closing the socket ends Fetch
            key = key_;
        }
        hangar::json msg;
        try {
            msg = c.next(Clock::now() + 200ms);
        } catch (const hangar::cdp::Failure &f) {
            if (f.timed_out()) continue;
            throw;
        }
        if (msg.value("method", "") != "Fetch.requestPaused" || !key) continue;
        const auto &params = msg["params"];
        hangar::json request = params.value("request", hangar::json::object());
        c.send("Fetch.continueRequest",
               {{"requestId", params.value("requestId", "")}, {"headers", signed_headers(request, *key)}});
        std::lock_guard lock(mutex_);
        ++signed_;
    }
}

} // namespace proxies
