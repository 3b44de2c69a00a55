#include "relay/kafka/security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace relay::kafka {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(KafkaSecurity, PlaintextSetsNothing) {
  Security s;
  EXPECT_TRUE(s.Validate().ok());
  EXPECT_TRUE(s.Properties().empty());
}

TEST(KafkaSecurity, SaslOverTlsGivesLibrdkafkasProperties) {
  Security s;
  s.protocol = "sasl_ssl";
  s.sasl_mechanism = "SCRAM-SHA-512";
  s.sasl_username = "relay-intake";
  s.sasl_password = "pw";
  s.ssl_ca_file = "/etc/kafka/ca.pem";
  ASSERT_TRUE(s.Validate().ok());
  EXPECT_THAT(s.Properties(),
              ElementsAre(Pair("security.protocol", "sasl_ssl"), Pair("sasl.mechanisms", "SCRAM-SHA-512"),
                          Pair("sasl.username", "relay-intake"), Pair("sasl.password", "pw"),
                          Pair("ssl.ca.location", "/etc/kafka/ca.pem")));
}

TEST(KafkaSecurity, MutualTlsNeedsCertificateAndKey) {
  Security s;
  s.protocol = "ssl";
  s.ssl_certificate_file = "/c.pem";
  EXPECT_THAT(s.Validate().message(), HasSubstr("needs its key"));
  s.ssl_key_file = "/k.pem";
  ASSERT_TRUE(s.Validate().ok());
  EXPECT_THAT(s.Properties(), ElementsAre(Pair("security.protocol", "ssl"), Pair("ssl.certificate.location", "/c.pem"),
                                          Pair("ssl.key.location", "/k.pem")));
}

TEST(KafkaSecurity, RefusesWhatWouldBeIgnoredOrIncomplete) {
  Security s;
  s.protocol = "sasl";
  EXPECT_THAT(s.Validate().message(), HasSubstr("is not plaintext|ssl|sasl_plaintext|sasl_ssl"));
  s.protocol = "sasl_plaintext";
  s.sasl_mechanism = "GSSAPI";
  EXPECT_THAT(s.Validate().message(), HasSubstr("is not PLAIN|SCRAM-SHA-256|SCRAM-SHA-512"));
  s.sasl_mechanism = "PLAIN";
  EXPECT_THAT(s.Validate().message(), HasSubstr("needs a SASL user name"));
  s.sasl_username = "relay";
  EXPECT_THAT(s.Validate().message(), HasSubstr("needs a SASL password"));
  Security plain;
  plain.sasl_username = "relay";
  EXPECT_THAT(plain.Validate().message(), HasSubstr("would be ignored"));
  plain.sasl_username.clear();
  plain.ssl_ca_file = "/ca.pem";
  EXPECT_THAT(plain.Validate().message(), HasSubstr("would be ignored"));
}

TEST(KafkaSecurity, ReadFromConfigWithThePasswordFromItsFile) {
  auto dir = std::filesystem::temp_directory_path() / ("kafka-security-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "pw") << "s3cret\n";
  auto config = Config::Load("", {{"RELAY_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"},
                                  {"RELAY_KAFKA_SASL_MECHANISM", "PLAIN"},
                                  {"RELAY_KAFKA_SASL_USERNAME", "relay"},
                                  {"RELAY_KAFKA_SASL_PASSWORD_FILE", (dir / "pw").string()}});
  ASSERT_TRUE(config.ok());
  Security s = ReadSecurity(*config);
  EXPECT_TRUE(config->Finish().ok()) << config->Finish();
  EXPECT_EQ(s.sasl_password, "s3cret");

  auto missing = Config::Load("", {{"RELAY_KAFKA_SECURITY_PROTOCOL", "sasl_plaintext"},
                                   {"RELAY_KAFKA_SASL_MECHANISM", "PLAIN"},
                                   {"RELAY_KAFKA_SASL_USERNAME", "relay"},
                                   {"RELAY_KAFKA_SASL_PASSWORD_FILE", (dir / "nope").string()}});
  ReadSecurity(*missing);
  EXPECT_THAT(missing->Finish().message(), HasSubstr("cannot read a password from"));
  std::filesystem::remove_all(dir);
}

TEST(KafkaSecurity, TheProcessSettingReachesEveryClientsConf) {
  Security s;
  s.protocol = "sasl_plaintext";
  s.sasl_mechanism = "PLAIN";
  s.sasl_username = "relay";
  s.sasl_password = "pw";
  SetSecurity(s);
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  ASSERT_TRUE(ApplySecurity(conf).ok());
  char value[64];
  size_t size = sizeof value;
  ASSERT_EQ(rd_kafka_conf_get(conf, "sasl.username", value, &size), RD_KAFKA_CONF_OK);
  EXPECT_STREQ(value, "relay");
  rd_kafka_conf_destroy(conf);
  SetSecurity(Security{});
  EXPECT_TRUE(SecurityProperties().empty());
}

}  // namespace
}  // namespace relay::kafka
