// curl through the browser's own network stack, over CDP (instance role).
//
// A hidden background tab is put on a blank document at the target's origin, served by Fetch
// interception (no network traffic), and calls fetch() from there (the tab is kept for the next
// request, which skips the document when its origin is the same): the request is same-origin,
// so Chromium attaches the profile's cookies (SameSite ones included) and stores the Set-Cookie
// of the answer, with its own TLS stack, proxy and default headers. Fetch interception sets the
// caller's headers at the request stage (fetch() itself may not set User-Agent, Cookie ...), and
// reads status, every header line and the body at the response stage, before any CORS check, so
// redirects to other origins still answer. See README.md ("curl") for why it is built so.
#include "curl.hpp"
#include "hidden_tab.hpp"

#include <hangar/cdp.hpp>
#include <hangar/resource.hpp>

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

namespace hangar::browsers {

namespace {

using cdp::Clock;
using namespace std::chrono_literals;

bool iequal(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

// Chromium's request headers with the caller's over them (names compared case-insensitively).
// The Content-Type fetch() gives a string body is dropped unless the caller sent one, as curl
// sends none; hop-by-hop and length headers stay Chromium's business.
json merged_headers(const json &chromium, const HeaderList &caller, bool drop_content_type) {
    json out = json::array();
    auto overridden = [&](const std::string &name) {
        if (drop_content_type && iequal(name, "content-type")) return true;
        return std::any_of(caller.begin(), caller.end(), [&](const auto &h) { return iequal(h.first, name); });
    };
    if (chromium.is_object())
        for (const auto &[name, value] : chromium.items())
            if (!overridden(name) && value.is_string()) out.push_back({{"name", name}, {"value", value}});
    for (const auto &[name, value] : caller) {
        if (iequal(name, "host") || iequal(name, "content-length") || iequal(name, "connection") ||
            iequal(name, "transfer-encoding"))
            continue;
        out.push_back({{"name", name}, {"value", value}});
    }
    return out;
}

// A CDP header object as lines; repeated headers come joined with '\n' (Set-Cookie).
HeaderList header_lines(const json &headers) {
    HeaderList out;
    for (const auto &[name, value] : headers.items()) {
        if (!value.is_string()) continue;
        const std::string &v = value.get_ref<const std::string &>();
        std::size_t start = 0;
        for (;;) {
            auto nl = v.find('\n', start);
            out.emplace_back(name, v.substr(start, nl == std::string::npos ? nl : nl - start));
            if (nl == std::string::npos) break;
            start = nl + 1;
        }
    }
    return out;
}

bool is_paused_in(const json &msg, const std::string &session) {
    return msg.value("method", "") == "Fetch.requestPaused" && msg.value("sessionId", "") == session;
}

[[noreturn]] void timed_out(const CurlRequest &r) {
    throw Error(504, "gateway_timeout",
                "the request did not finish within timeout_ms (" + std::to_string(r.timeout_ms) + " ms)");
}

} // namespace

// A hidden background tab and the connection that owns it.
struct BrowserCurl::Tab {
    Tab(int port, std::string browser_ws_path, Clock::time_point deadline)
        : port(port), browser_ws_path(std::move(browser_ws_path)),
          conn(port, this->browser_ws_path,
               std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())),
          tab(conn, deadline), target(tab.target), session(tab.session) {
        // Network events carry the raw response headers: Fetch leaves Set-Cookie out.
        conn.call_until("Network.enable", json::object(), session, deadline);
        // The origin's service worker must not answer in the network's place.
        conn.call_until("Network.setBypassServiceWorker", {{"bypass", true}}, session, deadline);
        conn.call_until("Fetch.enable",
                        {{"patterns", json::array({{{"urlPattern", "*"}, {"requestStage", "Request"}},
                                                   {{"urlPattern", "*"}, {"requestStage", "Response"}}})}},
                        session, deadline);
    }
    Tab(const Tab &) = delete;
    Tab &operator=(const Tab &) = delete;

    // One request. `clean` is set when it ended with nothing of it left in flight (the tab can
    // serve another); `sent` once Chromium started sending it.
    CurlResponse run(const CurlRequest &r, const std::string &target_origin, Clock::time_point deadline);

