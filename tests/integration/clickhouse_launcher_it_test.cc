// The ClickHouse launcher (tools/clickhouse/clickhouse-dev) starts Debian's
// real server on a free loopback port, and it answers SQL over HTTP.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/http_client.h"
#include "support/subprocess.h"

namespace relay {
namespace {

TEST(ClickHouseLauncherIT, ServesSqlOverHttpOnLoopback) {
  std::string url = testing::ReadFile(testing::Env("RELAY_IT_CLICKHOUSE_DIR") + "/url");
  ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
  uint16_t port = static_cast<uint16_t>(std::stoi(url.substr(17)));
  testing::HttpClient client("127.0.0.1", port);
  auto r = client.Post("/", {}, "SELECT 1 + 1");
  ASSERT_EQ(r.status, 200) << r.error;
  EXPECT_EQ(r.body, "2\n");
  r = client.Post("/", {}, "CREATE TABLE IF NOT EXISTS it_probe (x UInt32) ENGINE = ReplacingMergeTree ORDER BY x");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(client.Post("/", {}, "INSERT INTO it_probe VALUES (1), (1), (2)").status, 200);
  r = client.Post("/", {}, "SELECT count() FROM it_probe FINAL");
  EXPECT_EQ(r.body, "2\n");
  EXPECT_EQ(client.Post("/", {}, "DROP TABLE it_probe").status, 200);
}

}  // namespace
}  // namespace relay
