#include "relay_watch.hpp"

#include "util.hpp"

#include <algorithm>

namespace hangar::host {

// ---- MethodScanner -------------------------------------------------------------------------------

void MethodScanner::reset() {
    *this = MethodScanner();
}

MethodScanner::State MethodScanner::feed(char ch) {
    if (state_ != State::scanning) return state_;
    const bool space = ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
    if (!started_) {
        if (space) return state_;
        if (ch != '{') return state_ = State::gave_up;
        started_ = true;
        depth_ = 1;
        expect_ = Expect::key;
        return state_;
    }
    if (in_string_) {
        if (escape_) {
            escape_ = false;
        } else if (ch == '\\') {
            escape_ = true;
            // A key with an escape is not "method"; a method name with one is not reported.
            capture_key_ = false;
            if (capture_value_) return state_ = State::gave_up;
        } else if (ch == '"') {
            in_string_ = false;
            if (capture_value_) return state_ = State::found;
            if (capture_key_) {
                capture_key_ = false;
                expect_ = key_ == "method" ? Expect::method_colon : Expect::other;
            }
        } else if (capture_key_) {
            if (key_.size() < 7)
                key_ += ch;
            else
                capture_key_ = false;
        } else if (capture_value_) {
            if (value_.size() >= kMaxMethod) return state_ = State::gave_up;
            value_ += ch;
        }
        return state_;
    }
    if (space) return state_;
    switch (ch) {
    case '"':
        in_string_ = true;
        if (depth_ == 1 && expect_ == Expect::key) {
            capture_key_ = true;
            key_.clear();
        } else if (depth_ == 1 && expect_ == Expect::method_value) {
            capture_value_ = true;
            value_.clear();
        }
        if (expect_ != Expect::key) expect_ = Expect::other;
        break;
    case ':':
        if (depth_ == 1) expect_ = expect_ == Expect::method_colon ? Expect::method_value : Expect::other;
        break;
    case ',':
        if (depth_ == 1) expect_ = Expect::key;
        break;
    case '{':
    case '[':
        ++depth_;
        expect_ = Expect::other;
        break;
    case '}':
    case ']':
        if (--depth_ <= 0) return state_ = State::gave_up; // the object ended without a method
        break;
    default:
        if (depth_ == 1) expect_ = Expect::other; // a number, true, false or null
        break;
    }
    return state_;
}

// ---- WsFrameReader -------------------------------------------------------------------------------

void WsFrameReader::feed(const char *data, std::size_t len) {
    std::size_t i = 0;
    while (i < len && !dead_) {
        if (in_head_) {
            // The upgrade's answer: only a 101 is followed by frames.
            auto c = static_cast<std::uint8_t>(data[i++]);
            if (status_.size() < 12) status_ += static_cast<char>(c);
            head_tail_ = (head_tail_ << 8) | c;
            if (head_tail_ == 0x0d0a0d0au) {
                in_head_ = false;
                if (status_.size() < 12 || status_.compare(9, 3, "101") != 0) dead_ = true;
            }
            continue;
        }
        if (!in_payload_) {
            header_[header_len_++] = static_cast<std::uint8_t>(data[i++]);
            if (header_len_ < 2) continue;
            std::size_t need = 2;
            const std::uint8_t len7 = header_[1] & 0x7f;
            need += len7 == 126 ? 2 : (len7 == 127 ? 8 : 0);
            need += (header_[1] & 0x80) ? 4 : 0;
            if (header_len_ == need) frame_header_done();
            continue;
        }
        auto n = static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, len - i));
        payload(data + i, n);
        i += n;
        remaining_ -= n;
        if (remaining_ == 0) frame_done();
    }
}

void WsFrameReader::frame_header_done() {
    const bool fin = (header_[0] & 0x80) != 0;
    const bool rsv1 = (header_[0] & 0x40) != 0;
    const int opcode = header_[0] & 0x0f;
    masked_ = (header_[1] & 0x80) != 0;
    const std::uint8_t len7 = header_[1] & 0x7f;
    std::size_t at = 2;
    std::uint64_t length = len7;
    if (len7 == 126 || len7 == 127) {
        const std::size_t bytes = len7 == 126 ? 2 : 8;
        length = 0;
        for (std::size_t k = 0; k < bytes; ++k)
            length = (length << 8) | header_[at + k];
        at += bytes;
    }
    if (masked_) std::copy(header_ + at, header_ + at + 4, mask_);
    header_len_ = 0;
    mask_pos_ = 0;
    control_ = opcode >= 8;
    if (control_) {
        if (opcode == 8) sent_close_ = true;
    } else {
        if (opcode == 1 || opcode == 2) {
            message_text_ = opcode == 1;
            message_compressed_ = rsv1;
            scanner_.reset();
            scan_ = on_method_ && message_text_ && !message_compressed_;
        }
        fin_ = fin;
    }
    remaining_ = length;
    in_payload_ = true;
    if (remaining_ == 0) frame_done();
}

void WsFrameReader::frame_done() {
    in_payload_ = false;
    if (!control_ && fin_) {
        ++messages_;
        scan_ = false;
    }
}

void WsFrameReader::payload(const char *data, std::size_t n) {
    if (control_ || !scan_) {
        mask_pos_ += n;
        return;
    }
    for (std::size_t k = 0; k < n; ++k) {
        char ch = data[k];
        if (masked_) ch = static_cast<char>(static_cast<std::uint8_t>(ch) ^ mask_[mask_pos_ & 3]);
        ++mask_pos_;
        auto st = scanner_.feed(ch);
        if (st == MethodScanner::State::scanning) continue;
        scan_ = false; // the rest of the message is only counted
        if (st == MethodScanner::State::found) on_method_(scanner_.method());
        return;
    }
}

