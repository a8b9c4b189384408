// computer: Kernel API §3.11 [50]-[61]: mouse, keyboard, screenshots, cursor and clipboard of a
// browser instance.
//
// Server role: each public route relays to the session's agent (relay_to_session). Instance
// role: validates the body (400 naming the field, coordinates checked against the screen) and
// acts through a Screen that stays connected: XTest on the instance's Xvfb when headful, CDP
// input on the first page when headless. Every answer carries `Server-Timing: action;dur=<ms>`,
// the time spent inside the agent.
#include "screen.hpp"

#include <hangar/plugin.hpp>

#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace {

using hangar::Error;
using hangar::json;
using hangar::Request;
using hangar::Response;
using hangar::Validation;
using namespace hangar::computer;
using Clock = std::chrono::steady_clock;

void pause_ms(double ms) {
    if (ms > 0) std::this_thread::sleep_for(std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000)));
}

// ---- reading bodies -------------------------------------------------------------------------------

class Body {
public:
    Body(const json &j, std::string prefix, Validation &v) : j_(j), prefix_(std::move(prefix)), v_(v) {}

    std::string field(const std::string &name) const { return prefix_ + name; }
    bool has(const std::string &name) const { return j_.contains(name) && !j_[name].is_null(); }
    void fail(const std::string &name, const std::string &problem) const { v_.fail(field(name), problem); }

    std::optional<double> number(const std::string &name, bool required, double min = -1e9, double max = 1e9) const {
        if (!has(name)) {
            if (required) fail(name, "is required");
            return std::nullopt;
        }
        if (!j_[name].is_number()) {
            fail(name, "must be a number");
            return std::nullopt;
        }
        double d = j_[name].get<double>();
        if (d < min || d > max) {
            fail(name, "must be between " + std::to_string(static_cast<long long>(min)) + " and " +
                           std::to_string(static_cast<long long>(max)));
            return std::nullopt;
        }
        return d;
    }

    std::optional<std::string> string(const std::string &name, bool required) const {
        if (!has(name)) {
            if (required) fail(name, "is required");
            return std::nullopt;
        }
        if (!j_[name].is_string()) {
            fail(name, "must be a string");
            return std::nullopt;
        }
        return j_[name].get<std::string>();
    }

    std::optional<bool> boolean(const std::string &name, bool required) const {
        if (!has(name)) {
            if (required) fail(name, "is required");
            return std::nullopt;
        }
        if (!j_[name].is_boolean()) {
            fail(name, "must be a boolean");
            return std::nullopt;
        }
        return j_[name].get<bool>();
    }

    std::vector<Key> keys(const std::string &name, bool required) const {
        std::vector<Key> out;
        if (!has(name)) {
            if (required) fail(name, "is required");
            return out;
        }
        if (!j_[name].is_array()) {
            fail(name, "must be an array of key names");
            return out;
        }
        for (std::size_t i = 0; i < j_[name].size(); ++i) {
            const json &k = j_[name][i];
            auto combo = k.is_string() ? parse_combo(k.get<std::string>()) : std::nullopt;
            if (!combo) {
                v_.fail(field(name) + "[" + std::to_string(i) + "]",
                        "is not a key name (xdotool/X11 keysyms such as Return, Ctrl, F5, or combos such as Ctrl+t)");
                continue;
            }
            out.insert(out.end(), combo->begin(), combo->end());
        }
        return out;
    }

    const json &raw() const { return j_; }

private:
    const json &j_;
    std::string prefix_;
    Validation &v_;
};

// A point that must be on the screen: the error names the field that is off it.
std::pair<int, int> point(const Body &b, const std::string &xname, const std::string &yname, const Size &screen) {
    auto x = b.number(xname, true);
    auto y = b.number(yname, true);
    int xi = x ? static_cast<int>(std::lround(*x)) : 0, yi = y ? static_cast<int>(std::lround(*y)) : 0;
    if (x && (xi < 0 || xi >= screen.width))
        b.fail(xname, "is outside the screen (0 to " + std::to_string(screen.width - 1) + ")");
    if (y && (yi < 0 || yi >= screen.height))
        b.fail(yname, "is outside the screen (0 to " + std::to_string(screen.height - 1) + ")");
    return {xi, yi};
}

