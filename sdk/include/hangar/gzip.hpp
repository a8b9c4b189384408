// gzip of a whole body in memory (audit log chunks and export objects). Header-only; link
// Poco::Foundation.
#pragma once

#include <Poco/DeflatingStream.h>
#include <Poco/InflatingStream.h>
#include <Poco/StreamCopier.h>

#include <sstream>
#include <string>

namespace hangar {

inline std::string gzip(const std::string &data) {
    std::ostringstream out;
    Poco::DeflatingOutputStream z(out, Poco::DeflatingStreamBuf::STREAM_GZIP);
    z.write(data.data(), static_cast<std::streamsize>(data.size()));
    z.close();
    return out.str();
}

inline std::string gunzip(const std::string &data) {
    std::istringstream in(data);
    Poco::InflatingInputStream z(in, Poco::InflatingStreamBuf::STREAM_GZIP);
    std::string out;
    Poco::StreamCopier::copyToString(z, out);
    return out;
}

} // namespace hangar
