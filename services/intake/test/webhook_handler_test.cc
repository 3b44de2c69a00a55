#include "webhook_handler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include "prometheus/text_serializer.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/v1/webhook.pb.h"

namespace relay::intake {
namespace {

namespace bhttp = boost::beast::http;
using kafka::testing::FakeProducer;
using ::testing::HasSubstr;

constexpr char kSecret[] = "test-secret-0123456789";
constexpr char kBody[] = R"({"action":"opened","number":7,"repository":{"id":42,"full_name":"octo/repo"},)"
                         R"("installation":{"id":99}})";

http::Request SignedRequest(std::string body = kBody, std::string delivery = "d-1",
                            std::string event = "pull_request", std::string secret = kSecret) {
  http::Request req{bhttp::verb::post, "/github/webhook", 11};
  req.set("X-GitHub-Event", event);
  req.set("X-GitHub-Delivery", delivery);
  req.set("X-Hub-Signature-256", github::SignWebhook(secret, body));
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::user_agent, "GitHub-Hookshot/abc");
  req.body() = std::move(body);
  return req;
}

// Validate takes the request by reference (it moves the body out); tests
// hand it a copy.
WebhookHandler::Validated ValidateCopy(WebhookHandler& handler, http::Request request) {
  return handler.Validate(request);
}

// The handler only needs a Responder; tests reach the response through a
// tiny HTTP-free shim: WebhookHandler::Validate for rejections, and the
// producer callbacks for the durable path.
class WebhookHandlerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  prometheus::Registry registry_;
  DeliveryDedup dedup_{&clock_, std::chrono::minutes(10), 1000};

  std::string Metrics() { return prometheus::TextSerializer().Serialize(registry_.Collect()); }
};

TEST_F(WebhookHandlerTest, BuildsRecordWithBodyByteForByte) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", "host-1"}, &producer, &dedup_, &clock_, &registry_);
  auto v = ValidateCopy(handler, SignedRequest());
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.record.topic, "github.webhooks");
  EXPECT_EQ(v.record.key, "octo/repo");
  relay::v1::WebhookRecord record;
  ASSERT_TRUE(record.ParseFromString(v.record.value));
  EXPECT_EQ(record.body(), kBody);
  EXPECT_EQ(record.delivery_id(), "d-1");
  EXPECT_EQ(record.event(), "pull_request");
  EXPECT_EQ(record.action(), "opened");
  EXPECT_EQ(record.repository(), "octo/repo");
  EXPECT_EQ(record.repository_id(), 42);
  EXPECT_EQ(record.installation_id(), 99);
  EXPECT_EQ(record.received_at_unix_ms(), clock_.UnixMillis());
  EXPECT_EQ(record.intake_instance(), "host-1");
  bool has_sig = false, has_ua = false;
  for (const auto& h : record.headers()) {
    has_sig |= h.name() == "x-hub-signature-256";
    has_ua |= h.name() == "user-agent" && h.value() == "GitHub-Hookshot/abc";
  }
  EXPECT_TRUE(has_sig);
  EXPECT_TRUE(has_ua);
  ASSERT_EQ(v.record.headers.size(), 3u);
  EXPECT_EQ(v.record.headers[0].value, kWebhookSchema);
}

TEST_F(WebhookHandlerTest, EventNamesWithDigitsAreValid) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  EXPECT_TRUE(ValidateCopy(handler, SignedRequest(kBody, "d-2", "projects_v2_item")).ok);
  EXPECT_FALSE(ValidateCopy(handler, SignedRequest(kBody, "d-3", "Pull-Request")).ok);
}

