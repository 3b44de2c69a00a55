// The PR label table: the newest fact by the event's own time stands, never
// the one read last (a replay or a late redelivery of an older event).
#include "relay/collector/label_table.h"

#include <gtest/gtest.h>

namespace relay::collector {
namespace {

using Devices = std::set<std::string>;

v1::PullRequestLabels Fact(int64_t event_at, int64_t received_at, std::vector<std::string> devices,
                           const std::string& repo = "pytorch/pytorch", int64_t pr = 7) {
  v1::PullRequestLabels f;
  f.set_upstream_repo(repo);
  f.set_number(pr);
  for (auto& d : devices) f.add_crcr_devices(d);
  f.set_event_at_unix_ms(event_at);
  f.set_received_at_unix_ms(received_at);
  // The time it was published says nothing of the event's order.
  f.set_updated_at_unix_ms(9'999'999'999'999 - event_at);
  return f;
}

TEST(LabelTableTest, AnOlderEventReadLaterNeverReplacesANewerOne) {
  LabelTable table;
  EXPECT_TRUE(table.Apply(Fact(2'000'000, 2'000'100, {"xpu", "npu"})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), (Devices{"npu", "xpu"}));
  // A replay of the earlier label event (one device), read after it.
  EXPECT_FALSE(table.Apply(Fact(1'000'000, 1'000'100, {"xpu"})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), (Devices{"npu", "xpu"}));
  // The same event again changes nothing either.
  EXPECT_FALSE(table.Apply(Fact(2'000'000, 2'000'100, {})));
  EXPECT_EQ(table.Devices("PyTorch/PyTorch", 7), (Devices{"npu", "xpu"}));
  // A newer event (the label removed) does.
  EXPECT_TRUE(table.Apply(Fact(3'000'000, 3'000'100, {"npu"})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), (Devices{"npu"}));
}

TEST(LabelTableTest, TwoEventsOfOneSecondAreOrderedByIntakesReceipt) {
  LabelTable table;
  EXPECT_TRUE(table.Apply(Fact(5'000'000, 5'000'900, {"xpu", "npu"})));
  // Same second (GitHub's updated_at), received earlier: the older one.
  EXPECT_FALSE(table.Apply(Fact(5'000'000, 5'000'200, {"xpu"})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), (Devices{"npu", "xpu"}));
  EXPECT_TRUE(table.Apply(Fact(5'000'000, 5'000'950, {})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), Devices{});
}

TEST(LabelTableTest, AFactWithoutAnEventTimeIsOlderThanAnyAndPrsAreApart) {
  LabelTable table;
  EXPECT_TRUE(table.Apply(Fact(0, 0, {"old"})));  // published before facts carried their time
  EXPECT_TRUE(table.Apply(Fact(1, 0, {"xpu"})));
  EXPECT_FALSE(table.Apply(Fact(0, 0, {"old"})));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 7), (Devices{"xpu"}));
  EXPECT_TRUE(table.Apply(Fact(1, 0, {"npu"}, "pytorch/pytorch", 8)));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 8), (Devices{"npu"}));
  EXPECT_EQ(table.Devices("pytorch/pytorch", 9), Devices{});
}

}  // namespace
}  // namespace relay::collector
