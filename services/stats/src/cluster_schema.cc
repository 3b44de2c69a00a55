#include "relay/stats/cluster_schema.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/base/status.h"
#include "relay/clickhouse/client.h"
#include "relay/stats/migrate.h"

namespace relay::stats {
namespace {

using absl::string_view;

string_view A(std::string_view s) { return string_view(s.data(), s.size()); }

// The shard key of each table where its whole ORDER BY is not the best
// choice: its identity (every version of a row has the same), chosen to
// spread evenly and keep what is read together together. A table not named
// here is sharded by its whole ORDER BY, which is always correct for FINAL.
const std::map<std::string, std::string, std::less<>>& ShardKeys() {
  static const auto* keys = new std::map<std::string, std::string, std::less<>>{
      {"webhook_deliveries", "cityHash64(delivery_id)"},
      {"workflow_job", "cityHash64(id)"},
      {"workflow_run", "cityHash64(id)"},
      {"hud_deliveries", "cityHash64(delivery_id)"},
      // A run's tests on one shard: the HUD reads them by run.
      {"hud_test_runs", "cityHash64(workflow_id)"},
      {"dispatches", "cityHash64(request_id)"},
      {"github_outcomes", "cityHash64(request_id)"},
      {"crcr_workflow_job", "cityHash64(id)"},
      // A test's rows of one upload together; uploads spread over shards.
      {"test_results", "cityHash64(upload_id)"},
      {"cluster_events", "cityHash64(cluster_id)"},
      // Rollups are recomputed per (repo, day) window and pruned per
      // window: a window on one shard (the prunes need it: ClusterMutation).
      {"rollup_marks", "cityHash64(repo, day)"},
      {"rollup_state", "cityHash64(repo, day)"},
      {"test_daily", "cityHash64(repo, day)"},
      {"test_file_daily", "cityHash64(repo, day)"},
      {"test_flaky_daily", "cityHash64(repo, day)"},
      {"test_slowest_daily", "cityHash64(repo, day)"},
      {"schema_migrations", "cityHash64(version)"},
  };
  return *keys;
}

bool IsNameChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// The name at the start of `s` (letters, digits, '_', '.'), consumed.
std::string TakeName(string_view& s) {
  s = absl::StripLeadingAsciiWhitespace(s);
  size_t n = 0;
  while (n < s.size() && IsNameChar(s[n])) ++n;
  std::string out(s.substr(0, n));
  s.remove_prefix(n);
  return out;
}

// `s` starts with '(': the text inside the matching ')', consumed with it.
// Quotes are skipped (a ')' inside a string literal does not close).
std::optional<std::string> TakeParens(string_view& s) {
  if (s.empty() || s[0] != '(') return std::nullopt;
  int depth = 0;
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '`' || c == '"') quote = c;
    else if (c == '(') ++depth;
    else if (c == ')' && --depth == 0) {
      std::string inside(s.substr(1, i - 1));
      s.remove_prefix(i + 1);
      return inside;
    }
  }
  return std::nullopt;
}

// "db.name" or "name" (relay's database).
std::pair<std::string, std::string> Qualify(const std::string& name, const ClusterTarget& t) {
  size_t dot = name.find('.');
  if (dot == std::string::npos) return {t.database, name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::string OnCluster(const ClusterTarget& t) { return absl::StrCat(" ON CLUSTER '", t.cluster, "'"); }

// The shard key: the table's own (ShardKeys), or a hash of its ORDER BY.
absl::StatusOr<std::string> ShardKey(const std::string& table, string_view rest) {
  if (auto it = ShardKeys().find(table); it != ShardKeys().end()) return it->second;
  size_t at = rest.find("ORDER BY");
  if (at == string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table, ": no ORDER BY to make a shard key from"));
  }
  string_view key = absl::StripLeadingAsciiWhitespace(rest.substr(at + 8));
  if (auto inside = TakeParens(key)) return absl::StrCat("cityHash64(", *inside, ")");
  return absl::StrCat("cityHash64(", TakeName(key), ")");
}

