#include <thread>

#include "gtest/gtest.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/testing/fake_broker.h"
#include "relay/kafka/testing/fake_producer.h"

namespace relay::kafka {
namespace {

using namespace std::chrono_literals;
using testing::FakeBroker;
using testing::FakeProducer;

TEST(SendAndWait, OkOnceTheRecordIsAcknowledged) {
  FakeProducer producer;
  EXPECT_TRUE(SendAndWait(producer, Record{"t", "k", "v", {}}).ok());
  ASSERT_EQ(producer.sent().size(), 1u);
  EXPECT_EQ(producer.sent()[0].value, "v");
}

TEST(SendAndWait, TheDeliverysErrorAsItCame) {
  FakeProducer producer;
  producer.set_auto_status(absl::NotFoundError("no such topic"));
  absl::Status s = SendAndWait(producer, Record{"t", "k", "v", {}});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no such topic");
}

TEST(SendAndWait, WaitsForALateAcknowledgement) {
  FakeProducer producer(FakeProducer::Mode::kManual);
  std::thread acker([&] {
    while (producer.pending() == 0) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);
    producer.CompleteNext(absl::OkStatus());
  });
  EXPECT_TRUE(SendAndWait(producer, Record{"t", "k", "v", {}}).ok());
  acker.join();
}

TEST(SendAndWait, UnavailablePastItsTimeoutAndALaterAckHarmsNothing) {
  FakeProducer producer(FakeProducer::Mode::kManual);
  absl::Status s = SendAndWait(producer, Record{"t", "k", "v", {}}, 20ms);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("not acknowledged within 20 ms"), std::string::npos) << s;
  // The callback outlives the wait: completing it now must be safe.
  EXPECT_TRUE(producer.CompleteNext(absl::OkStatus()));
}

TEST(SendAndWaitForOffset, TheBrokersOffset) {
  FakeBroker broker;
  broker.CreateTopic("t", 1);
  FakeProducer producer(FakeProducer::Mode::kAuto, &broker);
  auto first = SendAndWaitForOffset(producer, Record{"t", "k", "a", {}});
  auto second = SendAndWaitForOffset(producer, Record{"t", "k", "b", {}});
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, *first + 1);
}

}  // namespace
}  // namespace relay::kafka
