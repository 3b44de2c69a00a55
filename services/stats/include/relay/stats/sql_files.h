// relay's ClickHouse SQL, as shipped in deploy/clickhouse/ and compiled
// into relay-stats (EmbedSql.cmake): the migrations that build the schema
// and the named dashboard queries, with their parameters.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace relay::stats {

struct SqlFile {
  std::string_view name;  // file name, e.g. "0001_tables.sql"
  std::string_view text;
};
std::span<const SqlFile> EmbeddedMigrations();  // deploy/clickhouse/migrations
std::span<const SqlFile> EmbeddedQueries();     // deploy/clickhouse/queries
std::span<const SqlFile> EmbeddedRollups();     // deploy/clickhouse/rollups (stats runs them)

// The statements of a SQL file: `--` comment lines dropped, split at a `;`
// that ends a line (or the text), empty statements skipped.
std::vector<std::string> SplitStatements(std::string_view sql);

// A named dashboard query (deploy/clickhouse/queries/NAME.sql). Its header
// declares parameters, one per line:
//   -- param: NAME TYPE DEFAULT
// and its body uses them as {NAME:TYPE}, current ClickHouse's syntax, so the
// file runs as is with `clickhouse-client --param_NAME=...`. ClickHouse
// 18.16 has no server-side parameters: Bind() substitutes literals.
struct QueryParam {
  std::string name, type, default_value;
};
struct NamedQuery {
  std::string name;         // file name without .sql
  std::string description;  // the header's first comment line
  std::vector<QueryParam> params;
  std::string sql;
};
absl::StatusOr<NamedQuery> ParseQuery(std::string_view file_name, std::string_view text);
absl::StatusOr<std::vector<NamedQuery>> EmbeddedNamedQueries();
absl::StatusOr<NamedQuery> FindQuery(std::string_view name);
// A rollup statement, same file format as a query.
absl::StatusOr<NamedQuery> FindRollup(std::string_view name);

// The query's SQL with every {NAME:TYPE} replaced by a literal of `values`
// (or the declared default): strings quoted, numbers checked. Errors name the
// parameter (unknown, undeclared, not a number).
absl::StatusOr<std::string> Bind(const NamedQuery& query, const std::map<std::string, std::string>& values);

}  // namespace relay::stats
