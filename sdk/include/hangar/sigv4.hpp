// AWS Signature Version 4 (the `Authorization: AWS4-HMAC-SHA256 ...` header) for requests the
// server sends to S3-compatible stores. Debian has no maintained C++ signer (libs3 2.0 signs V2
// only; the AWS C++ SDK is not packaged), so this is the algorithm as AWS publishes it, checked
// in tests/unit/sdk_sigv4_test.cpp against AWS's published examples.
//
// Header-only; hashes with libsodium (link `sodium`), like hangar/secrets.hpp.
//
//   hangar::sigv4::Request r{"PUT", "/bucket/key.jsonl.gz", {}, {{"host", "s3.example"}}, sha256_hex(body)};
//   r.headers.emplace_back("x-amz-date", amz_date);  r.headers.emplace_back("x-amz-content-sha256", r.payload_hash);
//   auth = hangar::sigv4::authorization(r, creds, "us-east-1", "s3", amz_date);
#pragma once

#include <hangar/secrets.hpp>
#include <hangar/text.hpp>

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hangar::sigv4 {

struct Credentials {
    std::string access_key_id;
    std::string secret_access_key;
    std::string session_token; // empty: none (static keys)
};

struct Request {
    std::string method;
    std::string path; // not encoded: "/bucket/a key/x.gz" (each segment is encoded once, as S3 wants)
    std::vector<std::pair<std::string, std::string>> query;   // not encoded
    std::vector<std::pair<std::string, std::string>> headers; // every header to sign, host included
    std::string payload_hash;                                 // lower-case hex SHA-256, or UNSIGNED-PAYLOAD
};

// The payload hash SigV4 wants is the one API keys are stored by: lower-case hex SHA-256.
using secrets::sha256_hex;

// Raw 32-byte HMAC-SHA256 of `data` under `key` (any length).
inline std::string hmac(std::string_view key, std::string_view data) {
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char *>(key.data()), key.size());
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char *>(data.data()), data.size());
    unsigned char out[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_final(&st, out);
    return {reinterpret_cast<const char *>(out), sizeof out};
}

// RFC 3986 unreserved characters stay, every other byte is %XX (upper-case); '/' stays when
// `keep_slash` (a path).
inline std::string uri_encode(std::string_view s, bool keep_slash) {
    static constexpr char digits[] = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
            out += static_cast<char>(c);
        } else {
            out += '%';
            out += digits[c >> 4];
            out += digits[c & 0xf];
        }
    }
    return out;
}

// "20130524T000000Z" for a time point.
inline std::string amz_date(std::chrono::system_clock::time_point t) {
    std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm tm{};
    ::gmtime_r(&tt, &tm);
    char buf[17];
    std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
    return buf;
}

namespace detail {
inline std::string trim_collapse(std::string_view v) {
    std::string out;
    bool space = false;
    for (char c : v) {
        if (c == ' ' || c == '\t') {
            space = !out.empty();
            continue;
        }
        if (space) out += ' ';
        space = false;
        out += c;
    }
    return out;
}
} // namespace detail

// "host;x-amz-date;...": the names signed, lower-case, sorted.
inline std::string signed_headers(const Request &r) {
    std::vector<std::string> names;
    for (const auto &[k, _] : r.headers)
        names.push_back(lower(k));
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::string out;
    for (const auto &n : names)
        out += (out.empty() ? "" : ";") + n;
    return out;
}

inline std::string canonical_request(const Request &r) {
    std::vector<std::pair<std::string, std::string>> q;
    for (const auto &[k, v] : r.query)
        q.emplace_back(uri_encode(k, false), uri_encode(v, false));
    std::sort(q.begin(), q.end());
    std::string query;
    for (const auto &[k, v] : q) {
        if (!query.empty()) query += '&';
        query += k;
        query += '=';
        query += v;
    }
    // Headers of one name (case-insensitive) join their values with commas, in the order given.
    std::vector<std::pair<std::string, std::string>> h;
    for (const auto &[k, v] : r.headers) {
        std::string name = lower(k), value = detail::trim_collapse(v);
        auto it = std::find_if(h.begin(), h.end(), [&](const auto &e) { return e.first == name; });
        if (it == h.end())
            h.emplace_back(name, value);
        else
            it->second += "," + value;
    }
    std::stable_sort(h.begin(), h.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    std::string headers;
    for (const auto &[k, v] : h) {
        headers += k;
        headers += ':';
        headers += v;
        headers += '\n';
    }
    std::string path = r.path.empty() ? "/" : uri_encode(r.path, true);
    return r.method + "\n" + path + "\n" + query + "\n" + headers + "\n" + signed_headers(r) + "\n" + r.payload_hash;
}

// <date>/<region>/<service>/aws4_request
inline std::string scope(std::string_view amz_date, std::string_view region, std::string_view service) {
    return std::string(amz_date.substr(0, 8)) + "/" + std::string(region) + "/" + std::string(service) +
           "/aws4_request";
}

inline std::string string_to_sign(const Request &r, std::string_view amz_date, std::string_view region,
                                  std::string_view service) {
    return "AWS4-HMAC-SHA256\n" + std::string(amz_date) + "\n" + scope(amz_date, region, service) + "\n" +
           sha256_hex(canonical_request(r));
}

inline std::string signature(const Request &r, const Credentials &c, std::string_view amz_date, std::string_view region,
                             std::string_view service) {
    std::string key = hmac("AWS4" + c.secret_access_key, amz_date.substr(0, 8));
    key = hmac(key, region);
    key = hmac(key, service);
    key = hmac(key, "aws4_request");
    std::string sig = hmac(key, string_to_sign(r, amz_date, region, service));
    return hex(sig);
}

// The Authorization header's value. `r.headers` must already hold every header that is sent and
// signed (host, x-amz-date, x-amz-content-sha256 for S3, x-amz-security-token with a session).
inline std::string authorization(const Request &r, const Credentials &c, std::string_view amz_date,
                                 std::string_view region, std::string_view service) {
    return "AWS4-HMAC-SHA256 Credential=" + c.access_key_id + "/" + scope(amz_date, region, service) +
           ", SignedHeaders=" + signed_headers(r) + ", Signature=" + signature(r, c, amz_date, region, service);
}

} // namespace hangar::sigv4
