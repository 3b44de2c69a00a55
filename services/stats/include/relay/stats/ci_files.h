// The files a PyTorch-style CI job downloads when it starts, made from
// relay's ClickHouse tables in the shapes PyTorch's CI reads
// (pytorch/test-infra's generated stats):
//
//   test-times.json                 {build env: {test config: {test file: seconds}}}
//   test-class-times.json           {build env: {test config: {test file: {class: seconds}}}}
//   slow-tests.json                 {"<test> (__main__.<class>)": seconds}
//   disabled-tests-condensed.json   {"<test> (__main__.<class>)": [issue number, issue URL, [platforms]]}
//   flaky-tests.json                relay's own: {"<test> (__main__.<class>)": {file, flaky_commits,
//                                   passed_on_rerun, runs, failed}} (PyTorch files flaky tests as
//                                   DISABLED issues; this is the list those come from)
//
// docs/architecture.md ("Published CI files") says where each number comes
// from. relay-stats recomputes them every stats.ci_files_interval and
// serves the last ones under /ci/<name> with an ETag (a 304 to a matching
// If-None-Match) and Cache-Control; with stats.ci_files_dir set it also
// writes them there (each replaced whole), for an object store to pick up.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/clickhouse/client.h"
#include "relay/http/router.h"
#include "relay/stats/hud/html.h"

namespace relay::stats {

struct CiFilesOptions {
  int days = 7;            // test and class times, slow tests: this many days of runs
  double slow_threshold_seconds = 60;  // a test slower than this on average is slow
  int flaky_days = 14;
  std::chrono::seconds max_age{300};  // Cache-Control max-age (the refresh interval)
  std::string dir;                    // set: the files are also written here
};

struct CiFile {
  std::string body;
  std::string etag;  // quoted, from the body's SHA-256
  int64_t generated_at_ms = 0;
};

// What each file is made of (exposed for tests): the named queries' rows
// to the file's JSON text.
std::string TestTimesJson(const hud::ResultSet& rows);
std::string TestClassTimesJson(const hud::ResultSet& rows);
std::string SlowTestsJson(const hud::ResultSet& rows);
std::string FlakyTestsJson(const hud::ResultSet& rows);
// `issues`: ci_disabled_issues rows (repo, received_at_ms, payload), oldest first.
std::string DisabledTestsJson(const hud::ResultSet& issues);
// "Platforms: linux, mac" in an issue body -> sorted, known platforms only;
// none (or no line): every platform.
std::vector<std::string> ParsePlatforms(std::string_view body);

class CiFiles {
 public:
  CiFiles(CiFilesOptions options, prometheus::Registry& metrics);
  static const std::vector<std::string>& Names();
  // Recomputes every file from ClickHouse; the previous ones stay served
  // when it fails.
  absl::Status Refresh(clickhouse::Client& client);
  // GET /ci/<name>: 200 with ETag and Cache-Control, 304 to a matching
  // If-None-Match, 503 until the first refresh.
  void AddRoutes(http::Router& router);
  std::optional<CiFile> Get(const std::string& name) const;

 private:
  CiFilesOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, CiFile> files_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& refreshes_;
};

}  // namespace relay::stats
