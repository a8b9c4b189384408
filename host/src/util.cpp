#include "util.hpp"

#include <Poco/DigestEngine.h>
#include <Poco/SHA2Engine.h>

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace hangar::host {

std::string random_token(std::size_t length) {
    static constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::string out;
    out.reserve(length);
    unsigned char buf[64];
    while (out.size() < length) {
        ssize_t n = getrandom(buf, sizeof buf, 0);
        if (n <= 0) throw std::system_error(errno, std::generic_category(), "getrandom");
        for (ssize_t i = 0; i < n && out.size() < length; ++i) {
            // 252 = 7 * 36: reject the tail so every character is equally likely.
            if (buf[i] < 252) out.push_back(alphabet[buf[i] % alphabet.size()]);
        }
    }
    return out;
}

std::string sha256_hex(std::string_view data) {
    Poco::SHA2Engine engine(Poco::SHA2Engine::SHA_256);
    engine.update(data.data(), static_cast<unsigned>(data.size()));
    return Poco::DigestEngine::digestToHex(engine.digest());
}

std::vector<std::string> split(std::string_view text, char sep) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (true) {
        auto pos = text.find(sep, start);
        out.emplace_back(text.substr(start, pos == std::string_view::npos ? std::string_view::npos : pos - start));
        if (pos == std::string_view::npos) break;
        start = pos + 1;
    }
    return out;
}

std::string trim(std::string_view text) {
    auto b = text.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    auto e = text.find_last_not_of(" \t\r\n");
    return std::string(text.substr(b, e - b + 1));
}

std::int64_t now_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::int64_t steady_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

std::string rfc3339(std::int64_t epoch_ms) {
    std::time_t secs = static_cast<std::time_t>(epoch_ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                  tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(epoch_ms % 1000));
    return buf;
}

std::string read_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_file_atomic(const std::string &path, std::string_view data, unsigned mode) {
    std::string tmp = path + ".tmp-" + random_token(8);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "open " + tmp);
    std::size_t off = 0;
    while (off < data.size()) {
        ssize_t n = ::write(fd, data.data() + off, data.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            throw std::system_error(err, std::generic_category(), "write " + tmp);
        }
        off += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        ::unlink(tmp.c_str());
        throw std::system_error(errno, std::generic_category(), "close " + tmp);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw std::system_error(err, std::generic_category(), "rename " + tmp);
    }
}

} // namespace hangar::host
