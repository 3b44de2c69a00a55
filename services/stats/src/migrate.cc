#include "relay/stats/migrate.h"


#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/base/digest.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/stats/cluster_schema.h"
#include "relay/stats/sql_files.h"

namespace relay::stats {
namespace {

constexpr char kCreateLedger[] =
    "CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, checksum String, "
    "applied_at DateTime) ENGINE = ReplacingMergeTree(applied_at) ORDER BY version";

struct Applied {
  std::string name, checksum;
};

absl::StatusOr<std::map<int, Applied>> ReadLedger(clickhouse::Client& client) {
  RELAY_ASSIGN_OR_RETURN(std::string tsv,
                         client.Query("SELECT version, name, checksum FROM schema_migrations FINAL ORDER BY version"));
  std::map<int, Applied> out;
  for (absl::string_view line : absl::StrSplit(tsv, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    int v = 0;
    if (f.size() != 3 || std::from_chars(f[0].data(), f[0].data() + f[0].size(), v).ec != std::errc()) {
      return absl::DataLossError(absl::StrCat("schema_migrations: unreadable row: ", line));
    }
    out[v] = {f[1], f[2]};
  }
  return out;
}

// Every applied migration must be one of ours, unchanged.
absl::Status CheckLedger(const std::map<int, Applied>& ledger, const std::vector<Migration>& migrations) {
  for (const auto& [v, a] : ledger) {
    if (v < 1 || v > static_cast<int>(migrations.size())) {
      return absl::FailedPreconditionError(absl::StrCat("the database has migration ", v, " (", a.name,
                                                        ") which this relay-stats does not know: it is older "
                                                        "than the schema"));
    }
    const Migration& m = migrations[v - 1];
    if (a.checksum != m.checksum) {
      return absl::FailedPreconditionError(absl::StrCat("migration ", m.name, " changed after it was applied (",
                                                        "checksum ", a.checksum.substr(0, 12), " in the database, ",
                                                        m.checksum.substr(0, 12), " in this build): migrations are "
                                                        "append-only, add a new one"));
    }
  }
  return absl::OkStatus();
}

int Top(const std::map<int, Applied>& ledger) { return ledger.empty() ? 0 : ledger.rbegin()->first; }

// A skipped migration's ledger name: the file name, then this.
constexpr char kSkippedMark[] = " [skipped: ";

bool Skipped(const Applied& a) { return a.name.find(kSkippedMark) != std::string::npos; }

// "X.Y" at the start of text (a version() answer or a requires line).
std::optional<std::pair<int, int>> MajorMinor(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  int major = 0, minor = 0;
  if (parts.size() < 2 || std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), major).ec != std::errc() ||
      std::from_chars(parts[1].data(), parts[1].data() + parts[1].size(), minor).ec != std::errc()) {
    return std::nullopt;
  }
  return std::pair{major, minor};
}

// `-- requires: ClickHouse >= X.Y` among the file's comment lines.
absl::StatusOr<std::pair<int, int>> RequiredServer(std::string_view name, std::string_view file_text) {
  absl::string_view text(file_text.data(), file_text.size());
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "--")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "requires:")) continue;
    line = absl::StripAsciiWhitespace(line);
    auto v = absl::ConsumePrefix(&line, "ClickHouse >=") ? MajorMinor(absl::StripAsciiWhitespace(line)) : std::nullopt;
    if (!v) {
      return absl::InternalError(absl::StrCat("migration ", std::string(name), ": want '-- requires: ClickHouse >= X.Y'"));
    }
    return *v;
  }
  return std::pair{0, 0};
}

// A database migrated for a cluster holds a Distributed ledger; one
// migrated for a single node, a plain one. Either, used the other way,
// would write past the cluster's guarantees (or fail table by table).
absl::Status CheckMode(clickhouse::Client& client, const std::string& database, const std::string& cluster) {
  RELAY_ASSIGN_OR_RETURN(std::string engine,
                         client.Query("SELECT engine FROM system.tables WHERE database = " + clickhouse::Quote(database) +
                                      " AND name = 'schema_migrations'"));
  engine = std::string(absl::StripAsciiWhitespace(engine));
  if (!cluster.empty() && !engine.empty() && engine != "Distributed") {
    return absl::FailedPreconditionError(
        "stats.clickhouse.cluster is set but this database holds a single-node schema: a cluster needs a database "
        "of its own, filled by a replay (docs/capacity.md, \"Moving to a cluster\")");
  }
  if (cluster.empty() && engine == "Distributed") {
    return absl::FailedPreconditionError(
        "this database was migrated for a cluster: set stats.clickhouse.cluster to its name");
  }
  return absl::OkStatus();
}

