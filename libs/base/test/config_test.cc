#include "relay/base/config.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace relay {
namespace {

using ::testing::HasSubstr;

std::string WriteTemp(const std::string& text) {
  char name[] = "/tmp/relay-config-XXXXXX";
  int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  std::ofstream(name) << text;
  ::close(fd);
  return name;
}

TEST(ConfigTest, ReadsFileValuesOfEveryType) {
  auto path = WriteTemp(
      "http:\n  listen: 127.0.0.1:9\n  threads: 3\n  timeout: 250ms\n"
      "intake:\n  max_body: 25MB\n  secrets: [a, b]\n  dedup: true\n");
  auto config = Config::Load(path, {});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->String("http.listen", "x"), "127.0.0.1:9");
  EXPECT_EQ(config->Int("http.threads", 1, 1, 64), 3);
  EXPECT_EQ(config->Duration("http.timeout", std::chrono::seconds(1), std::chrono::milliseconds(1), std::chrono::hours(1)),
            std::chrono::milliseconds(250));
  EXPECT_EQ(config->Bytes("intake.max_body", 0, 0, 1LL << 40), 25'000'000);
  EXPECT_THAT(config->StringList("intake.secrets"), ::testing::ElementsAre("a", "b"));
  EXPECT_TRUE(config->Bool("intake.dedup", false));
  EXPECT_TRUE(config->Finish().ok()) << config->Finish();
  std::remove(path.c_str());
}

TEST(ConfigTest, EnvironmentOverridesFile) {
  auto path = WriteTemp("http:\n  listen: 127.0.0.1:9\nintake:\n  secrets: [a]\n");
  auto config = Config::Load(path, {{"RELAY_HTTP_LISTEN", "0.0.0.0:80"},
                                    {"RELAY_INTAKE_SECRETS", "x, y"}});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->String("http.listen", ""), "0.0.0.0:80");
  EXPECT_THAT(config->StringList("intake.secrets"), ::testing::ElementsAre("x", "y"));
  EXPECT_TRUE(config->Finish().ok());
  std::remove(path.c_str());
}

TEST(ConfigTest, ReportsEveryBadValueAndUnknownKeyAtOnce) {
  auto path = WriteTemp("http:\n  threads: many\n  timeout: 5 parsecs\n  listn: typo\n");
  auto config = Config::Load(path, {{"RELAY_INTAKE_MAX_BODY", "9TB"}});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->Int("http.threads", 2, 1, 64), 2);
  config->Duration("http.timeout", std::chrono::seconds(1), std::chrono::milliseconds(1), std::chrono::hours(1));
  config->Bytes("intake.max_body", 1, 1, 100);
  config->RequiredString("kafka.bootstrap");
  auto status = config->Finish();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("http.threads"));
  EXPECT_THAT(status.message(), HasSubstr("'many' is not an integer"));
  EXPECT_THAT(status.message(), HasSubstr("unknown duration unit"));
  EXPECT_THAT(status.message(), HasSubstr("unknown size unit 'TB'"));
  EXPECT_THAT(status.message(), HasSubstr("kafka.bootstrap (RELAY_KAFKA_BOOTSTRAP): is required"));
  EXPECT_THAT(status.message(), HasSubstr("http.listn: unknown key"));
  std::remove(path.c_str());
}

TEST(ConfigTest, OutOfRangeIntegerIsAnError) {
  auto config = Config::Load("", {{"RELAY_HTTP_THREADS", "0"}});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->Int("http.threads", 2, 1, 64), 2);
  EXPECT_THAT(config->Finish().message(), HasSubstr("outside [1, 64]"));
}

TEST(ConfigTest, MalformedYamlIsAClearError) {
  auto path = WriteTemp("http: [unclosed\n");
  auto config = Config::Load(path, {});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr(path));
  std::remove(path.c_str());
}

