// Relay observers (hangar_host_v1::relay_observe): plugins told when a spliced relay opens and
// closes, and optionally the "method" of each client WebSocket message, read on the fly out of
// the bytes the event loop copies anyway. The relay stays a byte relay: nothing is buffered or
// changed, and a relay nobody asked to watch is spliced exactly as before.
#pragma once

#include "event_loop.hpp"

#include <hangar/plugin.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hangar::host {

class RelayObservers {
public:
    void add(const std::string &owner, const std::string &path_prefix, hangar_relay_fn fn, void *user);
    // A stopped plugin's observers are called no more, also by relays that are still open.
    void remove_owned_by(const std::string &owner);

    // Whether a relay to `path` would be announced to an observer.
    bool watches(const std::string &path);
    // Announces a relay about to be spliced to every observer whose prefix matches `path`.
    // Returns the watcher to hand to EventLoop::splice, or null when no observer wants more.
    std::unique_ptr<SpliceWatcher> open(const std::string &activity_key, const std::string &path,
                                        const std::string &client_path, bool websocket);

    struct Observer {
        std::string owner;
        std::string prefix;
        hangar_relay_fn fn;
        void *user;
        std::atomic<bool> live{true};
    };

private:
    // The observers whose prefix `path` starts with.
    std::vector<std::shared_ptr<Observer>> matching(const std::string &path);

    std::mutex mutex_;
    std::vector<std::shared_ptr<Observer>> observers_;
    std::atomic<std::uint64_t> next_id_{1};
    std::atomic<bool> any_{false}; // a relay pays one atomic load when nobody observes
};

// Finds a JSON object's top-level "method" string in a stream of bytes, one byte at a time,
// without building anything: depth and string state, and the few bytes of the key and value.
// Public for the unit test.
class MethodScanner {
public:
    enum class State { scanning, found, gave_up };
    State feed(char ch);
    State state() const { return state_; }
    const std::string &method() const { return value_; }
    void reset();

    static constexpr std::size_t kMaxMethod = 256;

private:
    enum class Expect { key, method_colon, method_value, other };
    State state_ = State::scanning;
    int depth_ = 0;
    bool in_string_ = false, escape_ = false, started_ = false;
    bool capture_key_ = false, capture_value_ = false;
    std::string key_, value_;
    Expect expect_ = Expect::other;
};

// WebSocket framing read out of a byte stream (one direction of a splice): frame headers,
// unmasking of the payload a MethodScanner is fed. Public for the unit test.
class WsFrameReader {
public:
    // `on_method`, when set, gets the method of each text message that names one.
    WsFrameReader(bool skip_http_head, std::function<void(const std::string &)> on_method)
        : in_head_(skip_http_head), on_method_(std::move(on_method)) {}
    void feed(const char *data, std::size_t len);
    std::uint64_t messages() const { return messages_; }
    bool sent_close() const { return sent_close_; }

private:
    bool in_head_;
    std::function<void(const std::string &)> on_method_;
    std::uint32_t head_tail_ = 0; // the last 4 bytes of the HTTP head, for its end
    std::string status_;          // the start of its status line
    bool dead_ = false;           // not WebSocket framing after all (an error answer)
    std::uint8_t header_[14] = {};
    std::size_t header_len_ = 0;
    std::uint64_t remaining_ = 0; // payload bytes of the current frame still to come
    bool in_payload_ = false;
    bool masked_ = false;
    std::uint8_t mask_[4] = {};
    std::uint64_t mask_pos_ = 0;
    bool control_ = false, fin_ = false, scan_ = false;
    bool message_text_ = false, message_compressed_ = false, in_message_ = false;
    MethodScanner scanner_;
    std::uint64_t messages_ = 0;
    bool sent_close_ = false;
    void frame_header_done();
    void frame_done();
    void payload(const char *data, std::size_t n);
};

} // namespace hangar::host
