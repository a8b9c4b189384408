// Where the host keeps its state: `[store] url` in hangar.ini or HANGAR_STORE_URL.
//   sqlite:<path>                                  one file (the default: <data dir>/hangar.db)
//   postgresql://user:pass@host:port/db?opt=value  a PostgreSQL database
// Parsing is separate from opening so bad input is refused before anything is touched, and so
// every message can name the setting without ever echoing the password.
#pragma once

#include <map>
#include <string>

namespace hangar::host {

// The name every store error message uses for the setting.
inline constexpr const char *kStoreSetting = "[store] url / HANGAR_STORE_URL";

struct StoreUrl {
    enum class Kind { sqlite, postgresql };
    Kind kind = Kind::sqlite;
    std::string path; // sqlite
    std::string user, password, host, dbname;
    unsigned port = 5432;
    std::map<std::string, std::string> options; // postgresql query options (sslmode, connect_timeout)

    // The URL as it may appear in logs and errors: the password is replaced by ***.
    std::string redacted() const;
    // A libpq "key='value' ..." connection string (connect_timeout defaults to 5 s).
    std::string conninfo() const;
};

// `url` empty means the default SQLite file under `data_dir`. Throws StoreError naming the setting.
StoreUrl parse_store_url(const std::string &url, const std::string &data_dir);

} // namespace hangar::host
