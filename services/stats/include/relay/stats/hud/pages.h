// The HUD's pages: each reads relay's ClickHouse through named queries
// (deploy/clickhouse/queries) and the tier report, never SQL built from the
// request, and returns the whole HTML document.
//
//   /hud          the commit grid: upstream commits, newest first, against
//                 the downstream repos (grouped by level) and their jobs
//                 params: upstream, branch, pr, page, per_page (20), days (30)
//                 (every page's `days`: at most PageContext::max_days)
//   /hud/repo     one downstream repo: trends over 14 or 30 days, flaky
//                 and slowest tests, its tier verdict
//                 params: name (required), days (14 or 30)
//   /hud/tiers    every downstream repo's level and verdict
//   /hud/test     one test's history across repos and commits, with its
//                 file's durations        params: name (required), classname, file, days
//   /hud/cost     cluster cost per team and node group    params: days, team
//
// A parameter that is malformed, out of range or names nothing relay knows
// is an InvalidArgument error naming it (the server answers 400); a filter
// that matches nothing is an empty page.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "relay/clickhouse/client.h"
#include "relay/stats/tier_report.h"

namespace relay::stats::hud {

// The tier report for every page that shows it: it runs tier_health over
// every repo twice (14 and 7 days), the slowest part of a repository page,
// and its verdicts are judged over days. relay-stats recomputes it in the
// background (Refresh, every HudOptions::tier_report_interval); pages show
// the last one computed, with its time, and compute it themselves only
// while there is none yet (one page at a time; the others get Unavailable
// rather than wait past their budget). Thread-safe.
class TierCache {
 public:
  struct Report {
    std::vector<TierVerdict> verdicts;
    std::chrono::system_clock::time_point computed_at;
  };
  absl::StatusOr<Report> Get(clickhouse::Client& client);
  absl::Status Refresh(clickhouse::Client& client);

 private:
  std::mutex mu_;        // guards report_
  std::mutex first_mu_;  // held by the one page computing the first report
  std::optional<Report> report_;
};

// What a page reads with: its thread's ClickHouse client, the shared tier
// report, and the longest window in days it may be asked for.
struct PageContext {
  clickhouse::Client& client;
  TierCache& tiers;
  int max_days = 90;
};

using Params = std::map<std::string, std::string, std::less<>>;
using PageFn = absl::StatusOr<std::string> (*)(const Params&, PageContext&);

absl::StatusOr<std::string> CommitGridPage(const Params& params, PageContext& ctx);
absl::StatusOr<std::string> RepoPage(const Params& params, PageContext& ctx);
absl::StatusOr<std::string> TiersPage(const Params& params, PageContext& ctx);
absl::StatusOr<std::string> TestPage(const Params& params, PageContext& ctx);
absl::StatusOr<std::string> CostPage(const Params& params, PageContext& ctx);

struct PageRoute {
  std::string path;   // e.g. "/hud/repo"
  std::string label;  // the page's metric label, e.g. "repo"
  PageFn render;
};
const std::vector<PageRoute>& PageRoutes();

// A request parameter the page cannot use: InvalidArgument naming it, marked
// so that the server answers 400 for it and for nothing else (an
// InvalidArgument from ClickHouse is the server's problem, not the reader's).
absl::Status BadParameter(absl::string_view key, absl::string_view why);
bool IsBadParameter(const absl::Status& status);

// Parameter checks, shared by the pages (exposed for tests).
// owner/name, GitHub's characters only; lower-cased (relay's repository keys).
absl::StatusOr<std::string> RepoParam(const Params& params, absl::string_view key, bool required);
// A decimal integer in [min, max]; `fallback` when absent or empty.
absl::StatusOr<int64_t> IntParam(const Params& params, absl::string_view key, int64_t fallback, int64_t min,
                                 int64_t max);
// `days`: a whole number of days in [1, max_days]; `fallback` (itself
// capped at max_days) when absent. Past max_days: a BadParameter saying
// the HUD's limit (a page over a year of payloads is what starves
// ClickHouse), never clamped silently.
absl::StatusOr<int64_t> DaysParam(const Params& params, int64_t fallback, int64_t max_days);
// Free text up to `max_bytes`, no control characters.
absl::StatusOr<std::string> TextParam(const Params& params, absl::string_view key, size_t max_bytes, bool required);

}  // namespace relay::stats::hud
