// `[logging] format = json`: one JSON object per log line, for log shippers that parse fields.
#pragma once

#include <Poco/Formatter.h>

#include <string>

namespace hangar::host {

// {"time":"2026-01-02T03:04:05.678Z","level":"information","logger":"hangar","thread":12,"message":"..."}
class JsonLogFormatter : public Poco::Formatter {
public:
    void format(const Poco::Message &msg, std::string &text) override;
};

} // namespace hangar::host