// ---- RelayObservers ------------------------------------------------------------------------------

namespace {

hangar_str hs(const std::string &s) {
    return {s.data(), s.size()};
}

class RelayWatcher final : public SpliceWatcher {
public:
    struct Target {
        std::shared_ptr<RelayObservers::Observer> observer;
        std::uint32_t flags;
    };

    RelayWatcher(std::uint64_t id, std::string key, std::string path, std::string client_path,
                 std::vector<Target> targets, bool frames)
        : id_(id), key_(std::move(key)), path_(std::move(path)), client_path_(std::move(client_path)),
          targets_(std::move(targets)), frames_(frames), started_(steady_ms()),
          client_(false, [this](const std::string &m) { method(m); }), upstream_(true, nullptr) {}

    void bytes(bool from_client, const char *data, std::size_t len) override {
        if (!frames_) return;
        auto &reader = from_client ? client_ : upstream_;
        reader.feed(data, len);
        if (first_close_ == 0 && reader.sent_close()) first_close_ = from_client ? 1 : 2;
    }

    void closed(SpliceEnd end) override {
        static const char *const kNames[] = {"client_close", "client_error", "upstream_close", "upstream_error",
                                             "shutdown"};
        std::string reason = first_close_ == 1   ? "client_close"
                             : first_close_ == 2 ? "upstream_close"
                                                 : kNames[static_cast<int>(end)];
        hangar_relay_event ev = base(HANGAR_RELAY_CLOSED);
        ev.reason = hs(reason);
        ev.message_count = client_.messages() + upstream_.messages();
        ev.duration_ms = static_cast<std::uint64_t>(std::max<std::int64_t>(0, steady_ms() - started_));
        for (auto &t : targets_)
            if ((t.flags & HANGAR_RELAY_WATCH_CLOSE) && t.observer->live.load()) t.observer->fn(t.observer->user, &ev);
    }

private:
    hangar_relay_event base(std::uint32_t kind) const {
        hangar_relay_event ev{};
        ev.struct_size = sizeof(hangar_relay_event);
        ev.kind = kind;
        ev.relay_id = id_;
        ev.activity_key = hs(key_);
        ev.path = hs(path_);
        ev.client_path = hs(client_path_);
        return ev;
    }

    void method(const std::string &m) {
        hangar_relay_event ev = base(HANGAR_RELAY_MESSAGE);
        ev.method = hs(m);
        for (auto &t : targets_)
            if ((t.flags & HANGAR_RELAY_WATCH_MESSAGES) && t.observer->live.load())
                t.observer->fn(t.observer->user, &ev);
    }

    std::uint64_t id_;
    std::string key_, path_, client_path_;
    std::vector<Target> targets_;
    bool frames_;
    std::int64_t started_;
    WsFrameReader client_, upstream_;
    int first_close_ = 0; // 1: the client sent the first WebSocket close, 2: the upstream did
};

} // namespace

void RelayObservers::add(const std::string &owner, const std::string &path_prefix, hangar_relay_fn fn, void *user) {
    auto o = std::make_shared<Observer>();
    o->owner = owner;
    o->prefix = path_prefix;
    o->fn = fn;
    o->user = user;
    std::lock_guard lock(mutex_);
    observers_.push_back(std::move(o));
    any_ = true;
}

void RelayObservers::remove_owned_by(const std::string &owner) {
    std::lock_guard lock(mutex_);
    std::erase_if(observers_, [&](const auto &o) {
        if (o->owner != owner) return false;
        o->live = false;
        return true;
    });
    any_ = !observers_.empty();
}

std::vector<std::shared_ptr<RelayObservers::Observer>> RelayObservers::matching(const std::string &path) {
    std::vector<std::shared_ptr<Observer>> found;
    std::lock_guard lock(mutex_);
    for (const auto &o : observers_)
        if (path.compare(0, o->prefix.size(), o->prefix) == 0) found.push_back(o);
    return found;
}

bool RelayObservers::watches(const std::string &path) {
    return any_.load(std::memory_order_relaxed) && !matching(path).empty();
}

std::unique_ptr<SpliceWatcher> RelayObservers::open(const std::string &activity_key, const std::string &path,
                                                    const std::string &client_path, bool websocket) {
    if (!any_.load(std::memory_order_relaxed)) return nullptr;
    auto observers = matching(path);
    if (observers.empty()) return nullptr;
    const std::uint64_t id = next_id_++;
    hangar_relay_event ev{};
    ev.struct_size = sizeof(hangar_relay_event);
    ev.kind = HANGAR_RELAY_OPENED;
    ev.relay_id = id;
    ev.activity_key = hs(activity_key);
    ev.path = hs(path);
    ev.client_path = hs(client_path);
    std::vector<RelayWatcher::Target> targets;
    bool frames = false;
    for (auto &o : observers) {
        std::uint32_t flags = o->fn(o->user, &ev);
        if (flags == 0) continue;
        frames = frames || (websocket && (flags & HANGAR_RELAY_WATCH_MESSAGES));
        targets.push_back({std::move(o), flags});
    }
    if (targets.empty()) return nullptr;
    return std::make_unique<RelayWatcher>(id, activity_key, path, client_path, std::move(targets), frames);
}

} // namespace hangar::host
