// relay-intake on the service host with fake Kafka clients: readiness says
// exactly what is wrong with the topic or the broker, webhooks flow into the
// (fake) topic over real HTTP, a permanent refusal shows in /readyz.
#include "relay/base/digest.h"
#include "relay/intake/intake_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "relay/github/webhook_signature.h"
#include "relay/kafka/testing/fake_admin.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_producer.h"
#include "relay/service/host.h"
#include "relay/v1/webhook.pb.h"
#include "support/http_client.h"

namespace relay::intake {
namespace {

using relay::testing::HttpClient;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

constexpr char kSecret[] = "service-test-secret-0123";
constexpr char kBody[] = R"({"action":"opened","number":7,"repository":{"id":42,"full_name":"octo/repo"}})";
constexpr int64_t kMaxBody = 25 * 1024 * 1024;

class IntakeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { broker_.CreateTopic("github.webhooks", 6); }

  void Start(std::map<std::string, std::string> env = {}) {
    env.emplace("RELAY_HTTP_LISTEN", "127.0.0.1:0");
    env.emplace("RELAY_HTTP_DRAIN_DELAY", "0s");
    env.emplace("RELAY_KAFKA_BOOTSTRAP", "fake:9092");
    env.emplace("RELAY_INTAKE_WEBHOOK_SECRETS", kSecret);
    env.emplace("RELAY_INTAKE_TOPIC_CHECK_INTERVAL", "1s");
    auto config = Config::Load("", env);
    ASSERT_TRUE(config.ok());
    service::Factories factories;
    factories.producer = [this](kafka::ProducerOptions, prometheus::Registry*) {
      return absl::StatusOr<std::unique_ptr<kafka::Producer>>(
          std::make_unique<kafka::testing::BorrowedProducer>(&producer_));
    };
    factories.admin = [this](const std::string&, const std::string&) {
      return absl::StatusOr<std::unique_ptr<kafka::Admin>>(std::make_unique<kafka::testing::BorrowedAdmin>(&admin_));
    };
    auto host = service::Host::Start(Definition(), std::move(*config), factories);
    ASSERT_TRUE(host.ok()) << host.status();
    host_ = std::move(*host);
  }

  // /readyz until its body contains (or, `exact`, is) `want` (the topic
  // check runs every second), or 5 s.
  relay::testing::HttpResult ReadyzUntil(const std::string& want, bool exact = false) {
    relay::testing::HttpResult r;
    auto deadline = std::chrono::steady_clock::now() + 5s;
    do {
      r = HttpClient("127.0.0.1", host_->port()).Get("/readyz");
      if (exact ? r.body == want : r.body.find(want) != std::string::npos) break;
      std::this_thread::sleep_for(20ms);
    } while (std::chrono::steady_clock::now() < deadline);
    return r;
  }

  relay::testing::HttpResult PostWebhook(const std::string& delivery, const std::string& body = kBody) {
    return HttpClient("127.0.0.1", host_->port())
        .Post("/github/webhook",
              {{"X-GitHub-Event", "pull_request"},
               {"X-GitHub-Delivery", delivery},
               {"X-Hub-Signature-256", github::SignWebhook(kSecret, body)},
               {"Content-Type", "application/json"}},
              body);
  }

  kafka::testing::FakeBroker broker_;
  kafka::testing::FakeProducer producer_{kafka::testing::FakeProducer::Mode::kAuto, &broker_};
  kafka::testing::FakeAdmin admin_;
  std::unique_ptr<service::Host> host_;
};

TEST_F(IntakeServiceTest, ReadinessSaysExactlyWhatIsWrongWithTheTopic) {
  Start();
  auto missing = ReadyzUntil("does not exist");
  EXPECT_EQ(missing.status, 503);
  EXPECT_THAT(missing.body, HasSubstr("topic: topic github.webhooks does not exist"));

  admin_.SetTopic("github.webhooks", 6, 1'048'588);  // Kafka's default max.message.bytes
  auto small = ReadyzUntil("max.message.bytes");
  EXPECT_EQ(small.status, 503);
  EXPECT_THAT(small.body, HasSubstr("max.message.bytes is 1048588, records of up to " +
                                    std::to_string(kMaxBody + kEnvelopeAllowance) + " bytes need at least"));

  admin_.SetTopic("github.webhooks", 6, 27'262'976);  // deploy/kafka/topics.txt
  auto ready = ReadyzUntil("ready\n", /*exact=*/true);
  EXPECT_EQ(ready.status, 200) << ready.body;

  producer_.set_connected(false);
  EXPECT_THAT(ReadyzUntil("kafka:").body, HasSubstr("kafka: no broker connection"));
}

TEST_F(IntakeServiceTest, WebhooksLandInTheTopicWithTheirDigest) {
  admin_.SetTopic("github.webhooks", 6, 27'262'976);
  Start();
  auto r = PostWebhook("d-1");
  EXPECT_EQ(r.status, 202) << r.body;
  EXPECT_EQ(PostWebhook("d-1").status, 200);
  auto records = broker_.All("github.webhooks");
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].key, "octo/repo");
  v1::WebhookRecord record;
  ASSERT_TRUE(record.ParseFromString(records[0].value));
  EXPECT_EQ(record.body(), kBody);
  auto digest = Sha256(kBody);
  EXPECT_EQ(record.body_sha256(), std::string(digest.begin(), digest.end()));
}

TEST_F(IntakeServiceTest, APermanentRefusalIs500AndShowsInReadiness) {
  admin_.SetTopic("github.webhooks", 6, 27'262'976);
  Start();
  ASSERT_EQ(ReadyzUntil("ready\n", /*exact=*/true).status, 200);
  producer_.set_auto_status(absl::PermissionDeniedError("delivery: TOPIC_AUTHORIZATION_FAILED"));
  auto r = PostWebhook("d-2");
  EXPECT_EQ(r.status, 500);
  EXPECT_THAT(r.body, HasSubstr("TOPIC_AUTHORIZATION_FAILED"));
  auto ready = HttpClient("127.0.0.1", host_->port()).Get("/readyz");
  EXPECT_EQ(ready.status, 503);
  EXPECT_THAT(ready.body, HasSubstr("produce: Kafka refused a webhook record"));
}

TEST_F(IntakeServiceTest, HandlerTimeoutMustExceedTheDeliveryTimeout) {
  auto config = Config::Load("", {{"RELAY_KAFKA_BOOTSTRAP", "fake:9092"},
                                  {"RELAY_INTAKE_WEBHOOK_SECRETS", kSecret},
                                  {"RELAY_KAFKA_DELIVERY_TIMEOUT", "10s"},
                                  {"RELAY_HTTP_HANDLER_TIMEOUT", "5s"}});
  ASSERT_TRUE(config.ok());
  auto host = service::Host::Start(Definition(), std::move(*config));
  ASSERT_FALSE(host.ok());
  EXPECT_THAT(std::string(host.status().message()), HasSubstr("must be at least kafka.delivery_timeout"));
}

}  // namespace
}  // namespace relay::intake
