// The client against Debian's real ClickHouse 18.16 (the ctest fixture):
// statements, RowBinary inserts read back, quoted values round-tripping,
// errors decoded with their codes, per-query settings, a read-only user's
// refusal, and a query given up on killed on the server.
#include <gtest/gtest.h>

#include "relay/clickhouse/client.h"
#include "relay/clickhouse/row_binary.h"
#include "support/subprocess.h"

namespace relay::clickhouse {
namespace {

std::unique_ptr<Client> Connect(ClientOptions o = {}) {
  o.url = testing::ReadFile(testing::Env("RELAY_IT_CLICKHOUSE_DIR") + "/url");
  while (!o.url.empty() && (o.url.back() == '\n' || o.url.back() == '/')) o.url.pop_back();
  auto c = Client::New(o);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(ClickHouseClientIT, InsertsRowBinaryAndReadsItBack) {
  auto c = Connect();
  ASSERT_TRUE(c);
  std::string table = "it_client_" + testing::Unique();
  ASSERT_TRUE(c->Query("CREATE TABLE " + QuoteIdentifier(table) +
                       " (id String, n UInt32, tags Array(String), at DateTime, note Nullable(String), v UInt64)"
                       " ENGINE = ReplacingMergeTree(v) ORDER BY id").ok());
  RowBinary rows;
  for (int i = 0; i < 1000; ++i) {
    rows.String("row-" + std::to_string(i % 500)).UInt32(static_cast<uint32_t>(i)).Strings({"a", "b"}).DateTime(1795000000);
    if (i % 2) rows.Null(); else rows.NotNull().String("it's \"quoted\"\n");
    rows.UInt64(static_cast<uint64_t>(i));
    rows.EndRow();
  }
  ASSERT_TRUE(c->Insert(table, "", "RowBinary", rows.data(), /*idempotent=*/true).ok());
  // The same rows again: ReplacingMergeTree keeps one per id (FINAL).
  ASSERT_TRUE(c->Insert(table, "", "RowBinary", rows.data(), /*idempotent=*/true).ok());
  auto count = c->Query("SELECT count() FROM " + QuoteIdentifier(table) + " FINAL");
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, "500\n");
  auto latest = c->Query("SELECT n FROM " + QuoteIdentifier(table) + " FINAL WHERE id = " + Quote("row-7"));
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "507\n") << "the highest version wins";
  std::string tricky = "it's a \\ back'slash\nand a newline";
  auto echoed = c->Query("SELECT " + Quote(tricky) + " FORMAT RowBinary");
  ASSERT_TRUE(echoed.ok());
  EXPECT_EQ(echoed->substr(1), tricky) << "quoted values arrive byte for byte";
  EXPECT_TRUE(c->Query("DROP TABLE " + QuoteIdentifier(table)).ok());
}

TEST(ClickHouseClientIT, ServerErrorsComeBackWithTheirCodes) {
  auto c = Connect();
  ASSERT_TRUE(c);
  auto missing = c->Query("SELECT * FROM no_such_table_anywhere");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_EQ(ServerErrorCode(missing.status()), 60);
  auto syntax = c->Query("SELEKT 1");
  EXPECT_TRUE(absl::IsInvalidArgument(syntax.status())) << syntax.status();
  EXPECT_EQ(ServerErrorCode(syntax.status()), 62);
  std::string table = "it_client_bad_" + testing::Unique();
  ASSERT_TRUE(c->Query("CREATE TABLE " + QuoteIdentifier(table) + " (x UInt64) ENGINE = MergeTree ORDER BY x").ok());
  absl::Status truncated = c->Insert(table, "", "RowBinary", std::string(5, '\1'), true);
  EXPECT_FALSE(truncated.ok()) << "5 bytes are not a UInt64 row";
  EXPECT_TRUE(ServerErrorCode(truncated).has_value()) << truncated;
  EXPECT_TRUE(c->Query("DROP TABLE " + QuoteIdentifier(table)).ok());
  ClientOptions o;
  o.url = "http://127.0.0.1:1";
  o.max_attempts = 2;
  o.retry_backoff = std::chrono::milliseconds(10);
  auto down = (*Client::New(o))->Query("SELECT 1");
  EXPECT_TRUE(absl::IsUnavailable(down.status())) << down.status();
}

// Settings in ClientOptions go with every request: a reader's limits.
TEST(ClickHouseClientIT, PerQuerySettingsAreSentAndEnforced) {
  auto writer = Connect();
  ASSERT_TRUE(writer);
  std::string table = "it_client_limits_" + testing::Unique();
  ASSERT_TRUE(writer->Query("CREATE TABLE " + table + " (x UInt64) ENGINE = MergeTree ORDER BY x").ok());
  ASSERT_TRUE(writer->Query("INSERT INTO " + table + " SELECT number FROM numbers(100000)").ok());
  ClientOptions o;
  o.settings = {{"max_rows_to_read", "1000"}};
  auto limited = Connect(o);
  auto r = limited->Query("SELECT sum(x) FROM " + table);
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  EXPECT_EQ(ServerErrorCode(r.status()), 158) << "TOO_MANY_ROWS";
  EXPECT_TRUE(writer->Query("DROP TABLE " + table).ok());
  o.settings = {{"max_rows_to_read; DROP", "1"}};
  EXPECT_FALSE(Client::New(o).ok()) << "a setting name is letters, digits and '_' only";
}

// The dev launcher's relay_hud (tools/clickhouse/clickhouse-dev), as the
// HUD reads: its limits may be set, nothing may be written.
TEST(ClickHouseClientIT, TheReadOnlyUserReadsAndSetsLimitsButCannotWrite) {
  ClientOptions o;
  o.user = "relay_hud";
  o.settings = {{"max_rows_to_read", "1000000"}, {"max_memory_usage", "100000000"}};
  auto hud = Connect(o);
  auto readonly = hud->Query("SELECT value FROM system.settings WHERE name = 'readonly'");
  ASSERT_TRUE(readonly.ok()) << readonly.status();
  EXPECT_EQ(*readonly, "2\n");
  std::string table = "it_client_ro_" + testing::Unique();
  auto create = hud->Query("CREATE TABLE " + table + " (x UInt64) ENGINE = Memory");
  EXPECT_TRUE(absl::IsPermissionDenied(create.status())) << create.status();
  EXPECT_EQ(ServerErrorCode(create.status()), 164) << "READONLY";
  auto writer = Connect();
  ASSERT_TRUE(writer->Query("CREATE TABLE " + table + " (x UInt64) ENGINE = Memory").ok());
  auto insert = hud->Insert(table, "", "TabSeparated", "1\n", /*idempotent=*/true);
  EXPECT_EQ(ServerErrorCode(insert), 164) << insert;
  EXPECT_EQ(*writer->Query("SELECT count() FROM " + table), "0\n");
  EXPECT_TRUE(writer->Query("DROP TABLE " + table).ok());
}

// 18.16 goes on with a query whose HTTP client has gone: a query the
// client gives up on at its deadline is killed before Query returns.
// sleep(3) is one block, so the server's own max_execution_time (1 s here)
// cannot end it sooner: only the kill does.
TEST(ClickHouseClientIT, AQueryPastItsDeadlineIsKilledOnTheServer) {
  ClientOptions o;
  o.max_attempts = 1;
  auto c = Connect(o);
  auto monitor = Connect();
  std::string prefix = "it-deadline-" + testing::Unique();
  c->Bound({std::chrono::steady_clock::now() + std::chrono::milliseconds(1000), prefix});
  auto start = std::chrono::steady_clock::now();
  auto r = c->Query("SELECT sleep(3)");
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(prefix + "-1 killed"), std::string::npos) << r.status();
  auto running = monitor->Query("SELECT count() FROM system.processes WHERE query_id LIKE " + Quote(prefix + "%"));
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(*running, "0\n") << "the query outlived the request that gave up on it";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000) + kKillTimeout);
  // Past the deadline nothing more is sent.
  auto late = c->Query("SELECT 1");
  EXPECT_TRUE(absl::IsDeadlineExceeded(late.status())) << late.status();
  // Unbound again, the client is as before.
  c->Bound({});
  EXPECT_EQ(*c->Query("SELECT 1"), "1\n");
}

}  // namespace
}  // namespace relay::clickhouse
