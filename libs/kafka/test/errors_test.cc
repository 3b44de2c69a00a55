#include "relay/kafka/errors.h"

#include "relay/kafka/admin.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/testing/fake_producer.h"

#include <gtest/gtest.h>

namespace relay::kafka {
namespace {

TEST(KafkaErrorsTest, ClassifiesOnce) {
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR_NO_ERROR), ErrorClass::kOk);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT), ErrorClass::kRetriable);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR__QUEUE_FULL), ErrorClass::kRetriable);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR__TRANSPORT), ErrorClass::kRetriable);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION), ErrorClass::kRetriable);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR__FATAL), ErrorClass::kFatal);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER), ErrorClass::kFatal);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE), ErrorClass::kPermanent);
  EXPECT_EQ(Classify(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC), ErrorClass::kPermanent);
}

TEST(KafkaErrorsTest, StatusCodesFollowTheClass) {
  EXPECT_TRUE(ToStatus(RD_KAFKA_RESP_ERR_NO_ERROR, "x").ok());
  EXPECT_TRUE(absl::IsUnavailable(ToStatus(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "x")));
  EXPECT_TRUE(absl::IsAborted(ToStatus(RD_KAFKA_RESP_ERR__FATAL, "x")));
  EXPECT_TRUE(absl::IsNotFound(ToStatus(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, "x")));
  EXPECT_TRUE(absl::IsPermissionDenied(ToStatus(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, "x")));
  EXPECT_TRUE(absl::IsInvalidArgument(ToStatus(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, "x")));
  EXPECT_NE(ToStatus(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "produce").message().find("produce"), std::string::npos);
}

TEST(KafkaErrorsTest, PermanentProduceErrorsAreTheOnesRetryingCannotFix) {
  EXPECT_TRUE(IsPermanentProduceError(ToStatus(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, "x")));
  EXPECT_TRUE(IsPermanentProduceError(ToStatus(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, "x")));
  EXPECT_TRUE(IsPermanentProduceError(ToStatus(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED, "x")));
  EXPECT_FALSE(IsPermanentProduceError(ToStatus(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, "x")));
  EXPECT_FALSE(IsPermanentProduceError(absl::AbortedError("failed on 4 producer instances")));
}

TEST(KafkaOptionsTest, ExtraPropertiesCannotWeakenTheGuarantees) {
  for (const char* key : {"acks", "enable.idempotence", "message.timeout.ms", "max.in.flight"}) {
    ProducerOptions options;
    options.bootstrap = "127.0.0.1:1";
    options.extra[key] = "1";
    auto producer = NewKafkaProducer(options, nullptr);
    ASSERT_FALSE(producer.ok()) << key;
    EXPECT_NE(producer.status().message().find(key), std::string::npos) << producer.status();
  }
  ProducerOptions zero;
  zero.bootstrap = "127.0.0.1:1";
  zero.delivery_timeout = std::chrono::milliseconds(0);  // librdkafka: "forever"
  EXPECT_FALSE(NewKafkaProducer(zero, nullptr).ok());
  ConsumerOptions consumer;
  consumer.bootstrap = "127.0.0.1:1";
  consumer.group_id = "g";
  consumer.topics = {"t"};
  consumer.extra["enable.auto.offset.store"] = "true";
  testing::FakeProducer dlq;
  EXPECT_FALSE(NewKafkaConsumer(consumer, &dlq, nullptr).ok());
}

TEST(KafkaAdminTest, TopicMustTakeTheLargestRecordPlusBatchOverhead) {
  TopicDescription topic{"github.webhooks", 6, 3, {{"max.message.bytes", "1048588"}}};
  absl::Status small = CheckTopicAccepts(topic, 25 * 1024 * 1024);
  EXPECT_TRUE(absl::IsFailedPrecondition(small));
  EXPECT_NE(small.message().find("max.message.bytes is 1048588"), std::string::npos) << small;
  topic.configs["max.message.bytes"] = std::to_string(25 * 1024 * 1024 + kRecordBatchOverhead);
  EXPECT_TRUE(CheckTopicAccepts(topic, 25 * 1024 * 1024).ok());
  topic.configs.clear();
  EXPECT_FALSE(CheckTopicAccepts(topic, 1).ok());
}

TEST(KafkaAdminTest, OnlyLogAppendTimeIsTheBrokersClock) {
  TopicDescription topic{"dispatch.budget", 1, 3, {{"message.timestamp.type", "CreateTime"}}};
  absl::Status create = CheckLogAppendTime(topic);
  EXPECT_TRUE(absl::IsFailedPrecondition(create));
  EXPECT_NE(create.message().find("message.timestamp.type is CreateTime"), std::string::npos) << create;
  topic.configs["message.timestamp.type"] = "LogAppendTime";
  EXPECT_TRUE(CheckLogAppendTime(topic).ok());
  topic.configs.clear();
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckLogAppendTime(topic)));
}

}  // namespace
}  // namespace relay::kafka
