#include "relay/stats/ci_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <boost/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "relay/base/log.h"
#include <openssl/sha.h>

namespace relay::stats {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;

// The platforms PyTorch's disabled-test bot knows (test-infra's
// torchci/lib/flakyBot/utils.ts); anything else in the line is ignored.
const std::set<std::string>& KnownPlatforms() {
  static const auto* known = new std::set<std::string>{"asan",  "dynamo", "inductor", "linux", "mac",
                                                       "macos", "rocm",   "slow",     "win",   "windows"};
  return *known;
}

// The verdicts DisabledTestsJson counts issues by.
constexpr const char* kVerdicts[] = {"disabled", "closed", "not_a_test", "other_repository", "untrusted_author",
                                     "unreadable"};

double Round3(double v) { return std::round(v * 1000) / 1000; }

// The "default" entries PyTorch's CI falls back to: [default][config][file]
// is the mean over build environments of each config, [default][default]
// the mean over every environment and config.
void AddDefaults(json::object& out) {
  std::map<std::string, std::map<std::string, std::pair<double, int>>> per_config;  // config -> file -> sum, n
  std::map<std::string, std::pair<double, int>> overall;
  for (const auto& [env, configs] : out) {
    for (const auto& [config, files] : configs.as_object()) {
      for (const auto& [file, seconds] : files.as_object()) {
        if (!seconds.is_number()) continue;
        double s = seconds.to_number<double>();
        auto& c = per_config[config][file];
        c.first += s;
        ++c.second;
        auto& o = overall[file];
        o.first += s;
        ++o.second;
      }
    }
  }
  if (overall.empty()) return;
  json::object defaults;
  for (const auto& [config, files] : per_config) {
    json::object f;
    for (const auto& [file, sn] : files) f[file] = Round3(sn.first / sn.second);
    defaults[config] = std::move(f);
  }
  json::object all;
  for (const auto& [file, sn] : overall) all[file] = Round3(sn.first / sn.second);
  defaults["default"] = std::move(all);
  out["default"] = std::move(defaults);
}

json::object& Child(json::object& o, const std::string& key) {
  json::value& v = o[key];
  if (!v.is_object()) v = json::object();
  return v.as_object();
}

std::string Etag(const std::string& body) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(), d);
  std::string hex;
  for (size_t i = 0; i < 16; ++i) absl::StrAppend(&hex, absl::Hex(d[i], absl::kZeroPad2));
  return "\"" + hex + "\"";
}

}  // namespace

std::string TestTimesJson(const hud::ResultSet& rows) {
  json::object out;
  for (size_t i = 0; i < rows.size(); ++i) {
    Child(Child(out, rows.Str(i, "env")), rows.Str(i, "config"))[rows.Str(i, "test_file")] =
        Round3(rows.Num(i, "seconds"));
  }
  AddDefaults(out);
  return json::serialize(out);
}

std::string TestClassTimesJson(const hud::ResultSet& rows) {
  json::object out;
  for (size_t i = 0; i < rows.size(); ++i) {
    Child(Child(Child(out, rows.Str(i, "env")), rows.Str(i, "config")), rows.Str(i, "test_file"))[rows.Str(
        i, "test_class")] = Round3(rows.Num(i, "seconds"));
  }
  return json::serialize(out);
}

std::string SlowTestsJson(const hud::ResultSet& rows) {
  json::object out;
  for (size_t i = 0; i < rows.size(); ++i) out[rows.Str(i, "test")] = Round3(rows.Num(i, "seconds"));
  return json::serialize(out);
}

std::string FlakyTestsJson(const hud::ResultSet& rows) {
  // The named query has a row per downstream repo: one entry per test.
  json::object out;
  for (size_t i = 0; i < rows.size(); ++i) {
    std::string cls = rows.Str(i, "classname");
    if (auto dot = cls.rfind('.'); dot != std::string::npos) cls = cls.substr(dot + 1);
    std::string key = absl::StrCat(rows.Str(i, "name"), " (__main__.", cls, ")");
    json::object& e = Child(out, key);
    if (!e.contains("file")) e["file"] = rows.Str(i, "file");
    for (auto [field, column] : {std::pair{"flaky_commits", "flaky_commits"}, {"passed_on_rerun", "passed_on_rerun"},
                                 {"runs", "total_runs"}, {"failed", "total_failed"}}) {
      int64_t before = e.contains(field) ? e[field].to_number<int64_t>() : 0;
      e[field] = before + static_cast<int64_t>(rows.Num(i, column));
    }
  }
  return json::serialize(out);
}

