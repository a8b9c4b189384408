// The crypto service for secrets at rest (credential values, TOTP secrets, provider tokens, proxy
// passwords): libsodium's crypto_secretbox (XSalsa20-Poly1305) with a fresh random nonce per
// value, under one 32-byte key kept in a file in the data dir.
//
// Header-only like the rest of the SDK: a plugin compiles its own copy and links libsodium
// (`sodium`; Debian libsodium-dev), so nothing crosses the C ABI and the host needs no new
// function. The host includes it too, for `hangar admin rotate-secrets-key`.
//
//   hangar::Secrets secrets(hangar::secrets::key_file(config("secrets.key_file"),
//                                                     config("server.data_dir")));
//   std::string sealed = secrets.seal("p4ssw0rd");   // "hs1:<key id>:<base64 nonce|box>"
//   std::string plain = secrets.open(sealed);         // throws secrets::Error if it does not verify
//
// A table column that holds sealed values is declared to the host in a migration, so rotation
// finds it:  INSERT INTO secret_columns (owner, table_name, id_column, column_name)
//            VALUES ('<plugin>', '<table>', '<primary key column>', '<column>')
// Such a column holds sealed text or NULL, nothing else.
//
// Key files: `<path>` is the current key (created on first use, 0600); rotation keeps the one
// before it in `<path>.previous`, so a value a running server sealed while the rotation ran still
// opens (the next rotation re-seals it). Every sealed value names its key, and Secrets re-reads
// the files when they change on disk, so a running server follows a rotation without a restart.
#pragma once

#include <hangar/text.hpp>

#include <sodium.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace hangar {
namespace secrets {

// Never carries a secret in its message: only paths and what went wrong.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline void init() {
    // Thread-safe and idempotent; 1 means it was already done.
    if (sodium_init() < 0) throw Error("libsodium could not be initialised");
}

// Lower-case hex SHA-256 (how API keys are stored, and archive checksums).
inline std::string sha256_hex(std::string_view data) {
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(digest, reinterpret_cast<const unsigned char *>(data.data()), data.size());
    return hex({reinterpret_cast<const char *>(digest), sizeof digest});
}

// The key file to use: the configured one (`[secrets] key_file`, HANGAR_SECRETS_KEY_FILE), else
// `<data dir>/secrets.key`.
inline std::string key_file(const std::optional<std::string> &configured, const std::optional<std::string> &data_dir) {
    if (configured && !configured->empty()) return *configured;
    return (data_dir && !data_dir->empty() ? *data_dir : std::string(".data")) + "/secrets.key";
}

class Key {
public:
    static constexpr std::size_t size = crypto_secretbox_KEYBYTES;

    static Key generate() {
        init();
        Key k;
        randombytes_buf(k.bytes_.data(), k.bytes_.size());
        k.derive_id();
        return k;
    }
    static Key from_bytes(std::string_view raw) {
        if (raw.size() != size) throw Error("a secrets key is " + std::to_string(size) + " bytes");
        init();
        Key k;
        std::memcpy(k.bytes_.data(), raw.data(), size);
        k.derive_id();
        return k;
    }
    Key(const Key &) = default;
    Key &operator=(const Key &) = default;
    ~Key() { sodium_memzero(bytes_.data(), bytes_.size()); }

    // 8 hex digits of a hash of the key: says which key sealed a value, reveals nothing of it.
    const std::string &id() const { return id_; }
    std::string_view bytes() const { return {reinterpret_cast<const char *>(bytes_.data()), bytes_.size()}; }

