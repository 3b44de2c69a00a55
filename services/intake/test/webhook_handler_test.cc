#include "relay/intake/webhook_handler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/url/encode.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include "prometheus/text_serializer.h"
#include "relay/base/digest.h"
#include "relay/http/testing/capture.h"
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
  // A signature in the record would let every reader of the topic replay
  // the body under any delivery id; its digest is enough for audit.
  EXPECT_FALSE(has_sig);
  EXPECT_TRUE(has_ua);
  auto digest = Sha256(kBody);
  EXPECT_EQ(record.body_sha256(), std::string(digest.begin(), digest.end()));
  EXPECT_EQ(v.digest, digest);
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

std::string HeaderOf(const kafka::Record& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "<none>";
}

TEST_F(WebhookHandlerTest, RepositoryKeysAreTheDefaultAndCarryNoKeysHeader) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  auto v = ValidateCopy(handler, SignedRequest(R"({"number":7,"repository":{"full_name":"Octo/Repo"}})"));
  ASSERT_TRUE(v.ok);
  EXPECT_EQ(v.record.key, "Octo/Repo");  // as received: a running deployment's partitions stay
  EXPECT_EQ(HeaderOf(v.record, "relay-keys"), "<none>");
}

// The payload's own fields decide the key under intake.record_keys: ordered.
TEST_F(WebhookHandlerTest, OrderedKeysComeFromEachEventsPayload) {
  FakeProducer producer;
  WebhookOptions options{{kSecret}, "github.webhooks", ""};
  options.keys = github::WebhookKeys::kOrdered;
  WebhookHandler handler(options, &producer, &dedup_, &clock_, &registry_);
  struct Case {
    const char* event;
    const char* body;
    const char* key;
  } cases[] = {
      {"pull_request", R"({"action":"labeled","number":7,"pull_request":{"number":7},"repository":{"full_name":"Octo/Repo"}})",
       "octo/repo#7"},
      {"issue_comment", R"({"action":"created","issue":{"number":7,"pull_request":{}},"repository":{"full_name":"octo/repo"}})",
       "octo/repo#7"},
      {"pull_request_review", R"({"pull_request":{"number":8},"repository":{"full_name":"octo/repo"}})", "octo/repo#8"},
      {"push", R"({"ref":"refs/heads/main","repository":{"full_name":"octo/repo"}})", "octo/repo@refs/heads/main"},
      {"workflow_job", R"({"action":"queued","workflow_job":{"id":5001,"run_id":77},"repository":{"full_name":"octo/repo"}})",
       "octo/repo/job:5001"},
      {"workflow_run", R"({"workflow_run":{"id":77},"repository":{"full_name":"octo/repo"}})", "octo/repo/run:77"},
      {"check_run", R"({"check_run":{"id":9},"repository":{"full_name":"octo/repo"}})", "octo/repo/check_run:9"},
      {"status", R"({"sha":"abc123","repository":{"full_name":"octo/repo"}})", "octo/repo@abc123"},
      {"release", R"({"release":{"id":3},"repository":{"full_name":"octo/repo"}})", "octo/repo"},
      {"pull_request", R"({"pull_request":{"number":"seven"},"repository":{"full_name":"octo/repo"}})", "octo/repo"},
      {"ping", R"({"zen":"Keep it simple."})", "d-1"},
  };
  for (const Case& c : cases) {
    auto v = ValidateCopy(handler, SignedRequest(c.body, "d-1", c.event));
    ASSERT_TRUE(v.ok) << c.event;
    EXPECT_EQ(v.record.key, c.key) << c.event << " " << c.body;
    EXPECT_EQ(HeaderOf(v.record, "relay-keys"), "2") << c.event;
    EXPECT_EQ(HeaderOf(v.record, "relay-keys-from"), "0") << c.event;
  }
}

