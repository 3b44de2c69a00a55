// Schema migrations: deploy/clickhouse/migrations/NNNN_name.sql, applied in
// order by `relay-stats migrate [--to N]` and recorded in the table
// schema_migrations (version, name, checksum, applied_at). Idempotent: an
// applied migration is skipped; one whose file changed since it was applied
// is an error (migrations are append-only; write a new one). Every statement
// is idempotent itself (IF NOT EXISTS), so a migration cut short by a crash
// is applied again whole. There are no down migrations: --to below the
// applied version is refused.
//
// A migration whose header says `-- requires: ClickHouse >= X.Y` is skipped
// on an older server: recorded in the ledger as skipped (so the services,
// which need the latest version, still start), reported, and applied by a
// later `migrate` once the server is new enough.
//
// On a cluster (`cluster`: its remote_servers name; empty: one server) every
// statement, the ledger's too, is applied in its cluster form
// (cluster_schema.h: replicated local tables and Distributed tables, ON
// CLUSTER), recorded in the same ledger (read through its Distributed
// table). A database migrated one way is refused the other way.
#pragma once

#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "relay/clickhouse/client.h"

namespace relay::stats {

struct Migration {
  int version = 0;
  std::string name;      // file name
  std::string checksum;  // sha256 of the file, hex
  std::vector<std::string> statements;
  // From `-- requires: ClickHouse >= X.Y` in the header; {0, 0}: any server.
  std::pair<int, int> requires_server{0, 0};
};

// The embedded migrations, checked: versions 1, 2, ... without gaps.
absl::StatusOr<std::vector<Migration>> LoadMigrations();
// The newest embedded version (what this build of stats needs).
int LatestSchemaVersion();

struct MigrateResult {
  int from = 0;  // version before
  int to = 0;    // version after
  std::vector<std::string> applied;  // file names, in order
  std::vector<std::string> skipped;  // "NAME: needs ClickHouse >= X.Y, the server is V"
};

// Creates options.database if needed, then applies migrations up to `to`
// (default: the latest).
absl::StatusOr<MigrateResult> Migrate(const clickhouse::ClientOptions& options, std::optional<int> to,
                                      const std::string& cluster = "");

// The highest applied version (0: none), after checking every applied
// migration still matches its file.
// FailedPrecondition when the database was migrated for a cluster and
// `cluster` is empty, or the other way round.
absl::StatusOr<int> AppliedSchemaVersion(clickhouse::Client& client, const std::string& cluster = "");

}  // namespace relay::stats
