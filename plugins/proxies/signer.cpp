#include "signer.hpp"

#include "proxies_model.hpp"
#include "signer_extension.hpp"
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

bool is_handoff(const hangar::json &request) {
    std::string url = request.value("url", "");
    return url.rfind(std::string(extension::kHandoffUrl) + "?", 0) == 0;
}

// The answer to the signer extension's ask: its key and the signing template, sealed to the
// X25519 public key it sent (`pk`, base64url) with a key pair made for this answer, so a reader
// of this response (another DevTools client intercepting it) learns nothing.
hangar::json sealed_key(const std::string &url, const SigningKey &key) {
    auto at = url.find("pk=");
    if (at == std::string::npos) return nullptr;
    std::string pk_text =
        url.substr(at + 3, url.find('&', at) == std::string::npos ? std::string::npos : url.find('&', at) - at - 3);
    unsigned char pk[crypto_box_PUBLICKEYBYTES];
    std::size_t n = 0;
    if (sodium_base642bin(pk, sizeof pk, pk_text.data(), pk_text.size(), nullptr, &n, nullptr,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 ||
        n != sizeof pk)
        return nullptr;
    signing::Params p;
    p.form = key.form;
    p.keyid = key.keyid;
    p.agent = key.agent;
    auto t = signing::signing_template(p);
    std::string payload =
        hangar::json{{"secret_key", signing::base64(key.secret_key)}, {"base", t.base},
                     {"signature_agent", t.signature_agent},          {"signature_input", t.signature_input},
                     {"signature_prefix", t.signature_prefix},        {"ttl_seconds", key.ttl_seconds}}
            .dump();
    std::string epk(crypto_box_PUBLICKEYBYTES, '\0'), esk(crypto_box_SECRETKEYBYTES, '\0');
    std::string nonce(crypto_box_NONCEBYTES, '\0');
    crypto_box_keypair(reinterpret_cast<unsigned char *>(epk.data()), reinterpret_cast<unsigned char *>(esk.data()));
    randombytes_buf(nonce.data(), nonce.size());
    std::string box(payload.size() + crypto_box_MACBYTES, '\0');
    int rc = crypto_box_easy(reinterpret_cast<unsigned char *>(box.data()),
                             reinterpret_cast<const unsigned char *>(payload.data()), payload.size(),
                             reinterpret_cast<const unsigned char *>(nonce.data()), pk,
                             reinterpret_cast<const unsigned char *>(esk.data()));
    sodium_memzero(esk.data(), esk.size());
    sodium_memzero(payload.data(), payload.size());
    if (rc != 0) return nullptr;
    return {{"epk", signing::base64(epk)}, {"nonce", signing::base64(nonce)}, {"box", signing::base64(box)}};
}

void fulfill(hangar::cdp::Connection &c, const std::string &request_id, int status, const std::string &body) {
    c.send("Fetch.fulfillRequest",
           {{"requestId", request_id},
            {"responseCode", status},
            {"responseHeaders", hangar::json::array({{{"name", "Content-Type"}, {"value", "application/json"}},
                                                     {{"name", "Cache-Control"}, {"value", "no-store"}}})},
            {"body", signing::base64(body)}});
}

} // namespace

Signer::Signer(Endpoint endpoint, bool extension) : endpoint_(std::move(endpoint)), extension_(extension) {
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
    // With the signer extension, signing is on once it holds the key too (WebSockets).
    return changed_.wait_for(lock, timeout, [this] { return armed_ == generation_ && (!extension_ || handed_); });
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
        std::string id = params.value("requestId", "");
        if (is_handoff(request)) {
            // Once per instance, and only with the extension: its first ask comes before the
            // tenant has the browser (set_key waits for it). Any later ask is refused, even after
            // a Chromium restart: by then a page of the tenant's could be the one asking.
            bool first = false;
            {
                std::lock_guard lock(mutex_);
                first = extension_ && !handed_;
            }
            hangar::json sealed = first ? sealed_key(request.value("url", ""), *key) : hangar::json();
            if (sealed.is_null()) {
                fulfill(c, id, 410, R"({"error":"gone"})");
                continue;
            }
            fulfill(c, id, 200, sealed.dump());
            {
                std::lock_guard lock(mutex_);
                handed_ = true;
            }
            changed_.notify_all();
            continue;
        }
        c.send("Fetch.continueRequest",
               {{"requestId", params.value("requestId", "")}, {"headers", signed_headers(request, *key)}});
        std::lock_guard lock(mutex_);
        ++signed_;
    }
}

} // namespace proxies
