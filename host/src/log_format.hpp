// `[logging] format = json`: one JSON object per log line, for log shippers that parse fields.
#pragma once

#include <Poco/AutoPtr.h>
#include <Poco/Channel.h>
#include <Poco/Formatter.h>

#include <string>
#include <string_view>

namespace hangar::host {

// {"time":"2026-01-02T03:04:05.678Z","level":"information","logger":"hangar","thread":12,"message":"..."}
class JsonLogFormatter : public Poco::Formatter {
public:
    void format(const Poco::Message &msg, std::string &text) override;
};

// Capability tokens (the JWTs of cdp_ws_url, live-view and replay-view URLs, flow tokens) are
// credentials anyone can use until they expire: a log line shows "[token]" in their place. Finds
// JWT-shaped text (eyJ… three base64url parts) anywhere, and any `jwt=` query value.
std::string redact_tokens(std::string_view text);

// Passes each message on with redact_tokens applied to its text, whoever logged it (the host's
// access log, a plugin, Poco itself).
class RedactingChannel : public Poco::Channel {
public:
    explicit RedactingChannel(Poco::AutoPtr<Poco::Channel> next) : next_(std::move(next)) {}
    void log(const Poco::Message &msg) override;
    void open() override { next_->open(); }
    void close() override { next_->close(); }

private:
    Poco::AutoPtr<Poco::Channel> next_;
};

} // namespace hangar::host
