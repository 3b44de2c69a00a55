#include "relay/stats/rollups.h"

#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "relay/base/status.h"
#include "relay/clickhouse/row_binary.h"
#include "relay/stats/sql_files.h"

namespace relay::stats {

absl::Status MarkWindows(clickhouse::Client& client, const std::set<Window>& windows, int64_t now_ms) {
  if (windows.empty()) return absl::OkStatus();
  clickhouse::RowBinary rows;
  for (const Window& w : windows) {
    rows.String(w.kind).Date(w.day).String(w.repo).UInt64(static_cast<uint64_t>(now_ms));
    rows.EndRow();
  }
  return client.Insert("rollup_marks", "kind, day, repo, marked_at_ms", "RowBinary", rows.data(), true);
}

namespace {

// Runs the embedded statement deploy/clickhouse/rollups/NAME.sql.
absl::StatusOr<std::string> Run(clickhouse::Client& client, std::string_view name,
                                const std::map<std::string, std::string>& params) {
  RELAY_ASSIGN_OR_RETURN(NamedQuery q, FindRollup(name));
  RELAY_ASSIGN_OR_RETURN(std::string sql, Bind(q, params));
  // Every rollup statement replaces whole windows: safe to repeat.
  return client.Query(sql, /*idempotent=*/true);
}

}  // namespace

absl::StatusOr<RefreshResult> Refresh(clickhouse::Client& client, const std::function<int64_t()>& now_ms,
                                      int max_windows, std::chrono::milliseconds min_interval) {
  RELAY_ASSIGN_OR_RETURN(std::string tsv, Run(client, "pending_windows", {}));
  std::vector<std::vector<std::string>> windows;
  for (absl::string_view line : absl::StrSplit(tsv, '\n', absl::SkipEmpty())) {
    windows.push_back(absl::StrSplit(line, '\t'));
  }
  RefreshResult result;
  for (const auto& w : windows) {
    int64_t computed = 0;
    if (w.size() != 4 || !absl::SimpleAtoi(w[3], &computed)) {
      return absl::DataLossError("pending_windows: unreadable row");
    }
    if (result.windows == max_windows || (computed > 0 && now_ms() - computed < min_interval.count())) {
      ++result.pending;
      continue;
    }
    // TabSeparated escapes \t, \n and \\ in strings; repo names have none of
    // them (GitHub allows [A-Za-z0-9._-] and one '/').
    int64_t from = now_ms();
    if (w[0] == "tests") {
      std::map<std::string, std::string> params = {{"day", w[1]}, {"repo", w[2]}, {"version", std::to_string(from)}};
      RELAY_RETURN_IF_ERROR(Run(client, "test_daily", params).status());
      RELAY_RETURN_IF_ERROR(Run(client, "test_file_daily", params).status());
    }
    RELAY_RETURN_IF_ERROR(client.Query(absl::StrCat(
        "INSERT INTO rollup_state (kind, day, repo, computed_from_ms) VALUES (", clickhouse::Quote(w[0]),
        ", toDate(", clickhouse::Quote(w[1]), "), ", clickhouse::Quote(w[2]), ", ", from, ")")).status());
    ++result.windows;
  }
  return result;
}

}  // namespace relay::stats
