// OTLP/HTTP's two encodings of one ExportLogsServiceRequest. logs_request builds the request
// once, as OTLP JSON; the binary form is protobuf's own parse of that JSON into the generated
// message, so the two can never say different things (README, "Encodings").
#include "export_model.hpp"

#include <opentelemetry/proto/collector/logs/v1/logs_service.pb.h>

#include <google/protobuf/util/json_util.h>

#include <limits>
#include <stdexcept>

namespace hangar::telemetry::otlp {

namespace {

using opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest;
using opentelemetry::proto::collector::logs::v1::ExportLogsServiceResponse;

void from_json(const std::string &text, google::protobuf::Message &message) {
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false; // a field the schema lacks is a bug the unit tests catch
    auto status = google::protobuf::util::JsonStringToMessage(text, &message, options);
    if (!status.ok()) throw std::runtime_error("OTLP JSON does not fit the protobuf schema: " + status.ToString());
}

} // namespace

std::optional<Encoding> parse_encoding(std::string_view text) {
    if (text == "protobuf") return Encoding::protobuf;
    if (text == "json") return Encoding::json;
    return std::nullopt;
}

const char *content_type(Encoding encoding) {
    return encoding == Encoding::protobuf ? "application/x-protobuf" : "application/json";
}

std::string encode_request(const json &request, Encoding encoding) {
    std::string text = request.dump(-1, ' ', false, json::error_handler_t::replace);
    if (encoding == Encoding::json) return text;
    ExportLogsServiceRequest message;
    from_json(text, message);
    std::string bytes;
    if (!message.SerializeToString(&bytes)) throw std::runtime_error("ExportLogsServiceRequest does not serialize");
    return bytes;
}

json decode_protobuf_request(std::string_view bytes) {
    ExportLogsServiceRequest message;
    if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
        !message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
        throw std::runtime_error("not an ExportLogsServiceRequest");
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_enums_as_ints = true;
    std::string text;
    auto status = google::protobuf::util::MessageToJsonString(message, &text, options);
    if (!status.ok()) throw std::runtime_error(status.ToString());
    return json::parse(text);
}

std::string encode_protobuf_response(const json &response) {
    ExportLogsServiceResponse message;
    from_json(response.dump(), message);
    return message.SerializeAsString();
}

std::uint64_t rejected_records(std::string_view body, Encoding encoding) {
    std::int64_t rejected = 0;
    if (encoding == Encoding::protobuf) {
        ExportLogsServiceResponse message;
        if (body.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()) &&
            message.ParseFromArray(body.data(), static_cast<int>(body.size())))
            rejected = message.partial_success().rejected_log_records();
    } else {
        auto answer = json::parse(body, nullptr, false);
        if (answer.is_object() && answer.contains("partialSuccess") && answer["partialSuccess"].is_object()) {
            const auto &n = answer["partialSuccess"].value("rejectedLogRecords", json(0));
            if (n.is_number_integer())
                rejected = n.get<std::int64_t>();
            else if (n.is_string())
                try {
                    rejected = std::stoll(n.get<std::string>());
                } catch (const std::exception &) {
                    rejected = 0; // not a count: nothing is known to be rejected
                }
        }
    }
    return rejected > 0 ? static_cast<std::uint64_t>(rejected) : 0;
}

} // namespace hangar::telemetry::otlp
