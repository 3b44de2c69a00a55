#include "relay/stats/hud/html.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "relay/base/status.h"
#include "relay/stats/sql_files.h"

namespace relay::stats::hud {
namespace json = boost::json;

absl::StatusOr<ResultSet> ResultSet::Parse(absl::string_view text) {
  boost::system::error_code ec;
  json::value doc = json::parse(std::string_view(text.data(), text.size()), ec);
  if (ec || !doc.is_object()) return absl::DataLossError("ClickHouse's JSONCompact answer does not parse");
  const json::object& o = doc.as_object();
  const json::value* meta = o.if_contains("meta");
  const json::value* data = o.if_contains("data");
  if (!meta || !meta->is_array() || !data || !data->is_array()) {
    return absl::DataLossError("ClickHouse's answer has no meta or data");
  }
  ResultSet rs;
  for (const json::value& col : meta->as_array()) {
    const json::value* name = col.is_object() ? col.as_object().if_contains("name") : nullptr;
    if (!name || !name->is_string()) return absl::DataLossError("a column without a name");
    rs.index_.emplace(std::string(name->as_string()), rs.index_.size());
  }
  for (const json::value& row : data->as_array()) {
    if (!row.is_array() || row.as_array().size() != rs.index_.size()) {
      return absl::DataLossError("a row with the wrong column count");
    }
    rs.rows_.push_back(row.as_array());
  }
  return rs;
}

const json::value& ResultSet::At(size_t row, absl::string_view column) const {
  static const json::value kNull;
  auto it = index_.find(column);
  if (row >= rows_.size() || it == index_.end()) return kNull;
  return rows_[row][it->second];
}

namespace {
std::string Text(const json::value& v) {
  switch (v.kind()) {
    case json::kind::string: return std::string(v.as_string());
    case json::kind::int64: return absl::StrCat(v.as_int64());
    case json::kind::uint64: return absl::StrCat(v.as_uint64());
    case json::kind::double_: return absl::StrCat(v.as_double());
    case json::kind::bool_: return v.as_bool() ? "1" : "0";
    case json::kind::array: {
      std::vector<std::string> parts;
      for (const auto& e : v.as_array()) parts.push_back(Text(e));
      return absl::StrJoin(parts, ", ");
    }
    default: return "";
  }
}
}  // namespace

std::string ResultSet::Str(size_t row, absl::string_view column) const { return Text(At(row, column)); }

double ResultSet::Num(size_t row, absl::string_view column) const {
  const json::value& v = At(row, column);
  if (v.is_number()) return v.to_number<double>();
  double d = 0;
  // 64-bit integers come quoted (output_format_json_quote_64bit_integers).
  if (v.is_string() && absl::SimpleAtod(std::string(v.as_string()), &d)) return d;
  return 0;
}

std::vector<std::string> ResultSet::List(size_t row, absl::string_view column) const {
  std::vector<std::string> out;
  const json::value& v = At(row, column);
  if (v.is_array()) {
    for (const auto& e : v.as_array()) out.push_back(Text(e));
  }
  return out;
}

absl::StatusOr<ResultSet> RunNamed(clickhouse::Client& client, absl::string_view name,
                                   const std::map<std::string, std::string>& params) {
  RELAY_ASSIGN_OR_RETURN(NamedQuery q, FindQuery(std::string_view(name.data(), name.size())));
  RELAY_ASSIGN_OR_RETURN(std::string sql, Bind(q, params));
  RELAY_ASSIGN_OR_RETURN(std::string out, client.Query(sql + "\nFORMAT JSONCompact"));
  auto rs = ResultSet::Parse(out);
  if (!rs.ok()) return absl::DataLossError(absl::StrCat(name, ": ", rs.status().message()));
  return rs;
}

std::string Escape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

std::string ChartData(const json::value& v) {
  std::string s = json::serialize(v);
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    // Inside a JSON string "<" may be written \u003c; outside strings JSON
    // has no "<" at all.
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Duration(double seconds) {
  if (!(seconds >= 0)) return "";
  auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh %02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm %02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

std::string Percent(double share) { return absl::StrFormat("%.1f%%", share * 100); }

std::string Frame(absl::string_view title, absl::string_view active, absl::string_view body) {
  std::string nav;
  for (auto [href, label] : {std::pair{"/hud", "Commits"}, std::pair{"/hud/tiers", "Tier health"},
                             std::pair{"/hud/cost", "Cluster cost"}}) {
    absl::StrAppend(&nav, "<a href=\"", href, "\"", label == active ? " class=\"active\"" : "", ">", label, "</a>");
  }
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>",
      Escape(title),
      " · relay HUD</title>"
      "<link rel=\"icon\" href=\"/hud/static/favicon.svg\" type=\"image/svg+xml\">"
      "<link rel=\"stylesheet\" href=\"/hud/static/hud.css\">"
      "<script src=\"/hud/static/chart.umd.js\" defer></script>"
      "<script src=\"/hud/static/hud.js\" defer></script>"
      "</head><body><header><span class=\"brand\">relay HUD</span><nav>",
      nav, "</nav></header><main><h1>", Escape(title), "</h1>", body, "</main></body></html>\n");
}

}  // namespace relay::stats::hud
