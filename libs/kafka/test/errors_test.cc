#include "relay/kafka/errors.h"

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

}  // namespace
}  // namespace relay::kafka
