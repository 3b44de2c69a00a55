// Records to ClickHouse rows: one converter per input topic, each turning a
// Kafka record into rows of one or more tables (deploy/clickhouse/
// migrations), in RowBinary, in the tables' column order. A record is
// converted whole or not at all: a record that cannot be decoded or breaks
// the schema's rules yields an error (the caller dead-letters it) and adds
// no row anywhere.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/clickhouse/row_binary.h"
#include "relay/kafka/record.h"

namespace relay::stats {

// The tables stats writes, with their insert column lists.
struct Table {
  const char* name;
  const char* columns;
};
extern const Table kWebhookDeliveries, kWorkflowJob, kWorkflowRun, kDispatches, kGitHubOutcomes,
    kSupersededDispatches, kJobResults, kTestResults, kClusterEvents;

// A rollup window to recompute (see migration 0002): (day, repo) of `kind`.
struct Window {
  std::string kind;
  int64_t day = 0;  // days since the epoch
  std::string repo;
  auto operator<=>(const Window&) const = default;
};

// Rows of one batch, per table, plus the rollup windows they touch.
class Rows {
 public:
  clickhouse::RowBinary& For(const Table& table) { return tables_[&table]; }
  const std::map<const Table*, clickhouse::RowBinary>& tables() const { return tables_; }
  std::set<Window>& windows() { return windows_; }
  size_t rows() const;
  size_t bytes() const;
  // Moves everything of `other` in (other is left empty).
  void Append(Rows& other);
  // Empties every table, keeping each one's buffer: the next rows are
  // encoded into memory already there.
  void Clear() {
    for (auto& [table, data] : tables_) data.Clear();
    windows_.clear();
  }

 private:
  std::map<const Table*, clickhouse::RowBinary> tables_;
  std::set<Window> windows_;
};

// Topic names the converters are chosen by (configurable in stats.topics.*).
struct Topics {
  std::string webhooks = "github.webhooks";
  std::string dispatches = "relay.dispatches";
  std::string outcomes = "github.outcomes";
  std::string results = "ci.results";
  std::string test_reports = "ci.test_reports";
  std::string cluster_events = "cluster.events";
};

// Converts `record` (of one of `topics`) into rows added to `out`. Errors
// are InvalidArgument with the reason (the record is poison).
absl::Status Convert(const Topics& topics, const kafka::ConsumedRecord& record, Rows& out);

// Exposed for tests: one converter per topic.
absl::Status ConvertWebhook(std::string_view value, Rows& out);
absl::Status ConvertDispatch(std::string_view value, Rows& out);
absl::Status ConvertOutcome(std::string_view value, Rows& out);
absl::Status ConvertJobResult(std::string_view value, Rows& out);
absl::Status ConvertTestReport(std::string_view value, Rows& out);
absl::Status ConvertClusterEvent(std::string_view value, Rows& out);

// GitHub's ISO 8601 times ("2019-05-15T15:20:31Z", offsets allowed) to unix
// seconds; 0 for null or empty; an error for anything else.
absl::StatusOr<int64_t> ParseGitHubTime(std::string_view text);

}  // namespace relay::stats
