// Error decoding, quoting and RowBinary encoding, without a server.
#include <gtest/gtest.h>

#include "relay/clickhouse/client.h"
#include "relay/clickhouse/row_binary.h"

namespace relay::clickhouse {
namespace {

TEST(ClickHouseErrors, DecodeTheCodeOfBothGenerationsIntoActionableStatuses) {
  // 18.16 and current releases word it differently; the code is what counts.
  absl::Status old_style = DecodeError(404, "Code: 60, e.displayText() = DB::Exception: Table default.x doesn't exist., e.what() = DB::Exception\n");
  EXPECT_TRUE(absl::IsNotFound(old_style)) << old_style;
  EXPECT_EQ(ServerErrorCode(old_style), 60);
  absl::Status new_style = DecodeError(400, "Code: 62. DB::Exception: Syntax error: failed at position 1. (SYNTAX_ERROR) (version 24.3.1)\n");
  EXPECT_TRUE(absl::IsInvalidArgument(new_style)) << new_style;
  EXPECT_EQ(ServerErrorCode(new_style), 62);
  EXPECT_TRUE(absl::IsUnavailable(DecodeError(500, "Code: 252, e.displayText() = DB::Exception: Too many parts")));
  EXPECT_TRUE(absl::IsResourceExhausted(DecodeError(500, "Code: 241. DB::Exception: Memory limit exceeded")));
  EXPECT_TRUE(absl::IsUnavailable(DecodeError(502, "bad gateway"))) << "no code, a 5xx: the way there failed";
  EXPECT_EQ(ServerErrorCode(DecodeError(502, "bad gateway")), std::nullopt);
  EXPECT_TRUE(absl::IsPermissionDenied(DecodeError(401, "Code: 193, e.displayText() = DB::Exception: Wrong password")));
}

TEST(ClickHouseQuoting, EscapesWhatWouldEndOrBendTheLiteral) {
  EXPECT_EQ(Quote("plain"), "'plain'");
  EXPECT_EQ(Quote("it's"), "'it\\'s'");
  EXPECT_EQ(Quote("back\\slash"), "'back\\\\slash'");
  EXPECT_EQ(Quote(std::string("nl\nnul\0", 7)), "'nl\\x0Anul\\x00'");
  EXPECT_EQ(QuoteIdentifier("ci_results"), "`ci_results`");
  EXPECT_EQ(QuoteIdentifier("a`b"), "`a\\`b`");
}

TEST(ClickHouseRowBinary, EncodesAsTheServerReadsIt) {
  RowBinary rb;
  rb.UInt8(1).UInt32(0x01020304).String("ab").Strings({"x", ""}).DateTime(1).Null().NotNull().Int64(-1);
  rb.EndRow();
  std::string want = std::string("\x01", 1) + std::string("\x04\x03\x02\x01", 4) + "\x02" "ab" + "\x02" "\x01" "x" +
                     std::string("\x00", 1) + std::string("\x01\x00\x00\x00", 4) + "\x01" + std::string("\x00", 1) +
                     std::string(8, '\xff');
  EXPECT_EQ(rb.data(), want);
  EXPECT_EQ(rb.rows(), 1u);
  RowBinary big;
  big.String(std::string(300, 'a'));
  EXPECT_EQ(big.data().substr(0, 2), "\xac\x02") << "lengths are LEB128 varints";
}

}  // namespace
}  // namespace relay::clickhouse
