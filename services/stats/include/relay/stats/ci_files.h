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
// services/stats/README.md ("Published CI files") says where each number comes
// from. relay-stats recomputes them every stats.ci_files_interval and
// serves the last ones under /ci/<name> with an ETag (a 304 to a matching
// If-None-Match) and Cache-Control; with stats.ci_files_dir set it also
// writes them there (each replaced whole), for an object store to pick up.
// Each file is recomputed and published on its own: one that fails (its
// query, or a body over stats.ci_files_max_bytes) keeps its last good
// version and leaves the others fresh.
//
// The disabled list turns off tests in every CI job that reads it, so it
// takes only issues that PyTorch's own tooling would act on (see
// DisabledTestsPolicy): issues of the configured upstream repositories,
// filed by an author whose association with the repository is trusted.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "relay/clickhouse/client.h"
#include "relay/http/router.h"
#include "relay/stats/hud/html.h"

namespace relay::stats {

// Whose DISABLED issues count. What PyTorch's tooling accepts (read in
// pytorch/test-infra and pytorch/pytorch; services/stats/README.md,
// "Published CI files"): .github/scripts/update_disabled_issues.py builds the file
// from the open issues of pytorch/pytorch only; torchci's
// lib/bot/verifyDisableTestIssueBot.ts treats an issue as authorized when
// its author is the PyTorch bot or has `admin` or `write` permission on the
// repository (hasWritePermissions in lib/bot/utils.ts) and closes the
// others, which keeps them out of that open-issue search. relay-stats asks
// GitHub nothing, so it judges the author by what the webhook carries: the
// issue's `author_association`, or the author's user id (a bot that files
// DISABLED issues, as PyTorch's does, has no association of its own).
struct DisabledTestsPolicy {
  std::set<std::string> repos;         // upstream repositories, lower-case "owner/name"; empty: none
  std::set<std::string> associations;  // trusted author_association values, upper-case
  std::set<int64_t> user_ids;          // authors trusted whatever their association (issue.user.id)
};
// GitHub's author_association values.
const std::set<std::string>& AuthorAssociations();
// The trusted ones by default.
std::vector<std::string> DefaultTrustedAssociations();

struct CiFilesOptions {
  int days = 7;            // test and class times, slow tests: this many days of runs
  double slow_threshold_seconds = 60;  // a test slower than this on average is slow
  int flaky_days = 14;
  std::chrono::seconds max_age{300};  // Cache-Control max-age (the refresh interval)
  std::string dir;                    // set: the files are also written here
  DisabledTestsPolicy disabled;       // whose issues disable tests
  int disabled_days = 365;            // issues whose latest delivery is older are not read
  size_t max_file_bytes = 32u << 20;  // a file larger than this is refused (the last good one stays)
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
// `issues`: ci_disabled_issues rows (repo, received_at_ms, payload), oldest
// first. Each issue's latest delivery decides; only an open issue of a
// policy repository, by an author with a trusted association, titled
// "DISABLED <test>" disables the test. `verdicts` (optional) gets the
// number of issues per verdict: disabled, closed, not_a_test,
// other_repository, untrusted_author, unreadable.
std::string DisabledTestsJson(const hud::ResultSet& issues, const DisabledTestsPolicy& policy,
                              std::map<std::string, int64_t>* verdicts = nullptr);
// "Platforms: linux, mac" in an issue body -> sorted, known platforms only;
// none (or no line): every platform.
std::vector<std::string> ParsePlatforms(std::string_view body);

// Runs a named query (deploy/clickhouse/queries) with its parameters.
using CiQueryRunner = std::function<absl::StatusOr<hud::ResultSet>(
    const std::string& query, const std::map<std::string, std::string>& params)>;

class CiFiles {
 public:
  CiFiles(CiFilesOptions options, prometheus::Registry& metrics);
  static const std::vector<std::string>& Names();
  // Recomputes each file from ClickHouse and publishes it on its own. A
  // file whose query fails, or whose body is over max_file_bytes, keeps
  // its last good version (503 if it never had one), with a log line and
  // relay_stats_ci_file_refreshes_total{file,result="error"|"too_large"};
  // the others are published. OK when all five were; otherwise an error
  // naming each file that was not.
  absl::Status Refresh(clickhouse::Client& client);
  absl::Status Refresh(const CiQueryRunner& run);
  // GET /ci/<name>: 200 with ETag and Cache-Control, 304 to a matching
  // If-None-Match, 503 until the first refresh.
  void AddRoutes(http::Router& router);
  std::optional<CiFile> Get(const std::string& name) const;

 private:
  // One file: published from `rows`, or refused with its reason (counted
  // and logged), the last good version kept.
  absl::Status RefreshFile(const std::string& name, absl::StatusOr<hud::ResultSet> rows,
                           const std::function<std::string(const hud::ResultSet&)>& to_json);
  void Publish(const std::string& name, std::string body);

  CiFilesOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, CiFile> files_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& refreshes_;
  prometheus::Family<prometheus::Gauge>& disabled_issues_;
};

}  // namespace relay::stats
