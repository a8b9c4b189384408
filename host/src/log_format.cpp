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

} // namespace hangar::host