    // nonce | MAC | ciphertext
    std::string seal_raw(std::string_view plaintext) const {
        std::string out(crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + plaintext.size(), '\0');
        auto *nonce = reinterpret_cast<unsigned char *>(out.data());
        randombytes_buf(nonce, crypto_secretbox_NONCEBYTES);
        crypto_secretbox_easy(nonce + crypto_secretbox_NONCEBYTES,
                              reinterpret_cast<const unsigned char *>(plaintext.data()), plaintext.size(), nonce,
                              bytes_.data());
        return out;
    }
    std::optional<std::string> open_raw(std::string_view box) const {
        if (box.size() < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES) return std::nullopt;
        const auto *nonce = reinterpret_cast<const unsigned char *>(box.data());
        const auto *cipher = nonce + crypto_secretbox_NONCEBYTES;
        std::size_t cipher_len = box.size() - crypto_secretbox_NONCEBYTES;
        std::string out(cipher_len - crypto_secretbox_MACBYTES, '\0');
        if (crypto_secretbox_open_easy(reinterpret_cast<unsigned char *>(out.data()), cipher, cipher_len, nonce,
                                       bytes_.data()) != 0)
            return std::nullopt;
        return out;
    }

private:
    Key() = default;
    void derive_id() {
        std::array<unsigned char, crypto_generichash_BYTES_MIN> hash{};
        crypto_generichash(hash.data(), hash.size(), bytes_.data(), bytes_.size(), nullptr, 0);
        static constexpr char hex[] = "0123456789abcdef";
        id_.clear();
        for (std::size_t i = 0; i < 4; ++i) {
            id_.push_back(hex[hash[i] >> 4]);
            id_.push_back(hex[hash[i] & 0xf]);
        }
    }

    std::array<unsigned char, size> bytes_{};
    std::string id_;
};

inline constexpr std::string_view kFormat = "hs1";

inline std::string base64(std::string_view raw) {
    std::string out(sodium_base64_ENCODED_LEN(raw.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
    sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char *>(raw.data()), raw.size(),
                      sodium_base64_VARIANT_ORIGINAL);
    out.resize(std::strlen(out.c_str()));
    return out;
}
inline std::optional<std::string> unbase64(std::string_view text) {
    std::string out(text.size(), '\0');
    std::size_t len = 0;
    if (sodium_base642bin(reinterpret_cast<unsigned char *>(out.data()), out.size(), text.data(), text.size(), nullptr,
                          &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0)
        return std::nullopt;
    out.resize(len);
    return out;
}

// "hs1:<key id>:<base64>" → (key id, raw box); nullopt for anything else.
inline std::optional<std::pair<std::string, std::string>> parse_sealed(std::string_view sealed) {
    if (sealed.size() < kFormat.size() + 11 || sealed.substr(0, kFormat.size()) != kFormat ||
        sealed[kFormat.size()] != ':' || sealed[kFormat.size() + 9] != ':')
        return std::nullopt;
    auto raw = unbase64(sealed.substr(kFormat.size() + 10));
    if (!raw) return std::nullopt;
    return std::make_pair(std::string(sealed.substr(kFormat.size() + 1, 8)), std::move(*raw));
}

// The current key, and the one before it when a rotation left it.
class Keyring {
public:
    explicit Keyring(const Key &current, const std::optional<Key> &previous = std::nullopt)
        : current_(current), previous_(previous) {}

    const Key &current() const { return current_; }

    std::string seal(std::string_view plaintext) const {
        return std::string(kFormat) + ":" + current_.id() + ":" + base64(current_.seal_raw(plaintext));
    }
    // True when this keyring holds the key `sealed` names (whether or not it then verifies).
    bool knows(std::string_view sealed) const {
        auto parsed = parse_sealed(sealed);
        return parsed && find(parsed->first) != nullptr;
    }
    std::string open(std::string_view sealed) const {
        auto parsed = parse_sealed(sealed);
        if (!parsed) throw Error("a stored secret is not in the sealed format");
        const Key *key = find(parsed->first);
        if (!key) throw Error("a stored secret was sealed with a key this server does not have");
        auto plain = key->open_raw(parsed->second);
        if (!plain) throw Error("a stored secret does not verify: it was altered or the key is wrong");
        return std::move(*plain);
    }

private:
    const Key *find(const std::string &id) const {
        if (current_.id() == id) return &current_;
        if (previous_ && previous_->id() == id) return &*previous_;
        return nullptr;
    }

    Key current_;
    std::optional<Key> previous_;
};

namespace detail {

// Which file a path names and when it last changed, to notice a replaced key file.
struct Stamp {
    ino_t ino = 0;
    long long mtime_ns = -1;
    bool operator==(const Stamp &) const = default;
};

inline std::string errno_text() {
    return std::strerror(errno);
}

inline std::optional<Key> read_key(const std::string &path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        throw Error("cannot read the secrets key " + path + ": " + errno_text());
    }
    std::array<char, Key::size + 1> buf{};
    std::size_t got = 0;
    while (got < buf.size()) {
        ssize_t n = ::read(fd, buf.data() + got, buf.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    if (got != Key::size)
        throw Error("the secrets key " + path + " is not " + std::to_string(Key::size) + " bytes long");
    auto key = Key::from_bytes({buf.data(), got});
    sodium_memzero(buf.data(), buf.size());
    return key;
}

inline void fsync_dir_of(const std::string &path) {
    auto slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

// A new 0600 file holding the key, written and synced under a unique temporary name.
inline std::string write_temp(const std::string &path, const Key &key) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(randombytes_random());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) throw Error("cannot create the secrets key " + path + ": " + errno_text());
    auto bytes = key.bytes();
    bool ok = ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
        ::unlink(tmp.c_str());
        throw Error("cannot write the secrets key " + path);
    }
    return tmp;
}

} // namespace detail

// The current key at `path`, created (32 random bytes, 0600) when there is none yet. Several
// processes racing here all end up with the same key: the file appears at once through link().
inline Key load_or_create_key(const std::string &path) {
    if (auto key = detail::read_key(path)) return *key;
    Key fresh = Key::generate();
    std::string tmp = detail::write_temp(path, fresh);
    int rc = ::link(tmp.c_str(), path.c_str());
    int err = errno;
    ::unlink(tmp.c_str());
    if (rc != 0) {
        if (err != EEXIST) throw Error("cannot create the secrets key " + path + ": " + std::strerror(err));
        return *detail::read_key(path);
    }
    detail::fsync_dir_of(path);
    return fresh;
}

inline Keyring load_keyring(const std::string &path) {
    return Keyring(load_or_create_key(path), detail::read_key(path + ".previous"));
}

// Makes `next` the current key and the current one `<path>.previous`. Rotation calls it after
// re-sealing every value and before committing: until the commit either key opens them all.
inline void install_key(const std::string &path, const Key &next) {
    Key current = load_or_create_key(path);
    std::string prev_tmp = detail::write_temp(path + ".previous", current);
    if (::rename(prev_tmp.c_str(), (path + ".previous").c_str()) != 0) {
        ::unlink(prev_tmp.c_str());
        throw Error("cannot keep the previous secrets key: " + detail::errno_text());
    }
    std::string next_tmp = detail::write_temp(path, next);
    if (::rename(next_tmp.c_str(), path.c_str()) != 0) {
        ::unlink(next_tmp.c_str());
        throw Error("cannot install the new secrets key: " + detail::errno_text());
    }
    detail::fsync_dir_of(path);
}

} // namespace secrets

