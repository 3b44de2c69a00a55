// relay-stats' settings for its HUD: the defaults, and the combinations it
// refuses at start (every error at once, as Config::Finish reports them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "relay/service/service.h"
#include "relay/stats/stats_service.h"

namespace relay::stats {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// LoadSettings over `env`, then Config::Finish: the settings, or every error.
absl::StatusOr<StatsSettings> Load(std::map<std::string, std::string> env) {
  env.emplace("RELAY_KAFKA_BOOTSTRAP", "127.0.0.1:1");
  auto config = Config::Load("", std::move(env));
  if (!config.ok()) return config.status();
  service::CommonSettings common = service::ReadCommonSettings(*config);
  auto s = LoadSettings(*config, common);
  config->AlsoKnown(service::SuiteKeys());
  if (auto st = config->Finish(); !st.ok()) return st;
  return s;
}

TEST(StatsSettings, TheHudReadsAsAReadOnlyUserOfItsOwnWithinItsBounds) {
  auto s = Load({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->hud_clickhouse_user, "relay_hud");
  EXPECT_NE(s->hud_clickhouse_user, s->clickhouse.user);
  EXPECT_EQ(s->hud_timeout, 10s);
  EXPECT_EQ(s->hud_max_days, 90);
  EXPECT_EQ(s->hud_cache_ttl, 10s);
  EXPECT_EQ(s->hud_threads, 2);
  EXPECT_EQ(s->hud_max_threads, 1) << "one core per HUD query: readers never take every core";
  EXPECT_GT(s->hud_max_rows_to_read, 0);
  EXPECT_GT(s->hud_max_memory_usage, 0);
}

// A page's queries must end before its request does: the handler answers
// 503 at http.handler_timeout, and a query given up on takes up to 3 s to
// kill.
TEST(StatsSettings, AHudTimeoutThatOutlivesTheRequestIsRefused) {
  EXPECT_TRUE(Load({{"RELAY_STATS_HUD_TIMEOUT", "12s"}}).ok());
  auto late = Load({{"RELAY_STATS_HUD_TIMEOUT", "13s"}});
  ASSERT_FALSE(late.ok());
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("RELAY_STATS_HUD_TIMEOUT"));
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("so a page's queries end before its request"));
  auto old_default = Load({{"RELAY_STATS_HUD_TIMEOUT", "30s"}});
  EXPECT_FALSE(old_default.ok()) << "30 s against a 15 s handler: the query went on after the 503";
  EXPECT_TRUE(Load({{"RELAY_STATS_HUD_TIMEOUT", "30s"}, {"RELAY_HTTP_HANDLER_TIMEOUT", "40s"},
                    {"RELAY_HTTP_DRAIN_TIMEOUT", "40s"}})
                  .ok());
}

TEST(StatsSettings, TheHudNeverReadsAsTheWriter) {
  auto same = Load({{"RELAY_CLICKHOUSE_USER", "relay"}, {"RELAY_STATS_HUD_CLICKHOUSE_USER", "relay"}});
  ASSERT_FALSE(same.ok());
  EXPECT_THAT(std::string(same.status().message()), HasSubstr("must differ from clickhouse.user"));
  auto days = Load({{"RELAY_STATS_HUD_MAX_DAYS", "400"}});
  EXPECT_FALSE(days.ok()) << "a year and more is what starved ClickHouse";
}

}  // namespace
}  // namespace relay::stats
