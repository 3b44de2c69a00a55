#include "relay/stats/rollups.h"

#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
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
  // Every rollup statement replaces whole windows: safe to repeat. A repeat
  // (or two instances in one millisecond) writes a window's rows again at
  // the same version; the tables' keys hold the version, so the readers'
  // FINAL keeps one copy (flaky_tests.sql, slowest_tests.sql).
  return client.Query(sql, /*idempotent=*/true);
}

// Recomputes one window: test_daily first, then what is derived from it,
// all with the same version; then records the computation.
absl::Status ComputeWindow(clickhouse::Client& client, const std::string& kind, const std::string& day,
                           const std::string& repo, int64_t from) {
  if (kind == "tests") {
    std::map<std::string, std::string> params = {{"day", day}, {"repo", repo}, {"version", std::to_string(from)}};
    for (const char* statement : {"test_daily", "test_file_daily", "test_flaky_daily", "test_slowest_daily"}) {
      auto r = Run(client, statement, params);
      if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat(statement, ": ", r.status().message()));
    }
  }
  // Marks stamped up to kClockMarginMs before `from` by a clock running
  // behind ours may concern rows this computation did not see: count them
  // as newer, at the cost of at most one more computation.
  return client
      .Query(absl::StrCat("INSERT INTO rollup_state (kind, day, repo, computed_from_ms) VALUES (",
                          clickhouse::Quote(kind), ", toDate(", clickhouse::Quote(day), "), ", clickhouse::Quote(repo),
                          ", ", std::max<int64_t>(1, from - kClockMarginMs), ")"))
      .status();
}

}  // namespace

absl::StatusOr<RefreshResult> Refresh(clickhouse::Client& client, const std::function<int64_t()>& now_ms,
                                      int max_windows, std::chrono::milliseconds min_interval,
                                      const std::atomic<bool>* stop) {
  RELAY_ASSIGN_OR_RETURN(std::string tsv, Run(client, "pending_windows", {}));
  RefreshResult result;
  for (absl::string_view line : absl::StrSplit(tsv, '\n', absl::SkipEmpty())) {
    std::vector<std::string> w = absl::StrSplit(line, '\t');
    int64_t computed = 0;
    if (w.size() != 4 || !absl::SimpleAtoi(w[3], &computed)) {
      return absl::DataLossError("pending_windows: unreadable row");
    }
    bool stopping = stop && stop->load();
    if (stopping || result.windows + result.failed == max_windows ||
        (computed > 0 && now_ms() - computed < min_interval.count())) {
      ++result.pending;
      continue;
    }
    // TabSeparated escapes \t, \n and \\ in strings; repo names have none
    // of them (GitHub allows [A-Za-z0-9._-] and one '/').
    if (absl::Status st = ComputeWindow(client, w[0], w[1], w[2], now_ms()); !st.ok()) {
      ++result.failed;
      result.last_error = absl::Status(st.code(), absl::StrCat(w[0], " ", w[1], " ", w[2], ": ", st.message()));
      continue;
    }
    ++result.windows;
  }
  return result;
}

absl::Status PruneSnapshots(clickhouse::Client& client, const ClusterTarget& target,
                            const clickhouse::ClientOptions& options) {
  for (const char* statement : {"prune_test_flaky_daily", "prune_test_slowest_daily"}) {
    absl::StatusOr<std::string> r;
    if (target.cluster.empty()) {
      r = Run(client, statement, {});
    } else {
      RELAY_ASSIGN_OR_RETURN(NamedQuery q, FindRollup(statement));
      RELAY_ASSIGN_OR_RETURN(std::string sql, ClusterMutation(q.sql, target));
      absl::Status st = RunOnEveryShard(options, target.cluster, sql);
      r = st.ok() ? absl::StatusOr<std::string>("") : absl::StatusOr<std::string>(st);
    }
    if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat(statement, ": ", r.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SnapshotQueueTimes(clickhouse::Client& client) {
  RELAY_ASSIGN_OR_RETURN(std::string n, client.Query("SELECT count() FROM system.tables WHERE database = 'default' "
                                                     "AND name = 'queue_times_historical'"));
  if (absl::StripAsciiWhitespace(n) == "0") return false;
  RELAY_RETURN_IF_ERROR(Run(client, "queue_times_snapshot", {}).status());
  return true;
}

}  // namespace relay::stats