// What a plugin holds: the keyring of one key file, re-read when the file changes (a rotation by
// `hangar admin rotate-secrets-key` while the server runs). Thread-safe.
class Secrets {
public:
    explicit Secrets(std::string key_path) : path_(std::move(key_path)) {
        std::lock_guard lock(mutex_);
        refresh_locked(true);
    }

    std::string seal(std::string_view plaintext) {
        std::lock_guard lock(mutex_);
        refresh_locked(false);
        return ring_->seal(plaintext);
    }
    // Throws secrets::Error when `sealed` does not open (altered, or sealed under a lost key).
    std::string open(std::string_view sealed) {
        std::lock_guard lock(mutex_);
        refresh_locked(false);
        if (!ring_->knows(sealed)) refresh_locked(true);
        return ring_->open(sealed);
    }
    const std::string &path() const { return path_; }

private:
    using Stamp = secrets::detail::Stamp;
    static Stamp stamp(const std::string &path) {
        struct stat st {};
        if (::stat(path.c_str(), &st) != 0) return {};
        return {st.st_ino, static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec};
    }
    void refresh_locked(bool force) {
        auto now = std::make_pair(stamp(path_), stamp(path_ + ".previous"));
        if (!force && ring_ && now == stamps_) return;
        ring_.emplace(secrets::load_keyring(path_));
        stamps_ = std::make_pair(stamp(path_), stamp(path_ + ".previous"));
    }

    std::string path_;
    std::mutex mutex_;
    std::optional<secrets::Keyring> ring_;
    std::pair<Stamp, Stamp> stamps_;
};

} // namespace hangar
