// Test reports, streamed: JUnit XML as pytest, GoogleTest, ctest and
// Gradle/Maven Surefire write it, and a JSON equivalent. Each test case is
// handed to a sink as soon as its element closes, so memory stays flat
// whatever the report's size (expat, a SAX parser; never a DOM).
//
// What is read of a <testcase>:
//   file        its `file` attribute (pytest, GoogleTest), else the
//               enclosing <testsuite file=...>
//   classname   `classname`; name `name`; duration `time` (seconds)
//   outcome     failed (<failure>), error (<error>), skipped (<skipped>, or
//               GoogleTest/ctest status="notrun"/"disabled"), else passed
//   reruns      <rerun>, <rerunFailure>, <rerunError>, <flakyFailure>,
//               <flakyError> children (pytest-rerunfailures, Surefire):
//               a test that passed after reruns is passed with a count
//   message     the failure's `message`, else its text; cut to a bound at
//               a UTF-8 boundary
// DTDs are refused (no entity expansion of any kind), and depth, attribute
// and name sizes are bounded.
//
// The JSON equivalent ({"timestamp": ISO 8601 (optional), "test_cases":
// [{file, classname, name, time, outcome, reruns, message}, ...]}) goes
// through the same sink.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace relay::collector {

enum class Outcome { kPassed, kFailed, kError, kSkipped };
std::string_view OutcomeName(Outcome o);  // passed | failed | error | skipped

struct TestCase {
  std::string file;
  std::string classname;
  std::string name;
  double duration_s = 0;
  Outcome outcome = Outcome::kPassed;
  int32_t reruns = 0;
  std::string message;  // failed/error/skipped: why (bounded)
};

struct ReportOptions {
  size_t max_message_bytes = 2048;
  size_t max_field_bytes = 1024;  // file, classname, name
  int max_depth = 64;
};

// Returns an error to stop the parse (the report is then refused whole).
using TestCaseSink = std::function<absl::Status(TestCase&&)>;

class ReportParser {
 public:
  virtual ~ReportParser() = default;
  // Feeds the next bytes. InvalidArgument "line N: reason" for a malformed
  // report; a sink error as the sink returned it.
  virtual absl::Status Feed(std::string_view chunk) = 0;
  // The end of the report; an error if it ended early.
  virtual absl::Status Finish() = 0;
  virtual int64_t cases() const = 0;
  // The report's own time: the first `timestamp` of a <testsuites> or
  // <testsuite> (pytest, GoogleTest, Surefire write one), or the JSON
  // report's top-level "timestamp"; ISO 8601, read as UTC without a zone.
  // 0 when it has none (or none readable). The same bytes uploaded again
  // give the same time: it places the report's rows on a day.
  virtual int64_t timestamp_unix_ms() const = 0;
};

// "2026-11-25T12:00:00[.fff][Z|+hh:mm|-hh:mm]" -> unix ms; 0 if malformed.
int64_t ParseReportTimestamp(std::string_view text);

std::unique_ptr<ReportParser> NewJUnitParser(ReportOptions options, TestCaseSink sink);
// The JSON equivalent. It is parsed whole (its size is capped by the
// caller like any upload); test cases then go out one by one.
std::unique_ptr<ReportParser> NewJsonReportParser(ReportOptions options, TestCaseSink sink);

}  // namespace relay::collector