std::optional<Button> button(const Body &b, bool drag) {
    auto name = b.string("button", false).value_or("left");
    if (name == "left") return Button::Left;
    if (name == "middle") return Button::Middle;
    if (name == "right") return Button::Right;
    if (!drag && name == "back") return Button::Back;
    if (!drag && name == "forward") return Button::Forward;
    b.fail("button", drag ? "must be left, middle or right" : "must be left, right, middle, back or forward");
    return std::nullopt;
}

// ---- actions: parsed (and so validated) first, run after -----------------------------------------

using Action = std::function<void(Screen &)>;

// Modifier keys held for the length of an action.
class Held {
public:
    Held(Screen &s, const std::vector<Key> &keys) : s_(s), keys_(keys) {
        for (const auto &k : keys_)
            s_.key(k, true);
    }
    Held(const Held &) = delete;
    Held &operator=(const Held &) = delete;
    ~Held() {
        for (auto it = keys_.rbegin(); it != keys_.rend(); ++it)
            try {
                s_.key(*it, false);
            } catch (...) {
                // releasing is best effort once the display is gone
            }
    }

private:
    Screen &s_;
    std::vector<Key> keys_;
};

// A human-looking path from a to b: a cubic Bezier with two random control points, eased.
std::vector<std::pair<int, int>> smooth_path(std::pair<int, int> a, std::pair<int, int> b, int steps) {
    static thread_local std::mt19937 rng{std::random_device{}()};
    double dx = b.first - a.first, dy = b.second - a.second;
    double dist = std::hypot(dx, dy);
    std::uniform_real_distribution<double> off(-0.25 * dist, 0.25 * dist), along(0.2, 0.8);
    auto control = [&](double t) {
        return std::pair<double, double>{a.first + dx * t - dy / (dist + 1) * off(rng),
                                         a.second + dy * t + dx / (dist + 1) * off(rng)};
    };
    auto c1 = control(along(rng) * 0.5), c2 = control(0.5 + along(rng) * 0.5);
    std::vector<std::pair<int, int>> out;
    for (int i = 1; i <= steps; ++i) {
        double t = static_cast<double>(i) / steps;
        t = t * t * (3 - 2 * t); // ease in and out
        double u = 1 - t;
        double x = u * u * u * a.first + 3 * u * u * t * c1.first + 3 * u * t * t * c2.first + t * t * t * b.first;
        double y = u * u * u * a.second + 3 * u * u * t * c1.second + 3 * u * t * t * c2.second + t * t * t * b.second;
        out.emplace_back(static_cast<int>(std::lround(x)), static_cast<int>(std::lround(y)));
    }
    out.back() = b;
    return out;
}

void glide(Screen &s, std::pair<int, int> from, std::pair<int, int> to, double duration_ms) {
    double dist = std::hypot(to.first - from.first, to.second - from.second);
    if (duration_ms < 0) duration_ms = std::clamp(dist * 0.6, 80.0, 900.0); // auto: longer for farther
    int steps = std::clamp(static_cast<int>(duration_ms / 8), 2, 200);
    for (auto [x, y] : smooth_path(from, to, steps)) {
        s.move(x, y);
        pause_ms(duration_ms / steps);
    }
}

Action parse_click(const Body &b, const Size &screen) {
    auto at = point(b, "x", "y", screen);
    auto btn = button(b, false);
    auto type = b.string("click_type", false).value_or("click");
    if (type != "click" && type != "down" && type != "up") b.fail("click_type", "must be down, up or click");
    auto n = static_cast<int>(b.number("num_clicks", false, 1, 100).value_or(1));
    auto hold = b.keys("hold_keys", false);
    return [=](Screen &s) {
        Held held(s, hold);
        s.move(at.first, at.second);
        for (int i = 0; i < (type == "click" ? n : 1); ++i) {
            if (type != "up") s.button(*btn, true);
            if (type != "down") s.button(*btn, false);
        }
    };
}

Action parse_move(const Body &b, const Size &screen) {
    auto to = point(b, "x", "y", screen);
    bool smooth = b.boolean("smooth", false).value_or(false);
    double duration = b.number("duration_ms", false, 0, 60000).value_or(-1);
    auto hold = b.keys("hold_keys", false);
    return [=](Screen &s) {
        Held held(s, hold);
        if (smooth)
            glide(s, s.pointer(), to, duration);
        else
            s.move(to.first, to.second);
    };
}

