#include "relay/stats/sql_files.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/clickhouse/client.h"

namespace relay::stats {

// Debian's Abseil is built for C++14: its string functions take
// absl::string_view, which std::string converts to but std::string_view
// does not.
using absl::string_view;
static string_view A(std::string_view s) { return {s.data(), s.size()}; }

std::vector<std::string> SplitStatements(std::string_view sql_in) {
  string_view sql = A(sql_in);
  std::vector<std::string> out;
  std::string current;
  auto flush = [&] {
    string_view s = absl::StripAsciiWhitespace(current);
    if (!s.empty()) out.emplace_back(s);
    current.clear();
  };
  for (string_view line : absl::StrSplit(sql, '\n')) {
    string_view t = absl::StripAsciiWhitespace(line);
    if (absl::StartsWith(t, "--")) continue;
    if (absl::EndsWith(t, ";")) {
      current.append(std::string(line.substr(0, line.rfind(';'))));
      flush();
      continue;
    }
    current.append(std::string(line));
    current.push_back('\n');
  }
  flush();
  return out;
}

absl::StatusOr<NamedQuery> ParseQuery(std::string_view file_name_in, std::string_view text_in) {
  string_view file_name = A(file_name_in), text = A(text_in);
  NamedQuery q;
  q.name = std::string(absl::StripSuffix(file_name, ".sql"));
  for (string_view line : absl::StrSplit(text, '\n')) {
    string_view t = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&t, "--")) continue;
    t = absl::StripLeadingAsciiWhitespace(t);
    if (absl::ConsumePrefix(&t, "param:")) {
      std::vector<string_view> parts = absl::StrSplit(absl::StripAsciiWhitespace(t), absl::MaxSplits(' ', 2));
      if (parts.size() < 2) return absl::InvalidArgumentError(absl::StrCat(file_name, ": bad param line: ", line));
      q.params.push_back({std::string(parts[0]), std::string(parts[1]),
                          parts.size() > 2 ? std::string(absl::StripAsciiWhitespace(parts[2])) : ""});
    } else if (q.description.empty() && !t.empty()) {
      q.description = std::string(t);
    }
  }
  std::vector<std::string> statements = SplitStatements(text_in);
  if (statements.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": a query file holds exactly one statement, not ",
                                                   statements.size()));
  }
  q.sql = std::move(statements[0]);
  return q;
}

absl::StatusOr<std::vector<NamedQuery>> EmbeddedNamedQueries() {
  std::vector<NamedQuery> out;
  for (const SqlFile& f : EmbeddedQueries()) {
    auto q = ParseQuery(f.name, f.text);
    if (!q.ok()) return q.status();
    out.push_back(*std::move(q));
  }
  return out;
}

namespace {
absl::StatusOr<NamedQuery> Find(std::span<const SqlFile> files, std::string_view name, const char* what) {
  for (const SqlFile& f : files) {
    if (absl::StripSuffix(A(f.name), ".sql") == A(name)) return ParseQuery(f.name, f.text);
  }
  return absl::NotFoundError(absl::StrCat("no ", what, " named ", A(name)));
}
}  // namespace

absl::StatusOr<NamedQuery> FindQuery(std::string_view name) { return Find(EmbeddedQueries(), name, "query"); }
absl::StatusOr<NamedQuery> FindRollup(std::string_view name) { return Find(EmbeddedRollups(), name, "rollup statement"); }

namespace {

absl::StatusOr<std::string> Literal(const QueryParam& p, const std::string& value) {
  const std::string& type = p.type;
  if (type == "String") return clickhouse::Quote(value);
  if (type == "Date") return absl::StrCat("toDate(", clickhouse::Quote(value), ")");
  if (type == "DateTime") return absl::StrCat("toDateTime(", clickhouse::Quote(value), ")");
  if (absl::StartsWith(type, "UInt") || absl::StartsWith(type, "Int")) {
    int64_t n;
    if (!absl::SimpleAtoi(value, &n) || (type[0] == 'U' && n < 0)) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", p.name, ": \"", value, "\" is not a ", type));
    }
    return absl::StrCat(n);
  }
  if (type == "Float64") {
    double d;
    if (!absl::SimpleAtod(value, &d)) {
      return absl::InvalidArgumentError(absl::StrCat("parameter ", p.name, ": \"", value, "\" is not a number"));
    }
    return absl::StrCat(d);
  }
  return absl::InvalidArgumentError(absl::StrCat("parameter ", p.name, ": unsupported type ", type));
}

}  // namespace

absl::StatusOr<std::string> Bind(const NamedQuery& query, const std::map<std::string, std::string>& values) {
  for (const auto& [name, v] : values) {
    bool known = false;
    for (const auto& p : query.params) known |= p.name == name;
    if (!known) return absl::InvalidArgumentError(absl::StrCat(query.name, " has no parameter ", name));
  }
  std::string out;
  string_view sql = query.sql;
  while (true) {
    size_t open = sql.find('{');
    if (open == std::string_view::npos) break;
    size_t close = sql.find('}', open);
    if (close == std::string_view::npos) break;
    string_view inside = sql.substr(open + 1, close - open - 1);
    size_t colon = inside.find(':');
    if (colon == std::string_view::npos) {  // not a placeholder
      out.append(std::string(sql.substr(0, close + 1)));
      sql.remove_prefix(close + 1);
      continue;
    }
    string_view name = inside.substr(0, colon);
    const QueryParam* param = nullptr;
    for (const auto& p : query.params) {
      if (p.name == name) param = &p;
    }
    if (!param) return absl::InvalidArgumentError(absl::StrCat(query.name, ": {", inside, "} is not a declared parameter"));
    auto it = values.find(param->name);
    auto literal = Literal(*param, it != values.end() ? it->second : param->default_value);
    if (!literal.ok()) return literal.status();
    out.append(std::string(sql.substr(0, open)));
    out.append(*literal);
    sql.remove_prefix(close + 1);
  }
  out.append(std::string(sql));
  return out;
}

}  // namespace relay::stats