absl::StatusOr<std::vector<ClusterStatement>> ClusterTable(string_view s, const ClusterTarget& t) {
  // s: after "CREATE TABLE IF NOT EXISTS ".
  std::string name = TakeName(s);
  auto [db, table] = Qualify(name, t);
  s = absl::StripLeadingAsciiWhitespace(s);
  auto columns = TakeParens(s);
  s = absl::StripLeadingAsciiWhitespace(s);
  if (name.empty() || !columns || !absl::ConsumePrefix(&s, "ENGINE = ")) {
    return absl::InvalidArgumentError(absl::StrCat("CREATE TABLE ", name, ": want 'name (columns) ENGINE = ...'"));
  }
  std::string engine = TakeName(s);
  if (!absl::EndsWith(engine, "MergeTree") || absl::StartsWith(engine, "Replicated")) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", name, ": engine ", engine, " has no cluster form (a *MergeTree is made Replicated)"));
  }
  std::optional<std::string> args = TakeParens(s);
  std::string rest = absl::StrJoin(absl::StrSplit(s, absl::ByAnyChar(" \n\t"), absl::SkipEmpty()), " ");
  RELAY_ASSIGN_OR_RETURN(std::string key, ShardKey(table, rest));
  std::vector<std::string> cols;
  for (string_view c : absl::StrSplit(*columns, ",\n")) cols.emplace_back(absl::StripAsciiWhitespace(c));
  std::string local = table + "_local";
  std::string replicated_args = absl::StrCat("'/clickhouse/tables/{shard}/", db, "/", local, "', '{replica}'");
  if (args && !absl::StripAsciiWhitespace(*args).empty()) absl::StrAppend(&replicated_args, ", ", *args);
  return std::vector<ClusterStatement>{
      {absl::StrCat("CREATE TABLE IF NOT EXISTS ", db, ".", local, OnCluster(t), " (\n  ", absl::StrJoin(cols, ",\n  "),
                    "\n) ENGINE = Replicated", engine, "(", replicated_args, ")\n", rest)},
      {absl::StrCat("CREATE TABLE IF NOT EXISTS ", db, ".", table, OnCluster(t), " AS ", db, ".", local,
                    "\nENGINE = Distributed('", t.cluster, "', ", db, ", ", local, ", ", key, ")")}};
}

// `head` (e.g. "CREATE OR REPLACE VIEW ") then a name: ON CLUSTER after it.
std::string AfterName(string_view head, string_view s, const ClusterTarget& t) {
  std::string name = TakeName(s);
  return absl::StrCat(head, name, OnCluster(t), s);
}

// A materialized view (after "CREATE MATERIALIZED VIEW IF NOT EXISTS "):
// "name TO target AS SELECT ... FROM source ...". On a cluster it watches
// the shard's copy of its source (an insert through the Distributed table
// lands in source_local, on the replica that takes it: a replica's fetches
// do not fire it, so each row is seen once) and writes through the
// target's Distributed table, which places each row by the target's own
// shard key (a run's rows by run id, whatever shard its delivery is on).
// One source only: a second FROM or a JOIN would read whole tables from
// every insert, which these views are not for.
absl::StatusOr<std::vector<ClusterStatement>> ClusterMaterializedView(string_view s, const ClusterTarget& t) {
  std::string name = TakeName(s);
  string_view rest = absl::StripLeadingAsciiWhitespace(s);
  if (name.empty() || !absl::ConsumePrefix(&rest, "TO ")) {
    return absl::InvalidArgumentError(absl::StrCat("materialized view ", name, ": want 'name TO target AS SELECT'"));
  }
  std::string target = TakeName(rest);
  string_view select = absl::StripLeadingAsciiWhitespace(rest);
  bool as = absl::ConsumePrefix(&select, "AS") && !select.empty() && absl::ascii_isspace(select[0]);
  select = absl::StripLeadingAsciiWhitespace(select);
  size_t from = select.find("FROM ");
  if (!as || from == string_view::npos ||
      select.find("FROM ", from + 5) != string_view::npos || absl::StrContains(select, "JOIN")) {
    return absl::InvalidArgumentError(
        absl::StrCat("materialized view ", name, ": want 'TO target AS SELECT ... FROM source' with one source"));
  }
  string_view after = select.substr(from + 5);
  auto [db, source] = Qualify(TakeName(after), t);
  return std::vector<ClusterStatement>{
      {absl::StrCat("CREATE MATERIALIZED VIEW IF NOT EXISTS ", name, OnCluster(t), " TO ", target, " AS ",
                    select.substr(0, from), "FROM ", db, ".", source, "_local", after)}};
}

}  // namespace

