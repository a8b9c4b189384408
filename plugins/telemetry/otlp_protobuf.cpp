// OTLP/HTTP's two encodings of one ExportLogsServiceRequest. logs_request builds the request
// once, as OTLP JSON; the binary form is that JSON set field by field onto the message (proto3's
// JSON mapping: lowerCamel names, 64-bit integers as strings or numbers, enums as numbers), so
// the two can never say different things (README, "Encodings"). The messages are dynamic ones of
// a private DescriptorPool built from the embedded schema (CMakeLists.txt says why not generated
// classes).
#include "export_model.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>

#include <google/protobuf/stubs/common.h>

#include <charconv>
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

// For the tests' side (decode, responses): libprotobuf's own JSON reader, strict.
void from_json(const std::string &text, pb::Message &message) {
    pb::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    auto status = pb::util::JsonStringToMessage(text, &message, options);
    if (!status.ok()) throw std::runtime_error("OTLP JSON does not fit the protobuf schema: " + status.ToString());
}

[[noreturn]] void unfit(const pb::FieldDescriptor &f, const char *why) {
    throw std::runtime_error("OTLP JSON field " + f.full_name() + " " + why);
}

template <typename T> T integer(const pb::FieldDescriptor &f, const json &v) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned()) {
            auto u = v.get<std::uint64_t>();
            if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) unfit(f, "is out of range");
            return static_cast<T>(u);
        }
        auto i = v.get<std::int64_t>();
        if (!std::in_range<T>(i)) unfit(f, "is out of range");
        return static_cast<T>(i);
    }
    if (v.is_string()) { // proto3 JSON: 64-bit integers as decimal strings
        const auto &text = v.get_ref<const std::string &>();
        T out{};
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
        if (ec != std::errc() || end != text.data() + text.size()) unfit(f, "is not an integer");
        return out;
    }
    unfit(f, "is not an integer");
}

// Text that is not UTF-8 (proto3 strings must be) becomes U+FFFD, as the JSON encoding's dump does.
std::string utf8(const std::string &text) {
    if (pb::internal::IsStructurallyValidUTF8(text)) return text;
    return json::parse(json(text).dump(-1, ' ', false, json::error_handler_t::replace)).get<std::string>();
}

// Sets `v` (proto3 JSON of the message's type) onto `m`; a name or a type the schema does not
// have throws, so nothing logs_request writes is silently left out of the binary form.
void set_from_json(pb::Message &m, const json &v) {
    if (!v.is_object()) throw std::runtime_error("OTLP JSON " + m.GetDescriptor()->full_name() + " is not an object");
    const auto *d = m.GetDescriptor();
    const auto *r = m.GetReflection();
    for (const auto &[key, value] : v.items()) {
        const auto *f = d->FindFieldByCamelcaseName(key);
        if (f == nullptr)
            throw std::runtime_error("OTLP JSON field " + d->full_name() + "." + key + " is not in the schema");
        if (value.is_null()) continue; // proto3 JSON: the default
        if (f->is_repeated()) {
            if (!value.is_array() || f->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE)
                unfit(*f, "is not a list of messages");
            for (const auto &e : value)
                set_from_json(*r->AddMessage(&m, f), e);
            continue;
        }
        switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
            set_from_json(*r->MutableMessage(&m, f), value);
            break;
        case pb::FieldDescriptor::CPPTYPE_STRING:
            if (!value.is_string() || f->type() == pb::FieldDescriptor::TYPE_BYTES) unfit(*f, "is not a string");
            r->SetString(&m, f, utf8(value.get_ref<const std::string &>()));
            break;
        case pb::FieldDescriptor::CPPTYPE_BOOL:
            if (!value.is_boolean()) unfit(*f, "is not a boolean");
            r->SetBool(&m, f, value.get<bool>());
            break;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
            if (!value.is_number()) unfit(*f, "is not a number");
            r->SetDouble(&m, f, value.get<double>());
            break;
        case pb::FieldDescriptor::CPPTYPE_INT64:
            r->SetInt64(&m, f, integer<std::int64_t>(*f, value));
            break;
        case pb::FieldDescriptor::CPPTYPE_UINT64:
            r->SetUInt64(&m, f, integer<std::uint64_t>(*f, value));
            break;
        case pb::FieldDescriptor::CPPTYPE_INT32:
            r->SetInt32(&m, f, integer<std::int32_t>(*f, value));
            break;
        case pb::FieldDescriptor::CPPTYPE_UINT32:
            r->SetUInt32(&m, f, integer<std::uint32_t>(*f, value));
            break;
        case pb::FieldDescriptor::CPPTYPE_ENUM: // OTLP JSON: enums as numbers only
            r->SetEnumValue(&m, f, integer<std::int32_t>(*f, value));
            break;
        default:
            unfit(*f, "has a type Hangar does not send");
        }
    }
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
    if (encoding == Encoding::json) return request.dump(-1, ' ', false, json::error_handler_t::replace);
    auto message = schema().request();
    set_from_json(*message, request);
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
