// The report parser over each flavour as its tool writes it, fed in small
// chunks (as an upload arrives), and over malformed and hostile input.
#include "relay/collector/junit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace relay::collector {
namespace {

using ::testing::HasSubstr;

struct Parsed {
  absl::Status status;
  std::vector<TestCase> cases;
};

Parsed ParseIn(std::unique_ptr<ReportParser> (*make)(ReportOptions, TestCaseSink), std::string_view text,
               size_t chunk = 7, ReportOptions options = {}) {
  Parsed out;
  auto parser = make(options, [&](TestCase&& c) {
    out.cases.push_back(std::move(c));
    return absl::OkStatus();
  });
  for (size_t i = 0; i < text.size() && out.status.ok(); i += chunk) out.status = parser->Feed(text.substr(i, chunk));
  if (out.status.ok()) out.status = parser->Finish();
  return out;
}
Parsed Xml(std::string_view text, size_t chunk = 7) { return ParseIn(&NewJUnitParser, text, chunk); }

TEST(JUnitTest, Pytest) {
  auto p = Xml(R"(<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5" time="3.1">
<testcase classname="test.test_ops.TestOps" name="test_add" file="test/test_ops.py" line="10" time="0.012"/>
<testcase classname="test.test_ops.TestOps" name="test_mul" file="test/test_ops.py" line="20" time="1.5">
  <failure message="AssertionError: 2 != 3">Traceback (most recent call last):
  assert 2 == 3</failure>
</testcase>
<testcase classname="test.test_ops.TestOps" name="test_div" file="test/test_ops.py" time="0.1">
  <skipped type="pytest.skip" message="needs a GPU">test/test_ops.py:30: needs a GPU</skipped>
</testcase>
<testcase classname="test.test_ops.TestOps" name="test_flaky" file="test/test_ops.py" time="0.3">
  <rerun message="flaked once">trace</rerun><rerun message="flaked twice">trace</rerun>
</testcase>
<testcase classname="test.test_ops.TestOps" name="test_setup" file="test/test_ops.py" time="0">
  <error message="fixture 'gpu' not found"/>
</testcase>
</testsuite></testsuites>)");
  ASSERT_TRUE(p.status.ok()) << p.status;
  ASSERT_EQ(p.cases.size(), 5u);
  EXPECT_EQ(p.cases[0].file, "test/test_ops.py");
  EXPECT_EQ(p.cases[0].classname, "test.test_ops.TestOps");
  EXPECT_EQ(p.cases[0].name, "test_add");
  EXPECT_DOUBLE_EQ(p.cases[0].duration_s, 0.012);
  EXPECT_EQ(p.cases[0].outcome, Outcome::kPassed);
  EXPECT_EQ(p.cases[1].outcome, Outcome::kFailed);
  EXPECT_EQ(p.cases[1].message, "AssertionError: 2 != 3");
  EXPECT_EQ(p.cases[2].outcome, Outcome::kSkipped);
  EXPECT_EQ(p.cases[2].message, "needs a GPU");
  EXPECT_EQ(p.cases[3].outcome, Outcome::kPassed);
  EXPECT_EQ(p.cases[3].reruns, 2);
  EXPECT_EQ(p.cases[4].outcome, Outcome::kError);
  EXPECT_EQ(p.cases[4].message, "fixture 'gpu' not found");
}

TEST(JUnitTest, GoogleTest) {
  auto p = Xml(R"(<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="1" disabled="1" errors="0" time="0.2" name="AllTests">
  <testsuite name="MathTest" tests="3" failures="1" disabled="1" skipped="0" errors="0" time="0.2">
    <testcase name="Adds" file="math_test.cc" line="5" status="run" result="completed" time="0.001" classname="MathTest" />
    <testcase name="Divides" file="math_test.cc" line="9" status="run" result="completed" time="0.002" classname="MathTest">
      <failure message="math_test.cc:10&#x0A;Expected equality of these values:&#x0A;  1&#x0A;  2" type=""><![CDATA[math_test.cc:10
Expected equality of these values:
  1
  2]]></failure>
    </testcase>
    <testcase name="DISABLED_Slow" file="math_test.cc" line="14" status="notrun" result="suppressed" time="0" classname="MathTest" />
  </testsuite>
</testsuites>)");
  ASSERT_TRUE(p.status.ok()) << p.status;
  ASSERT_EQ(p.cases.size(), 3u);
  EXPECT_EQ(p.cases[1].outcome, Outcome::kFailed);
  EXPECT_THAT(p.cases[1].message, HasSubstr("Expected equality"));
  EXPECT_EQ(p.cases[2].outcome, Outcome::kSkipped);
  EXPECT_EQ(p.cases[0].file, "math_test.cc");
}

TEST(JUnitTest, CtestAndSurefire) {
  auto ctest = Xml(R"(<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux-c++" tests="3" failures="1" disabled="0" skipped="1" hostname="" time="2" timestamp="2026-11-23T10:00:00">
  <testcase name="unit" classname="unit" time="0.5" status="run"><system-out>ok</system-out></testcase>
  <testcase name="it" classname="it" time="1.5" status="fail"><failure message="Failed"/><system-out>boom</system-out></testcase>
  <testcase name="gpu" classname="gpu" time="0" status="notrun"><skipped message="Disabled"/></testcase>
</testsuite>)");
  ASSERT_TRUE(ctest.status.ok()) << ctest.status;
  ASSERT_EQ(ctest.cases.size(), 3u);
  EXPECT_EQ(ctest.cases[1].outcome, Outcome::kFailed);
  EXPECT_EQ(ctest.cases[2].outcome, Outcome::kSkipped);
  EXPECT_EQ(ctest.cases[2].message, "Disabled");

  auto surefire = Xml(R"(<?xml version="1.0" encoding="UTF-8"?>
<testsuite xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" name="com.acme.CalcTest" time="1,234.5" tests="3" errors="0" skipped="0" failures="1">
  <properties><property name="java.version" value="17"/></properties>
  <testcase name="adds" classname="com.acme.CalcTest" time="1,200.25"/>
  <testcase name="flaky" classname="com.acme.CalcTest" time="0.1">
    <flakyFailure message="timeout" type="java.lang.AssertionError"><stackTrace>at x</stackTrace></flakyFailure>
  </testcase>
  <testcase name="broken" classname="com.acme.CalcTest" time="0.2">
    <failure message="expected: &lt;1&gt; but was: &lt;2&gt;" type="org.opentest4j.AssertionFailedError">stack</failure>
    <rerunFailure message="again" type="x">stack</rerunFailure>
    <rerunFailure message="again" type="x">stack</rerunFailure>
  </testcase>
</testsuite>)");
  ASSERT_TRUE(surefire.status.ok()) << surefire.status;
  ASSERT_EQ(surefire.cases.size(), 3u);
  EXPECT_DOUBLE_EQ(surefire.cases[0].duration_s, 1200.25);
  EXPECT_EQ(surefire.cases[1].outcome, Outcome::kPassed);
  EXPECT_EQ(surefire.cases[1].reruns, 1);
  EXPECT_EQ(surefire.cases[2].outcome, Outcome::kFailed);
  EXPECT_EQ(surefire.cases[2].reruns, 2);
  EXPECT_EQ(surefire.cases[2].message, "expected: <1> but was: <2>");
}

TEST(JUnitTest, MessagesAreBoundedAtACharacterBoundary) {
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "é";  // two bytes each
  auto p = ParseIn(&NewJUnitParser,
                   "<testsuite><testcase name=\"t\"><failure>" + long_text + "</failure></testcase></testsuite>", 100,
                   ReportOptions{101, 1024, 64});
  ASSERT_TRUE(p.status.ok()) << p.status;
  ASSERT_EQ(p.cases.size(), 1u);
  EXPECT_EQ(p.cases[0].message.size(), 100u);
  EXPECT_EQ(p.cases[0].message.substr(0, 2), "é");
}

TEST(JUnitTest, MalformedReportsSayWhereAndWhy) {
  auto p = Xml("<testsuite>\n<testcase name=\"a\">\n</testsuite>");
  EXPECT_TRUE(absl::IsInvalidArgument(p.status));
  EXPECT_THAT(p.status.message(), HasSubstr("line 3"));
  EXPECT_THAT(p.status.message(), HasSubstr("mismatched tag"));

  p = Xml("<testsuite><testcase name=\"a\"/>");  // cut short
  EXPECT_THAT(p.status.message(), HasSubstr("no element found"));
  p = Xml("<html><body/></html>");
  EXPECT_THAT(p.status.message(), HasSubstr("not a JUnit report"));
  p = Xml("");
  EXPECT_FALSE(p.status.ok());
  p = Xml("<testsuite><testcase classname=\"x\"/></testsuite>");
  EXPECT_THAT(p.status.message(), HasSubstr("without a name"));
}

TEST(JUnitTest, DtdsAndEntityExpansionAreRefused) {
  auto p = Xml(R"(<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<testsuite><testcase name="&lol2;"/></testsuite>)");
  EXPECT_THAT(p.status.message(), HasSubstr("DTDs are not accepted"));
  p = Xml(R"(<!DOCTYPE x SYSTEM "file:///etc/passwd"><testsuite/>)");
  EXPECT_THAT(p.status.message(), HasSubstr("DTDs are not accepted"));
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "<testsuite>";
  p = Xml(deep);
  EXPECT_THAT(p.status.message(), HasSubstr("nested too deep"));
}

TEST(JUnitTest, ASinkErrorStopsTheParse) {
  int seen = 0;
  auto parser = NewJUnitParser({}, [&](TestCase&&) {
    ++seen;
    return absl::ResourceExhaustedError("too many test cases");
  });
  absl::Status s = parser->Feed("<testsuite><testcase name=\"a\"/><testcase name=\"b\"/></testsuite>");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_EQ(seen, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(parser->Finish()));
}

TEST(JsonReportTest, TheJsonEquivalent) {
  auto p = ParseIn(&NewJsonReportParser, R"({"test_cases":[
    {"file":"a.py","classname":"A","name":"t1","time":0.5,"outcome":"passed"},
    {"file":"a.py","classname":"A","name":"t2","time":1,"outcome":"failed","message":"boom","reruns":2}]})");
  ASSERT_TRUE(p.status.ok()) << p.status;
  ASSERT_EQ(p.cases.size(), 2u);
  EXPECT_EQ(p.cases[1].outcome, Outcome::kFailed);
  EXPECT_EQ(p.cases[1].reruns, 2);
  EXPECT_EQ(p.cases[1].message, "boom");
  p = ParseIn(&NewJsonReportParser, R"({"test_cases":[{"name":"t","outcome":"maybe"}]})");
  EXPECT_THAT(p.status.message(), HasSubstr("test_cases[0] outcome"));
  p = ParseIn(&NewJsonReportParser, R"({"test_cases":[{"name":"t"})");
  EXPECT_FALSE(p.status.ok());
}

