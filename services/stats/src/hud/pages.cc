#include "relay/stats/hud/pages.h"

#include <algorithm>
#include <set>

#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "relay/stats/hud/html.h"
#include "relay/base/status.h"
#include "relay/stats/tier_report.h"

namespace relay::stats::hud {
namespace json = boost::json;
namespace {


constexpr char kBadParameterPayload[] = "relay.hud/bad-parameter";

const std::string* Find(const Params& params, absl::string_view key) {
  auto it = params.find(key);
  return it == params.end() || it->second.empty() ? nullptr : &it->second;
}

// Only http(s) links from the data become hrefs (a javascript: URL in a
// job's run URL would otherwise run in the reader's browser).
std::string SafeHref(absl::string_view url) {
  if (url.rfind("https://", 0) == 0 || url.rfind("http://", 0) == 0) return Escape(url);
  return "";
}

// How a job's result reads on the page: css class, symbol, words.
struct Look {
  const char* css;
  const char* symbol;
};
Look JobLook(absl::string_view status, absl::string_view conclusion, bool swept) {
  if (swept) return {"fail", "&#x2717;"};
  if (status != "completed") return {"pending", "&#x25CB;"};
  if (conclusion == "success") return {"ok", "&#x2713;"};
  if (conclusion == "failure" || conclusion == "timed_out" || conclusion == "startup_failure") {
    return {"fail", "&#x2717;"};
  }
  return {"neutral", "&#x2298;"};  // cancelled, skipped, neutral
}

std::string Table(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                  absl::string_view css = "") {
  std::string out = absl::StrCat("<table", css.empty() ? "" : absl::StrCat(" class=\"", css, "\""), "><thead><tr>");
  for (const auto& h : headers) absl::StrAppend(&out, "<th>", h, "</th>");
  out += "</tr></thead><tbody>";
  for (const auto& r : rows) {
    out += "<tr>";
    for (const auto& c : r) absl::StrAppend(&out, "<td>", c, "</td>");
    out += "</tr>";
  }
  out += "</tbody></table>";
  if (rows.empty()) out += "<p class=\"empty\">Nothing in this window.</p>";
  return out;
}

std::string Link(absl::string_view href, absl::string_view text) {
  return absl::StrCat("<a href=\"", href, "\">", Escape(text), "</a>");
}
std::string RepoLink(absl::string_view repo) { return Link(absl::StrCat("/hud/repo?name=", UrlEncode(repo)), repo); }
std::string TestLink(absl::string_view file, absl::string_view classname, absl::string_view name) {
  return Link(absl::StrCat("/hud/test?name=", UrlEncode(name), "&amp;classname=", UrlEncode(classname),
                           "&amp;file=", UrlEncode(file)),
              classname.empty() ? std::string(name) : absl::StrCat(classname, ".", name));
}

// A chart: its data block and the canvas hud.js draws it on. `kind`:
// line or bar; `points`: how many the server sent (the browser test reads
// it back from the chart).
std::string Chart(absl::string_view id, absl::string_view title, absl::string_view kind, const json::array& labels,
                  const std::vector<std::pair<std::string, json::array>>& series, absl::string_view y_title) {
  json::array datasets;
  for (const auto& [label, data] : series) datasets.push_back(json::object{{"label", label}, {"data", data}});
  json::object spec{{"type", std::string(kind)},
                    {"labels", labels},
                    {"datasets", datasets},
                    {"y_title", std::string(y_title)}};
  return absl::StrCat("<figure class=\"chart\"><figcaption>", Escape(title), "</figcaption><div class=\"canvas\">",
                      "<canvas id=\"", id, "\" data-points=\"", labels.size(), "\"></canvas></div>",
                      "<script type=\"application/json\" class=\"hud-chart\" data-canvas=\"", id, "\">",
                      ChartData(spec), "</script></figure>");
}

// Letters, digits and `extra` only.
bool InCharset(absl::string_view v, absl::string_view extra) {
  return std::all_of(v.begin(), v.end(), [&](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || extra.find(c) != absl::string_view::npos;
  });
}

}  // namespace

absl::Status BadParameter(absl::string_view key, absl::string_view why) {
  absl::Status st = absl::InvalidArgumentError(absl::StrCat("parameter ", key, ": ", why));
  st.SetPayload(kBadParameterPayload, absl::Cord("1"));
  return st;
}

bool IsBadParameter(const absl::Status& status) { return status.GetPayload(kBadParameterPayload).has_value(); }

absl::StatusOr<std::string> RepoParam(const Params& params, absl::string_view key, bool required) {
  const std::string* v = Find(params, key);
  if (!v) {
    if (required) return BadParameter(key, "a repository (owner/name) is required");
    return std::string();
  }
  size_t slash = v->find('/');
  bool ok = v->size() <= 201 && slash != std::string::npos && slash > 0 && slash + 1 < v->size() &&
            v->find('/', slash + 1) == std::string::npos && InCharset(*v, "-_./");
  if (!ok) return BadParameter(key, "not a repository name (owner/name)");
  // relay keys repositories by their lower-cased names, as GitHub compares them.
  return absl::AsciiStrToLower(*v);
}

absl::StatusOr<int64_t> IntParam(const Params& params, absl::string_view key, int64_t fallback, int64_t min,
                                 int64_t max) {
  const std::string* v = Find(params, key);
  if (!v) return fallback;
  int64_t n;
  bool digits = v->size() <= 12 && std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(*v, &n)) return BadParameter(key, "not a whole number");
  if (n < min || n > max) {
    return BadParameter(key, absl::StrCat("must be between ", min, " and ", max));
  }
  return n;
}