TEST(ConfigTest, MissingFileIsAClearError) {
  auto config = Config::Load("/nonexistent/relay.yaml", {});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("/nonexistent/relay.yaml"));
}

TEST(ConfigTest, DurationsAndSizesHaveBoundsAndNeverOverflow) {
  using std::chrono::milliseconds;
  auto config = Config::Load("", {{"RELAY_KAFKA_DELIVERY_TIMEOUT", "0"},
                                  {"RELAY_HTTP_IDLE_TIMEOUT", "9223372036854775807h"},
                                  {"RELAY_HTTP_BODY_TIMEOUT", "99999999999999999999s"},
                                  {"RELAY_INTAKE_MAX_BODY", "9223372036854775807GiB"},
                                  {"RELAY_HTTP_HEADER_TIMEOUT", "2m"}});
  ASSERT_TRUE(config.ok());
  // Out of bounds or overflowing: an error, and the default in the meantime.
  EXPECT_EQ(config->Duration("kafka.delivery_timeout", milliseconds(5000), milliseconds(100), milliseconds(300'000)),
            milliseconds(5000));
  EXPECT_EQ(config->Duration("http.idle_timeout", milliseconds(75'000), milliseconds(1), milliseconds(3'600'000)),
            milliseconds(75'000));
  EXPECT_EQ(config->Duration("http.body_timeout", milliseconds(30'000), milliseconds(1), milliseconds(3'600'000)),
            milliseconds(30'000));
  EXPECT_EQ(config->Bytes("intake.max_body", 1024, 1, 1LL << 40), 1024);
  EXPECT_EQ(config->Duration("http.header_timeout", milliseconds(1), milliseconds(1), milliseconds(3'600'000)),
            milliseconds(120'000));
  auto status = config->Finish();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("RELAY_KAFKA_DELIVERY_TIMEOUT): '0' is outside [100ms, 300000ms]"));
  EXPECT_THAT(status.message(), HasSubstr("RELAY_HTTP_IDLE_TIMEOUT): '9223372036854775807h' is outside"));
  EXPECT_THAT(status.message(), HasSubstr("RELAY_HTTP_BODY_TIMEOUT): '99999999999999999999s' is not a duration"));
  EXPECT_THAT(status.message(), HasSubstr("RELAY_INTAKE_MAX_BODY): '9223372036854775807GiB' is outside"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("header_timeout")));
}

TEST(ConfigTest, UnknownVariableInASectionTheServiceReadsIsAnError) {
  auto config = Config::Load("", {{"RELAY_KAFKA_BOOTSTRAP", "k:9092"},
                                  {"RELAY_KAFKA_DELIVERY_TIMOUT", "5s"},  // typo
                                  {"RELAY_IT_KAFKA_DIR", "/tmp/x"},       // another program's
                                  {"RELAY_DISPATCH_UPSTREAM", "a/b"}});   // another service's section
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->String("kafka.bootstrap", ""), "k:9092");
  config->Duration("kafka.delivery_timeout", std::chrono::seconds(5), std::chrono::milliseconds(1),
                   std::chrono::hours(1));
  auto status = config->Finish();
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("RELAY_KAFKA_DELIVERY_TIMOUT: unknown variable"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("RELAY_IT_KAFKA_DIR")));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("RELAY_DISPATCH_UPSTREAM")));
}

TEST(ConfigTest, AVariableAnotherServiceReadsIsNotATypo) {
  auto config = Config::Load("", {{"RELAY_KAFKA_BOOTSTRAP", "k:9092"}, {"RELAY_KAFKA_GROUP_ID", "dispatch"}});
  ASSERT_TRUE(config.ok());
  config->String("kafka.bootstrap", "");
  EXPECT_FALSE(config->Finish().ok());
  config->AlsoKnown({"kafka.group_id"});
  EXPECT_TRUE(config->Finish().ok()) << config->Finish();
}

}  // namespace
}  // namespace relay
