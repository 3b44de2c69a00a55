// The embedded SQL: statement splitting, query files and parameter binding,
// the migrations' numbering.
#include <gtest/gtest.h>

#include "relay/stats/migrate.h"
#include "relay/stats/sql_files.h"

namespace relay::stats {
namespace {

TEST(SplitStatements, DropsCommentsAndSplitsAtLineEndSemicolons) {
  auto s = SplitStatements("-- a comment; not a statement\nCREATE TABLE a (x String DEFAULT ';')\nENGINE = Log;\n\n"
                           "  -- another\nSELECT 1;\nSELECT 2");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], "CREATE TABLE a (x String DEFAULT ';')\nENGINE = Log");
  EXPECT_EQ(s[1], "SELECT 1");
  EXPECT_EQ(s[2], "SELECT 2");
}

TEST(NamedQuery, ParsesParamsAndBindsLiterals) {
  auto q = ParseQuery("q.sql",
                      "-- What it shows.\n-- param: repo String\n-- param: days UInt32 14\n-- param: since Date 2026-01-01\n"
                      "SELECT {days:UInt32}, {repo:String}, {since:Date}, {x} ");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->name, "q");
  EXPECT_EQ(q->description, "What it shows.");
  ASSERT_EQ(q->params.size(), 3u);
  auto sql = Bind(*q, {{"repo", "o/r"}});
  ASSERT_TRUE(sql.ok()) << sql.status();
  // Braces without a type are not placeholders.
  EXPECT_EQ(*sql, "SELECT 14, 'o/r', toDate('2026-01-01'), {x}");
}

TEST(NamedQuery, BindChecksNamesAndNumbers) {
  auto q = ParseQuery("q.sql", "-- param: days UInt32 14\nSELECT {days:UInt32}");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*Bind(*q, {}), "SELECT 14");
  EXPECT_EQ(*Bind(*q, {{"days", "7"}}), "SELECT 7");
  EXPECT_FALSE(Bind(*q, {{"days", "7; DROP TABLE x"}}).ok());
  EXPECT_FALSE(Bind(*q, {{"days", "-1"}}).ok());
  EXPECT_FALSE(Bind(*q, {{"nope", "1"}}).ok());
  auto undeclared = ParseQuery("u.sql", "SELECT {x:UInt8}");
  ASSERT_TRUE(undeclared.ok());
  EXPECT_FALSE(Bind(*undeclared, {}).ok());
  EXPECT_FALSE(ParseQuery("two.sql", "SELECT 1;\nSELECT 2;").ok());
}

TEST(NamedQuery, StringsAreQuoted) {
  auto q = ParseQuery("q.sql", "-- param: repo String\nSELECT {repo:String}");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*Bind(*q, {{"repo", "a'b\\c"}}), "SELECT 'a\\'b\\\\c'");
}

TEST(Embedded, EveryQueryParsesAndBindsWithDefaults) {
  auto all = EmbeddedNamedQueries();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_FALSE(all->empty());
  for (const auto& q : *all) {
    auto sql = Bind(q, {});
    EXPECT_TRUE(sql.ok()) << q.name << ": " << sql.status();
  }
}

TEST(Embedded, EveryRollupStatementBindsWithDefaults) {
  for (const SqlFile& f : EmbeddedRollups()) {
    auto q = ParseQuery(f.name, f.text);
    ASSERT_TRUE(q.ok()) << f.name << ": " << q.status();
    auto sql = Bind(*q, {});
    EXPECT_TRUE(sql.ok()) << f.name << ": " << sql.status();
  }
  EXPECT_TRUE(FindRollup("test_daily").ok());
  EXPECT_TRUE(FindRollup("pending_windows").ok());
}

TEST(Embedded, MigrationsAreNumberedWithoutGaps) {
  auto m = LoadMigrations();
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(static_cast<int>(m->size()), LatestSchemaVersion());
  for (size_t i = 0; i < m->size(); ++i) {
    EXPECT_EQ((*m)[i].version, static_cast<int>(i) + 1);
    EXPECT_EQ((*m)[i].checksum.size(), 64u);
    EXPECT_FALSE((*m)[i].statements.empty());
  }
}

}  // namespace
}  // namespace relay::stats