std::vector<std::string> ParsePlatforms(std::string_view body) {
  std::set<std::string> found;
  for (absl::string_view line : absl::StrSplit(absl::string_view(body.data(), body.size()), '\n')) {
    std::string l = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line));
    if (!absl::StartsWith(l, "platforms:")) continue;
    for (absl::string_view p : absl::StrSplit(l.substr(10), absl::ByAnyChar(", \t\r"), absl::SkipEmpty())) {
      if (KnownPlatforms().count(std::string(p))) found.insert(std::string(p));
    }
    break;
  }
  return {found.begin(), found.end()};
}

const std::set<std::string>& AuthorAssociations() {
  static const auto* all = new std::set<std::string>{"COLLABORATOR", "CONTRIBUTOR", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR",
                                                     "MANNEQUIN",    "MEMBER",      "NONE",        "OWNER"};
  return *all;
}

std::vector<std::string> DefaultTrustedAssociations() { return {"OWNER", "MEMBER", "COLLABORATOR"}; }

std::string DisabledTestsJson(const hud::ResultSet& issues, const DisabledTestsPolicy& policy,
                              std::map<std::string, int64_t>* verdicts) {
  // Each issue's latest delivery: (repo, number) -> open?, title, body, url,
  // and who filed it.
  struct Issue {
    bool open = false;
    std::string title, body, url, association;
    int64_t number = 0, user_id = 0;
  };
  std::map<std::string, int64_t> counts;
  std::map<std::pair<std::string, int64_t>, Issue> latest;
  for (size_t i = 0; i < issues.size(); ++i) {
    boost::system::error_code ec;
    json::value v = json::parse(issues.Str(i, "payload"), ec);
    const json::value* issue = !ec && v.is_object() ? v.as_object().if_contains("issue") : nullptr;
    const json::value* number = issue && issue->is_object() ? issue->as_object().if_contains("number") : nullptr;
    if (!number || !number->is_int64()) {
      ++counts["unreadable"];  // a delivery, not an issue: counted as such
      continue;
    }
    const json::object& o = issue->as_object();
    auto str = [&](const char* k) {
      const json::value* x = o.if_contains(k);
      return x && x->is_string() ? std::string(x->as_string()) : std::string();
    };
    Issue is;
    is.number = number->as_int64();
    is.open = str("state") == "open";
    is.title = str("title");
    is.body = str("body");
    is.url = str("html_url");
    is.association = str("author_association");
    if (const json::value* user = o.if_contains("user"); user && user->is_object()) {
      const json::value* id = user->as_object().if_contains("id");
      if (id && id->is_int64()) is.user_id = id->as_int64();
    }
    latest[{absl::AsciiStrToLower(issues.Str(i, "repo")), is.number}] = std::move(is);
  }
  // Test key -> issue and platforms; several issues for one test: the
  // platforms' union, every platform when any says every platform
  // (PyTorch's update_disabled_issues.py merges them so). Only issues that
  // passed the policy get here, so an untrusted issue without a Platforms:
  // line cannot widen a disable to every platform.
  std::map<std::string, std::pair<const Issue*, std::optional<std::set<std::string>>>> tests;
  for (const auto& [key, is] : latest) {
    // The repository first: an issue of a repository relay does not serve
    // says nothing about the upstream's tests, whoever filed it.
    if (!policy.repos.count(key.first)) {
      ++counts["other_repository"];
      continue;
    }
    if (!policy.associations.count(is.association) && !policy.user_ids.count(is.user_id)) {
      ++counts["untrusted_author"];
      continue;
    }
    if (!is.open) {
      ++counts["closed"];
      continue;
    }
    std::string test;
    if (absl::StartsWith(is.title, "DISABLED ")) {
      test = std::string(absl::StripAsciiWhitespace(absl::string_view(is.title).substr(9)));
    }
    if (test.empty()) {
      ++counts["not_a_test"];
      continue;
    }
    ++counts["disabled"];
    auto platforms = ParsePlatforms(is.body);
    std::optional<std::set<std::string>> named;  // none: every platform
    if (!platforms.empty()) named.emplace(platforms.begin(), platforms.end());
    auto [it, fresh] = tests.try_emplace(test, &is, named);
    if (fresh) continue;
    if (platforms.empty() || !it->second.second) {
      it->second.second.reset();  // every platform
    } else {
      it->second.second->insert(platforms.begin(), platforms.end());
    }
    if (is.number < it->second.first->number) it->second.first = &is;  // the oldest issue names it
  }
  json::object out;
  for (const auto& [test, v] : tests) {
    json::array platforms;
    if (v.second) {
      for (const auto& p : *v.second) platforms.push_back(json::value(p));
    }
    out[test] = json::array{json::value(std::to_string(v.first->number)), json::value(v.first->url), platforms};
  }
  if (verdicts) *verdicts = std::move(counts);
  return json::serialize(out);
}