// The report's own time, which places a re-uploaded report on the same
// day (issue 15, item 8).
TEST(ReportTimestampTest, TheReportsOwnTimeIsReadFromEitherFormat) {
  EXPECT_EQ(ParseReportTimestamp("2026-11-25T23:59:58"), 1795651198000);
  EXPECT_EQ(ParseReportTimestamp("2026-11-25T23:59:58.250Z"), 1795651198250);
  EXPECT_EQ(ParseReportTimestamp("2026-11-26T01:59:58.250+02:00"), 1795651198250);
  EXPECT_EQ(ParseReportTimestamp("2026-11-25T21:59:58-02:00"), 1795651198000);
  for (const char* bad : {"", "yesterday", "2026-13-01T00:00:00", "2026-11-25 10:00:00", "2026-11-25T10:00:00+xx"}) {
    EXPECT_EQ(ParseReportTimestamp(bad), 0) << bad;
  }
  int64_t seen = -1;
  auto parser = NewJUnitParser({}, [](TestCase&&) { return absl::OkStatus(); });
  ASSERT_TRUE(parser->Feed(R"(<testsuites><testsuite name="pytest" timestamp="2026-11-25T23:59:58.250000" hostname="h">)"
                           R"(<testcase classname="a" name="t" time="0.1"/></testsuite></testsuites>)").ok());
  ASSERT_TRUE(parser->Finish().ok());
  seen = parser->timestamp_unix_ms();
  EXPECT_EQ(seen, 1795651198250);
  auto json = NewJsonReportParser({}, [](TestCase&&) { return absl::OkStatus(); });
  ASSERT_TRUE(json->Feed(R"({"timestamp":"2026-11-25T23:59:58Z","test_cases":[{"name":"t"}]})").ok());
  ASSERT_TRUE(json->Finish().ok());
  EXPECT_EQ(json->timestamp_unix_ms(), 1795651198000);
  auto none = NewJUnitParser({}, [](TestCase&&) { return absl::OkStatus(); });
  ASSERT_TRUE(none->Feed(R"(<testsuite name="x"><testcase name="t"/></testsuite>)").ok());
  ASSERT_TRUE(none->Finish().ok());
  EXPECT_EQ(none->timestamp_unix_ms(), 0);
}

}  // namespace
}  // namespace relay::collector
