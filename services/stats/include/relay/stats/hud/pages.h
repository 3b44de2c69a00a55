// The HUD's pages: each reads relay's ClickHouse through named queries
// (deploy/clickhouse/queries) and the tier report, never SQL built from the
// request, and returns the whole HTML document.
//
//   /hud          the commit grid: upstream commits, newest first, against
//                 the downstream repos (grouped by level) and their jobs
//                 params: upstream, branch, pr, page, per_page (20)
//   /hud/repo     one downstream repo: trends over 14 or 30 days, flaky
//                 and slowest tests, its tier verdict
//                 params: name (required), days (14 or 30)
//   /hud/tiers    every downstream repo's level and verdict
//   /hud/test     one test's history across repos and commits, with its
//                 file's durations        params: name (required), classname, days
//   /hud/cost     cluster cost per team and node group    params: days, team
//
// A parameter that is malformed, out of range or names nothing relay knows
// is an InvalidArgument error naming it (the server answers 400); a filter
// that matches nothing is an empty page.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "relay/clickhouse/client.h"

namespace relay::stats::hud {

using Params = std::map<std::string, std::string, std::less<>>;
using PageFn = absl::StatusOr<std::string> (*)(const Params&, clickhouse::Client&);

absl::StatusOr<std::string> CommitGridPage(const Params& params, clickhouse::Client& client);
absl::StatusOr<std::string> RepoPage(const Params& params, clickhouse::Client& client);
absl::StatusOr<std::string> TiersPage(const Params& params, clickhouse::Client& client);
absl::StatusOr<std::string> TestPage(const Params& params, clickhouse::Client& client);
absl::StatusOr<std::string> CostPage(const Params& params, clickhouse::Client& client);

struct PageRoute {
  std::string path;   // e.g. "/hud/repo"
  std::string label;  // the page's metric label, e.g. "repo"
  PageFn render;
};
const std::vector<PageRoute>& PageRoutes();

// Parameter checks, shared by the pages (exposed for tests).
// owner/name, GitHub's characters only.
absl::StatusOr<std::string> RepoParam(const Params& params, absl::string_view key, bool required);
// A decimal integer in [min, max]; `fallback` when absent or empty.
absl::StatusOr<int64_t> IntParam(const Params& params, absl::string_view key, int64_t fallback, int64_t min,
                                 int64_t max);
// Free text up to `max_bytes`, no control characters.
absl::StatusOr<std::string> TextParam(const Params& params, absl::string_view key, size_t max_bytes, bool required);

}  // namespace relay::stats::hud
