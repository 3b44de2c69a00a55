// The pieces every HUD page is made of: named-query results read from
// ClickHouse's JSONCompact output, HTML escaping, and the page frame.
// Values from ClickHouse and from the request reach the HTML only through
// Escape() (text and attributes) or ChartData() (JSON in a data block).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "relay/clickhouse/client.h"

namespace relay::stats::hud {

// A named query's answer (deploy/clickhouse/queries/NAME.sql).
class ResultSet {
 public:
  // Parses ClickHouse's JSONCompact output.
  static absl::StatusOr<ResultSet> Parse(absl::string_view json);

  size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  // The value of `column` in row `row` as text (numbers printed, arrays
  // joined with ", ", NULL as ""); Num as a number (0 when not one);
  // List as an array's elements.
  std::string Str(size_t row, absl::string_view column) const;
  double Num(size_t row, absl::string_view column) const;
  std::vector<std::string> List(size_t row, absl::string_view column) const;

 private:
  const boost::json::value& At(size_t row, absl::string_view column) const;
  std::map<std::string, size_t, std::less<>> index_;
  std::vector<boost::json::array> rows_;
};

// Runs the named query `name` with `params` (checked and bound by Bind,
// sql_files.h), asking for JSONCompact.
absl::StatusOr<ResultSet> RunNamed(clickhouse::Client& client, absl::string_view name,
                                   const std::map<std::string, std::string>& params);

// Text for HTML content and double-quoted attribute values: & < > " ' escaped.
std::string Escape(absl::string_view text);
// A URL query component, percent-encoded (for links the pages build).
std::string UrlEncode(absl::string_view text);

// JSON for a <script type="application/json"> data block: serialised, with
// "<" written as \u003c so no value can end the block.
std::string ChartData(const boost::json::value& v);

// "1h 02m", "3m 07s", "12s".
std::string Duration(double seconds);
// "93.5%".
std::string Percent(double share);

// The whole document: title, the navigation with `active` marked, the body.
// Scripts and styles come from /hud/static (the pages send a CSP that
// allows nothing inline).
std::string Frame(absl::string_view title, absl::string_view active, absl::string_view body);

}  // namespace relay::stats::hud
