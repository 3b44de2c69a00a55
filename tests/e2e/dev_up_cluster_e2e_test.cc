// `tools/dev up --cluster`: the dev stack's sample traffic (every real
// webhook payload, the canary's callbacks and JUnit reports, the
// pytorch/pytorch-shaped upstream traffic) lands in the single ClickHouse
// and, through a second relay-stats in a consumer group of its own, in a
// 2 shards x 2 replicas cluster of 18.16 with ZooKeeper. `up` then compares
// the two (tools/dev compare_cluster): every named query, the tier report,
// the HUD's pages and the CI files must be equal, or `up` fails. Label
// `cluster`, on demand (tools/dev test --cluster).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/subprocess.h"

namespace relay {
namespace {

using ::testing::HasSubstr;

TEST(DevUpClusterE2E, TheClusterAnswersAsTheSingleServerOnTheSampleTraffic) {
  std::string root = testing::Env("RELAY_ROOT");
  std::string dev_dir = testing::Env("RELAY_DEV_DIR");
  ASSERT_FALSE(dev_dir.empty());
  testing::RunCommand(root + "/tools/dev down >/dev/null 2>&1; rm -rf '" + dev_dir + "'");
  std::string out;
  int rc = testing::RunCommand(root + "/tools/dev up --cluster 2>&1", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("on the cluster relay"));
  EXPECT_THAT(out, HasSubstr("skipped 0004_hud.sql: needs ClickHouse >= 23.3"));
  // The sample traffic reached both (the single server's counts, as in
  // dev_up_e2e_test), and the comparison ran over all of it.
  EXPECT_THAT(out, ::testing::ContainsRegex("398\twebhook_deliveries"));
  EXPECT_THAT(out, ::testing::ContainsRegex("equal: [1-9][0-9] named query runs, the tier report, and 10 HUD pages and "
                                            "CI files"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("DIFFERS")));
  std::string status;
  EXPECT_EQ(testing::RunCommand(root + "/tools/dev status", &status), 0) << status;
  EXPECT_THAT(status, HasSubstr("STATS_CLUSTER_URL=http://127.0.0.1:"));
  EXPECT_THAT(status, HasSubstr("CLICKHOUSE_CLUSTER_URL=http://127.0.0.1:"));
  EXPECT_EQ(testing::RunCommand(root + "/tools/dev down 2>&1", &out), 0) << out;
  EXPECT_NE(testing::RunCommand(root + "/tools/dev status 2>/dev/null", &status), 0);
}

}  // namespace
}  // namespace relay
