// The host's half of the secrets service (sdk/include/hangar/secrets.hpp): the registry of
// columns that hold sealed values, and `hangar admin rotate-secrets-key`.
#pragma once

#include "config.hpp"
#include "store.hpp"

#include <cstddef>
#include <string>

namespace hangar::host {

// Creates `secret_columns`, where plugins declare (in their migrations) each column that holds
// values sealed by hangar::Secrets. Runs before any plugin migration.
void migrate_secret_registry(Store &store);

// `[secrets] key_file` / HANGAR_SECRETS_KEY_FILE, else <data dir>/secrets.key.
std::string secrets_key_file(const Config &cfg, const std::string &data_dir);

struct Rotation {
    std::size_t values = 0; // sealed values re-sealed
    std::string key_id;     // the new key's id
};

// Re-seals every value in every declared column under a new key, in one transaction; the new key
// becomes current (the old one `<key_file>.previous`) just before the commit. A value that does
// not open aborts the whole rotation and changes nothing.
Rotation rotate_secrets_key(Store &store, const std::string &key_file);

} // namespace hangar::host