absl::StatusOr<std::vector<ClusterStatement>> ClusterStatements(std::string_view statement_in,
                                                                const ClusterTarget& t) {
  string_view s = absl::StripAsciiWhitespace(A(statement_in));
  for (string_view head : {"CREATE TABLE IF NOT EXISTS ", "CREATE TABLE "}) {
    if (absl::ConsumePrefix(&s, head)) return ClusterTable(s, t);
  }
  for (string_view head : {"CREATE DATABASE IF NOT EXISTS ", "CREATE OR REPLACE VIEW ", "CREATE VIEW IF NOT EXISTS ",
                           "CREATE OR REPLACE FUNCTION ", "CREATE FUNCTION IF NOT EXISTS ", "DROP VIEW IF EXISTS "}) {
    if (absl::ConsumePrefix(&s, head)) return std::vector<ClusterStatement>{{AfterName(head, s, t)}};
  }
  if (absl::ConsumePrefix(&s, "CREATE MATERIALIZED VIEW IF NOT EXISTS ")) return ClusterMaterializedView(s, t);
  // A copy of rows (a migration filling a new table from older ones): once,
  // through the Distributed tables, which read every shard and place each
  // row by the target's key.
  if (absl::StartsWith(s, "INSERT INTO ") && absl::StrContains(s, "\nSELECT ")) {
    return std::vector<ClusterStatement>{{std::string(s)}};
  }
  if (absl::ConsumePrefix(&s, "ALTER TABLE ")) {
    auto [db, table] = Qualify(TakeName(s), t);
    std::vector<ClusterStatement> out = {{absl::StrCat("ALTER TABLE ", db, ".", table, "_local", s), true}};
    // A column change applies to the Distributed table too (its columns
    // are the local table's, copied at CREATE); not replicated, so ON
    // CLUSTER does not race there.
    if (absl::StrContains(s, " COLUMN ")) out.push_back({absl::StrCat("ALTER TABLE ", db, ".", table, OnCluster(t), s)});
    return out;
  }
  return absl::InvalidArgumentError(absl::StrCat("no cluster form for the statement '",
                                                 s.substr(0, std::min<size_t>(s.size(), 60)), "...'"));
}

absl::StatusOr<std::string> ClusterMutation(std::string_view statement_in, const ClusterTarget& t) {
  string_view s = absl::StripAsciiWhitespace(A(statement_in));
  if (!absl::ConsumePrefix(&s, "ALTER TABLE ")) {
    return absl::InvalidArgumentError("a mutation is 'ALTER TABLE T ...'");
  }
  std::string table = TakeName(s);
  auto [db, name] = Qualify(table, t);
  std::string local = absl::StrCat(db, ".", name, "_local");
  // Every mention of the table as a whole word reads the shard's copy.
  std::string body;
  for (size_t i = 0; i < s.size();) {
    bool word_start = i == 0 || !IsNameChar(s[i - 1]);
    if (word_start && s.substr(i, table.size()) == table &&
        (i + table.size() == s.size() || !IsNameChar(s[i + table.size()]))) {
      body += local;
      i += table.size();
    } else {
      body += s[i++];
    }
  }
  return absl::StrCat("ALTER TABLE ", local, body);
}

