// OTLP/HTTP's two encodings of one ExportLogsServiceRequest. logs_request builds the request
// once, as OTLP JSON; the binary form is protobuf's own parse of that JSON into the message, so
// the two can never say different things (README, "Encodings"). The messages are dynamic ones of
// a private DescriptorPool built from the embedded schema (CMakeLists.txt says why not generated
// classes).
#include "export_model.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>

#include <limits>
#include <memory>
#include <stdexcept>

namespace hangar::telemetry::otlp {

// protoc's FileDescriptorSet of proto/ (generated/otlp/logs_descriptor_set.cc).
extern const unsigned char kLogsDescriptorSet[];
extern const std::size_t kLogsDescriptorSetSize;

namespace {

namespace pb = google::protobuf;

class Schema {
public:
    Schema() {
        pb::FileDescriptorSet set;
        if (!set.ParseFromArray(kLogsDescriptorSet, static_cast<int>(kLogsDescriptorSetSize)))
            throw std::runtime_error("the embedded OTLP schema does not parse");
        for (const auto &file : set.file()) // dependencies first (protoc --include_imports)
            if (pool_.BuildFile(file) == nullptr)
                throw std::runtime_error("the embedded OTLP schema does not build: " + file.name());
        request_ = prototype("opentelemetry.proto.collector.logs.v1.ExportLogsServiceRequest");
        response_ = prototype("opentelemetry.proto.collector.logs.v1.ExportLogsServiceResponse");
        partial_success_ = response_->GetDescriptor()->FindFieldByName("partial_success");
        rejected_ =
            partial_success_ ? partial_success_->message_type()->FindFieldByName("rejected_log_records") : nullptr;
        if (!partial_success_ || !rejected_) throw std::runtime_error("the embedded OTLP schema lacks partial_success");
    }
    // Prototypes' New() is safe from any thread; the factory is only used above.
    std::unique_ptr<pb::Message> request() const { return std::unique_ptr<pb::Message>(request_->New()); }
    std::unique_ptr<pb::Message> response() const { return std::unique_ptr<pb::Message>(response_->New()); }
    std::int64_t rejected(const pb::Message &response) const {
        const auto &ps = response.GetReflection()->GetMessage(response, partial_success_);
        return ps.GetReflection()->GetInt64(ps, rejected_);
    }

private:
    const pb::Message *prototype(const char *name) {
        const auto *d = pool_.FindMessageTypeByName(name);
        if (d == nullptr) throw std::runtime_error(std::string("the embedded OTLP schema lacks ") + name);
        return factory_.GetPrototype(d);
    }
    pb::DescriptorPool pool_;
    pb::DynamicMessageFactory factory_{&pool_};
    const pb::Message *request_ = nullptr, *response_ = nullptr;
    const pb::FieldDescriptor *partial_success_ = nullptr, *rejected_ = nullptr;
};

const Schema &schema() {
    static const Schema s;
    return s;
}

void from_json(const std::string &text, pb::Message &message) {
    pb::util::JsonParseOptions options;
    options.ignore_unknown_fields = false; // a field the schema lacks is a bug the unit tests catch
    auto status = pb::util::JsonStringToMessage(text, &message, options);
    if (!status.ok()) throw std::runtime_error("OTLP JSON does not fit the protobuf schema: " + status.ToString());
}

bool parse(std::string_view bytes, pb::Message &message) {
    return bytes.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()) &&
           message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
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
    auto message = schema().request();
    from_json(text, *message);
    std::string bytes;
    if (!message->SerializeToString(&bytes)) throw std::runtime_error("ExportLogsServiceRequest does not serialize");
    return bytes;
}

json decode_protobuf_request(std::string_view bytes) {
    auto message = schema().request();
    if (!parse(bytes, *message)) throw std::runtime_error("not an ExportLogsServiceRequest");
    pb::util::JsonPrintOptions options;
    options.always_print_enums_as_ints = true;
    std::string text;
    auto status = pb::util::MessageToJsonString(*message, &text, options);
    if (!status.ok()) throw std::runtime_error(status.ToString());
    return json::parse(text);
}

std::string encode_protobuf_response(const json &response) {
    auto message = schema().response();
    from_json(response.dump(), *message);
    return message->SerializeAsString();
}

std::uint64_t rejected_records(std::string_view body, Encoding encoding) {
    std::int64_t rejected = 0;
    if (encoding == Encoding::protobuf) {
        auto message = schema().response();
        if (parse(body, *message)) rejected = schema().rejected(*message);
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