absl::StatusOr<int64_t> DaysParam(const Params& params, int64_t fallback, int64_t max_days) {
  const std::string* v = Find(params, "days");
  if (!v) return std::min(fallback, max_days);
  int64_t n;
  bool digits = v->size() <= 12 && std::all_of(v->begin(), v->end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || !absl::SimpleAtoi(*v, &n) || n < 1) return BadParameter("days", "not a whole number of days (1 or more)");
  if (n > max_days) {
    return BadParameter("days", absl::StrCat("at most ", max_days, " days (the HUD's limit, stats.hud_max_days); asked for ",
                                             n));
  }
  return n;
}

absl::StatusOr<std::string> TextParam(const Params& params, absl::string_view key, size_t max_bytes, bool required) {
  const std::string* v = Find(params, key);
  if (!v) {
    if (required) return BadParameter(key, "is required");
    return std::string();
  }
  if (v->size() > max_bytes) return BadParameter(key, absl::StrCat("longer than ", max_bytes, " bytes"));
  for (unsigned char c : *v) {
    if (c < 0x20 || c == 0x7f) return BadParameter(key, "holds a control character");
  }
  return *v;
}

// ---- the commit grid ----

absl::StatusOr<std::string> CommitGridPage(const Params& params, PageContext& ctx) {
  clickhouse::Client& client = ctx.client;
  RELAY_ASSIGN_OR_RETURN(std::string upstream, RepoParam(params, "upstream", false));
  RELAY_ASSIGN_OR_RETURN(std::string branch, TextParam(params, "branch", 255, false));
  RELAY_ASSIGN_OR_RETURN(int64_t pr, IntParam(params, "pr", 0, 1, 999'999'999));
  RELAY_ASSIGN_OR_RETURN(int64_t page, IntParam(params, "page", 0, 0, 100'000));
  RELAY_ASSIGN_OR_RETURN(int64_t per_page, IntParam(params, "per_page", 20, 1, 100));
  RELAY_ASSIGN_OR_RETURN(int64_t days, DaysParam(params, 30, ctx.max_days));

  // One more than a page, to know whether there is an older one.
  RELAY_ASSIGN_OR_RETURN(ResultSet commits,
                         RunNamed(client, "commit_grid",
                                  {{"upstream_repo", upstream},
                                   {"branch", branch},
                                   {"pr", absl::StrCat(pr)},
                                   {"days", absl::StrCat(days)},
                                   {"offset", absl::StrCat(page * per_page)},
                                   {"limit", absl::StrCat(per_page + 1)}}));
  size_t shown = std::min<size_t>(commits.size(), per_page);
  std::vector<std::string> shas;
  for (size_t i = 0; i < shown; ++i) shas.push_back(commits.Str(i, "head_sha"));

  ResultSet cells;
  if (!shas.empty()) {
    RELAY_ASSIGN_OR_RETURN(cells, RunNamed(client, "commit_grid_cells",
                                           {{"upstream_repo", upstream}, {"shas", absl::StrJoin(shas, ",")}}));
  }
  // Columns: every repo on the page, by level (highest first), then name.
  std::map<std::string, int> level_of;
  for (size_t i = 0; i < cells.size(); ++i) {
    int& l = level_of[cells.Str(i, "downstream_repo")];
    l = std::max(l, static_cast<int>(cells.Num(i, "level")));
  }
  std::vector<std::pair<int, std::string>> columns;
  for (const auto& [repo, level] : level_of) columns.emplace_back(level, repo);
  std::sort(columns.begin(), columns.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  // (upstream, sha, repo) -> the rows of its cell
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<size_t>> cell_rows;
  for (size_t i = 0; i < cells.size(); ++i) {
    cell_rows[{cells.Str(i, "upstream_repo"), cells.Str(i, "head_sha"), cells.Str(i, "downstream_repo")}].push_back(i);
  }

  std::string body;
  absl::StrAppend(&body,
                  "<form class=\"filters\" method=\"get\" action=\"/hud\">"
                  "<label>upstream <input name=\"upstream\" value=\"",
                  Escape(upstream), "\" placeholder=\"owner/name\"></label><label>branch <input name=\"branch\" value=\"",
                  Escape(branch), "\"></label><label>PR <input name=\"pr\" inputmode=\"numeric\" value=\"",
                  pr ? absl::StrCat(pr) : "", "\"></label><button type=\"submit\">Filter</button></form>");
  if (shown == 0) {
    absl::StrAppend(&body, "<p class=\"empty\">No upstream commits match in the last ", days, " days.</p>");
    return Frame("Commits", "Commits", body);
  }
  body += "<table class=\"grid\"><thead><tr><th rowspan=\"2\">commit</th><th rowspan=\"2\">first dispatch</th>"
          "<th rowspan=\"2\">PR / branch</th>";
  for (size_t i = 0; i < columns.size();) {
    size_t j = i;
    while (j < columns.size() && columns[j].first == columns[i].first) ++j;
    absl::StrAppend(&body, "<th class=\"level\" colspan=\"", j - i, "\">L", columns[i].first, "</th>");
    i = j;
  }
  body += "</tr><tr>";
  for (const auto& [level, repo] : columns) {
    absl::StrAppend(&body, "<th class=\"repo\" data-repo=\"", Escape(repo), "\">", RepoLink(repo), "</th>");
  }
  body += "</tr></thead><tbody>";
  for (size_t i = 0; i < shown; ++i) {
    std::string up = commits.Str(i, "upstream_repo"), sha = commits.Str(i, "head_sha");
    std::vector<std::string> refs;
    for (const auto& n : commits.List(i, "pr_numbers")) {
      refs.push_back(Link(absl::StrCat("https://github.com/", UrlEncode(up), "/pull/", UrlEncode(n)), "#" + n));
    }
    for (const auto& b : commits.List(i, "branches")) refs.push_back(Escape(b));
    absl::StrAppend(&body, "<tr data-sha=\"", Escape(sha), "\" data-upstream=\"", Escape(up), "\"><td class=\"sha\">",
                    Link(absl::StrCat("https://github.com/", UrlEncode(up), "/commit/", UrlEncode(sha)),
                         sha.substr(0, 10)),
                    "<div class=\"upstream\">", Escape(up), "</div></td><td>",
                    Escape(commits.Str(i, "first_dispatched_at")), "</td><td>", absl::StrJoin(refs, " "), "</td>");
    for (const auto& [level, repo] : columns) {
      auto it = cell_rows.find({up, sha, repo});
      if (it == cell_rows.end()) {
        body += "<td class=\"cell none\"></td>";
        continue;
      }
      absl::StrAppend(&body, "<td class=\"cell\" data-repo=\"", Escape(repo), "\">");
      for (size_t r : it->second) {
        std::string job_id = cells.Str(r, "job_id");
        if (job_id.empty()) {
          std::string by = cells.Str(r, "superseded_by");
          if (!by.empty()) {
            // Coalesced: never sent, on purpose (a newer head went instead).
            absl::StrAppend(&body,
                            "<span class=\"job superseded\" title=\"not sent: superseded by a newer head of the pull "
                            "request (request ",
                            Escape(by), ")\">&#x21B7;</span>");
            continue;
          }
          body += "<span class=\"job waiting\" title=\"dispatched; no job reported yet\">&#xB7;</span>";
          continue;
        }
        std::string status = cells.Str(r, "status"), conclusion = cells.Str(r, "conclusion");
        bool swept = cells.Num(r, "timed_out_by_sweeper") > 0;
        Look look = JobLook(status, conclusion, swept);
        std::string shown_conclusion = swept ? "timed out (no result)" : status == "completed" ? conclusion : status;
        std::string title = absl::StrCat(cells.Str(r, "workflow_name"), " / ", cells.Str(r, "job_name"), " (attempt ",
                                         cells.Str(r, "run_attempt"), "): ", shown_conclusion);
        if (double d = cells.Num(r, "duration_s"); d > 0) absl::StrAppend(&title, ", ", Duration(d));
        absl::StrAppend(&title, ", ", cells.Str(r, "failed_tests"), " failed tests");
        std::string href = SafeHref(cells.Str(r, "run_url"));
        absl::StrAppend(&body, "<a class=\"job ", look.css, "\"", href.empty() ? "" : absl::StrCat(" href=\"", href, "\""),
                        " title=\"", Escape(title), "\" data-job-id=\"", Escape(job_id), "\" data-conclusion=\"",
                        Escape(swept ? "timed_out" : status == "completed" ? conclusion : status), "\">", look.symbol,
                        "</a>");
      }
      body += "</td>";
    }
    body += "</tr>";
  }
  body += "</tbody></table><nav class=\"pages\">";
  auto page_link = [&](int64_t p, absl::string_view text) {
    std::string q = absl::StrCat("/hud?page=", p);
    if (!upstream.empty()) absl::StrAppend(&q, "&amp;upstream=", UrlEncode(upstream));
    if (!branch.empty()) absl::StrAppend(&q, "&amp;branch=", UrlEncode(branch));
    if (pr) absl::StrAppend(&q, "&amp;pr=", pr);
    if (per_page != 20) absl::StrAppend(&q, "&amp;per_page=", per_page);
    if (days != 30) absl::StrAppend(&q, "&amp;days=", days);
    return absl::StrCat("<a rel=\"", p < page ? "prev" : "next", "\" href=\"", q, "\">", text, "</a>");
  };
  if (page > 0) body += page_link(page - 1, "&#x2190; newer");
  if (commits.size() > shown) body += page_link(page + 1, "older &#x2192;");
  body += "</nav>";
  return Frame("Commits", "Commits", body);
}

// ---- tier verdicts (the repo page and the tier page) ----

absl::StatusOr<TierCache::Report> TierCache::Get(clickhouse::Client& client) {
  {
    std::lock_guard lock(mu_);
    if (report_) return *report_;
  }
  // The first report: one page computes it, within its own budget; the
  // others do not wait for it (a lock has no deadline), they say so.
  std::unique_lock first(first_mu_, std::try_to_lock);
  if (!first.owns_lock()) return absl::UnavailableError("the tier report is being computed");
  {
    std::lock_guard lock(mu_);
    if (report_) return *report_;
  }
  auto start = std::chrono::system_clock::now();
  RELAY_ASSIGN_OR_RETURN(auto verdicts, TierReport(client));
  std::lock_guard lock(mu_);
  if (!report_ || report_->computed_at <= start) report_ = Report{std::move(verdicts), start};
  return *report_;
}

absl::Status TierCache::Refresh(clickhouse::Client& client) {
  // Computed outside the lock: pages keep reading the previous report.
  auto start = std::chrono::system_clock::now();
  RELAY_ASSIGN_OR_RETURN(auto verdicts, TierReport(client));
  std::lock_guard lock(mu_);
  if (!report_ || report_->computed_at <= start) report_ = Report{std::move(verdicts), start};
  return absl::OkStatus();
}

namespace {

std::string Rules(const TierWindow& w) {
  return w.failed_rules.empty() ? "<span class=\"ok\">all hold</span>"
                                : absl::StrCat("<span class=\"fail\">", Escape(absl::StrJoin(w.failed_rules, ", ")),
                                               "</span>");
}

std::string TierRow(const TierVerdict& v, bool link) {
  return absl::StrCat("<tr data-repo=\"", Escape(v.repo), "\"><td>", link ? RepoLink(v.repo) : Escape(v.repo),
                      "</td><td>L", v.level, "</td><td class=\"verdict ", Escape(v.verdict), "\">", Escape(v.verdict),
                      "</td><td>", Escape(v.reason), "</td><td>", v.promotion.jobs, "</td><td>",
                      Percent(v.promotion.pass_rate), "</td><td>", Rules(v.promotion), "</td><td>", Rules(v.demotion),
                      "</td></tr>");
}

std::string AsOf(const TierCache::Report& r) {
  return absl::StrCat("<p class=\"as-of\">Verdicts as of ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromChrono(r.computed_at), absl::UTCTimeZone()),
                      " (recomputed every 30 s).</p>");
}

constexpr const char* kTierHeader =
    "<table class=\"tiers\"><thead><tr><th>repository</th><th>level</th><th>verdict</th><th>why</th>"
    "<th>jobs (14 d)</th><th>pass rate (14 d)</th><th>L3 rules failing, 14 d</th><th>L3 rules failing, 7 d</th>"
    "</tr></thead><tbody>";

}  // namespace

absl::StatusOr<std::string> TiersPage(const Params&, PageContext& ctx) {
  RELAY_ASSIGN_OR_RETURN(TierCache::Report report, ctx.tiers.Get(ctx.client));
  std::string body = AsOf(report) + kTierHeader;
  for (const auto& v : report.verdicts) body += TierRow(v, true);
  body += "</tbody></table>";
  if (report.verdicts.empty()) body += "<p class=\"empty\">relay has dispatched to no repository yet.</p>";
  return Frame("Tier health", "Tier health", body);
}

// ---- a downstream repository ----

absl::StatusOr<std::string> RepoPage(const Params& params, PageContext& ctx) {
  clickhouse::Client& client = ctx.client;
  RELAY_ASSIGN_OR_RETURN(std::string repo, RepoParam(params, "name", true));
  RELAY_ASSIGN_OR_RETURN(int64_t days, DaysParam(params, 14, ctx.max_days));
  if (days != 14 && days != 30) return BadParameter("days", "must be 14 or 30");
  RELAY_ASSIGN_OR_RETURN(TierCache::Report report, ctx.tiers.Get(client));
  auto tier = std::find_if(report.verdicts.begin(), report.verdicts.end(),
                           [&](const TierVerdict& v) { return v.repo == repo; });
  if (tier == report.verdicts.end()) {
    return BadParameter("name", absl::StrCat("relay had not dispatched to ", repo, " when the tier report was made (",
                                             absl::FormatTime("%H:%M:%S UTC", absl::FromChrono(report.computed_at),
                                                              absl::UTCTimeZone()),
                                             ")"));
  }
  std::string d = absl::StrCat(days);
  RELAY_ASSIGN_OR_RETURN(ResultSet trend, RunNamed(client, "repo_trend", {{"repo", repo}, {"days", d}}));
  RELAY_ASSIGN_OR_RETURN(ResultSet flaky,
                         RunNamed(client, "flaky_tests", {{"repo", repo}, {"days", d}, {"limit", "20"}}));
  RELAY_ASSIGN_OR_RETURN(ResultSet slow,
                         RunNamed(client, "slowest_tests", {{"repo", repo}, {"days", d}, {"limit", "20"}}));

  std::string body = absl::StrCat("<p class=\"windows\">Window: ",
                                  days == 14 ? "<b>14 days</b>" : Link(absl::StrCat("/hud/repo?name=", UrlEncode(repo), "&amp;days=14"), "14 days"),
                                  " · ",
                                  days == 30 ? "<b>30 days</b>" : Link(absl::StrCat("/hud/repo?name=", UrlEncode(repo), "&amp;days=30"), "30 days"),
                                  "</p>");
  absl::StrAppend(&body, "<h2>Tier</h2>", AsOf(report), kTierHeader, TierRow(*tier, false), "</tbody></table>");

  json::array labels, pass, test_fail, infra_fail, signal, queue;
  for (size_t i = 0; i < trend.size(); ++i) {
    labels.emplace_back(trend.Str(i, "day"));
    pass.emplace_back(trend.Num(i, "pass_rate") * 100);
    test_fail.emplace_back(trend.Num(i, "test_failure_rate") * 100);
    infra_fail.emplace_back(trend.Num(i, "infra_failure_rate") * 100);
    signal.emplace_back(trend.Num(i, "p50_signal_s") / 60);
    queue.emplace_back(trend.Num(i, "mean_queue_s") / 60);
  }
  absl::StrAppend(&body, "<h2>Trends, last ", days, " days</h2><div class=\"charts\">",
                  Chart("pass-rate", "Pass rate, infra and test failures apart (% of jobs with a signal)", "line",
                        labels, {{"passed", pass}, {"test failures", test_fail}, {"infra failures", infra_fail}}, "%"),
                  Chart("time-to-signal", "Time to signal, p50 (minutes)", "line", labels, {{"p50", signal}}, "min"),
                  Chart("queue-time", "Queue time, mean (minutes)", "line", labels, {{"mean", queue}}, "min"),
                  "</div>");
  if (trend.empty()) body += "<p class=\"empty\">No completed jobs in this window.</p>";

  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < flaky.size(); ++i) {
    rows.push_back({TestLink(flaky.Str(i, "file"), flaky.Str(i, "classname"), flaky.Str(i, "name")), Escape(flaky.Str(i, "file")),
                    Escape(flaky.Str(i, "flaky_commits")), Escape(flaky.Str(i, "passed_on_rerun")),
                    Escape(flaky.Str(i, "total_failed")), Escape(flaky.Str(i, "total_runs"))});
  }
  absl::StrAppend(&body, "<h2>Flaky tests</h2>",
                  Table({"test", "file", "flaky commits", "passed on rerun", "failed", "runs"}, rows, "flaky"));
  rows.clear();
  for (size_t i = 0; i < slow.size(); ++i) {
    rows.push_back({TestLink(slow.Str(i, "file"), slow.Str(i, "classname"), slow.Str(i, "name")), Escape(slow.Str(i, "file")),
                    Escape(slow.Str(i, "mean_s")), Escape(slow.Str(i, "max_s")), Escape(slow.Str(i, "timed_runs"))});
  }
  absl::StrAppend(&body, "<h2>Slowest tests</h2>", Table({"test", "file", "mean s", "max s", "runs"}, rows, "slowest"));
  return Frame(repo, "", body);
}

// ---- a test's history ----

constexpr size_t kTestRuns = 500;  // runs a test page lists, newest first

absl::StatusOr<std::string> TestPage(const Params& params, PageContext& ctx) {
  clickhouse::Client& client = ctx.client;
  RELAY_ASSIGN_OR_RETURN(std::string name, TextParam(params, "name", 1000, true));
  RELAY_ASSIGN_OR_RETURN(std::string classname, TextParam(params, "classname", 1000, false));
  RELAY_ASSIGN_OR_RETURN(std::string file, TextParam(params, "file", 1000, false));
  RELAY_ASSIGN_OR_RETURN(int64_t days, DaysParam(params, 30, std::min(90, ctx.max_days)));
  std::string d = absl::StrCat(days);
  if (file.empty() || classname.empty()) {
    // test_history needs all three (they pick the table's granules): find
    // where this name was reported.
    RELAY_ASSIGN_OR_RETURN(ResultSet where, RunNamed(client, "test_files", {{"name", name},
                                                                           {"classname", classname},
                                                                           {"file", file},
                                                                           {"days", d}}));
    std::vector<std::pair<std::string, std::string>> found;  // file, classname
    for (size_t i = 0; i < where.size(); ++i) found.emplace_back(where.Str(i, "file"), where.Str(i, "classname"));
    if (found.empty()) {
      return Frame(name, "", absl::StrCat("<p class=\"empty\">No runs of this test in the last ", days, " days.</p>"));
    }
    if (found.size() > 1) {
      std::string list = "<ul class=\"candidates\">";
      for (const auto& [f, c] : found) absl::StrAppend(&list, "<li>", TestLink(f, c, name), " in ", Escape(f), "</li>");
      return Frame(name, "", absl::StrCat("<p>This name was reported in ", found.size(),
                                          " files or classes; pick one:</p>", list, "</ul>"));
    }
    file = found[0].first;
    classname = found[0].second;
  }
  RELAY_ASSIGN_OR_RETURN(ResultSet runs, RunNamed(client, "test_history",
                                                  {{"name", name},
                                                   {"classname", classname},
                                                   {"file", file},
                                                   {"days", d},
                                                   {"limit", absl::StrCat(kTestRuns)}}));
  std::string title = classname.empty() ? name : absl::StrCat(classname, ".", name);
  if (runs.empty()) {
    return Frame(title, "", absl::StrCat("<p class=\"empty\">No runs of this test in the last ", days, " days.</p>"));
  }
  struct Tally {
    int passed = 0, failed = 0, skipped = 0;
  };
  std::map<std::string, Tally> per_repo;
  std::set<std::string> files;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::string outcome = runs.Str(i, "outcome"), repo = runs.Str(i, "repo");
    Tally& t = per_repo[repo];
    const char* css = "neutral";
    if (outcome == "passed") {
      ++t.passed, css = "ok";
    } else if (outcome == "failed" || outcome == "error") {
      ++t.failed, css = "fail";
    } else {
      ++t.skipped;
    }
    files.insert(runs.Str(i, "file"));
    std::string sha = runs.Str(i, "head_sha");
    std::string href = SafeHref(runs.Str(i, "run_url"));
    rows.push_back({Escape(runs.Str(i, "uploaded_at")), RepoLink(repo),
                    absl::StrCat(Escape(runs.Str(i, "upstream_repo")), " ", Escape(sha.substr(0, 10))),
                    absl::StrCat("<span class=\"outcome ", css, "\">", Escape(outcome), "</span>"),
                    Escape(runs.Str(i, "duration")), Escape(runs.Str(i, "reruns")),
                    href.empty() ? Escape(runs.Str(i, "job_name"))
                                 : absl::StrCat("<a href=\"", href, "\">", Escape(runs.Str(i, "job_name")), "</a>")});
  }
  std::vector<std::vector<std::string>> summary;
  for (const auto& [repo, t] : per_repo) {
    summary.push_back({RepoLink(repo), absl::StrCat(t.passed), absl::StrCat(t.failed), absl::StrCat(t.skipped)});
  }
  std::string body = absl::StrCat(
      "<h2>By repository, last ", days, " days",
      runs.size() >= kTestRuns ? absl::StrCat(" (the newest ", kTestRuns, " runs)") : std::string(), "</h2>",
      Table({"repository", "passed", "failed", "skipped"}, summary, "summary"));
  std::vector<std::vector<std::string>> file_rows;
  for (const auto& f : files) {
    if (f.empty()) continue;  // the report named no file (file_durations would read them all)
    RELAY_ASSIGN_OR_RETURN(ResultSet fd, RunNamed(client, "file_durations", {{"file", f}, {"days", d}}));
    for (size_t i = 0; i < fd.size(); ++i) {
      file_rows.push_back({Escape(fd.Str(i, "file")), RepoLink(fd.Str(i, "repo")), Escape(fd.Str(i, "tests")),
                           Escape(fd.Str(i, "job_runs")), Escape(fd.Str(i, "per_run_s"))});
    }
  }
  absl::StrAppend(&body, "<h2>Its file's durations</h2>",
                  Table({"file", "repository", "tests", "job runs", "seconds per run"}, file_rows, "files"),
                  "<h2>Runs</h2>",
                  Table({"uploaded", "repository", "upstream commit", "outcome", "seconds", "reruns", "job"}, rows,
                        "runs"));
  return Frame(title, "", body);
}

// ---- cluster cost ----

absl::StatusOr<std::string> CostPage(const Params& params, PageContext& ctx) {
  clickhouse::Client& client = ctx.client;
  RELAY_ASSIGN_OR_RETURN(int64_t days, DaysParam(params, 30, ctx.max_days));
  RELAY_ASSIGN_OR_RETURN(std::string team, TextParam(params, "team", 100, false));
  if (!InCharset(team, "-_.")) return BadParameter("team", "letters, digits, '-', '_' and '.' only");
  RELAY_ASSIGN_OR_RETURN(ResultSet usage,
                         RunNamed(client, "cluster_usage", {{"days", absl::StrCat(days)}, {"team", team}}));
  json::array labels, node_hours, cluster_hours;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < usage.size(); ++i) {
    std::string t = usage.Str(i, "team"), group = usage.Str(i, "node_group");
    labels.emplace_back(absl::StrCat(t, " / ", group));
    node_hours.emplace_back(usage.Num(i, "total_node_seconds") / 3600);
    cluster_hours.emplace_back(usage.Num(i, "total_cluster_seconds") / 3600);
    rows.push_back({Escape(t), Escape(group), Escape(usage.Str(i, "clusters")),
                    Escape(usage.Str(i, "total_cluster_seconds")), Escape(usage.Str(i, "total_node_seconds"))});
  }
  std::string body =
      absl::StrCat("<p class=\"windows\">Last ", days, " days", team.empty() ? "" : absl::StrCat(", team ", Escape(team)),
                   "</p>",
                   Chart("cost", "Node-hours and cluster-hours per team / node group", "bar", labels,
                         {{"node-hours", node_hours}, {"cluster-hours", cluster_hours}}, "hours"),
                   Table({"team", "node group", "clusters", "cluster-seconds", "node-seconds"}, rows, "cost"));
  return Frame("Cluster cost", "Cluster cost", body);
}

const std::vector<PageRoute>& PageRoutes() {
  static const auto* routes = new std::vector<PageRoute>{
      {"/hud", "grid", &CommitGridPage},   {"/hud/repo", "repo", &RepoPage}, {"/hud/tiers", "tiers", &TiersPage},
      {"/hud/test", "test", &TestPage},    {"/hud/cost", "cost", &CostPage},
  };
  return *routes;
}

}  // namespace relay::stats::hud