// intake.record_keys_from: every replica switches at one instant.
TEST_F(WebhookHandlerTest, OrderedKeysStartAtTheConfiguredInstant) {
  FakeProducer producer;
  WebhookOptions options{{kSecret}, "github.webhooks", ""};
  options.keys = github::WebhookKeys::kOrdered;
  options.keys_from_unix_ms = clock_.UnixMillis() + 1000;
  WebhookHandler handler(options, &producer, &dedup_, &clock_, &registry_);
  const char* body = R"({"number":7,"pull_request":{"number":7},"repository":{"full_name":"Octo/Repo"}})";
  auto before = ValidateCopy(handler, SignedRequest(body));
  ASSERT_TRUE(before.ok);
  EXPECT_EQ(before.record.key, "Octo/Repo");
  EXPECT_EQ(HeaderOf(before.record, "relay-keys"), "<none>");
  clock_.Advance(std::chrono::seconds(1));
  auto at = ValidateCopy(handler, SignedRequest(body));
  ASSERT_TRUE(at.ok);
  EXPECT_EQ(at.record.key, "octo/repo#7");
  EXPECT_EQ(HeaderOf(at.record, "relay-keys-from"), std::to_string(options.keys_from_unix_ms));
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
  // Signed, but naming a repository no GitHub makes (2 MB): its record would
  // be past the topic's size.
  EXPECT_EQ(status(SignedRequest(R"({"repository":{"full_name":")" + std::string(2'000'000, 'a') + R"("}})")), 400u);
  EXPECT_TRUE(producer.sent().empty());
  std::string m = Metrics();
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_signature"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_headers"} 3)"));
  EXPECT_THAT(m, HasSubstr(R"(relay_intake_webhooks_total{outcome="bad_body"} 5)"));
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

// Handle end to end with a fake producer whose acks the test controls, and
// a captured responder.
class HandleTest : public WebhookHandlerTest {
 protected:
  std::shared_ptr<http::testing::CapturedResponse> Post(http::Request request) {
    auto [responder, captured] = http::testing::CaptureResponder();
    handler_.Handle(std::move(request), std::move(responder));
    return captured;
  }
  FakeProducer producer_{FakeProducer::Mode::kManual};
  WebhookHandler handler_{{{kSecret}, "github.webhooks", "host-1"}, &producer_, &dedup_, &clock_, &registry_};
};

TEST_F(HandleTest, NothingIsAnsweredBeforeTheBrokerAcknowledged) {
  auto response = Post(SignedRequest());
  EXPECT_EQ(response->count(), 0);
  ASSERT_EQ(producer_.pending(), 1u);
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  ASSERT_EQ(response->count(), 1);
  EXPECT_EQ(response->status(), 202u);
  EXPECT_THAT(response->response()->body(), HasSubstr(R"("status":"accepted")"));
}

TEST_F(HandleTest, ARepeatWhileTheFirstIsInFlightGetsTheFirstOutcomeAndNoSecondRecord) {
  auto first = Post(SignedRequest());
  auto repeat = Post(SignedRequest());
  EXPECT_EQ(producer_.sent().size(), 1u);
  EXPECT_EQ(repeat->count(), 0) << "the repeat must wait for the first one's ack";
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  EXPECT_EQ(first->status(), 202u);
  EXPECT_EQ(repeat->status(), 200u);
  EXPECT_THAT(repeat->response()->body(), HasSubstr("duplicate"));
  // And once durable, a repeat is answered at once, still without a record.
  auto later = Post(SignedRequest());
  EXPECT_EQ(later->status(), 200u);
  EXPECT_EQ(producer_.sent().size(), 1u);
}

TEST_F(HandleTest, AFailedDeliveryFreesTheIdSoTheRetryIsRecorded) {
  auto first = Post(SignedRequest());
  auto joined = Post(SignedRequest());
  ASSERT_TRUE(producer_.CompleteNext(absl::UnavailableError("not acknowledged within the delivery timeout")));
  EXPECT_EQ(first->status(), 503u);
  EXPECT_EQ(first->response()->at(bhttp::field::retry_after), "5");
  EXPECT_EQ(joined->status(), 503u);
  auto retry = Post(SignedRequest());
  ASSERT_EQ(producer_.pending(), 1u) << "the retry must be produced again";
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  EXPECT_EQ(retry->status(), 202u);
  EXPECT_EQ(producer_.sent().size(), 2u);
}

