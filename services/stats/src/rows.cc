#include "relay/stats/rows.h"

#include <cmath>
#include <limits>
#include <vector>

#include <boost/json.hpp>
#include <boost/url/params_view.hpp>
#include <boost/url/parse_query.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "relay/base/json_fields.h"
#include "relay/base/status.h"
#include "relay/v1/cluster.pb.h"
#include "relay/v1/collector.pb.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/github.pb.h"
#include "relay/v1/webhook.pb.h"

namespace relay::stats {

// Column lists in the tables' order (deploy/clickhouse/migrations); each
// converter below writes exactly these, in this order.
const Table kWebhookDeliveries{
    "webhook_deliveries",
    "delivery_id, event, action, repo, repository_id, installation_id, received_at, received_at_ms, body_sha256, "
    "content_type, payload, version"};
const Table kWorkflowJob{
    "workflow_job",
    "id, run_id, run_attempt, name, workflow_name, head_sha, head_branch, status, conclusion, created_at, "
    "started_at, completed_at, labels, runner_id, runner_name, runner_group_name, steps.name, steps.status, "
    "steps.conclusion, steps.number, steps.started_at, steps.completed_at, html_url, repository_full_name, "
    "delivery_id, received_at, version"};
const Table kWorkflowRun{
    "workflow_run",
    "id, run_attempt, run_number, workflow_id, name, event, head_sha, head_branch, status, conclusion, created_at, "
    "updated_at, run_started_at, html_url, repository_full_name, head_repository_full_name, pull_request_numbers, "
    "delivery_id, received_at, version"};
const Table kDispatches{
    "dispatches",
    "request_id, delivery_id, upstream_repo, downstream_repo, level, event, action, pr_number, head_sha, "
    "dispatched_at, dispatched_at_ms, slimmed, repeated, version"};
const Table kGitHubOutcomes{
    "github_outcomes",
    "request_id, kind, repo, endpoint, http_status, attempts, result, error, finished_at, finished_at_ms, "
    "latency_ms, level, delivery_id, installation_id, repeated, version"};
const Table kSupersededDispatches{
    "superseded_dispatches",
    "request_id, delivery_id, upstream_repo, downstream_repo, level, pr_number, head_sha, superseded_by, "
    "superseded_at, superseded_at_ms, version"};
const Table kJobResults{
    "crcr_workflow_job",
    "id, status, downstream_repo, upstream_repo, pr_number, head_sha, delivery_id, workflow_run_url, "
    "workflow_name, job_name, check_run_id, run_id, run_attempt, conclusion, queue_time, execution_time, "
    "dispatched_at, started_at, completed_at, total_tests, passed_tests, failed_tests, skipped_tests, "
    "failed_test_names, has_test_results, artifact_url, downstream_repo_level, event_type, timed_out_by_sweeper, "
    "version"};
const Table kTestResults{
    "test_results",
    "day, uploaded_at, repo, job_id, delivery_id, run_id, run_attempt, job_name, upload_id, seq, idx, file, "
    "classname, name, duration, outcome, reruns, message, version"};
const Table kClusterEvents{
    "cluster_events",
    "event_id, cluster_id, team, kind, state, previous_state, reason, at, at_ms, node_group, nodes, "
    "cluster_seconds, node_seconds, provider, version"};

size_t Rows::rows() const {
  size_t n = 0;
  for (const auto& [t, r] : tables_) n += r.rows();
  return n;
}

size_t Rows::bytes() const {
  size_t n = 0;
  for (const auto& [t, r] : tables_) n += r.bytes();
  return n;
}

void Rows::Append(Rows& other) {
  for (auto& [t, r] : other.tables_) tables_[t].Append(r);
  windows_.merge(other.windows_);
  other.Clear();
}

namespace {

namespace json = boost::json;

constexpr int64_t kMsPerDay = 86'400'000;
// DateTime is a UInt32 of seconds: 1970 to 2106.
constexpr int64_t kMaxDateTime = std::numeric_limits<uint32_t>::max();

absl::Status Invalid(std::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// Repository names as a key: GitHub treats owner/name case-insensitively,
// and so do the allowlist and the collector, so every table stores them
// lower-cased and joins and filters meet whatever case a source used.
std::string RepoKey(std::string_view repo) {
  std::string out(repo);
  for (char& c : out) c = static_cast<char>(absl::ascii_tolower(static_cast<unsigned char>(c)));
  return out;
}

// A time in ms since the epoch that a DateTime column can hold.
absl::Status CheckMs(int64_t ms, std::string_view field) {
  if (ms < 0 || ms / 1000 > kMaxDateTime) return Invalid(absl::StrCat(std::string(field), " out of range: ", ms));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Time(const json::object& o, std::string_view key) {
  auto t = ParseGitHubTime(StringField(o, key));
  if (!t.ok()) return Invalid(absl::StrCat(std::string(key), ": ", t.status().message()));
  return t;
}

int StatusRank(std::string_view status) {
  if (status == "completed") return 3;
  if (status == "in_progress") return 2;
  return 1;  // queued, waiting, requested, pending
}

// Version of a webhook-derived row: the status rank first (a late
// in_progress never replaces completed), then a time from the record.
uint64_t RankedVersion(std::string_view status, int64_t ms) {
  return static_cast<uint64_t>(StatusRank(status)) * 10'000'000'000'000ull + static_cast<uint64_t>(ms);
}

// The JSON a webhook carried: the body, or its `payload` form field.
absl::StatusOr<std::string> PayloadJson(const v1::WebhookRecord& w) {
  if (!absl::StartsWithIgnoreCase(w.content_type(), "application/x-www-form-urlencoded")) return w.body();
  auto params = boost::urls::parse_query(w.body());
  if (!params) return Invalid("form body: " + params.error().message());
  // Decoded as HTML forms encode: percent escapes, and '+' for a space.
  boost::urls::encoding_opts opt;
  opt.space_as_plus = true;
  for (auto p : boost::urls::params_view(params->buffer(), opt)) {
    if (p.key == "payload") return std::string(p.value);
  }
  return Invalid("form body without a payload field");
}

absl::Status WorkflowJobRow(const json::object& payload, const v1::WebhookRecord& w, Rows& out) {
  const json::object* job = ObjectField(payload, "workflow_job");
  if (!job) return Invalid("workflow_job event without a workflow_job object");
  int64_t id = IntField(*job, "id");
  if (id <= 0) return Invalid("workflow_job.id missing");
  RELAY_ASSIGN_OR_RETURN(int64_t created, Time(*job, "created_at"));
  RELAY_ASSIGN_OR_RETURN(int64_t started, Time(*job, "started_at"));
  RELAY_ASSIGN_OR_RETURN(int64_t completed, Time(*job, "completed_at"));
  std::vector<std::string> labels;
  if (const json::value* l = job->if_contains("labels"); l && l->is_array()) {
    for (const auto& v : l->get_array()) {
      if (v.is_string()) labels.emplace_back(v.get_string());
    }
  }
  struct Step {
    std::string name, status, conclusion;
    uint32_t number;
    int64_t started, completed;
  };
  std::vector<Step> steps;
  if (const json::value* s = job->if_contains("steps"); s && s->is_array()) {
    for (const auto& v : s->get_array()) {
      if (!v.is_object()) continue;
      const auto& o = v.get_object();
      RELAY_ASSIGN_OR_RETURN(int64_t ss, Time(o, "started_at"));
      RELAY_ASSIGN_OR_RETURN(int64_t sc, Time(o, "completed_at"));
      steps.push_back({std::string(StringField(o, "name")), std::string(StringField(o, "status")), std::string(StringField(o, "conclusion")),
                       static_cast<uint32_t>(IntField(o, "number")), ss, sc});
    }
  }
  std::string repo = RepoKey(w.repository());
  auto& r = out.For(kWorkflowJob);
  r.UInt64(static_cast<uint64_t>(id))
      .UInt64(static_cast<uint64_t>(IntField(*job, "run_id")))
      .UInt32(static_cast<uint32_t>(IntField(*job, "run_attempt")))
      .String(StringField(*job, "name"))
      .String(StringField(*job, "workflow_name"))
      .String(StringField(*job, "head_sha"))
      .String(StringField(*job, "head_branch"))
      .String(StringField(*job, "status"))
      .String(StringField(*job, "conclusion"))
      .DateTime(created)
      .DateTime(started)
      .DateTime(completed)
      .Strings(labels)
      .UInt64(static_cast<uint64_t>(IntField(*job, "runner_id")))
      .String(StringField(*job, "runner_name"))
      .String(StringField(*job, "runner_group_name"));
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.String(s.name);
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.String(s.status);
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.String(s.conclusion);
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.UInt32(s.number);
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.DateTime(s.started);
  r.ArrayHeader(steps.size());
  for (const auto& s : steps) r.DateTime(s.completed);
  r.String(StringField(*job, "html_url"))
      .String(repo)
      .String(w.delivery_id())
      .DateTime(w.received_at_unix_ms() / 1000)
      .UInt64(RankedVersion(StringField(*job, "status"), w.received_at_unix_ms()));
  r.EndRow();
  return absl::OkStatus();
}

absl::Status WorkflowRunRow(const json::object& payload, const v1::WebhookRecord& w, Rows& out) {
  const json::object* run = ObjectField(payload, "workflow_run");
  if (!run) return Invalid("workflow_run event without a workflow_run object");
  int64_t id = IntField(*run, "id");
  if (id <= 0) return Invalid("workflow_run.id missing");
  RELAY_ASSIGN_OR_RETURN(int64_t created, Time(*run, "created_at"));
  RELAY_ASSIGN_OR_RETURN(int64_t updated, Time(*run, "updated_at"));
  RELAY_ASSIGN_OR_RETURN(int64_t run_started, Time(*run, "run_started_at"));
  std::vector<uint64_t> prs;
  if (const json::value* p = run->if_contains("pull_requests"); p && p->is_array()) {
    for (const auto& v : p->get_array()) {
      if (v.is_object()) prs.push_back(static_cast<uint64_t>(IntField(v.get_object(), "number")));
    }
  }
  const json::object* head_repo = ObjectField(*run, "head_repository");
  auto& r = out.For(kWorkflowRun);
  r.UInt64(static_cast<uint64_t>(id))
      .UInt32(static_cast<uint32_t>(std::max<int64_t>(1, IntField(*run, "run_attempt"))))
      .UInt64(static_cast<uint64_t>(IntField(*run, "run_number")))
      .UInt64(static_cast<uint64_t>(IntField(*run, "workflow_id")))
      .String(StringField(*run, "name"))
      .String(StringField(*run, "event"))
      .String(StringField(*run, "head_sha"))
      .String(StringField(*run, "head_branch"))
      .String(StringField(*run, "status"))
      .String(StringField(*run, "conclusion"))
      .DateTime(created)
      .DateTime(updated)
      .DateTime(run_started)
      .String(StringField(*run, "html_url"))
      .String(RepoKey(w.repository()))
      .String(RepoKey(head_repo ? StringField(*head_repo, "full_name") : std::string_view()));
  r.ArrayHeader(prs.size());
  for (uint64_t n : prs) r.UInt64(n);
  r.String(w.delivery_id())
      .DateTime(w.received_at_unix_ms() / 1000)
      .UInt64(RankedVersion(StringField(*run, "status"), updated * 1000));
  r.EndRow();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> ParseGitHubTime(std::string_view text) {
  if (text.empty()) return 0;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), &t, &err)) {
    return Invalid(absl::StrCat("not an ISO 8601 time: \"", std::string(text.substr(0, 40)), "\""));
  }
  int64_t s = absl::ToUnixSeconds(t);
  if (s < 0 || s > kMaxDateTime) return Invalid(absl::StrCat("time out of range: ", std::string(text.substr(0, 40))));
  return s;
}

absl::Status ConvertWebhook(std::string_view value, Rows& out) {
  v1::WebhookRecord w;
  if (!w.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.WebhookRecord");
  if (w.delivery_id().empty() || w.event().empty()) return Invalid("webhook record without delivery id or event");
  RELAY_RETURN_IF_ERROR(CheckMs(w.received_at_unix_ms(), "received_at_unix_ms"));
  RELAY_ASSIGN_OR_RETURN(std::string payload, PayloadJson(w));

  // The rows that come from the payload first: they are the ones that can
  // fail, and a record adds all its rows or none.
  if (w.event() == "workflow_job" || w.event() == "workflow_run") {
    boost::system::error_code ec;
    json::value doc = json::parse(payload, ec);
    if (ec || !doc.is_object()) return Invalid(absl::StrCat(w.event(), " payload is not a JSON object"));
    Rows rows;
    RELAY_RETURN_IF_ERROR(w.event() == "workflow_job" ? WorkflowJobRow(doc.get_object(), w, rows)
                                                      : WorkflowRunRow(doc.get_object(), w, rows));
    out.Append(rows);
  }
  auto& r = out.For(kWebhookDeliveries);
  r.String(w.delivery_id())
      .String(w.event())
      .String(w.action())
      .String(RepoKey(w.repository()))
      .Int64(w.repository_id())
      .Int64(w.installation_id())
      .DateTime(w.received_at_unix_ms() / 1000)
      .Int64(w.received_at_unix_ms())
      .String(w.body_sha256())
      .String(w.content_type())
      .String(payload)
      .UInt64(static_cast<uint64_t>(w.received_at_unix_ms()));
  r.EndRow();
  return absl::OkStatus();
}

absl::Status ConvertDispatch(std::string_view value, Rows& out) {
  v1::DispatchRecord d;
  if (!d.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.DispatchRecord");
  if (d.request_id().empty() || d.downstream_repo().empty()) return Invalid("dispatch without request id or downstream repo");
  if (d.level() < 0 || d.level() > 255) return Invalid(absl::StrCat("level out of range: ", d.level()));
  RELAY_RETURN_IF_ERROR(CheckMs(d.dispatched_at_unix_ms(), "dispatched_at_unix_ms"));
  auto& r = out.For(kDispatches);
  r.String(d.request_id())
      .String(d.delivery_id())
      .String(RepoKey(d.upstream_repo()))
      .String(RepoKey(d.downstream_repo()))
      .UInt8(static_cast<uint8_t>(d.level()))
      .String(d.event())
      .String(d.action())
      .Int64(d.pr_number())
      .String(d.head_sha())
      .DateTime(d.dispatched_at_unix_ms() / 1000)
      .Int64(d.dispatched_at_unix_ms())
      .UInt8(d.slimmed())
      .UInt8(d.repeated())
      .UInt64(static_cast<uint64_t>(d.dispatched_at_unix_ms()));
  r.EndRow();
  // Test rollups join dispatches for the upstream sha: windows of the
  // downstream repo around the dispatch are recomputed once it is known.
  int64_t day = d.dispatched_at_unix_ms() / kMsPerDay;
  out.windows().insert({"tests", day, RepoKey(d.downstream_repo())});
  out.windows().insert({"tests", day + 1, RepoKey(d.downstream_repo())});
  return absl::OkStatus();
}

absl::Status ConvertOutcome(std::string_view value, Rows& out) {
  v1::GitHubOutcome o;
  if (!o.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.GitHubOutcome");
  if (o.request_id().empty()) return Invalid("outcome without request id");
  if (o.level() < 0 || o.level() > 255) return Invalid(absl::StrCat("level out of range: ", o.level()));
  RELAY_RETURN_IF_ERROR(CheckMs(o.finished_at_unix_ms(), "finished_at_unix_ms"));
  auto& r = out.For(kGitHubOutcomes);
  r.String(o.request_id())
      .String(o.kind())
      .String(RepoKey(o.repo()))
      .String(o.endpoint())
      .Int32(o.http_status())
      .Int32(o.attempts())
      .String(o.result())
      .String(o.error())
      .DateTime(o.finished_at_unix_ms() / 1000)
      .Int64(o.finished_at_unix_ms())
      .Int64(o.latency_ms())
      .UInt8(static_cast<uint8_t>(o.level()))
      .String(o.delivery_id())
      .Int64(o.installation_id())
      .UInt8(o.repeated())
      .UInt64(static_cast<uint64_t>(o.finished_at_unix_ms()));
  r.EndRow();
  // A dispatch never sent for its commit: the grid shows it as superseded.
  if (o.result() == "superseded" && !o.head_sha().empty()) {
    out.For(kSupersededDispatches)
        .String(o.request_id())
        .String(o.delivery_id())
        .String(RepoKey(o.upstream_repo()))
        .String(RepoKey(o.repo()))
        .UInt8(static_cast<uint8_t>(o.level()))
        .Int64(o.pr_number())
        .String(o.head_sha())
        .String(o.superseded_by())
        .DateTime(o.finished_at_unix_ms() / 1000)
        .Int64(o.finished_at_unix_ms())
        .UInt64(static_cast<uint64_t>(o.finished_at_unix_ms()))
        .EndRow();
  }
  return absl::OkStatus();
}

absl::Status ConvertJobResult(std::string_view value, Rows& out) {
  v1::JobResult j;
  if (!j.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.JobResult");
  const auto& t = j.trusted();
  const auto& rep = j.reported();
  if (j.job_id().empty() || t.verified_repo().empty()) return Invalid("job result without job id or verified repo");
  if (j.version() < 0) return Invalid("negative version");
  if (t.level() < 0 || t.level() > 255) return Invalid(absl::StrCat("level out of range: ", t.level()));
  for (auto [ms, name] : {std::pair{t.dispatched_at_unix_ms(), "dispatched_at_unix_ms"},
                          std::pair{t.started_at_unix_ms(), "started_at_unix_ms"},
                          std::pair{t.completed_at_unix_ms(), "completed_at_unix_ms"}}) {
    RELAY_RETURN_IF_ERROR(CheckMs(ms, name));
  }
  for (int64_t n : {rep.tests_total(), rep.tests_passed(), rep.tests_failed(), rep.tests_skipped()}) {
    if (n < 0 || n > std::numeric_limits<uint32_t>::max()) return Invalid(absl::StrCat("test count out of range: ", n));
  }
  // The trusted facts (the relay's own) win over what the job reported.
  auto or_reported = [](const std::string& trusted, const std::string& reported) -> const std::string& {
    return trusted.empty() ? reported : trusted;
  };
  auto& r = out.For(kJobResults);
  r.String(j.job_id())
      .String(t.status())
      .String(RepoKey(t.verified_repo()))
      .String(RepoKey(or_reported(t.upstream_repo(), rep.upstream_repo())))
      .Int64(t.pr_number() != 0 ? t.pr_number() : rep.pr_number())
      .String(or_reported(t.head_sha(), rep.head_sha()))
      .String(t.delivery_id())
      .String(rep.workflow_run_url())
      .String(rep.workflow_name())
      .String(rep.job_name())
      .String(rep.check_run_id())
      .String(rep.run_id())
      .String(rep.run_attempt())
      .String(rep.conclusion());
  for (int64_t ms : {t.queue_time_ms(), t.execution_time_ms()}) {
    if (ms < 0) r.Null();
    else r.NotNull().Float64(static_cast<double>(ms) / 1000.0);
  }
  r.DateTime(t.dispatched_at_unix_ms() / 1000)
      .DateTime(t.started_at_unix_ms() / 1000)
      .DateTime(t.completed_at_unix_ms() / 1000)
      .UInt32(static_cast<uint32_t>(rep.tests_total()))
      .UInt32(static_cast<uint32_t>(rep.tests_passed()))
      .UInt32(static_cast<uint32_t>(rep.tests_failed()))
      .UInt32(static_cast<uint32_t>(rep.tests_skipped()));
  r.ArrayHeader(static_cast<size_t>(rep.failed_tests_size()));
  for (const auto& f : rep.failed_tests()) r.String(f);
  r.UInt8(rep.has_test_results())
      .String(rep.artifact_url())
      .UInt8(static_cast<uint8_t>(t.level()))
      .String(or_reported(t.event(), rep.event_type()))
      .UInt8(t.timed_out_by_sweeper())
      .UInt64(static_cast<uint64_t>(j.version()));
  r.EndRow();
  return absl::OkStatus();
}

absl::Status ConvertTestReport(std::string_view value, Rows& out) {
  v1::TestReportBatch b;
  if (!b.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.TestReportBatch");
  if (b.upload_id().empty() || b.repo().empty()) return Invalid("test report without upload id or repo");
  if (b.seq() < 0) return Invalid("negative seq");
  RELAY_RETURN_IF_ERROR(CheckMs(b.uploaded_at_unix_ms(), "uploaded_at_unix_ms"));
  for (const auto& c : b.cases()) {
    if (!std::isfinite(c.duration_s()) || c.duration_s() < 0) {
      return Invalid(absl::StrCat("test ", c.name(), ": duration ", c.duration_s(), " is not a duration"));
    }
    if (c.outcome() != "passed" && c.outcome() != "failed" && c.outcome() != "error" && c.outcome() != "skipped") {
      return Invalid(absl::StrCat("test ", c.name(), ": unknown outcome \"", c.outcome(), "\""));
    }
    if (c.reruns() < 0) return Invalid(absl::StrCat("test ", c.name(), ": negative reruns"));
  }
  // The report's stable time places it (an upload repeated after midnight
  // is the same rows); records from before it existed carry none.
  int64_t placed_ms = b.report_time_unix_ms() > 0 ? b.report_time_unix_ms() : b.uploaded_at_unix_ms();
  RELAY_RETURN_IF_ERROR(CheckMs(placed_ms, "report_time_unix_ms"));
  int64_t day = placed_ms / kMsPerDay;
  std::string repo = RepoKey(b.repo());
  auto& r = out.For(kTestResults);
  uint32_t idx = 0;
  for (const auto& c : b.cases()) {
    r.Date(day)
        .DateTime(b.uploaded_at_unix_ms() / 1000)
        .String(repo)
        .String(b.job_id())
        .String(b.delivery_id())
        .String(b.run_id())
        .String(b.run_attempt())
        .String(b.job_name())
        .String(b.upload_id())
        .UInt32(static_cast<uint32_t>(b.seq()))
        .UInt32(idx++)
        .String(c.file())
        .String(c.classname())
        .String(c.name())
        .Float64(c.duration_s())
        .String(c.outcome())
        .UInt32(static_cast<uint32_t>(c.reruns()))
        .String(c.message())
        .UInt64(static_cast<uint64_t>(b.uploaded_at_unix_ms()));
    r.EndRow();
  }
  if (b.cases_size() > 0) out.windows().insert({"tests", day, repo});
  return absl::OkStatus();
}

absl::Status ConvertClusterEvent(std::string_view value, Rows& out) {
  v1::ClusterEvent e;
  if (!e.ParseFromArray(value.data(), static_cast<int>(value.size()))) return Invalid("not a relay.v1.ClusterEvent");
  if (e.event_id().empty() || e.cluster_id().empty()) return Invalid("cluster event without event id or cluster id");
  RELAY_RETURN_IF_ERROR(CheckMs(e.at_unix_ms(), "at_unix_ms"));
  if (e.nodes() < 0) return Invalid("negative node count");
  for (double v : {e.cluster_seconds(), e.node_seconds()}) {
    if (!std::isfinite(v) || v < 0) return Invalid(absl::StrCat("usage seconds ", v, " is not a duration"));
  }
  auto& r = out.For(kClusterEvents);
  r.String(e.event_id())
      .String(e.cluster_id())
      .String(e.team())
      .String(e.kind())
      .String(e.state())
      .String(e.previous_state())
      .String(e.reason())
      .DateTime(e.at_unix_ms() / 1000)
      .Int64(e.at_unix_ms())
      .String(e.node_group())
      .UInt32(static_cast<uint32_t>(e.nodes()))
      .Float64(e.cluster_seconds())
      .Float64(e.node_seconds())
      .String(e.provider())
      .UInt64(static_cast<uint64_t>(e.at_unix_ms()));
  r.EndRow();
  return absl::OkStatus();
}

absl::Status Convert(const Topics& topics, const kafka::ConsumedRecord& record, Rows& out) {
  const std::string& t = record.topic;
  std::string_view v = record.value;
  if (t == topics.test_reports) return ConvertTestReport(v, out);
  if (t == topics.webhooks) return ConvertWebhook(v, out);
  if (t == topics.results) return ConvertJobResult(v, out);
  if (t == topics.dispatches) return ConvertDispatch(v, out);
  if (t == topics.outcomes) return ConvertOutcome(v, out);
  if (t == topics.cluster_events) return ConvertClusterEvent(v, out);
  return Invalid("stats has no converter for topic " + t);
}

}  // namespace relay::stats
