// A hidden background tab of its own on a browser-level CDP connection, closed with this object:
// what the agent's curl and page-text fetches work in, out of the tab strip and the live view.
#pragma once

#include <hangar/cdp.hpp>

#include <string>

namespace hangar::browsers {

struct HiddenTab {
    HiddenTab(cdp::Connection &conn, cdp::Clock::time_point deadline) : conn(conn) {
        nlohmann::json created;
        try {
            created = conn.call_until("Target.createTarget",
                                      {{"url", "about:blank"}, {"background", true}, {"hidden", true}}, "", deadline);
        } catch (const cdp::Failure &e) {
            // A Chromium without `hidden` refuses the call: a background tab then.
            if (e.timed_out()) throw;
            created =
                conn.call_until("Target.createTarget", {{"url", "about:blank"}, {"background", true}}, "", deadline);
        }
        target = created.value("targetId", "");
        session = conn.call_until("Target.attachToTarget", {{"targetId", target}, {"flatten", true}}, "", deadline)
                      .value("sessionId", "");
    }
    HiddenTab(const HiddenTab &) = delete;
    HiddenTab &operator=(const HiddenTab &) = delete;
    ~HiddenTab() {
        try {
            conn.send("Target.closeTarget", {{"targetId", target}});
        } catch (const std::exception &) {
            // the connection is gone; Chromium closes a hidden tab with it
        }
    }
    cdp::Connection &conn;
    std::string target;
    std::string session;
};

} // namespace hangar::browsers
