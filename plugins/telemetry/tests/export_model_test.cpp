// Unit tests of OTLP export's pure logic (kernel-api-0131.md §1E, §2.1): `telemetry.export` and
// `telemetry.storage` rules, a destination's name/endpoint/header rules, the OTLP/HTTP JSON
// and protobuf encodings, the bounded queue with its export_dropped note, and the retry schedule.
#include "export_model.hpp"
#include "telemetry_model.hpp"

#include <hangar/name_fold.hpp>
#include <hangar/text.hpp>

#include <atomic>
#include <thread>

#include <cppunit/TestFixture.h>
#include <cppunit/extensions/HelperMacros.h>

using namespace hangar::telemetry;
using hangar::telemetry::otlp::Headers;

namespace {

template <typename F> void expect_400(F &&f, const std::string &field) {
    try {
        f();
        CPPUNIT_FAIL("accepted, expected a 400 naming " + field);
    } catch (const hangar::Error &e) {
        CPPUNIT_ASSERT_EQUAL(400, e.status());
        CPPUNIT_ASSERT_MESSAGE(std::string(e.what()) + " / " + e.details_json().dump(),
                               (std::string(e.what()) + e.details_json().dump()).find(field) != std::string::npos);
    }
}

ConfigRequest req(const char *text) {
    return parse_request(json::parse(text));
}

} // namespace

class ExportModelTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(ExportModelTest);
    CPPUNIT_TEST(parsesExportAndStorage);
    CPPUNIT_TEST(exportRules);
    CPPUNIT_TEST(rendersExport);
    CPPUNIT_TEST(endpointRules);
    CPPUNIT_TEST(nameRules);
    CPPUNIT_TEST(headerRules);
    CPPUNIT_TEST(encodesOtlpJson);
    CPPUNIT_TEST(encodesOtlpProtobuf);
    CPPUNIT_TEST(readsPartialSuccess);
    CPPUNIT_TEST(encodesFromManyThreads);
    CPPUNIT_TEST(queueDropsWithANote);
    CPPUNIT_TEST(backoffSchedule);
    CPPUNIT_TEST(foldsNamesIgnoringCaseAndAccents);
    CPPUNIT_TEST_SUITE_END();