CiFiles::CiFiles(CiFilesOptions options, prometheus::Registry& metrics)
    : options_(std::move(options)),
      requests_(prometheus::BuildCounter()
                    .Name("relay_stats_ci_file_requests_total")
                    .Help("Published CI files served (/ci/<file>), by file and HTTP status (304: unchanged)")
                    .Register(metrics)),
      refreshes_(prometheus::BuildCounter()
                     .Name("relay_stats_ci_file_refreshes_total")
                     .Help("Recomputations of each published CI file, by file and result (ok; error: its query "
                           "failed; too_large: over stats.ci_files_max_bytes; the last good version stays served)")
                     .Register(metrics)),
      disabled_issues_(prometheus::BuildGauge()
                           .Name("relay_stats_ci_disabled_issues")
                           .Help("Issues read for disabled-tests-condensed.json at its last computation, by verdict "
                                 "(disabled, closed, not_a_test, other_repository, untrusted_author, unreadable)")
                           .Register(metrics)) {
  for (const std::string& f : Names()) {
    for (const char* r : {"ok", "error", "too_large"}) refreshes_.Add({{"file", f}, {"result", r}});
  }
  for (const char* v : kVerdicts) disabled_issues_.Add({{"verdict", v}});
}

const std::vector<std::string>& CiFiles::Names() {
  static const auto* names = new std::vector<std::string>{
      "test-times.json", "test-class-times.json", "slow-tests.json", "disabled-tests-condensed.json",
      "flaky-tests.json"};
  return *names;
}

absl::Status CiFiles::Refresh(clickhouse::Client& client) {
  return Refresh([&client](const std::string& query, const std::map<std::string, std::string>& params) {
    return hud::RunNamed(client, query, params);
  });
}

absl::Status CiFiles::Refresh(const CiQueryRunner& run) {
  std::string days = std::to_string(options_.days);
  std::optional<std::map<std::string, int64_t>> verdicts;  // set when the disabled list was computed
  auto disabled = [&](const hud::ResultSet& rows) {
    return DisabledTestsJson(rows, options_.disabled, &verdicts.emplace());
  };
  struct Spec {
    const char* file;
    const char* query;
    std::map<std::string, std::string> params;
    std::function<std::string(const hud::ResultSet&)> to_json;
  };
  const Spec specs[] = {
      {"test-times.json", "ci_test_times", {{"days", days}}, TestTimesJson},
      {"test-class-times.json", "ci_test_class_times", {{"days", days}}, TestClassTimesJson},
      {"slow-tests.json", "ci_slow_tests",
       {{"days", days}, {"threshold", absl::StrCat(options_.slow_threshold_seconds)}}, SlowTestsJson},
      // The upstreams go in as one comma-separated literal (ClickHouse 18.16
      // binds no arrays); the policy is applied again to each issue.
      {"disabled-tests-condensed.json", "ci_disabled_issues",
       {{"days", std::to_string(options_.disabled_days)}, {"repos", absl::StrJoin(options_.disabled.repos, ",")}},
       disabled},
      {"flaky-tests.json", "flaky_tests",
       {{"days", std::to_string(options_.flaky_days)}, {"repo", ""}, {"limit", "100000"}}, FlakyTestsJson},
  };
  // Each file on its own: one that cannot be made must not hold back the
  // others (a CI job reads all five).
  std::vector<std::string> failed;
  for (const Spec& spec : specs) {
    absl::Status st = RefreshFile(spec.file, run(spec.query, spec.params), spec.to_json);
    if (!st.ok()) failed.push_back(absl::StrCat(spec.file, ": ", st.message()));
  }
  if (verdicts) {
    for (const char* v : kVerdicts) disabled_issues_.Add({{"verdict", v}}).Set(static_cast<double>((*verdicts)[v]));
  }
  if (failed.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(failed.size(), " of ", std::size(specs),
                                             " CI files not refreshed (their last good versions stay served): ",
                                             absl::StrJoin(failed, "; ")));
}