TEST_F(WebhookHandlerTest, NonUtf8HeaderValuesStillMakeAParsableRecord) {
  // The signature covers only the body, so header bytes are attacker-chosen;
  // HTTP allows obs-text (0x80-0xFF). The record must still decode.
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  auto req = SignedRequest();
  req.set(bhttp::field::user_agent, "GitHub-Hookshot/\xff\xfe");
  req.set(bhttp::field::content_type, "application/json; charset=\xe9");
  auto v = ValidateCopy(handler, req);
  ASSERT_TRUE(v.ok);
  relay::v1::WebhookRecord record;
  ASSERT_TRUE(record.ParseFromString(v.record.value));
  EXPECT_EQ(record.content_type(), "application/json; charset=\xe9");
}

TEST_F(WebhookHandlerTest, EventWithoutRepositoryIsKeyedByDeliveryId) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  auto v = ValidateCopy(handler, SignedRequest(R"({"zen":"Keep it simple.","hook_id":1})", "ping-1", "ping"));
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.record.key, "ping-1");
}

TEST_F(WebhookHandlerTest, RejectsEachBadInputWithItsStatusAndCounter) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  auto status = [&](http::Request req) {
    auto v = ValidateCopy(handler, req);
    EXPECT_FALSE(v.ok);
    return v.error.result_int();
  };
  auto unsigned_req = SignedRequest();
  unsigned_req.erase("X-Hub-Signature-256");
  EXPECT_EQ(status(unsigned_req), 401u);
  EXPECT_EQ(status(SignedRequest(kBody, "d", "push", "wrong-secret-0123456789")), 401u);
  auto tampered = SignedRequest();
  tampered.body() += " ";
  EXPECT_EQ(status(tampered), 401u);
  auto no_event = SignedRequest();
  no_event.erase("X-GitHub-Event");
  EXPECT_EQ(status(no_event), 400u);
  auto no_delivery = SignedRequest();
  no_delivery.erase("X-GitHub-Delivery");
  EXPECT_EQ(status(no_delivery), 400u);
  EXPECT_EQ(status(SignedRequest(kBody, "bad id\n")), 400u);
  EXPECT_EQ(status(SignedRequest("not json")), 400u);
  EXPECT_EQ(status(SignedRequest("[1,2]")), 400u);  // JSON, but not a webhook object
  EXPECT_EQ(status(SignedRequest(R"({"a":1)")), 400u);
  auto xml = SignedRequest();
  xml.set(bhttp::field::content_type, "application/xml");
  EXPECT_EQ(status(xml), 400u);
  EXPECT_TRUE(producer.sent().empty());
  std::string m = Metrics();
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_signature"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_headers"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_body"} 4)"));
}

TEST_F(WebhookHandlerTest, SignatureIsCheckedBeforeAnythingElse) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  auto req = SignedRequest("not json", "");
  req.set("X-Hub-Signature-256", "sha256=00");
  EXPECT_EQ(ValidateCopy(handler, req).error.result_int(), 401u);
}

TEST_F(WebhookHandlerTest, AcceptsFormEncodedPayload) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  std::string form = "payload=" + boost::urls::encode(kBody, boost::urls::unreserved_chars);
  auto req = SignedRequest(form);
  req.set(bhttp::field::content_type, "application/x-www-form-urlencoded");
  auto v = ValidateCopy(handler, req);
  ASSERT_TRUE(v.ok) << v.error.body();
  EXPECT_EQ(v.record.key, "octo/repo");
  relay::v1::WebhookRecord record;
  ASSERT_TRUE(record.ParseFromString(v.record.value));
  EXPECT_EQ(record.body(), form);  // the raw body, not the decoded JSON
}

TEST_F(WebhookHandlerTest, RotatedSecretsAreAllAccepted) {
  FakeProducer producer;
  WebhookHandler handler({{"old-secret-0123456789", kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  EXPECT_TRUE(ValidateCopy(handler, SignedRequest(kBody, "a", "push", "old-secret-0123456789")).ok);
  EXPECT_TRUE(ValidateCopy(handler, SignedRequest(kBody, "b", "push", kSecret)).ok);
}

}  // namespace
}  // namespace relay::intake