// Runs one schema statement: as it is, or its cluster form.
absl::Status Apply(clickhouse::Client& client, const clickhouse::ClientOptions& options, const std::string& statement,
                   const std::string& cluster) {
  if (cluster.empty()) return client.Query(statement).status();
  RELAY_ASSIGN_OR_RETURN(auto statements, ClusterStatements(statement, {cluster, options.database}));
  for (const ClusterStatement& st : statements) {
    RELAY_RETURN_IF_ERROR(st.per_shard ? RunOnEveryShard(options, cluster, st.sql) : client.Query(st.sql).status());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Migration>> LoadMigrations() {
  std::vector<Migration> out;
  for (const SqlFile& f : EmbeddedMigrations()) {
    int v = 0;
    auto [end, ec] = std::from_chars(f.name.data(), f.name.data() + f.name.size(), v);
    if (ec != std::errc() || end == f.name.data() || *end != '_') {
      return absl::InternalError(absl::StrCat("migration file ", std::string(f.name), " is not named NNNN_name.sql"));
    }
    if (v != static_cast<int>(out.size()) + 1) {
      return absl::InternalError(absl::StrCat("migration ", std::string(f.name), ": expected version ", out.size() + 1));
    }
    RELAY_ASSIGN_OR_RETURN(auto requires_server, RequiredServer(f.name, f.text));
    out.push_back({v, std::string(f.name), Sha256Hex(f.text), SplitStatements(f.text), requires_server});
  }
  return out;
}

int LatestSchemaVersion() { return static_cast<int>(EmbeddedMigrations().size()); }

absl::StatusOr<int> AppliedSchemaVersion(clickhouse::Client& client, const std::string& cluster) {
  RELAY_ASSIGN_OR_RETURN(auto migrations, LoadMigrations());
  auto database = client.Query("SELECT currentDatabase()");
  if (!database.ok()) {
    if (database.status().code() == absl::StatusCode::kNotFound) return 0;  // no database yet: nothing applied
    return database.status();
  }
  RELAY_RETURN_IF_ERROR(CheckMode(client, std::string(absl::StripAsciiWhitespace(*database)), cluster));
  auto ledger = ReadLedger(client);
  if (!ledger.ok()) {
    if (ledger.status().code() == absl::StatusCode::kNotFound) return 0;  // no ledger table: nothing applied
    return ledger.status();
  }
  RELAY_RETURN_IF_ERROR(CheckLedger(*ledger, migrations));
  return Top(*ledger);
}

absl::StatusOr<MigrateResult> Migrate(const clickhouse::ClientOptions& options, std::optional<int> to,
                                      const std::string& cluster) {
  RELAY_ASSIGN_OR_RETURN(auto migrations, LoadMigrations());
  int target = to.value_or(static_cast<int>(migrations.size()));
  if (target < 0 || target > static_cast<int>(migrations.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--to ", target, ": migrations go from 1 to ", migrations.size()));
  }
  {
    clickhouse::ClientOptions o = options;
    o.database = "default";
    RELAY_ASSIGN_OR_RETURN(auto admin, clickhouse::Client::New(o));
    RELAY_RETURN_IF_ERROR(CheckMode(*admin, options.database, cluster));
    RELAY_RETURN_IF_ERROR(admin
                              ->Query(absl::StrCat("CREATE DATABASE IF NOT EXISTS ",
                                                   clickhouse::QuoteIdentifier(options.database),
                                                   cluster.empty() ? "" : " ON CLUSTER " + clickhouse::Quote(cluster)))
                              .status());
  }
  RELAY_ASSIGN_OR_RETURN(auto client, clickhouse::Client::New(options));
  RELAY_RETURN_IF_ERROR(Apply(*client, options, kCreateLedger, cluster));
  RELAY_ASSIGN_OR_RETURN(auto ledger, ReadLedger(*client));
  RELAY_RETURN_IF_ERROR(CheckLedger(ledger, migrations));
  MigrateResult result;
  result.from = result.to = Top(ledger);
  if (target < result.from) {
    return absl::FailedPreconditionError(absl::StrCat("the database is at migration ", result.from, "; --to ", target,
                                                      " would go back, and there are no down migrations"));
  }
  RELAY_ASSIGN_OR_RETURN(std::string server, client->Query("SELECT version()"));
  server = std::string(absl::StripAsciiWhitespace(server));
  auto server_version = MajorMinor(server);
  if (!server_version) return absl::InternalError("unreadable ClickHouse version: " + server);
  // applied_at: the server's clock, so versions of a re-applied row order.
  auto record = [&](const Migration& m, const std::string& name) {
    return client
        ->Query(absl::StrCat("INSERT INTO schema_migrations SELECT ", m.version, ", ", clickhouse::Quote(name), ", ",
                             clickhouse::Quote(m.checksum), ", now()"))
        .status();
  };
  for (const Migration& m : migrations) {
    if (m.version > target) continue;
    auto done = ledger.find(m.version);
    bool skipped_before = done != ledger.end() && Skipped(done->second);
    if (done != ledger.end() && !skipped_before) continue;  // applied
    result.to = std::max(result.to, m.version);
    if (*server_version < m.requires_server) {
      if (skipped_before) continue;  // the server is still too old
      std::string why = absl::StrCat("needs ClickHouse >= ", m.requires_server.first, ".", m.requires_server.second,
                                     ", the server is ", server);
      RELAY_RETURN_IF_ERROR(record(m, m.name + kSkippedMark + why + "]"));
      log::Warn("migration skipped", {{"migration", m.name}, {"reason", why}});
      result.skipped.push_back(m.name + ": " + why);
      continue;
    }
    for (size_t i = 0; i < m.statements.size(); ++i) {
      if (absl::Status st = Apply(*client, options, m.statements[i], cluster); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat(m.name, ", statement ", i + 1, ": ", st.message()));
      }
    }
    RELAY_RETURN_IF_ERROR(record(m, m.name));
    log::Info("migration applied", {{"migration", m.name}, {"statements", static_cast<int64_t>(m.statements.size())}});
    result.applied.push_back(m.name);
  }
  return result;
}

}  // namespace relay::stats