Action parse_drag(const Body &b, const Size &screen) {
    std::vector<std::pair<int, int>> path;
    if (!b.has("path") || !b.raw()["path"].is_array() || b.raw()["path"].size() < 2) {
        b.fail("path", "must be a list of at least 2 [x, y] points");
    } else {
        for (std::size_t i = 0; i < b.raw()["path"].size(); ++i) {
            const json &p = b.raw()["path"][i];
            std::string name = b.field("path") + "[" + std::to_string(i) + "]";
            if (!p.is_array() || p.size() != 2 || !p[0].is_number() || !p[1].is_number()) {
                b.fail("path[" + std::to_string(i) + "]", "must be [x, y]");
                continue;
            }
            json xy = {{"x", p[0]}, {"y", p[1]}};
            Validation inner;
            Body pb(xy, "", inner);
            path.push_back(point(pb, "x", "y", screen));
            if (!inner.ok()) b.fail("path[" + std::to_string(i) + "]", "is outside the screen");
        }
    }
    auto btn = button(b, true);
    double delay = b.number("delay", false, 0, 60000).value_or(0);
    bool smooth = b.boolean("smooth", false).value_or(false);
    double duration = b.number("duration_ms", false, 0, 60000).value_or(-1);
    int steps = static_cast<int>(b.number("steps_per_segment", false, 1, 1000).value_or(10));
    double step_delay = b.number("step_delay_ms", false, 0, 10000).value_or(0);
    auto hold = b.keys("hold_keys", false);
    return [=](Screen &s) {
        Held held(s, hold);
        s.move(path[0].first, path[0].second);
        s.button(*btn, true);
        pause_ms(delay);
        for (std::size_t i = 1; i < path.size(); ++i) {
            if (smooth) {
                glide(s, path[i - 1], path[i], duration < 0 ? -1 : duration / static_cast<double>(path.size() - 1));
                continue;
            }
            for (int k = 1; k <= steps; ++k) {
                double t = static_cast<double>(k) / steps;
                s.move(static_cast<int>(std::lround(path[i - 1].first + (path[i].first - path[i - 1].first) * t)),
                       static_cast<int>(std::lround(path[i - 1].second + (path[i].second - path[i - 1].second) * t)));
                pause_ms(step_delay);
            }
        }
        s.button(*btn, false);
    };
}

Action parse_scroll(const Body &b, const Size &screen) {
    auto at = point(b, "x", "y", screen);
    int dx = static_cast<int>(b.number("delta_x", false, -1000, 1000).value_or(0));
    int dy = static_cast<int>(b.number("delta_y", false, -1000, 1000).value_or(0));
    auto hold = b.keys("hold_keys", false);
    return [=](Screen &s) {
        Held held(s, hold);
        s.move(at.first, at.second);
        s.wheel(dx, dy);
    };
}

Action parse_type(const Body &b) {
    auto text = b.string("text", true).value_or("");
    double delay = b.number("delay", false, 0, 10000).value_or(0);
    return [=](Screen &s) {
        bool first = true;
        for (char32_t cp : utf8_to_codepoints(text)) {
            if (!first) pause_ms(delay);
            first = false;
            s.type_char(cp);
        }
    };
}

Action parse_press(const Body &b) {
    std::vector<std::vector<Key>> combos;
    if (!b.has("keys") || !b.raw()["keys"].is_array() || b.raw()["keys"].empty()) {
        b.fail("keys", "must be a non-empty array of key names or combos such as Ctrl+a");
    } else {
        for (std::size_t i = 0; i < b.raw()["keys"].size(); ++i) {
            const json &k = b.raw()["keys"][i];
            auto combo = k.is_string() ? parse_combo(k.get<std::string>()) : std::nullopt;
            if (combo)
                combos.push_back(*combo);
            else
                b.fail("keys[" + std::to_string(i) + "]", "is not a key name or combo (e.g. Return, F5, Ctrl+a)");
        }
    }
    double hold_ms = b.number("duration", false, 0, 60000).value_or(0);
    auto hold = b.keys("hold_keys", false);
    return [=](Screen &s) {
        Held held(s, hold);
        for (const auto &combo : combos) {
            for (const auto &k : combo)
                s.key(k, true);
            pause_ms(hold_ms);
            for (auto it = combo.rbegin(); it != combo.rend(); ++it)
                s.key(*it, false);
        }
    };
}

Action parse_cursor(const Body &b) {
    bool hidden = b.boolean("hidden", true).value_or(false);
    return [=](Screen &s) { s.cursor_hidden(hidden); };
}

Action parse_sleep(const Body &b) {
    double ms = b.number("duration_ms", true, 0, 60000).value_or(0);
    return [=](Screen &) { pause_ms(ms); };
}