public:
    void parsesExportAndStorage() {
        auto r = req(
            R"({"browser":{"console":{}},"export":{"otlp":{"destination":{"name":"hc"}}},"storage":{"enabled":false}})");
        CPPUNIT_ASSERT(r.otlp.has_value());
        CPPUNIT_ASSERT_EQUAL(std::string("hc"), r.otlp->destination_name);
        CPPUNIT_ASSERT(r.otlp->names_destination());
        CPPUNIT_ASSERT(r.storage == false);
        CPPUNIT_ASSERT(req(R"({"export":null,"storage":null})").otlp == std::nullopt);
        CPPUNIT_ASSERT(req(R"({"export":{"otlp":{"enabled":false}}})").otlp->enabled == false);
        expect_400([] { req(R"({"export":{"otlp":{"destination":{"id":"a","name":"b"}}}})"); },
                   "telemetry.export.otlp.destination");
        expect_400([] { req(R"({"export":{"otlp":{"destination":{}}}})"); }, "telemetry.export.otlp.destination");
        expect_400([] { req(R"({"export":{"otlp":{"destination":{"id":"x"},"enabled":false}}})"); },
                   "telemetry.export.otlp.enabled");
        expect_400([] { req(R"({"export":{"kafka":{}}})"); }, "telemetry.export.kafka");
        expect_400([] { req(R"({"export":{"otlp":{"endpoint":"x"}}})"); }, "telemetry.export.otlp.endpoint");
        expect_400([] { req(R"({"storage":{"enabled":"no"}})"); }, "telemetry.storage.enabled");
        expect_400([] { req(R"({"storage":true})"); }, "telemetry.storage");
    }

    void exportRules() {
        const Selection on = {"console"};
        // Create: naming a destination exports; storage defaults on.
        auto x = apply_export({}, req(R"({"export":{"otlp":{"destination":{"name":"hc"}}}})"), on, true, "d1");
        CPPUNIT_ASSERT(x == (ExportState{"d1", true}));
        // Export needs capture.
        expect_400([] { apply_export({}, req(R"({"export":{"otlp":{"destination":{"id":"d1"}}}})"), {}, true, "d1"); },
                   "telemetry.export.otlp");
        // storage: false needs a destination, and cannot change later.
        expect_400([&] { apply_export({}, req(R"({"storage":{"enabled":false}})"), on, true, ""); },
                   "telemetry.storage.enabled");
        x = apply_export({}, req(R"({"export":{"otlp":{"destination":{"id":"d1"}}},"storage":{"enabled":false}})"), on,
                         true, "d1");
        CPPUNIT_ASSERT(x == (ExportState{"d1", false}));
        expect_400([&] { apply_export(x, req(R"({"storage":{"enabled":true}})"), on, false, ""); },
                   "telemetry.storage.enabled");
        // ...and export can then not be switched off (nothing would keep the events).
        expect_400([&] { apply_export(x, req(R"({"export":{"otlp":{"enabled":false}}})"), on, false, ""); },
                   "telemetry.storage.enabled");
        // Update: omitted keeps, enabled:false stops, a new destination switches.
        ExportState cur{"d1", true};
        CPPUNIT_ASSERT(apply_export(cur, req(R"({"browser":{"page":{}}})"), on, false, "") == cur);
        CPPUNIT_ASSERT(apply_export(cur, req(R"({"export":{"otlp":{"enabled":false}}})"), on, false, "") ==
                       (ExportState{"", true}));
        CPPUNIT_ASSERT(apply_export(cur, req(R"({"export":{"otlp":{"destination":{"id":"d2"}}}})"), on, false, "d2") ==
                       (ExportState{"d2", true}));
        // enabled:true alone needs a destination already selected.
        expect_400([&] { apply_export({}, req(R"({"export":{"otlp":{"enabled":true}}})"), on, false, ""); },
                   "telemetry.export.otlp.destination");
        CPPUNIT_ASSERT(apply_export(cur, req(R"({"export":{"otlp":{"enabled":true}}})"), on, false, "") == cur);
        // Capture switched off ends export.
        CPPUNIT_ASSERT(apply_export(cur, req(R"({"enabled":false})"), {}, false, "") == ExportState{});
    }

    void rendersExport() {
        const Selection on = {"console"};
        json plain = render(on);
        CPPUNIT_ASSERT(!plain.contains("export"));
        CPPUNIT_ASSERT(!plain.contains("storage"));
        json r = render(on, {"d1", false});
        CPPUNIT_ASSERT_EQUAL(std::string("d1"), r["export"]["otlp"]["destination"].get<std::string>());
        CPPUNIT_ASSERT(r["export"]["otlp"]["enabled"].get<bool>());
        CPPUNIT_ASSERT(!r["storage"]["enabled"].get<bool>());
        CPPUNIT_ASSERT(export_from_json(r) == (ExportState{"d1", false}));
        CPPUNIT_ASSERT(selection_from_json(r) == on);
        CPPUNIT_ASSERT(render({}, {"d1", true}).is_null());
    }

    void endpointRules() {
        CPPUNIT_ASSERT_EQUAL(std::string("https://api.honeycomb.io"),
                             otlp::check_endpoint("https://api.honeycomb.io/", "endpoint"));
        CPPUNIT_ASSERT_EQUAL(std::string("https://otlp.example.com/otlp"),
                             otlp::check_endpoint("HTTPS://otlp.example.com/otlp", "endpoint"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://[2001:db8::1]:4318"),
                             otlp::check_endpoint("http://[2001:db8::1]:4318", "endpoint"));
        CPPUNIT_ASSERT_EQUAL(std::string("http://c:4318/v1/logs"), otlp::logs_url("http://c:4318"));
        for (const char *bad : {"ftp://x", "x.example.com", "https://x/v1/logs", "https://x/otlp/v1/traces/",
                                "https://x/v1/metrics", "https://x?a=1", "https://x#f", "https://u:p@x", "https://",
                                "https://x:0", "https://x:99999", "https://x y"})
            expect_400([&] { otlp::check_endpoint(bad, "endpoint"); }, "endpoint");
        expect_400([] { otlp::check_endpoint(42, "endpoint"); }, "endpoint");
    }

    void nameRules() {
        CPPUNIT_ASSERT_EQUAL(std::string("Honeycomb prod"), otlp::check_name("Honeycomb prod", "name"));
        expect_400([] { otlp::check_name("", "name"); }, "name");
        expect_400([] { otlp::check_name(std::string(256, 'a'), "name"); }, "name");
        expect_400([] { otlp::check_name("abcdefghijklmnopqrstuvwx", "name"); }, "name"); // shaped like an id
        expect_400([] { otlp::check_name("a\nb", "name"); }, "name");
    }

    void headerRules() {
        CPPUNIT_ASSERT_EQUAL(std::string("X-Honeycomb-Team"), hangar::canonical_header_name("x-honeycomb-TEAM"));
        Headers h =
            otlp::merge_headers({}, json::parse(R"({"authorization":"Bearer a","x-api-key":"k"})"), "headers", false);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, h.size());
        CPPUNIT_ASSERT_EQUAL(std::string("Bearer a"), h["Authorization"]);
        // PATCH: per key; another spelling replaces; null deletes; omitted stays.
        Headers p =
            otlp::merge_headers(h, json::parse(R"({"AUTHORIZATION":"Bearer b","X-API-KEY":null})"), "headers", true);
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, p.size());
        CPPUNIT_ASSERT_EQUAL(std::string("Bearer b"), p["Authorization"]);
        CPPUNIT_ASSERT(otlp::merge_headers(h, nullptr, "headers", true) == h);
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"a":"1","A":"2"})"), "headers", false); }, "headers.");
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"bad name":"1"})"), "headers", false); }, "headers.");
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"x":"a\r\nInjected: 1"})"), "headers", false); },
                   "headers.x");
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"Content-Type":"text/plain"})"), "headers", false); },
                   "headers.Content-Type");
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"x":null})"), "headers", false); }, "headers.x");
        expect_400([] { otlp::merge_headers({}, json::parse(R"({"x":1})"), "headers", false); }, "headers.x");
        expect_400([] { otlp::merge_headers({}, json{{"x", std::string(8200, 'v')}}, "headers", false); }, "headers");
        expect_400([] { otlp::merge_headers({}, json::array(), "headers", false); }, "headers");
    }

    void encodesOtlpJson() {
        json v = otlp::any_value(
            json::parse(R"({"s":"x","i":42,"big":9007199254740993,"f":1.5,"b":true,"n":null,"a":[1,"y"]})"));
        const auto &kv = v["kvlistValue"]["values"];
        auto at = [&](const std::string &k) {
            for (const auto &e : kv)
                if (e["key"] == k) return e["value"];
            return json();
        };
        CPPUNIT_ASSERT_EQUAL(std::string("x"), at("s")["stringValue"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("42"), at("i")["intValue"].get<std::string>()); // int64 as a JSON string
        CPPUNIT_ASSERT_EQUAL(std::string("9007199254740993"), at("big")["intValue"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(1.5, at("f")["doubleValue"].get<double>());
        CPPUNIT_ASSERT(at("b")["boolValue"].get<bool>());
        CPPUNIT_ASSERT(at("n").is_object() && at("n").empty());
        CPPUNIT_ASSERT_EQUAL(std::string("y"), at("a")["arrayValue"]["values"][1]["stringValue"].get<std::string>());

        json env = json::parse(R"({"seq":7,"event":{"category":"console","type":"console_error","ts":1700000000123456,
            "source":{"kind":"cdp","event":"Runtime.exceptionThrown"},"data":{"text":"boom"},"truncated":true}})");
        json rec = otlp::log_record(env);
        CPPUNIT_ASSERT_EQUAL(std::string("1700000000123456000"), rec["timeUnixNano"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(17, rec["severityNumber"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("console_error"), rec["eventName"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("boom"),
                             rec["body"]["kvlistValue"]["values"][0]["value"]["stringValue"].get<std::string>());
        std::string attrs = rec["attributes"].dump();
        for (const char *k :
             {"event.name", "kernel.telemetry.category", "kernel.telemetry.seq", "kernel.telemetry.source.kind",
              "kernel.telemetry.source.event", "kernel.telemetry.truncated"})
            CPPUNIT_ASSERT_MESSAGE(k, attrs.find(k) != std::string::npos);

        // One ResourceLogs per session, with its ids as resource attributes.
        std::vector<otlp::Record> recs = {{"s1", "p1", rec}, {"s2", "p1", rec}, {"s1", "p1", rec}};
        json body = otlp::logs_request(recs, "node-a");
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, body["resourceLogs"].size());
        const json &first = body["resourceLogs"][0];
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, first["scopeLogs"][0]["logRecords"].size());
        std::string res = first["resource"].dump();
        CPPUNIT_ASSERT(res.find(R"("kernel.browser.session_id")") != std::string::npos);
        CPPUNIT_ASSERT(res.find(R"({"stringValue":"s1"})") != std::string::npos);
        CPPUNIT_ASSERT(res.find(R"("kernel.project.id")") != std::string::npos);
        CPPUNIT_ASSERT(res.find(R"("service.name")") != std::string::npos);
        CPPUNIT_ASSERT(res.find(R"({"stringValue":"node-a"})") != std::string::npos);
    }

    void encodesOtlpProtobuf() {
        CPPUNIT_ASSERT(otlp::parse_encoding("protobuf") == otlp::Encoding::protobuf);
        CPPUNIT_ASSERT(otlp::parse_encoding("json") == otlp::Encoding::json);
        CPPUNIT_ASSERT(!otlp::parse_encoding("JSON") && !otlp::parse_encoding("") && !otlp::parse_encoding("grpc"));
        CPPUNIT_ASSERT_EQUAL(std::string("application/x-protobuf"),
                             std::string(otlp::content_type(otlp::Encoding::protobuf)));
        CPPUNIT_ASSERT_EQUAL(std::string("application/json"), std::string(otlp::content_type(otlp::Encoding::json)));

        // The specification's field numbers, checked against bytes worked out by hand (a round
        // trip through our own schema alone could not catch a wrong number): request.resource_logs
        // (1) > scope_logs (2) > log_records (2) > time_unix_nano (1, fixed64), body (5) >
        // string_value (1), event_name (12).
        json tiny = json::parse(R"({"resourceLogs":[{"scopeLogs":[{"logRecords":[
            {"timeUnixNano":"1","body":{"stringValue":"y"},"eventName":"x"}]}]}]})");
        const std::string expected("\x0a\x15\x12\x13\x12\x11\x09\x01\x00\x00\x00\x00\x00\x00\x00"
                                   "\x2a\x03\x0a\x01y\x62\x01x",
                                   23);
        CPPUNIT_ASSERT(otlp::encode_request(tiny, otlp::Encoding::protobuf) == expected);

        // Every field an event's record carries comes back the same from the binary form.
        json env = json::parse(R"({"seq":7,"event":{"category":"console","type":"console_error","ts":1700000000123456,
            "source":{"kind":"cdp","event":"Runtime.exceptionThrown"},"truncated":true,
            "data":{"text":"boom","n":-3,"big":9007199254740993,"f":1.5,"ok":false,"none":null,
                    "list":[1,"two",{"three":3}],"nested":{"deep":{"x":"y"}}}}})");
        json huge = json::parse(R"({"event":{"category":"network","type":"network_response","ts":1,
            "data":{"bytes":18446744073709551615}}})");
        std::vector<otlp::Record> recs = {{"s1", "p1", otlp::log_record(env)},
                                          {"s2", "p2", otlp::log_record(huge)},
                                          {"s1", "p1", otlp::log_record(env)}};
        json request = otlp::logs_request(recs, "node-a");
        std::string bytes = otlp::encode_request(request, otlp::Encoding::protobuf);
        CPPUNIT_ASSERT(bytes.size() < request.dump().size());
        json back = otlp::decode_protobuf_request(bytes);
        CPPUNIT_ASSERT_MESSAGE(request.dump() + "\n" + back.dump(), back == request);
        const json &rec = back["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
        CPPUNIT_ASSERT_EQUAL(std::string("1700000000123456000"), rec["timeUnixNano"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("console_error"), rec["eventName"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(17, rec["severityNumber"].get<int>());
        CPPUNIT_ASSERT_EQUAL(std::string("boom"), rec["body"]["kvlistValue"]["values"][7]["value"]["stringValue"]
                                                      .get<std::string>()); // keys in order: big f ... ok text
        CPPUNIT_ASSERT(back["resourceLogs"][0]["resource"].dump().find(R"({"stringValue":"s1"})") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(std::string("hangar.telemetry"),
                             back["resourceLogs"][1]["scopeLogs"][0]["scope"]["name"].get<std::string>());
        // A count past int64 goes as a double, in both encodings.
        CPPUNIT_ASSERT(
            back["resourceLogs"][1]["scopeLogs"][0]["logRecords"][0]["body"]["kvlistValue"]["values"][0]["value"]
                .contains("doubleValue"));

        // JSON goes as logs_request built it.
        CPPUNIT_ASSERT(json::parse(otlp::encode_request(request, otlp::Encoding::json)) == request);
        // An empty object is still a (empty) kvlist, not a missing body.
        json empty = otlp::logs_request(
            {{"s", "p", otlp::log_record(json::parse(R"({"event":{"type":"t","ts":1,"data":{}}})"))}}, "");
        CPPUNIT_ASSERT(otlp::decode_protobuf_request(otlp::encode_request(
            empty, otlp::Encoding::protobuf))["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"]
                           .contains("kvlistValue"));
        // Text that is not UTF-8 is replaced, not a failed batch.
        json bad = otlp::logs_request(
            {{"s", "p", otlp::log_record(json{{"event", {{"type", "t"}, {"ts", 1}, {"data", "a\xff"}}}})}}, "");
        json bad_back = otlp::decode_protobuf_request(otlp::encode_request(bad, otlp::Encoding::protobuf));
        CPPUNIT_ASSERT_EQUAL(
            std::string("a\xef\xbf\xbd"),
            bad_back["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"]["stringValue"].get<std::string>());
        CPPUNIT_ASSERT(json::parse(otlp::encode_request(bad, otlp::Encoding::json)).is_object());
        // A field the schema lacks is refused, not silently lost.
        json unknown = tiny;
        unknown["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["colour"] = "red";
        CPPUNIT_ASSERT_THROW(otlp::encode_request(unknown, otlp::Encoding::protobuf), std::runtime_error);
        CPPUNIT_ASSERT_THROW(otlp::decode_protobuf_request("\xff\xff\xff"), std::runtime_error);
    }

    void readsPartialSuccess() {
        using otlp::Encoding;
        auto pb = [](const char *text) { return otlp::encode_protobuf_response(json::parse(text)); };
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{3}, otlp::rejected_records(pb(R"({"partialSuccess":{"rejectedLogRecords":"3",
                                                           "errorMessage":"too old"}})"),
                                                                      Encoding::protobuf));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{0}, otlp::rejected_records(pb("{}"), Encoding::protobuf));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{0}, otlp::rejected_records("", Encoding::protobuf));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{0}, otlp::rejected_records("\xff\xff\xff", Encoding::protobuf));
        CPPUNIT_ASSERT_EQUAL(
            std::uint64_t{0},
            otlp::rejected_records(pb(R"({"partialSuccess":{"rejectedLogRecords":"-2"}})"), Encoding::protobuf));
        // A JSON answer to a protobuf request is not one the request's encoding reads.
        CPPUNIT_ASSERT_EQUAL(
            std::uint64_t{0},
            otlp::rejected_records(R"({"partialSuccess":{"rejectedLogRecords":"3"}})", Encoding::protobuf));

        CPPUNIT_ASSERT_EQUAL(std::uint64_t{4}, otlp::rejected_records(
                                                   R"({"partialSuccess":{"rejectedLogRecords":"4"}})", Encoding::json));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{5},
                             otlp::rejected_records(R"({"partialSuccess":{"rejectedLogRecords":5}})", Encoding::json));
        for (const char *none :
             {"", "{}", "null", R"({"partialSuccess":{}})", R"({"partialSuccess":5})",
              R"({"partialSuccess":{"rejectedLogRecords":"many"}})", R"({"partialSuccess":{"rejectedLogRecords":-1}})"})
            CPPUNIT_ASSERT_EQUAL_MESSAGE(none, std::uint64_t{0}, otlp::rejected_records(none, Encoding::json));
    }

    // Each destination's sender thread encodes on its own: the schema is built once and shared.
    void encodesFromManyThreads() {
        json env = json::parse(R"({"seq":1,"event":{"category":"console","type":"console_log","ts":5,
            "data":{"text":"t","n":[1,2,{"x":true}]}}})");
        json request = otlp::logs_request({{"s", "p", otlp::log_record(env)}}, "n");
        const std::string expected = otlp::encode_request(request, otlp::Encoding::protobuf);
        std::atomic<int> wrong{0};
        {
            std::vector<std::jthread> threads;
            threads.reserve(4);
            for (int t = 0; t < 4; ++t)
                threads.emplace_back([&] {
                    for (int i = 0; i < 200; ++i)
                        if (otlp::encode_request(request, otlp::Encoding::protobuf) != expected ||
                            otlp::decode_protobuf_request(expected) != request)
                            ++wrong;
                });
        }
        CPPUNIT_ASSERT_EQUAL(0, wrong.load());
    }

    void queueDropsWithANote() {
        otlp::Queue q(4);
        auto rec = [](const char *sid) { return otlp::Record{sid, "p", json::object()}; };
        for (int i = 0; i < 4; ++i)
            CPPUNIT_ASSERT(q.push(rec("s1"), 1));
        CPPUNIT_ASSERT(!q.push(rec("s1"), 1));
        CPPUNIT_ASSERT(!q.push(rec("s1"), 1));
        CPPUNIT_ASSERT_EQUAL(std::uint64_t{2}, q.dropped());
        CPPUNIT_ASSERT_EQUAL(std::size_t{4}, q.size());
        CPPUNIT_ASSERT_EQUAL(std::size_t{3}, q.take(3).size());
        // One slot free: a note and a record need two, so this one is dropped too.
        CPPUNIT_ASSERT(q.size() == 1);
        CPPUNIT_ASSERT(q.push(rec("s2"), 1)); // another session has no note pending
        CPPUNIT_ASSERT(q.size() == 2);
        q.take(2);
        CPPUNIT_ASSERT(q.push(rec("s1"), 5));
        auto out = q.take(10);
        CPPUNIT_ASSERT_EQUAL(std::size_t{2}, out.size());
        CPPUNIT_ASSERT_EQUAL(std::string("export_dropped"), out[0].record["eventName"].get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("2"),
                             out[0].record["body"]["kvlistValue"]["values"][0]["value"]["intValue"].get<std::string>());
        CPPUNIT_ASSERT(out[1].record.empty());
        CPPUNIT_ASSERT(q.push(rec("s1"), 5)); // told once
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, q.size());
        CPPUNIT_ASSERT_EQUAL(std::size_t{1}, q.clear());
    }

    void backoffSchedule() {
        using ms = std::chrono::milliseconds;
        CPPUNIT_ASSERT_EQUAL(ms(500).count(), otlp::backoff(1, ms(500), ms(30000), 0).count());
        CPPUNIT_ASSERT_EQUAL(ms(1000).count(), otlp::backoff(2, ms(500), ms(30000), 0).count());
        CPPUNIT_ASSERT_EQUAL(ms(8000).count(), otlp::backoff(5, ms(500), ms(30000), 0).count());
        CPPUNIT_ASSERT_EQUAL(ms(30000).count(), otlp::backoff(40, ms(500), ms(30000), 0).count());
        CPPUNIT_ASSERT_EQUAL(ms(375).count(), otlp::backoff(1, ms(500), ms(30000), 1.0).count()); // jitter: ≤ ¼ less
        CPPUNIT_ASSERT_EQUAL(ms(5000).count(), otlp::backoff(1, ms(500), ms(30000), 0, 5).count()); // Retry-After
        CPPUNIT_ASSERT_EQUAL(ms(30000).count(), otlp::backoff(1, ms(500), ms(30000), 0, 3600).count());
        CPPUNIT_ASSERT(otlp::retryable_status(503) && otlp::retryable_status(429) && otlp::retryable_status(408));
        CPPUNIT_ASSERT(!otlp::retryable_status(400) && !otlp::retryable_status(401) && !otlp::retryable_status(404));
        CPPUNIT_ASSERT_EQUAL(std::string("unauthorized"), otlp::error_class_of_status(403));
        CPPUNIT_ASSERT_EQUAL(std::string("server_error"), otlp::error_class_of_status(502));
    }

    // Destination names (§1E: case- and accent-insensitive), the same on every store.
    void foldsNamesIgnoringCaseAndAccents() {
        using hangar::fold_name;
        CPPUNIT_ASSERT_EQUAL(fold_name("cafe export"), fold_name("Café Export"));
        CPPUNIT_ASSERT_EQUAL(fold_name("CAFÉ EXPORT"), fold_name("café export"));
        CPPUNIT_ASSERT_EQUAL(std::string("strasse"), fold_name("Straße"));
        CPPUNIT_ASSERT_EQUAL(std::string("ecole"), fold_name("\u00c9cole"));  // precomposed
        CPPUNIT_ASSERT_EQUAL(std::string("ecole"), fold_name("E\u0301cole")); // combining accent
        CPPUNIT_ASSERT(fold_name("cafe") != fold_name("cafes"));
        CPPUNIT_ASSERT(fold_name("日本") == fold_name("日本") && !fold_name("日本").empty());
        CPPUNIT_ASSERT_EQUAL(std::string("ab\xff"), fold_name("AB\xff")); // not UTF-8: ASCII folding only
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(ExportModelTest);