absl::Status RunOnEveryShard(const clickhouse::ClientOptions& options, std::string_view cluster, std::string_view sql) {
  // scheme://host:port of the configured node; each replica at its host.
  string_view url = A(options.url);
  size_t scheme_end = url.find("://");
  size_t port_at = url.rfind(':');
  if (scheme_end == string_view::npos || port_at == string_view::npos || port_at < scheme_end + 3) {
    return absl::InvalidArgumentError(absl::StrCat("clickhouse.url ", options.url, ": want scheme://host:port"));
  }
  string_view scheme = url.substr(0, scheme_end + 3), port = url.substr(port_at);
  RELAY_ASSIGN_OR_RETURN(auto client, clickhouse::Client::New(options));
  RELAY_ASSIGN_OR_RETURN(std::string tsv, client->Query(absl::StrCat(
                                              "SELECT shard_num, host_name, port FROM system.clusters WHERE cluster = ",
                                              clickhouse::Quote(cluster), " ORDER BY shard_num, replica_num")));
  std::map<std::string, std::vector<std::string>> shards;  // shard_num -> host:tcp_port
  for (string_view line : absl::StrSplit(tsv, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    if (f.size() != 3) return absl::DataLossError(absl::StrCat("system.clusters: unreadable row: ", line));
    shards[f[0]].push_back(f[1] + ":" + f[2]);
  }
  if (shards.empty()) return absl::NotFoundError(absl::StrCat("no cluster '", A(cluster), "' in system.clusters"));
  for (const auto& [shard, hosts] : shards) {
    absl::Status last;
    for (const std::string& host : hosts) {
      // Its HTTP URL: its own macro relay_http_url when it declares one
      // (nodes with ports of their own, as clickhouse-dev's cluster on one
      // machine), else its host on clickhouse.url's port. Asked through
      // the configured node: an error here is a replica down.
      auto declared = client->Query(absl::StrCat("SELECT substitution FROM remote(", clickhouse::Quote(host),
                                                 ", system.macros) WHERE macro = 'relay_http_url'"));
      if (!declared.ok()) {
        last = declared.status();
        continue;
      }
      clickhouse::ClientOptions o = options;
      o.url = std::string(absl::StripAsciiWhitespace(*declared));
      if (o.url.empty()) o.url = absl::StrCat(scheme, host.substr(0, host.rfind(':')), port);
      o.max_attempts = 1;  // the next replica is the retry
      auto replica = clickhouse::Client::New(o);
      last = replica.ok() ? (*replica)->Query(sql, /*idempotent=*/true).status() : replica.status();
      if (last.ok()) break;
    }
    if (!last.ok()) {
      return absl::UnavailableError(absl::StrCat("shard ", shard, " of cluster ", A(cluster), ": no replica took it (",
                                                 absl::StrJoin(hosts, ", "), "): ", last.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ClusterVariant(const ClusterTarget& t) {
  RELAY_ASSIGN_OR_RETURN(auto migrations, LoadMigrations());
  std::string out = absl::StrCat(
      "-- relay's schema on a ClickHouse cluster: what `relay-stats migrate` applies when\n"
      "-- stats.clickhouse.cluster is set (each migration's statements made into their cluster\n"
      "-- form as they are applied; services/stats/src/cluster_schema.cc). Printed by\n"
      "-- `relay-stats cluster-schema` (tools/clickhouse/cluster-variant print); do not edit.\n"
      "-- Needs the cluster in remote_servers with the {shard} and {replica} macros, and\n"
      "-- ZooKeeper or ClickHouse Keeper. The ledger, schema_migrations, is made the same way.\n"
      "-- docs/capacity.md explains the layout.\n",
      "CREATE DATABASE IF NOT EXISTS ", t.database, OnCluster(t), ";\n");
  for (const Migration& m : migrations) {
    absl::StrAppend(&out, "\n-- ", m.name,
                    m.requires_server.first ? absl::StrCat(" (requires ClickHouse >= ", m.requires_server.first, ".",
                                                           m.requires_server.second, ")")
                                            : "",
                    "\n");
    for (const std::string& st : m.statements) {
      auto cluster = ClusterStatements(st, t);
      if (!cluster.ok()) return absl::Status(cluster.status().code(), m.name + ": " + std::string(cluster.status().message()));
      for (const ClusterStatement& c : *cluster) {
        absl::StrAppend(&out, c.per_shard ? "-- on one replica of each shard:\n" : "", c.sql, ";\n");
      }
    }
  }
  return out;
}

}  // namespace relay::stats
