// How the instance half launches Xvfb and Chromium, as pure functions: the spec it receives, the
// command lines, the readiness line and the stealth user agent. Unit-tested without a browser.
#pragma once

#include "session_model.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hangar::browsers {

// What the server put into the instance spec (see make_instance_spec() in session_model.hpp).
struct LaunchSpec {
    bool headless = false;
    bool stealth = false;
    bool kiosk_mode = false;
    Viewport viewport;
    std::optional<std::string> start_url;
    std::optional<json> chrome_policy;
    // Unpacked extension folders to load (the extensions plugin names them at each launch).
    std::vector<std::string> extensions;
    // Session-only timezone (the process's TZ) and locale (--lang and --accept-lang): both hold
    // for every page and tab of the run, which a per-target CDP override would not.
    Location location;
};

// Lenient about missing keys (defaults), strict about types: throws Error 400.
LaunchSpec parse_launch_spec(const json &spec);
// A {width, height, refresh_rate?} object as the agent receives it. Throws Error 400.
Viewport parse_viewport(const json &v);
// {"timezone"?, "locale"?} as the server sends it (checked there; here again, since a TZ or a
// flag value that is not one would reach Chromium). Throws Error 400.
Location parse_location(const json &v);
// The TZ Chromium runs with: the override, else the default (never the host's own zone).
std::string chromium_timezone(const LaunchSpec &spec);

// Operator settings of the instance half (etc/plugins.d/browsers.ini).
struct ChromiumSettings {
    std::string chromium_path = "/usr/lib/chromium/chromium";
    std::string xvfb_path = "/usr/bin/Xvfb";
    // The headful instance's audio sink; empty or missing: no audio (Chromium stays muted).
    std::string pulseaudio_path = "/usr/bin/pulseaudio";
    std::string user_data_dir = "/home/kernel/user-data";
    std::string run_dir = "/run/hangar"; // the instance dir inside the sandbox: logs/, policy/
    // Where Chromium reads managed policies; the host bind-mounts <run_dir>/policy there. Empty:
    // do not check that the mount is in place.
    std::string policy_mount_dir = "/etc/chromium/policies/managed";
    std::vector<std::string> extra_flags;
    // An extension installed by policy (the proxies plugin's request signer): Chromium installs
    // it through its extension updater, which --disable-background-networking turns off, so the
    // runner installs it in a first run of its own (install_forced_extension) and every real run
    // keeps the flag. Empty id: none.
    std::string forced_extension_id;
    std::string forced_extension_update_url;
    // Only that install run, whose proxy goes nowhere, sets this.
    bool background_networking = false;
    int startup_timeout_ms = 20000;
    int first_page_timeout_ms = 5000;
};

// What keeps Chromium's own background requests off the network (chromium_args says which and
// why): a disabled feature, the component updater's source, and the host GAIA is moved to.
inline constexpr const char *kNetworkTimeFeature = "NetworkTimeServiceQuerying";
inline constexpr const char *kQuietComponentUpdater = "--component-updater=url-source=file:///nonexistent/";
inline constexpr const char *kQuietGaiaHost = "gaia.hangar.invalid";
// Hangar's own names (GAIA's above, the signer extension's key hand-off): past any proxy and
// resolved by Chromium to "not found", so a request to one never leaves the browser; the
// agent's Fetch interception, which runs before either, is the only thing that answers them.
inline constexpr const char *kHangarHosts = "*.hangar.invalid";

// Chromium's command line (without argv[0]). `user_agent` empty = Chromium's own. `url` goes
// after "--" so a start_url can never be read as a switch. Without `audio_output` (headless, or
// no sink) Chromium is muted.
std::vector<std::string> chromium_args(const ChromiumSettings &settings, const LaunchSpec &spec,
                                       std::string_view user_agent, std::string_view url, bool audio_output = false);

// The instance's audio sink, `kAudioSink`, whose monitor `kAudioSource` a recording reads.
inline constexpr const char *kAudioSink = "hangar";
inline constexpr const char *kAudioSource = "hangar.monitor";

// PulseAudio's command line: one null sink, clients only through the unix socket `socket` (no
// system mode, no default script, no module loading by clients, never exits when idle).
std::vector<std::string> pulseaudio_args(const std::string &socket);

// Xvfb's command line: it picks a free display itself and writes the number to `displayfd` once
// it accepts connections (the readiness signal).
std::vector<std::string> xvfb_args(const Viewport &viewport, int displayfd);

struct DevToolsEndpoint {
    std::uint16_t port = 0;
    std::string ws_path; // "/devtools/browser/<uuid>"
};

// "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID" -> {PORT, path}.
std::optional<DevToolsEndpoint> parse_devtools_line(std::string_view line);

// From `chromium --version` ("Chromium 156.0.8078.79 ..."): the user agent headful Chromium would
// send, which headless otherwise spells "HeadlessChrome". Reduced form, like Chrome's own.
std::optional<std::string> stealth_user_agent(std::string_view version_output);

// Whitespace-separated flags from the config file.
std::vector<std::string> split_flags(std::string_view s);

} // namespace hangar::browsers