TEST_F(HandleTest, AnotherBodyUnderAKnownIdIsRecordedAsAConflict) {
  // Someone replays an old signed body under the id of a genuine delivery.
  constexpr char kOld[] = R"({"action":"closed","number":1,"repository":{"id":42,"full_name":"octo/repo"}})";
  auto replay = Post(SignedRequest(kOld, "genuine-id"));
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  EXPECT_EQ(replay->status(), 202u);
  // GitHub's delivery of the genuine body is recorded all the same.
  auto genuine = Post(SignedRequest(kBody, "genuine-id"));
  ASSERT_EQ(producer_.pending(), 1u);
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  EXPECT_EQ(genuine->status(), 202u);
  EXPECT_THAT(genuine->response()->body(), HasSubstr(R"("conflict":true)"));
  EXPECT_EQ(producer_.sent().size(), 2u);
  relay::v1::WebhookRecord second;
  ASSERT_TRUE(second.ParseFromString(producer_.sent()[1].value));
  EXPECT_EQ(second.body(), kBody);
  // Repeats of either body are duplicates.
  EXPECT_EQ(Post(SignedRequest(kOld, "genuine-id"))->status(), 200u);
  EXPECT_EQ(Post(SignedRequest(kBody, "genuine-id"))->status(), 200u);
  EXPECT_EQ(producer_.sent().size(), 2u);
  EXPECT_THAT(Metrics(), HasSubstr(R"(relay_intake_webhooks_total{outcome="conflict"} 1)"));
  EXPECT_THAT(Metrics(), HasSubstr(R"(relay_intake_webhooks_total{outcome="duplicate"} 2)"));
}

TEST_F(HandleTest, APermanentRefusalIs500WithoutRetryAfterAndFailsReadinessUntilRecordsFlow) {
  auto refused = Post(SignedRequest());
  ASSERT_TRUE(producer_.CompleteNext(absl::InvalidArgumentError("delivery: MSG_SIZE_TOO_LARGE")));
  EXPECT_EQ(refused->status(), 500u);
  EXPECT_EQ(refused->response()->count(bhttp::field::retry_after), 0u);
  EXPECT_THAT(refused->response()->body(), HasSubstr("MSG_SIZE_TOO_LARGE"));
  EXPECT_THAT(handler_.RecentRefusal().message(), HasSubstr("MSG_SIZE_TOO_LARGE"));
  EXPECT_THAT(Metrics(), HasSubstr(R"(relay_intake_webhooks_total{outcome="refused"} 1)"));
  // The id was freed: a later attempt is produced, and a success clears it.
  auto next = Post(SignedRequest());
  ASSERT_TRUE(producer_.CompleteNext(absl::OkStatus()));
  EXPECT_EQ(next->status(), 202u);
  EXPECT_TRUE(handler_.RecentRefusal().ok());
  // Without traffic, the refusal also ages out of readiness.
  Post(SignedRequest(kBody, "d-other"));
  ASSERT_TRUE(producer_.CompleteNext(absl::NotFoundError("delivery: UNKNOWN_TOPIC_OR_PART")));
  EXPECT_FALSE(handler_.RecentRefusal().ok());
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_TRUE(handler_.RecentRefusal().ok());
}

TEST_F(WebhookHandlerTest, AVeryLargeBodyDoesNotGrowTheThreadsParser) {
  FakeProducer producer;
  WebhookHandler handler({{kSecret}, "github.webhooks", ""}, &producer, &dedup_, &clock_, &registry_);
  ASSERT_TRUE(ValidateCopy(handler, SignedRequest()).ok);
  size_t steady = WebhookHandler::ThreadParserCapacity();
  std::string big = R"({"action":"opened","padding":")" + std::string(8 * 1024 * 1024, 'x') + "\"}";
  ASSERT_TRUE(ValidateCopy(handler, SignedRequest(big, "d-big")).ok);
  EXPECT_EQ(WebhookHandler::ThreadParserCapacity(), steady);
  EXPECT_LE(steady, 1024u * 1024u);
}

}  // namespace
}  // namespace relay::intake
