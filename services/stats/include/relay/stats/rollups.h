// Rollups that survive a replay (migration 0002): windows (one day of one
// downstream repo) recomputed whole from the deduplicated raw rows into
// replacing tables, never incremented.
//
// Protocol: the ingesting side inserts raw rows, then MarkWindows (both
// before its offsets are committed). Refresh recomputes every window marked
// at or after its last computation began, so a window whose rows arrived
// while it was being computed is computed again. Both sides use the same
// clock (one process; several stats instances need clocks that agree to
// well under stats.rollup_interval).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>

#include "absl/status/statusor.h"
#include "relay/clickhouse/client.h"
#include "relay/stats/cluster_schema.h"
#include "relay/stats/rows.h"

namespace relay::stats {

absl::Status MarkWindows(clickhouse::Client& client, const std::set<Window>& windows, int64_t now_ms);

struct RefreshResult {
  int windows = 0;      // recomputed
  int failed = 0;       // a statement failed: the window stays marked, retried next round
  int64_t pending = 0;  // still marked after this round (past max_windows, or computed too recently)
  absl::Status last_error;
};

// How far before a computation's start its marks count as seen: marks are
// stamped by the ingesting process's clock, computations by the
// refresher's; with several instances their clocks must agree within this.
inline constexpr int64_t kClockMarginMs = 5'000;

// Recomputes up to `max_windows` marked windows, skipping (for a later
// round) any whose last computation began less than `min_interval` ago: a
// window of a busy day (millions of rows, seconds to compute) is then
// recomputed at most that often, however often batches mark it. A window
// whose statements fail is counted and left marked; the others go on.
// `now_ms` is read once per window, before it is computed; `stop` ends the
// round early (shutdown).
absl::StatusOr<RefreshResult> Refresh(clickhouse::Client& client, const std::function<int64_t()>& now_ms,
                                      int max_windows, std::chrono::milliseconds min_interval,
                                      const std::atomic<bool>* stop = nullptr);

// Removes superseded computations of the per-window snapshots
// (test_flaky_daily, test_slowest_daily): rows of a window that are not of
// its latest computation, which is all the dashboards read. ClickHouse
// mutations, asynchronous: the rows go once the server has applied them.
// On a cluster (target.cluster set) they run on the _local tables of each
// shard (one replica of it, reached through `options`: RunOnEveryShard),
// each shard pruning its own windows (ClusterMutation: a window is on one
// shard).
absl::Status PruneSnapshots(clickhouse::Client& client, const ClusterTarget& target = {},
                            const clickhouse::ClientOptions& options = {});

// The HUD's queue-time snapshot (rollups/queue_times_snapshot.sql) into
// default.queue_times_historical. false: that table is not there (the HUD
// migration is skipped on this server), nothing done.
absl::StatusOr<bool> SnapshotQueueTimes(clickhouse::Client& client);

}  // namespace relay::stats
