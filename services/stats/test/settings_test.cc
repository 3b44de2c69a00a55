// relay-stats' settings: who may disable tests through the published
// disabled-tests list (stats.ci_files_upstreams and friends).
#include "relay/stats/stats_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace relay::stats {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Loaded {
  StatsSettings settings;
  absl::Status finish;
  std::string errors() const { return std::string(finish.message()); }
};

Loaded Load(std::map<std::string, std::string> env) {
  env.emplace("RELAY_KAFKA_BOOTSTRAP", "127.0.0.1:9092");  // required, and beside the point here
  auto config = Config::Load("", std::move(env));
  EXPECT_TRUE(config.ok()) << config.status();
  auto s = LoadSettings(*config, service::CommonSettings{});
  EXPECT_TRUE(s.ok()) << s.status();
  return {s.ok() ? *s : StatsSettings{}, config->Finish()};
}

TEST(StatsSettings, NoUpstreamAndTheDefaultAssociationsUnlessConfigured) {
  Loaded l = Load({});
  ASSERT_TRUE(l.finish.ok()) << l.finish;
  EXPECT_TRUE(l.settings.ci_files_upstreams.empty());
  EXPECT_THAT(l.settings.ci_disabled_associations, ElementsAre("OWNER", "MEMBER", "COLLABORATOR"));
  EXPECT_TRUE(l.settings.ci_disabled_user_ids.empty());
  EXPECT_EQ(l.settings.ci_disabled_days, 365);
  EXPECT_EQ(l.settings.ci_files_max_bytes, 32LL << 20);
}

TEST(StatsSettings, UpstreamsAreLowerCasedAndAssociationsUpperCased) {
  Loaded l = Load({{"RELAY_STATS_CI_FILES_UPSTREAMS", "PyTorch/PyTorch, acme/torch"},
                   {"RELAY_STATS_CI_DISABLED_ASSOCIATIONS", "owner"},
                   {"RELAY_STATS_CI_DISABLED_USER_IDS", "54816060"},
                   {"RELAY_STATS_CI_FILES_MAX_BYTES", "1MiB"}});
  ASSERT_TRUE(l.finish.ok()) << l.finish;
  EXPECT_THAT(l.settings.ci_files_upstreams, ElementsAre("pytorch/pytorch", "acme/torch"));
  EXPECT_THAT(l.settings.ci_disabled_associations, ElementsAre("OWNER"));
  EXPECT_THAT(l.settings.ci_disabled_user_ids, ElementsAre(54816060));
  EXPECT_EQ(l.settings.ci_files_max_bytes, 1 << 20);
}

TEST(StatsSettings, AMalformedTrustSettingIsRefusedNamingTheKey) {
  Loaded repo = Load({{"RELAY_STATS_CI_FILES_UPSTREAMS", "pytorch"}});
  EXPECT_THAT(repo.errors(), HasSubstr("stats.ci_files_upstreams (RELAY_STATS_CI_FILES_UPSTREAMS): "
                                       "'pytorch' is not an owner/name repository"));
  Loaded association = Load({{"RELAY_STATS_CI_DISABLED_ASSOCIATIONS", "MEMBER,MAINTAINER"}});
  EXPECT_THAT(association.errors(),
              HasSubstr("stats.ci_disabled_associations (RELAY_STATS_CI_DISABLED_ASSOCIATIONS): "
                        "'MAINTAINER' is not one of GitHub's author_association"));
  Loaded id = Load({{"RELAY_STATS_CI_DISABLED_USER_IDS", "pytorch-bot"}});
  EXPECT_THAT(id.errors(), HasSubstr("(RELAY_STATS_CI_DISABLED_USER_IDS): 'pytorch-bot' is not a GitHub user id"));
}

// stats.clickhouse.cluster: every request to a cluster carries the settings
// that make its reads equal one server's and its inserts acknowledged only
// once on their shard's quorum; one server gets none of them.
TEST(StatsSettings, AClusterAddsItsSettingsToEveryClient) {
  Loaded single = Load({});
  ASSERT_TRUE(single.finish.ok()) << single.finish;
  EXPECT_EQ(single.settings.clickhouse_cluster, "");
  EXPECT_TRUE(single.settings.clickhouse.settings.empty());

  Loaded c = Load({{"RELAY_STATS_CLICKHOUSE_CLUSTER", "relay"}, {"RELAY_CLICKHOUSE_TIMEOUT", "30s"}});
  ASSERT_TRUE(c.finish.ok()) << c.finish;
  EXPECT_EQ(c.settings.clickhouse_cluster, "relay");
  const auto& set = c.settings.clickhouse.settings;
  EXPECT_EQ(set.at("distributed_product_mode"), "global");
  EXPECT_EQ(set.at("insert_distributed_sync"), "1");
  EXPECT_EQ(set.at("insert_distributed_timeout"), "15");
  EXPECT_EQ(set.at("insert_quorum"), "2");
  EXPECT_EQ(set.at("insert_quorum_timeout"), "15000");
  EXPECT_EQ(set.at("prefer_localhost_replica"), "0");

  Loaded one = Load({{"RELAY_STATS_CLICKHOUSE_CLUSTER", "relay"}, {"RELAY_STATS_CLICKHOUSE_INSERT_QUORUM", "1"}});
  ASSERT_TRUE(one.finish.ok()) << one.finish;
  EXPECT_EQ(one.settings.clickhouse.settings.count("insert_quorum"), 0u);
  EXPECT_EQ(one.settings.clickhouse.settings.at("insert_distributed_sync"), "1");

  Loaded bad = Load({{"RELAY_STATS_CLICKHOUSE_CLUSTER", "relay'; DROP"}});
  EXPECT_THAT(bad.errors(), HasSubstr("stats.clickhouse.cluster (RELAY_STATS_CLICKHOUSE_CLUSTER): 'relay'; DROP' is "
                                      "not a cluster name"));
  // The cluster form writes the database's name unquoted into table names
  // and ZooKeeper paths: a name that would need quoting is refused there.
  Loaded dashed = Load({{"RELAY_STATS_CLICKHOUSE_CLUSTER", "relay"}, {"RELAY_CLICKHOUSE_DATABASE", "relay-dev"}});
  EXPECT_THAT(dashed.errors(), HasSubstr("clickhouse.database (RELAY_CLICKHOUSE_DATABASE): 'relay-dev': on a cluster "
                                         "the database name is letters, digits and '_'"));
  EXPECT_TRUE(Load({{"RELAY_CLICKHOUSE_DATABASE", "relay-dev"}}).finish.ok());
}

}  // namespace
}  // namespace relay::stats