struct BatchStep {
    std::string type;
    Action run;
};

std::vector<BatchStep> parse_batch(const json &body, Validation &v, const Size &screen) {
    std::vector<BatchStep> steps;
    if (!body.contains("actions") || !body["actions"].is_array()) {
        v.fail("actions", "must be an array of actions");
        return steps;
    }
    static const std::map<std::string, std::string> payload_key = {
        {"click_mouse", "click_mouse"}, {"move_mouse", "move_mouse"},
        {"type_text", "type_text"},     {"press_key", "press_key"},
        {"scroll", "scroll"},           {"drag_mouse", "drag_mouse"},
        {"set_cursor", "set_cursor"},   {"sleep", "sleep"}};
    const json &actions = body["actions"];
    for (std::size_t i = 0; i < actions.size(); ++i) {
        std::string at = "actions[" + std::to_string(i) + "]";
        const json &a = actions[i];
        if (!a.is_object() || !a.contains("type") || !a["type"].is_string()) {
            v.fail(at + ".type", "is required");
            continue;
        }
        std::string type = a["type"].get<std::string>();
        auto key = payload_key.find(type);
        if (key == payload_key.end()) {
            v.fail(at + ".type", "must be one of click_mouse, move_mouse, type_text, press_key, scroll, drag_mouse, "
                                 "set_cursor, sleep");
            continue;
        }
        if (!a.contains(key->second) || !a[key->second].is_object()) {
            v.fail(at + "." + key->second, "is required for type " + type);
            continue;
        }
        Body b(a[key->second], at + "." + key->second + ".", v);
        Action run;
        if (type == "click_mouse") run = parse_click(b, screen);
        if (type == "move_mouse") run = parse_move(b, screen);
        if (type == "type_text") run = parse_type(b);
        if (type == "press_key") run = parse_press(b);
        if (type == "scroll") run = parse_scroll(b, screen);
        if (type == "drag_mouse") run = parse_drag(b, screen);
        if (type == "set_cursor") run = parse_cursor(b);
        if (type == "sleep") run = parse_sleep(b);
        steps.push_back({type, std::move(run)});
    }
    return steps;
}

class ComputerPlugin final : public hangar::Plugin {
public:
    void stop() override {
        std::lock_guard lock(screen_m_);
        screen_.reset();
    }

private:
    void start_server() override {
        for (const char *op : {"batch", "screenshot", "click_mouse", "drag_mouse", "get_mouse_position", "move_mouse",
                               "press_key", "clipboard/read", "scroll", "cursor", "type", "clipboard/write"}) {
            std::string path = std::string("/computer/") + op;
            route("POST", "/browsers/{id}" + path,
                  [this, path](Request &q, Response &r) { relay_to_session(q, r, path); });
        }
    }

    void start_instance() override {
        // For the live view in this agent: the clipboard in both directions.
        service("computer.clipboard_write", [this](const json &in) {
            screen().clipboard_write(in.value("text", ""));
            return json::object();
        });
        service("computer.clipboard_read", [this](const json &) { return json{{"text", screen().clipboard_read()}}; });
        auto simple = [this](const char *op, auto parse) {
            route("POST", std::string("/computer/") + op, [this, parse](Request &q, Response &r) {
                act(q, r, [&](const json &body, Validation &v, const Size &screen) {
                    Body b(body, "", v);
                    return parse(b, screen);
                });
            });
        };
        simple("click_mouse", [](const Body &b, const Size &s) { return parse_click(b, s); });
        simple("move_mouse", [](const Body &b, const Size &s) { return parse_move(b, s); });
        simple("drag_mouse", [](const Body &b, const Size &s) { return parse_drag(b, s); });
        simple("scroll", [](const Body &b, const Size &s) { return parse_scroll(b, s); });
        simple("type", [](const Body &b, const Size &) { return parse_type(b); });
        simple("press_key", [](const Body &b, const Size &) { return parse_press(b); });
        simple("clipboard/write", [](const Body &b, const Size &) -> Action {
            auto text = b.string("text", true).value_or("");
            return [text](Screen &s) { s.clipboard_write(text); };
        });

        route("POST", "/computer/cursor", [this](Request &q, Response &r) {
            act(q, r, [](const json &body, Validation &v, const Size &) { return parse_cursor(Body(body, "", v)); });
            r.json({{"ok", true}});
        });
        route("POST", "/computer/batch", [this](Request &q, Response &r) { batch(q, r); });
        route("POST", "/computer/screenshot", [this](Request &q, Response &r) { screenshot(q, r); });
        route("POST", "/computer/get_mouse_position", [this](Request &, Response &r) {
            auto t0 = Clock::now();
            auto [x, y] = screen().pointer();
            timing(r, t0);
            r.json({{"x", x}, {"y", y}});
        });
        route("POST", "/computer/clipboard/read", [this](Request &, Response &r) {
            auto t0 = Clock::now();
            auto text = screen().clipboard_read();
            timing(r, t0);
            r.json({{"text", text}});
        });
    }

