// What a failed service call (Plugin::call) says about the service itself.
#pragma once

#include <hangar/plugin.hpp>

#include <string>

namespace hangar {

// The call failed because no loaded plugin offers the service (the host's 404, host_api.cpp), as
// against a 404 the service itself answered: the feature behind it is switched off.
inline bool service_missing(const Error &e) {
    return e.status() == 404 && std::string(e.what()).rfind("no plugin offers the service", 0) == 0;
}

} // namespace hangar