    const int port;
    const std::string browser_ws_path;
    cdp::Connection conn;
    HiddenTab tab;
    const std::string &target;
    const std::string &session;
    std::string origin; // of the document the tab shows; empty until one is shown
    Clock::time_point last_used;
    bool clean = false;
    bool sent = false;

private:
    void show_origin(const std::string &target_origin, Clock::time_point deadline);
};

// A blank document at the target's origin, answered here.
void BrowserCurl::Tab::show_origin(const std::string &target_origin, Clock::time_point deadline) {
    origin.clear();
    const std::string boot = target_origin + "/.hangar-curl-" + hangar::new_id(12);
    int nav = conn.send("Page.navigate", {{"url", boot}, {"referrerPolicy", "noReferrer"}}, session);
    for (;;) {
        json msg = conn.next(deadline);
        if (msg.value("id", 0) == nav) {
            std::string error = msg.value("result", json::object()).value("errorText", "");
            if (msg.contains("error") || !error.empty())
                throw Error(502, "bad_gateway", "the browser could not prepare the request: " + error);
            break;
        }
        if (!is_paused_in(msg, session)) continue;
        const json &p = msg["params"];
        if (p.at("request").value("url", "") == boot && !p.contains("responseStatusCode"))
            conn.send("Fetch.fulfillRequest",
                      {{"requestId", p["requestId"]},
                       {"responseCode", 200},
                       {"responseHeaders", json::array({{{"name", "Content-Type"}, {"value", "text/html"}}})},
                       {"body", cdp::base64_encode("<!doctype html><title>curl</title>")}},
                      session);
        else
            conn.send("Fetch.continueRequest", {{"requestId", p["requestId"]}}, session);
    }
    origin = target_origin;
}

CurlResponse BrowserCurl::Tab::run(const CurlRequest &r, const std::string &target_origin, Clock::time_point deadline) {
    const auto started = Clock::now();
    clean = sent = false;
    if (origin != target_origin) show_origin(target_origin, deadline);

    // The request, made by the page.
    json init = {{"method", r.method},
                 {"credentials", "include"},
                 {"redirect", "follow"},
                 {"cache", "no-store"},
                 {"referrerPolicy", "no-referrer"}};
    if (r.body) init["body"] = *r.body;
    const bool caller_content_type =
        std::any_of(r.headers.begin(), r.headers.end(), [](const auto &h) { return iequal(h.first, "content-type"); });
    std::string expression = "fetch(" + json(r.url).dump() + ", " + init.dump() +
                             ").then(r => r.arrayBuffer()).then(() => 'done', e => String(e))";
    int eval = conn.send("Runtime.evaluate", {{"expression", expression}, {"awaitPromise", true}}, session);

    CurlResponse out;
    std::string network_id; // of our request, to find its raw headers
    std::map<std::string, json> raw_headers;
    bool answered = false, settled = false;
    std::string failure; // Chromium's net error, or the page's
    while (!settled) {
        json msg;
        try {
            msg = conn.next(deadline);
        } catch (const cdp::Failure &e) {
            if (e.timed_out() && answered) break; // the answer is complete; Chromium is still reading it
            throw;
        }
        if (msg.value("id", 0) == eval) {
            settled = true;
            if (!answered && failure.empty())
                failure = msg.value("result", json::object()).value("result", json::object()).value("value", "");
            continue;
        }
        if (msg.value("method", "") == "Network.responseReceivedExtraInfo" && msg.value("sessionId", "") == session) {
            const json &e = msg["params"];
            raw_headers[e.value("requestId", "")] = e.value("headers", json::object());
            continue;
        }
        if (!is_paused_in(msg, session)) continue;
        const json &p = msg["params"];
        const json id = p["requestId"];
        if (const std::string type = p.value("resourceType", ""); type != "XHR" && type != "Fetch") {
            // the document's own (a favicon): not the caller's business; fetch() is "XHR" here
            conn.send("Fetch.continueRequest", {{"requestId", id}}, session);
        } else if (p.contains("responseErrorReason")) {
            failure = p["responseErrorReason"].get<std::string>();
            conn.send("Fetch.continueRequest", {{"requestId", id}}, session);
        } else if (!p.contains("responseStatusCode")) {
            // Request stage: ours (the first) gets the caller's headers; a redirect's next hop goes on as is.
            if (!sent) {
                sent = true;
                conn.send("Fetch.continueRequest",
                          {{"requestId", id},
                           {"headers", merged_headers(p["request"].value("headers", json::object()), r.headers,
                                                      r.body && !caller_content_type)}},
                          session);
            } else {
                conn.send("Fetch.continueRequest", {{"requestId", id}}, session);
            }
        } else {
            int status = p["responseStatusCode"].get<int>();
            bool redirect = false;
            json fetch_headers = json::object();
            for (const auto &h : p.value("responseHeaders", json::array())) {
                std::string name = h.value("name", "");
                if (status >= 300 && status < 400 && iequal(name, "location")) redirect = true;
                auto &slot = fetch_headers[name];
                slot = slot.is_string() ? json(slot.get<std::string>() + "\n" + h.value("value", ""))
                                        : json(h.value("value", ""));
            }
            HeaderList headers = header_lines(fetch_headers);
            if (redirect) {
                conn.send("Fetch.continueRequest", {{"requestId", id}}, session);
                continue;
            }
            out.status = status;
            out.headers = std::move(headers);
            out.final_url = p.at("request").value("url", r.url);
            network_id = p.value("networkId", "");
            if (r.method != "HEAD") {
                try {
                    json b = conn.call_until("Fetch.getResponseBody", {{"requestId", id}}, session, deadline);
                    std::string body = b.value("body", "");
                    out.body = b.value("base64Encoded", false) ? cdp::base64_decode(body) : body;
                } catch (const cdp::Failure &e) {
                    if (e.timed_out()) throw;
                    // no body (204, 304): empty
                }
            }
            out.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
            answered = true;
            // Let Chromium process the answer too (its Set-Cookie lands in the cookie jar).
            conn.send("Fetch.continueRequest", {{"requestId", id}}, session);
        }
    }
    clean = settled;
    if (!answered)
        throw Error(502, "bad_gateway",
                    "the request failed in the browser: " + (failure.empty() ? std::string("no answer") : failure));
    if (auto raw = raw_headers.find(network_id); !network_id.empty() && raw != raw_headers.end())
        out.headers = header_lines(raw->second);
    return out;
}

BrowserCurl::BrowserCurl(std::size_t keep, std::chrono::milliseconds idle)
    : keep_(keep), idle_(idle), closer_([this](const std::stop_token &stop) { close_idle(stop); }) {}

BrowserCurl::~BrowserCurl() = default; // closer_ goes first: it stops and joins

// A kept tab of this Chromium, one already on `origin` first; null when there is none.
std::unique_ptr<BrowserCurl::Tab> BrowserCurl::take(int port, const std::string &browser_ws_path,
                                                    const std::string &origin) {
    std::vector<std::unique_ptr<Tab>> stale; // closed outside the lock
    std::unique_ptr<Tab> tab;
    {
        std::lock_guard lock(mutex_);
        std::erase_if(kept_, [&](std::unique_ptr<Tab> &t) {
            if (t->port == port && t->browser_ws_path == browser_ws_path) return false;
            stale.push_back(std::move(t)); // of a Chromium that was restarted
            return true;
        });
        auto it = std::find_if(kept_.begin(), kept_.end(), [&](const auto &t) { return t->origin == origin; });
        if (it == kept_.end() && !kept_.empty()) it = std::prev(kept_.end()); // the most recently used
        if (it != kept_.end()) {
            tab = std::move(*it);
            kept_.erase(it);
        }
    }
    return tab;
}

void BrowserCurl::give_back(std::unique_ptr<Tab> tab) {
    std::unique_ptr<Tab> dropped;
    std::lock_guard lock(mutex_);
    tab->last_used = Clock::now();
    kept_.push_back(std::move(tab));
    if (kept_.size() > keep_) {
        dropped = std::move(kept_.front()); // the least recently used; closed after the lock is released
        kept_.erase(kept_.begin());
    }
}

// Each kept tab holds a renderer: close those unused for `idle_`.
void BrowserCurl::close_idle(const std::stop_token &stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
        wake_.wait_for(lock, stop, idle_ / 2 + std::chrono::milliseconds(1), [] { return false; });
        std::vector<std::unique_ptr<Tab>> expired;
        auto now = Clock::now();
        std::erase_if(kept_, [&](std::unique_ptr<Tab> &t) {
            if (now - t->last_used < idle_) return false;
            expired.push_back(std::move(t));
            return true;
        });
        lock.unlock();
        expired.clear();
        lock.lock();
    }
}

CurlResponse BrowserCurl::request(int port, const std::string &browser_ws_path, const CurlRequest &r) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(r.timeout_ms);
    const std::string origin = *http_origin(r.url);
    for (;;) {
        std::unique_ptr<Tab> tab = take(port, browser_ws_path, origin);
        const bool kept = tab != nullptr;
        try {
            if (!tab) tab = std::make_unique<Tab>(port, browser_ws_path, deadline);
            CurlResponse out = tab->run(r, origin, deadline);
            give_back(std::move(tab));
            return out;
        } catch (const Error &) {
            if (tab && tab->clean) give_back(std::move(tab)); // the target failed, not the tab
            throw;
        } catch (const cdp::Failure &e) {
            if (e.timed_out()) timed_out(r);
            // A kept tab that broke before the request left (closed by someone, Chromium gone):
            // once more on a new tab.
            if (kept && !tab->sent) continue;
            throw Error(502, "bad_gateway", std::string("the browser could not make the request: ") + e.what());
        }
    }
}

} // namespace hangar::browsers
