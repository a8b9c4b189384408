#include "connect.hpp"

#include <hangar/outbound.hpp>

#include <Poco/Exception.h>
#include <Poco/Net/Context.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/HTTPSClientSession.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/SSLManager.h>
#include <Poco/Net/SocketAddress.h>
#include <Poco/StreamCopier.h>
#include <Poco/URI.h>

#include <memory>
#include <utility>
#include <vector>

namespace credentials {

namespace {

// Connect's error body is {"status": 401, "message": "..."}.
std::string connect_message(const std::string &body) {
    auto parsed = nlohmann::json::parse(body, nullptr, false);
    if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string())
        return parsed["message"].get<std::string>();
    return body.substr(0, 200);
}

std::string path_segment(const std::string &s) {
    std::string out;
    Poco::URI::encode(s, "/?#%&=+", out);
    return out;
}

} // namespace

ConnectClient::ConnectClient(std::string base_url, std::string token, std::chrono::milliseconds timeout,
                             hangar::egress::Policy policy)
    : base_url_(std::move(base_url)), token_(std::move(token)), timeout_(timeout), policy_(std::move(policy)) {}

void ConnectClient::initialize() {
    Poco::Net::initializeSSL();
}
void ConnectClient::uninitialize() {
    Poco::Net::uninitializeSSL();
}

nlohmann::json ConnectClient::vaults() const {
    return get("/v1/vaults");
}
nlohmann::json ConnectClient::items(const std::string &vault_id) const {
    return get("/v1/vaults/" + path_segment(vault_id) + "/items");
}
nlohmann::json ConnectClient::item(const std::string &vault_id, const std::string &item_id) const {
    return get("/v1/vaults/" + path_segment(vault_id) + "/items/" + path_segment(item_id));
}

nlohmann::json ConnectClient::get(const std::string &path) const {
    std::string body;
    int status = 0;
    try {
        Poco::URI uri(base_url_);
        Poco::Timespan timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout_).count());
        std::vector<hangar::egress::Address> addresses;
        try {
            addresses = hangar::egress::resolve(uri.getHost(), uri.getPort(), policy_);
        } catch (const hangar::egress::Refused &e) {
            throw ConnectError(0, e.what(), true);
        } catch (const hangar::egress::ResolveError &e) {
            throw ConnectError(0, std::string("the 1Password Connect server cannot be reached: ") + e.what());
        }
        std::unique_ptr<Poco::Net::HTTPClientSession> session;
        if (uri.getScheme() == "https") {
            // The system's CA store; the host name is checked against the certificate (and
            // sent as SNI) although the connection goes to the checked address.
            Poco::Net::Context::Ptr context(new Poco::Net::Context(Poco::Net::Context::TLS_CLIENT_USE, "",
                                                                   Poco::Net::Context::VERIFY_RELAXED, 9, true));
            session = std::make_unique<hangar::outbound::Pinned<Poco::Net::HTTPSClientSession>>(
                std::move(addresses), uri.getHost(), uri.getPort(), context);
        } else {
            session = std::make_unique<hangar::outbound::Pinned<Poco::Net::HTTPClientSession>>(
                std::move(addresses), uri.getHost(), uri.getPort());
        }
        session->setTimeout(timeout);
        std::string prefix = uri.getPath();
        while (!prefix.empty() && prefix.back() == '/')
            prefix.pop_back();
        Poco::Net::HTTPRequest request(Poco::Net::HTTPRequest::HTTP_GET, prefix + path,
                                       Poco::Net::HTTPMessage::HTTP_1_1);
        request.set("Authorization", "Bearer " + token_);
        request.set("Accept", "application/json");
        session->sendRequest(request);
        Poco::Net::HTTPResponse response;
        std::istream &in = session->receiveResponse(response);
        Poco::StreamCopier::copyToString(in, body);
        status = response.getStatus();
    } catch (const Poco::TimeoutException &) {
        throw ConnectError(0, "the 1Password Connect server did not answer within " + std::to_string(timeout_.count()) +
                                  " ms");
    } catch (const Poco::Exception &e) {
        throw ConnectError(0, "the 1Password Connect server cannot be reached: " + e.displayText());
    }
    if (status == 401) throw ConnectError(status, "the token was refused: " + connect_message(body));
    if (status < 200 || status >= 300)
        throw ConnectError(status,
                           "1Password Connect answered HTTP " + std::to_string(status) + ": " + connect_message(body));
    auto parsed = nlohmann::json::parse(body, nullptr, false);
    if (parsed.is_discarded()) throw ConnectError(status, "1Password Connect answered something that is not JSON");
    return parsed;
}

} // namespace credentials