absl::Status CiFiles::RefreshFile(const std::string& name, absl::StatusOr<hud::ResultSet> rows,
                                  const std::function<std::string(const hud::ResultSet&)>& to_json) {
  if (!rows.ok()) {
    refreshes_.Add({{"file", name}, {"result", "error"}}).Increment();
    log::Warn("ci file not refreshed: its query failed; the last good version stays served",
              {{"file", name}, {"error", rows.status().ToString()}});
    return rows.status();
  }
  std::string body = to_json(*rows);
  if (body.size() > options_.max_file_bytes) {
    // Never a truncated file: a cut list would re-enable every test past
    // the cut. The last good version stays until the cause is found.
    refreshes_.Add({{"file", name}, {"result", "too_large"}}).Increment();
    log::Warn("ci file not refreshed: larger than stats.ci_files_max_bytes; the last good version stays served",
              {{"file", name},
               {"bytes", static_cast<int64_t>(body.size())},
               {"max_bytes", static_cast<int64_t>(options_.max_file_bytes)}});
    return absl::ResourceExhaustedError(
        absl::StrCat(body.size(), " bytes, over stats.ci_files_max_bytes (", options_.max_file_bytes, ")"));
  }
  Publish(name, std::move(body));
  refreshes_.Add({{"file", name}, {"result", "ok"}}).Increment();
  return absl::OkStatus();
}

void CiFiles::Publish(const std::string& name, std::string body) {
  if (!options_.dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.dir, ec);
    std::string path = options_.dir + "/" + name, tmp = path + ".tmp";
    bool written = false;
    {
      std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
      out << body;
      out.close();
      written = out.good();
    }
    // A file cut short (a full disk) never replaces a whole one.
    if (written) std::filesystem::rename(tmp, path, ec);
    if (!written || ec) log::Warn("ci files: not written", {{"path", path}, {"error", written ? ec.message() : "write failed"}});
  }
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::lock_guard lock(mu_);
  CiFile& f = files_[name];
  if (f.body != body) {
    f.etag = Etag(body);
    f.body = std::move(body);
    f.generated_at_ms = now;
  }
}

std::optional<CiFile> CiFiles::Get(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = files_.find(name);
  if (it == files_.end()) return std::nullopt;
  return it->second;
}

void CiFiles::AddRoutes(http::Router& router) {
  for (const std::string& name : Names()) {
    router.Add(bhttp::verb::get, "/ci/" + name, [this, name](http::Request&& req, http::Responder respond) {
      std::optional<CiFile> f = Get(name);
      if (!f) {
        requests_.Add({{"file", name}, {"code", "503"}}).Increment();
        http::Response r = http::MakeResponse(503, "not computed yet: relay-stats is waiting for ClickHouse\n",
                                              "text/plain; charset=utf-8");
        r.set(bhttp::field::retry_after, "30");
        respond.Send(std::move(r));
        return;
      }
      bool unchanged = false;
      std::string if_none_match(req[bhttp::field::if_none_match]);
      for (absl::string_view tag : absl::StrSplit(if_none_match, ',')) {
        tag = absl::StripAsciiWhitespace(tag);
        if (absl::StartsWith(tag, "W/")) tag.remove_prefix(2);
        unchanged |= tag == f->etag || tag == "*";
      }
      http::Response r = unchanged ? http::MakeResponse(304, "", "application/json")
                                   : http::MakeResponse(200, std::move(f->body), "application/json");
      r.set(bhttp::field::etag, f->etag);
      r.set(bhttp::field::cache_control, absl::StrCat("public, max-age=", options_.max_age.count()));
      r.set("X-Content-Type-Options", "nosniff");
      requests_.Add({{"file", name}, {"code", unchanged ? "304" : "200"}}).Increment();
      respond.Send(std::move(r));
    });
  }
}

}  // namespace relay::stats
