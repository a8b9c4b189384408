#include "chromium_launch.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace hangar::browsers {

namespace {

bool bool_field(const json &spec, const char *name, bool fallback) {
    auto it = spec.find(name);
    if (it == spec.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw Error::invalid(name, "must be a boolean");
    return it->get<bool>();
}

int int_field(const json &v, const char *name, int min, int max, std::optional<int> fallback) {
    auto it = v.find(name);
    if (it == v.end() || it->is_null()) {
        if (fallback) return *fallback;
        throw Error::invalid(std::string("viewport.") + name, "is required");
    }
    if (!it->is_number_integer()) throw Error::invalid(std::string("viewport.") + name, "must be an integer");
    auto n = it->get<std::int64_t>();
    if (n < min || n > max)
        throw Error::invalid(std::string("viewport.") + name,
                             "must be between " + std::to_string(min) + " and " + std::to_string(max));
    return static_cast<int>(n);
}

} // namespace

Viewport parse_viewport(const json &v) {
    if (!v.is_object()) throw Error::invalid("viewport", "must be an object");
    Viewport vp;
    vp.width = int_field(v, "width", kMinWidth, kMaxWidth, std::nullopt);
    vp.height = int_field(v, "height", kMinHeight, kMaxHeight, std::nullopt);
    vp.refresh_rate = int_field(v, "refresh_rate", 1, kMaxRefreshRate, default_refresh_rate(vp.width, vp.height));
    return vp;
}

Location parse_location(const json &v) {
    if (!v.is_object()) throw Error::invalid("location", "must be an object");
    Location l;
    if (auto it = v.find("timezone"); it != v.end() && !it->is_null()) {
        if (!it->is_string() || !known_timezone(it->get_ref<const std::string &>()))
            throw Error::invalid("location.timezone", "must be a known IANA timezone");
        l.timezone = it->get<std::string>();
    }
    if (auto it = v.find("locale"); it != v.end() && !it->is_null()) {
        auto canonical = it->is_string() ? canonical_locale(it->get_ref<const std::string &>()) : std::nullopt;
        if (!canonical) throw Error::invalid("location.locale", "must be a BCP 47 language tag");
        l.locale = std::move(canonical);
    }
    return l;
}

std::string chromium_timezone(const LaunchSpec &spec) {
    return spec.location.timezone.value_or(kDefaultTimezone);
}

LaunchSpec parse_launch_spec(const json &spec) {
    if (!spec.is_object()) throw Error::invalid("spec", "must be an object");
    LaunchSpec s;
    s.headless = bool_field(spec, "headless", false);
    s.stealth = bool_field(spec, "stealth", false);
    s.kiosk_mode = bool_field(spec, "kiosk_mode", false);
    if (auto it = spec.find("viewport"); it != spec.end() && !it->is_null()) s.viewport = parse_viewport(*it);
    if (auto it = spec.find("start_url"); it != spec.end() && !it->is_null()) {
        if (!it->is_string()) throw Error::invalid("start_url", "must be a string");
        if (!it->get_ref<const std::string &>().empty()) s.start_url = it->get<std::string>();
    }
    if (auto it = spec.find("chrome_policy"); it != spec.end() && !it->is_null()) {
        if (!it->is_object()) throw Error::invalid("chrome_policy", "must be an object");
        s.chrome_policy = *it;
    }
    if (auto it = spec.find("location"); it != spec.end() && !it->is_null()) s.location = parse_location(*it);
    return s;
}

std::vector<std::string> chromium_args(const ChromiumSettings &settings, const LaunchSpec &spec,
                                       std::string_view user_agent, std::string_view url, bool audio_output) {
    std::vector<std::string> a = {
        // Port 0: Chromium picks a free one and prints it; no port bookkeeping, no races.
        "--remote-debugging-port=0",
        "--remote-debugging-address=127.0.0.1",
        "--remote-allow-origins=*",
        "--user-data-dir=" + settings.user_data_dir,
        // bubblewrap is the sandbox; Chromium's own needs privileges the agent does not have.
        "--no-sandbox",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
        "--password-store=basic",
        // /dev/shm inside a sandbox may be tiny or absent; /tmp is private to the instance.
        "--disable-dev-shm-usage",
        "--disable-breakpad",
        "--disable-search-engine-choice-screen",
        "--hide-crash-restore-bubble",
        // Automation drives pages that are not in front; throttling them breaks timers and input.
        "--disable-background-timer-throttling",
        "--disable-backgrounding-occluded-windows",
        "--disable-renderer-backgrounding",
        "--window-size=" + std::to_string(spec.viewport.width) + "," + std::to_string(spec.viewport.height),
    };
    // Only the forced extension's install run lets Chromium's updater (and so the network) on.
    if (settings.background_networking) std::erase(a, std::string("--disable-background-networking"));
    // Headful Chromium plays into the instance's own sink (PULSE_SERVER), which replays record.
    if (!audio_output) a.emplace_back("--mute-audio");
    if (spec.headless) {
        a.insert(a.begin(), "--headless=new");
        // New headless emulates an 800x600 screen and a toolbar inside the window. A screen of
        // the viewport's size plus kiosk (no toolbar) makes page == window == screen, as on
        // Kernel, and drops the 800x600 screen that gives headless away.
        a.push_back("--screen-info={" + std::to_string(spec.viewport.width) + "x" +
                    std::to_string(spec.viewport.height) + "}");
        a.emplace_back("--kiosk");
    } else {
        a.emplace_back("--ozone-platform=x11");
        a.emplace_back("--window-position=0,0");
        if (spec.kiosk_mode) a.emplace_back("--kiosk");
    }
    if (spec.stealth) {
        a.emplace_back("--disable-blink-features=AutomationControlled");
        if (!user_agent.empty()) a.push_back("--user-agent=" + std::string(user_agent));
    }
    if (!spec.extensions.empty()) {
        std::string dirs;
        for (const auto &d : spec.extensions)
            dirs += (dirs.empty() ? "" : ",") + d;
        a.push_back("--load-extension=" + dirs);
        a.push_back("--disable-extensions-except=" + dirs);
    }
    // --accept-lang is navigator.language(s) and the Accept-Language header, in every tab; --lang
    // is the UI and Intl locale where Chromium has that locale's pak. Chromium keeps the accepted
    // languages in the profile's preferences, so the default is passed too (Chromium's own
    // "en-US,en"): a run after an override (a PATCH that clears it, a profile saved by a session
    // that had one) then shows the default it reports.
    a.push_back("--accept-lang=" + spec.location.locale.value_or(kDefaultAcceptLanguages));
    if (spec.location.locale) a.push_back("--lang=" + *spec.location.locale);
    // WebMCP (document.modelContext and the CDP WebMCP domain) is behind a feature in Chromium
    // 146+; the webmcp routes need it in every instance. The omnibox's WebUI popups (Chromium
    // 15x preloads two, each a renderer of its own, even headless and in kiosk mode) cost more CPU
    // at start than the rest of Chromium's start-up together (~0.5–0.7 s of 1 s, measured with and
    // without on Debian's Chromium 156) and a renderer's memory per session; without them the
    // address bar of a headful non-kiosk browser keeps its classic popup. Chromium honours only the
    // last --enable-features and --disable-features, so an operator's own lists are merged in
    // rather than overriding these.
    //
    // Chromium's own requests: --disable-background-networking does not stop three kinds, which
    // a fresh profile makes within a second of start, through the browser's proxy (so through a
    // tenant's proxy, and out of a browser meant to make only the requests its pages make;
    // measured on Debian's Chromium 156 behind a recording proxy): the network time query
    // (clients2.google.com/time), the optimization guide's on-demand model manifest
    // (update.googleapis.com, component ceofaddefefcbblgcgnibnonglccbfja, which
    // --disable-component-update does not cover), and GAIA's ListAccounts
    // (accounts.google.com, retried with backoff). The first is a feature; the component
    // updater is pointed at a file URL the network service never loads; GAIA is moved to one of
    // Hangar's own names, which Chromium resolves itself (past the proxy) to "not found",
    // without a DNS query. The signer extension's key hand-off is such a name too: asked before
    // the agent intercepts (at start, after a restart) it fails here instead of reaching the
    // proxy, and the extension asks again. This Chromium has no OAuth client, so it never signs
    // in to Google itself: pages on accounts.google.com are ordinary pages either way. Every
    // on-demand component install is off with the updater's source, not only the manifest.
    std::string enabled = "WebMCP";
    std::string disabled = "WebUIOmniboxPopup,WebUIOmniboxAimPopup," + std::string(kNetworkTimeFeature);
    a.emplace_back(kQuietComponentUpdater);
    a.push_back("--gaia-url=https://" + std::string(kQuietGaiaHost) + "/");
    a.push_back("--host-resolver-rules=MAP " + std::string(kHangarHosts) + " ~NOTFOUND");
    for (const auto &f : settings.extra_flags) {
        constexpr std::string_view kEnable = "--enable-features=";
        constexpr std::string_view kDisable = "--disable-features=";
        constexpr std::string_view kBypass = "--proxy-bypass-list=";
        if (f.rfind(kEnable, 0) == 0)
            enabled += "," + f.substr(kEnable.size());
        else if (f.rfind(kDisable, 0) == 0)
            disabled += "," + f.substr(kDisable.size());
        else if (f.rfind(kBypass, 0) == 0)
            a.push_back(f + ";" + kHangarHosts); // resolved here (to nothing), never sent to a proxy
        else
            a.push_back(f);
    }
    a.push_back("--enable-features=" + enabled);
    a.push_back("--disable-features=" + disabled);
    a.emplace_back("--");
    a.emplace_back(url.empty() ? std::string("about:blank") : std::string(url));
    return a;
}

std::vector<std::string> pulseaudio_args(const std::string &socket) {
    return {"--daemonize=no", "--system=no", "--use-pid-file=no", "--exit-idle-time=-1", "--disallow-exit=yes",
            // No default.pa: only the two modules below; clients cannot load more.
            "-n", "--disallow-module-loading=yes", "--fail=yes", "--realtime=no", "--high-priority=no",
            "--log-target=stderr", "--log-level=warning",
            // Chromium's output; nothing suspends it, so its monitor always has a clock.
            "-L", std::string("module-null-sink sink_name=") + kAudioSink + " rate=48000 channels=2",
            // A path in the instance's own folder (no abstract socket, no TCP): nothing outside
            // this sandbox reaches it, so anonymous access is only this instance's processes.
            "-L", "module-native-protocol-unix auth-anonymous=1 socket=" + socket};
}

std::vector<std::string> xvfb_args(const Viewport &v, int displayfd) {
    return {
        "-screen",
        "0",
        std::to_string(v.width) + "x" + std::to_string(v.height) + "x24",
        // No TCP, and no abstract socket: abstract sockets are shared by every sandbox without its
        // own network namespace, so only the socket file in the private /tmp is used.
        "-nolisten",
        "tcp",
        "-nolisten",
        "local",
        "-displayfd",
        std::to_string(displayfd),
    };
}

std::optional<DevToolsEndpoint> parse_devtools_line(std::string_view line) {
    static constexpr std::string_view marker = "DevTools listening on ws://";
    auto at = line.find(marker);
    if (at == std::string_view::npos) return std::nullopt;
    std::string_view rest = line.substr(at + marker.size());
    while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.back())))
        rest.remove_suffix(1);
    auto slash = rest.find('/');
    if (slash == std::string_view::npos) return std::nullopt;
    std::string_view hostport = rest.substr(0, slash);
    auto colon = hostport.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    unsigned port = 0;
    auto digits = hostport.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
    if (ec != std::errc() || ptr != digits.data() + digits.size() || port == 0 || port > 65535) return std::nullopt;
    std::string_view path = rest.substr(slash);
    if (!path.starts_with("/devtools/browser/")) return std::nullopt;
    return DevToolsEndpoint{static_cast<std::uint16_t>(port), std::string(path)};
}

std::optional<std::string> stealth_user_agent(std::string_view out) {
    // The first token that starts with a digit and has dots is the version.
    std::size_t i = 0;
    while (i < out.size()) {
        while (i < out.size() && std::isspace(static_cast<unsigned char>(out[i])))
            ++i;
        std::size_t j = i;
        while (j < out.size() && !std::isspace(static_cast<unsigned char>(out[j])))
            ++j;
        std::string_view tok = out.substr(i, j - i);
        if (!tok.empty() && std::isdigit(static_cast<unsigned char>(tok[0])) &&
            tok.find('.') != std::string_view::npos) {
            auto major = tok.substr(0, tok.find('.'));
            if (std::all_of(major.begin(), major.end(), [](unsigned char c) { return std::isdigit(c); }))
                return "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/" +
                       std::string(major) + ".0.0.0 Safari/537.36";
        }
        i = j;
    }
    return std::nullopt;
}

std::vector<std::string> split_flags(std::string_view s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])))
            ++i;
        std::size_t j = i;
        while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j])))
            ++j;
        if (j > i) out.emplace_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

} // namespace hangar::browsers
