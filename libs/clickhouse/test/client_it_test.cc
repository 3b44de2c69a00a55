// The client against Debian's real ClickHouse 18.16 (the ctest fixture):
// statements, RowBinary inserts read back, quoted values round-tripping,
// and errors decoded with their codes.
#include <gtest/gtest.h>

#include "relay/clickhouse/client.h"
#include "relay/clickhouse/row_binary.h"
#include "support/subprocess.h"

namespace relay::clickhouse {
namespace {

std::unique_ptr<Client> Connect() {
  ClientOptions o;
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

}  // namespace
}  // namespace relay::clickhouse