    // Headful: the X display the browsers plugin started; headless: the first page over CDP.
    Screen &screen() {
        std::lock_guard lock(screen_m_);
        if (!screen_) {
            auto info = locate();
            if (info.display)
                screen_ = make_x11_screen(*info.display);
            else
                screen_ = make_cdp_screen([this] { return locate(); });
        }
        return *screen_;
    }

    ChromiumInfo locate() const {
        json st = call("browsers.chromium", json::object());
        ChromiumInfo info;
        if (auto d = st.value("display", json()); d.is_string() && d.get<std::string>().size() > 1)
            info.display = std::stoi(d.get<std::string>().substr(1));
        info.port = st.value("port", json(0)).is_number() ? st["port"].get<int>() : 0;
        return info;
    }

    static void timing(Response &r, Clock::time_point t0) {
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        r.header("Server-Timing", "action;dur=" + std::to_string(ms));
    }

    template <typename Parse> void act(Request &req, Response &res, Parse parse) {
        json body = req.json_body(false);
        Screen &s = screen();
        Validation v;
        Action run = parse(body, v, s.size());
        v.throw_if_failed("invalid computer action");
        auto t0 = Clock::now();
        try {
            run(s);
        } catch (const Error &) {
            throw; // already the answer (a 4xx the screen chose)
        } catch (const std::runtime_error &e) {
            throw Error::internal(std::string("the action failed: ") + e.what());
        }
        timing(res, t0);
        res.no_content();
    }

    void batch(Request &req, Response &res) {
        json body = req.json_body(false);
        Screen &s = screen();
        Validation v;
        auto steps = parse_batch(body, v, s.size());
        v.throw_if_failed("invalid batch: nothing was run");
        auto t0 = Clock::now();
        for (std::size_t i = 0; i < steps.size(); ++i) {
            try {
                steps[i].run(s);
            } catch (const Error &e) {
                throw Error(e.status(), e.code(),
                            "batch stopped at actions[" + std::to_string(i) + "] (" + steps[i].type + "): " + e.what() +
                                "; " + std::to_string(i) + " action(s) before it ran");
            } catch (const std::exception &e) {
                throw Error(500, "internal",
                            "batch stopped at actions[" + std::to_string(i) + "] (" + steps[i].type + "): " + e.what() +
                                "; " + std::to_string(i) + " action(s) before it ran");
            }
        }
        timing(res, t0);
        res.no_content();
    }

    void screenshot(Request &req, Response &res) {
        json body = req.json_body(true);
        Screen &s = screen();
        Size size = s.size();
        std::optional<Region> region;
        if (body.contains("region") && !body["region"].is_null()) {
            Validation v;
            if (!body["region"].is_object()) {
                v.fail("region", "must be {x, y, width, height}");
            } else {
                Body b(body["region"], "region.", v);
                auto x = b.number("x", true, 0, size.width - 1), y = b.number("y", true, 0, size.height - 1);
                auto w = b.number("width", true, 1, size.width), h = b.number("height", true, 1, size.height);
                if (x && y && w && h) {
                    region =
                        Region{static_cast<int>(*x), static_cast<int>(*y), static_cast<int>(*w), static_cast<int>(*h)};
                    if (region->x + region->width > size.width) v.fail("region.width", "reaches past the screen");
                    if (region->y + region->height > size.height) v.fail("region.height", "reaches past the screen");
                }
            }
            v.throw_if_failed("invalid screenshot region");
        }
        auto t0 = Clock::now();
        std::string png;
        try {
            png = s.screenshot(region);
        } catch (const std::runtime_error &e) {
            throw Error::internal(std::string("the screenshot failed: ") + e.what());
        }
        timing(res, t0);
        res.body("image/png", png);
    }

    std::mutex screen_m_;
    std::unique_ptr<Screen> screen_;
};

} // namespace

HANGAR_PLUGIN(ComputerPlugin, "computer", "0.1.0", "browsers", nullptr, 0)
