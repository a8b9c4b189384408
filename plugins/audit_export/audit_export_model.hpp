// Continuous audit-log export's pure logic (kernel-api-0131.md §1F): the rules of a destination's
// fields, how entries are cut into objects (never across a UTC hour, never past an entry too new to
// be certain no earlier one is still being written), the objects' keys and bodies, and the S3
// request's address. Nothing here talks to the host or the network, so tests/unit links it.
#pragma once

#include <hangar/plugin.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hangar::audit_export {

using json = nlohmann::json;

// S3's bucket naming rules: 3-63 of [a-z0-9.-], starting and ending with a letter or digit, no
// "..", not shaped like an IPv4 address.
std::string check_bucket(const json &value, const std::string &field);
// A key prefix: at most 512 bytes, no control characters, no "." or ".." segment; slashes at both
// ends are dropped ("" = the bucket's root).
std::string check_prefix(const json &value, const std::string &field);
// An AWS region name: 1-32 of [a-z0-9-].
std::string check_region(const json &value, const std::string &field);
// Server-side encryption: "AES256" (default), "aws:kms" (with kms_key_id), or "none".
std::string check_sse(const json &value, const std::string &field);

struct Entry {
    std::int64_t seq = 0;
    std::int64_t ts_ms = 0;
    json entry;
};

// How many entries from the front of `entries` (oldest first) go into the next object: up to
// `max`, stopping before the first entry whose UTC hour differs from the first one's (an object's
// hour partition contains all of its rows) and before the first entry written at or after
// `settled_before_ms` (a younger one may still have an earlier sequence number in flight on
// another node). 0 when even the first is too young.
std::size_t chunk_size(const std::vector<Entry> &entries, std::int64_t settled_before_ms, std::size_t max);

// `<prefix>/destination_id=<id>/org_id=<org>/date=YYYY-MM-DD/hour=HH/<first>-<last>.jsonl.gz`:
// Hive partitions from the first entry's UTC time, the name from the sequence range, so a retry of
// the same range rewrites the same object.
std::string object_key(const std::string &prefix, const std::string &destination_id, const std::string &org_id,
                       std::int64_t first_ts_ms, std::int64_t first_seq, std::int64_t last_seq);
// One JSON object per line: the entry as GET /audit-logs renders it plus `event_id` (the entry's
// sequence number as text, what consumers deduplicate on).
std::string jsonl(const std::vector<Entry> &entries, std::size_t count);
// The opaque cursor a destination shows: "v1:<seq>".
std::string cursor_text(std::int64_t seq);

// Where an object is PUT: with `endpoint` (an S3-compatible server), path style
// `<endpoint>/<bucket>/<key>`; without, AWS's virtual-hosted `https://<bucket>.s3.<region>.amazonaws.com/<key>`.
// `path` is not URI-encoded (the signer and the request line encode it once).
struct S3Address {
    std::string scheme_host; // "http://127.0.0.1:9000"
    std::string host;        // the Host header ("127.0.0.1:9000")
    std::string path;        // "/bucket/key"
};
S3Address s3_address(const std::string &endpoint, const std::string &region, const std::string &bucket,
                     const std::string &key);
// The headers that ask for server-side encryption.
std::vector<std::pair<std::string, std::string>> sse_headers(const std::string &sse, const std::string &kms_key_id);

// ---- role assumption (STS AssumeRole) -------------------------------------------------------------

// An IAM role ARN: arn:<partition>:iam::<12 digits>:role/<path and name>, at most 2048 bytes.
std::string check_role_arn(const json &value, const std::string &field);
// The form body of STS AssumeRole (Version 2011-06-15) for `role_arn`, with the destination's
// external id (the confused-deputy guard the role's trust policy checks) and a session name.
std::string assume_role_body(const std::string &role_arn, const std::string &session_name,
                             const std::string &external_id, int duration_seconds);
// What STS answered: the temporary keys and when they expire, or the error's <Code>.
struct AssumedRole {
    std::string access_key_id, secret_access_key, session_token;
    std::int64_t expires_ms = 0;
    std::string error_code; // set when the answer holds no credentials
};
AssumedRole parse_assume_role(const std::string &xml, std::int64_t now_ms);

} // namespace hangar::audit_export
