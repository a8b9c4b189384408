// The instance half's processes: Xvfb (headful) and Chromium, started, watched and restarted.
//
// Everything is synchronous and readiness-driven: start() and restart() return once Chromium has
// printed "DevTools listening on ..." and shows its first page, never after a sleep. One mutex
// serialises launches; endpoint() always names the *current* Chromium, so a relay started after a
// restart reaches the new process under the same public URL.
#pragma once

#include "chromium_launch.hpp"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace hangar::browsers {

enum class LogLevel { Info, Warn, Error };
using Logger = std::function<void(LogLevel, std::string_view)>;
// The unpacked extension folders Chromium loads, asked again at every launch.
using ExtensionFolders = std::function<std::vector<std::string>()>;

class Xvfb;
class PulseSink;
class ChromiumProcess;

class ChromiumRunner {
public:
    ChromiumRunner(ChromiumSettings settings, LaunchSpec spec, Logger log, ExtensionFolders extensions);
    ~ChromiumRunner(); // stops Chromium, then Xvfb and the audio sink
    ChromiumRunner(const ChromiumRunner &) = delete;
    ChromiumRunner &operator=(const ChromiumRunner &) = delete;

    // Writes the managed policy, starts Xvfb (headful) and Chromium with the start URL.
    // Throws std::runtime_error with a message naming what failed.
    void start();

    // {"pid","port","ws_path","restarts","headless","kiosk_mode","viewport","display"?,
    //  "audio"?: {"server","source"}}
    json status();

    struct Endpoint {
        std::uint16_t port;
        std::string ws_path;
    };
    // The running Chromium's DevTools endpoint; relaunches it first if it died.
    Endpoint endpoint();

    // Replaces every page with one new page at `url` (a warm spare handed to a create that asked
    // for a start_url): the client finds exactly one page, with a history of one entry.
    json open_only(const std::string &url);

    // Restarts Chromium (and Xvfb if a headful size changed) with the given changes (`location`
    // replaces both overrides); returns
    // status() once the new Chromium is ready.
    json restart(std::optional<Viewport> viewport, std::optional<bool> kiosk_mode,
                 std::optional<Location> location = std::nullopt);

    // Stops Chromium (so cookies and storage reach the disk) and returns the user-data folder as
    // a profile archive (tar + zstd). Chromium stays stopped: this is how a session ends.
    std::string archive_profile();
    // Restarts Chromium on the profile in `archive` (tar + zstd) in place of the current state.
    json load_profile(std::string_view archive);

private:
    void write_policy();
    void install_forced_extension();
    void launch_locked(std::string_view url);
    void stop_locked();
    std::string user_agent_locked();

    ChromiumSettings settings_;
    LaunchSpec spec_;
    Logger log_;
    ExtensionFolders extensions_;
    std::mutex mutex_;
    std::unique_ptr<Xvfb> display_;
    std::unique_ptr<PulseSink> audio_; // headful only; absent when PulseAudio is not there
    std::unique_ptr<ChromiumProcess> chromium_;
    int restarts_ = 0;
    int crashes_ = 0; // exits we did not ask for; the second ends the session
    std::optional<std::string> user_agent_;
};

} // namespace hangar::browsers
