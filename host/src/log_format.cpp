#include "log_format.hpp"

#include <Poco/DateTimeFormat.h>
#include <Poco/DateTimeFormatter.h>
#include <Poco/Message.h>

#include <nlohmann/json.hpp>

namespace hangar::host {

namespace {

const char *level_name(Poco::Message::Priority p) {
    switch (p) {
    case Poco::Message::PRIO_FATAL:
        return "fatal";
    case Poco::Message::PRIO_CRITICAL:
        return "critical";
    case Poco::Message::PRIO_ERROR:
        return "error";
    case Poco::Message::PRIO_WARNING:
        return "warning";
    case Poco::Message::PRIO_NOTICE:
        return "notice";
    case Poco::Message::PRIO_INFORMATION:
        return "information";
    case Poco::Message::PRIO_DEBUG:
        return "debug";
    default:
        return "trace";
    }
}

} // namespace

void JsonLogFormatter::format(const Poco::Message &msg, std::string &text) {
    nlohmann::json line = {
        {"time", Poco::DateTimeFormatter::format(msg.getTime(), "%Y-%m-%dT%H:%M:%S.%iZ")},
        {"level", level_name(msg.getPriority())},
        {"logger", msg.getSource()},
        {"thread", msg.getTid()},
        {"message", msg.getText()},
    };
    // A message is whatever a plugin logged: invalid UTF-8 is replaced, never a thrown dump.
    text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

bool base64url(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Length of the JWT starting at `at` (header "eyJ…", a payload and a signature), 0 when none.
std::size_t jwt_length(std::string_view s, std::size_t at) {
    if (s.substr(at, 3) != "eyJ") return 0;
    std::size_t i = at, dots = 0;
    while (i < s.size() && (base64url(s[i]) || (s[i] == '.' && dots < 2))) {
        if (s[i] == '.') ++dots;
        ++i;
    }
    return dots == 2 ? i - at : 0;
}

} // namespace

std::string redact_tokens(std::string_view s) {
    constexpr std::string_view kMark = "[token]";
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        // A token only starts where a base64url run does (not inside another word).
        const bool boundary = i == 0 || !base64url(s[i - 1]);
        if (boundary && s.substr(i, 4) == "jwt=") {
            out += "jwt=";
            i += 4;
            std::size_t end = s.find_first_of("& \t\r\n\"'", i);
            if (end == std::string_view::npos) end = s.size();
            if (end > i) out += kMark;
            i = end;
        } else if (std::size_t n = boundary ? jwt_length(s, i) : 0; n > 0) {
            out += kMark;
            i += n;
        } else {
            out += s[i++];
        }
    }
    return out;
}

void RedactingChannel::log(const Poco::Message &msg) {
    const auto &text = msg.getText();
    if (text.find("eyJ") == std::string::npos && text.find("jwt=") == std::string::npos) return next_->log(msg);
    Poco::Message redacted(msg);
    redacted.setText(redact_tokens(text));
    next_->log(redacted);
}

} // namespace hangar::host
