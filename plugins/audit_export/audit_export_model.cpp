#include "audit_export_model.hpp"

#include <hangar/resource.hpp>
#include <hangar/sigv4.hpp>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <regex>

namespace hangar::audit_export {

namespace {
const std::string &text(const json &value, const std::string &field) {
    if (!value.is_string()) throw Error::invalid(field, "must be a string");
    return value.get_ref<const std::string &>();
}
} // namespace

std::string check_bucket(const json &value, const std::string &field) {
    const std::string &b = text(value, field);
    if (b.size() < 3 || b.size() > 63) throw Error::invalid(field, "must be 3 to 63 characters");
    if (!std::all_of(b.begin(), b.end(),
                     [](unsigned char c) { return std::islower(c) || std::isdigit(c) || c == '.' || c == '-'; }))
        throw Error::invalid(field, "may hold lower-case letters, digits, dots and hyphens only");
    if (!std::isalnum(static_cast<unsigned char>(b.front())) || !std::isalnum(static_cast<unsigned char>(b.back())))
        throw Error::invalid(field, "must start and end with a letter or digit");
    if (b.find("..") != std::string::npos) throw Error::invalid(field, "must not contain two dots in a row");
    int dots = 0;
    bool digits_and_dots = true;
    for (char c : b) {
        if (c == '.')
            ++dots;
        else if (!std::isdigit(static_cast<unsigned char>(c)))
            digits_and_dots = false;
    }
    if (digits_and_dots && dots == 3) throw Error::invalid(field, "must not look like an IP address");
    return b;
}

std::string check_prefix(const json &value, const std::string &field) {
    std::string p = text(value, field);
    if (p.size() > 512) throw Error::invalid(field, "must be at most 512 bytes");
    if (std::any_of(p.begin(), p.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
        throw Error::invalid(field, "must not contain control characters");
    while (!p.empty() && p.front() == '/')
        p.erase(0, 1);
    while (!p.empty() && p.back() == '/')
        p.pop_back();
    std::size_t start = 0;
    while (start <= p.size() && !p.empty()) {
        auto end = p.find('/', start);
        std::string seg = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (seg.empty() || seg == "." || seg == "..")
            throw Error::invalid(field, "must not have empty, \".\" or \"..\" segments");
        if (end == std::string::npos) break;
        start = end + 1;
    }
    return p;
}

std::string check_region(const json &value, const std::string &field) {
    const std::string &r = text(value, field);
    if (r.empty() || r.size() > 32 || !std::all_of(r.begin(), r.end(), [](unsigned char c) {
            return std::islower(c) || std::isdigit(c) || c == '-';
        }))
        throw Error::invalid(field, "must be a region name such as us-east-1");
    return r;
}

std::string check_sse(const json &value, const std::string &field) {
    const std::string &s = text(value, field);
    if (s != "AES256" && s != "aws:kms" && s != "none") throw Error::invalid(field, "must be AES256, aws:kms or none");
    return s;
}

namespace {
std::tm utc(std::int64_t ms) {
    std::time_t t = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    return tm;
}
} // namespace

std::size_t chunk_size(const std::vector<Entry> &entries, std::int64_t settled_before_ms, std::size_t max) {
    std::size_t n = 0;
    const std::int64_t hour = entries.empty() ? 0 : entries.front().ts_ms / 3'600'000;
    for (const auto &e : entries) {
        if (n == max || e.ts_ms >= settled_before_ms || e.ts_ms / 3'600'000 != hour) break;
        ++n;
    }
    return n;
}

std::string object_key(const std::string &prefix, const std::string &destination_id, const std::string &org_id,
                       std::int64_t first_ts_ms, std::int64_t first_seq, std::int64_t last_seq) {
    std::tm tm = utc(first_ts_ms);
    char part[40];
    std::strftime(part, sizeof part, "date=%Y-%m-%d/hour=%H", &tm);
    std::string key = prefix.empty() ? "" : prefix + "/";
    key += "destination_id=" + destination_id + "/org_id=" + org_id + "/" + part + "/";
    // Zero-padded so the objects of one hour list in order.
    char name[64];
    std::snprintf(name, sizeof name, "%012lld-%012lld.jsonl.gz", static_cast<long long>(first_seq),
                  static_cast<long long>(last_seq));
    return key + name;
}

std::string jsonl(const std::vector<Entry> &entries, std::size_t count) {
    std::string out;
    for (std::size_t i = 0; i < count && i < entries.size(); ++i) {
        json line = entries[i].entry;
        line["event_id"] = std::to_string(entries[i].seq);
        out += line.dump() + "\n";
    }
    return out;
}

std::string cursor_text(std::int64_t seq) {
    return "v1:" + std::to_string(seq);
}

S3Address s3_address(const std::string &endpoint, const std::string &region, const std::string &bucket,
                     const std::string &key) {
    S3Address a;
    if (endpoint.empty()) {
        a.host = bucket + ".s3." + region + ".amazonaws.com";
        a.scheme_host = "https://" + a.host;
        a.path = "/" + key;
        return a;
    }
    std::string base = endpoint;
    while (!base.empty() && base.back() == '/')
        base.pop_back();
    auto scheme_end = base.find("://");
    std::string rest = scheme_end == std::string::npos ? base : base.substr(scheme_end + 3);
    auto slash = rest.find('/');
    a.host = rest.substr(0, slash);
    std::string base_path = slash == std::string::npos ? "" : rest.substr(slash);
    a.scheme_host = base.substr(0, base.size() - base_path.size());
    a.path = base_path + "/" + bucket + "/" + key;
    return a;
}

std::vector<std::pair<std::string, std::string>> sse_headers(const std::string &sse, const std::string &kms_key_id) {
    if (sse == "aws:kms") {
        std::vector<std::pair<std::string, std::string>> h = {{"x-amz-server-side-encryption", "aws:kms"}};
        if (!kms_key_id.empty()) h.emplace_back("x-amz-server-side-encryption-aws-kms-key-id", kms_key_id);
        return h;
    }
    if (sse == "AES256") return {{"x-amz-server-side-encryption", "AES256"}};
    return {};
}

std::string check_role_arn(const json &value, const std::string &field) {
    if (!value.is_string()) throw Error::invalid(field, "must be a string");
    std::string arn = value.get<std::string>();
    static const std::regex shape(R"(arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512})");
    if (arn.size() > 2048 || !std::regex_match(arn, shape))
        throw Error::invalid(field, "must be an IAM role ARN (arn:aws:iam::<account>:role/<name>)");
    return arn;
}

std::string assume_role_body(const std::string &role_arn, const std::string &session_name,
                             const std::string &external_id, int duration_seconds) {
    auto enc = [](const std::string &v) { return hangar::sigv4::uri_encode(v, false); };
    return "Action=AssumeRole&DurationSeconds=" + std::to_string(duration_seconds) + "&ExternalId=" + enc(external_id) +
           "&RoleArn=" + enc(role_arn) + "&RoleSessionName=" + enc(session_name) + "&Version=2011-06-15";
}

namespace {
// The text of the first <tag>…</tag> in `xml` (STS answers are small and flat enough for this; no
// entity in them matters to us), or "".
std::string xml_text(const std::string &xml, const std::string &tag) {
    const std::string open = "<" + tag + ">", close = "</" + tag + ">";
    auto at = xml.find(open);
    if (at == std::string::npos) return {};
    at += open.size();
    auto end = xml.find(close, at);
    return end == std::string::npos ? std::string() : xml.substr(at, end - at);
}
} // namespace

AssumedRole parse_assume_role(const std::string &xml, std::int64_t now_ms) {
    AssumedRole r;
    const std::string credentials = xml_text(xml, "Credentials");
    r.access_key_id = xml_text(credentials, "AccessKeyId");
    r.secret_access_key = xml_text(credentials, "SecretAccessKey");
    r.session_token = xml_text(credentials, "SessionToken");
    if (r.access_key_id.empty() || r.secret_access_key.empty() || r.session_token.empty()) {
        r = {};
        r.error_code = xml_text(xml, "Code").substr(0, 64);
        if (r.error_code.empty()) r.error_code = "no_credentials";
        return r;
    }
    // Expiration is RFC 3339; a time not read is taken as 15 minutes (STS's shortest session).
    const auto expires_us = hangar::parse_rfc3339_us(xml_text(credentials, "Expiration"));
    r.expires_ms = expires_us ? *expires_us / 1000 : now_ms + std::int64_t{15} * 60 * 1000;
    return r;
}

} // namespace hangar::audit_export
