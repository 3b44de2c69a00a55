#include "relay/dispatch/executor.h"

#include <thread>

#include <boost/json.hpp>

#include "absl/strings/match.h"
#include "relay/dispatch/planner.h"
#include "relay/kafka/producer.h"

namespace relay::dispatch {
namespace {

namespace bhttp = boost::beast::http;
namespace json = boost::json;
using Kind = Verdict::Kind;

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string GitHubMessage(const std::string& body) {
  boost::system::error_code ec;
  auto v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (auto* m = v.as_object().if_contains("message"); m && m->is_string()) return std::string(m->as_string());
  }
  return body.substr(0, 200);
}

}  // namespace

// GitHub's secondary limits: 429, or 403 with Retry-After or saying so in
// its message (it often sends neither header).
bool IsSecondaryLimit(const github::ApiResult& r) {
  if (r.status == 429) return true;
  if (r.status != 403) return false;
  if (r.headers.count("retry-after")) return true;
  std::string message = GitHubMessage(r.body);
  for (auto& c : message) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return message.find("secondary rate limit") != std::string::npos || message.find("abuse") != std::string::npos;
}

namespace {

// The verdict of one answer (classified once, here).
Verdict Classify(const absl::StatusOr<github::ApiResult>& r, const std::string& endpoint) {
  Verdict v;
  v.endpoint = endpoint;
  if (!r.ok()) {
    v.error = std::string(r.status().message());
    // The App not installed on the repository (the lookup said 404), or
    // the App's own JWT refused: no retry will help.
    v.not_installed = github::IsNotInstalled(r.status());
    v.kind = absl::IsUnavailable(r.status()) ? Kind::kTransient : Kind::kPermanent;
    return v;
  }
  v.http_status = r->status;
  v.installation_id = r->installation_id;
  if (r->status >= 200 && r->status < 300) {
    v.kind = Kind::kDone;
    return v;
  }
  v.error = "HTTP " + std::to_string(r->status) + ": " + GitHubMessage(r->body);
  if (r->retry) {
    // Credentials renewed (a new token, or the installation looked up
    // again after a reinstall): the next attempt, under the budget.
    v.kind = Kind::kRetry;
    return v;
  }
  if (r->status == 401) {
    // Fresh credentials refused: the installation is backed off (Api); not
    // the write's fault, so not permanent.
    v.kind = Kind::kTransient;
    return v;
  }
  auto header = [&](const char* name) {
    auto it = r->headers.find(name);
    return it == r->headers.end() ? std::string() : it->second;
  };
  if (IsSecondaryLimit(*r) || (r->status == 403 && header("x-ratelimit-remaining") == "0")) {
    v.kind = Kind::kRateLimited;
  } else if (r->status >= 500) {
    v.kind = Kind::kTransient;
  } else {
    v.kind = Kind::kPermanent;  // 401 (after a refresh), 403, 404, 422, ...
  }
  return v;
}

}  // namespace

std::string_view KindName(const v1::GitHubRequest& request) {
  switch (request.call_case()) {
    case v1::GitHubRequest::kDispatch: return "dispatch";
    case v1::GitHubRequest::kRerun: return "rerun";
    case v1::GitHubRequest::kSuiteRerun: return "suite_rerun";
    case v1::GitHubRequest::kCheckRun: return "check_run";
    case v1::GitHubRequest::kComment: return "comment";
    case v1::GitHubRequest::kRedelivery: return "redelivery";
    case v1::GitHubRequest::CALL_NOT_SET: break;
  }
  return "unknown";
}

ApiPool::ApiPool(std::function<std::unique_ptr<http::Client>()> connect, github::AppCredentials* credentials,
                 int size, std::chrono::milliseconds grant_wait)
    : grant_wait_(grant_wait) {
  for (int i = 0; i < std::max(1, size); ++i) {
    apis_.push_back(std::make_unique<github::Api>(connect(), credentials));
    free_.push_back(apis_.back().get());
  }
}

std::optional<ApiPool::Lease> ApiPool::Take(const std::atomic<bool>& stop, std::chrono::milliseconds wait) {
  auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(mu_);
  // In short steps, so a stop is not held up by calls in progress.
  while (free_.empty()) {
    auto now = std::chrono::steady_clock::now();
    if (stop.load() || now >= deadline) return std::nullopt;
    cv_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(50)));
  }
  github::Api* api = free_.back();
  free_.pop_back();
  return Lease(this, api);
}

void ApiPool::Give(github::Api* api) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(api);
  }
  cv_.notify_one();
}

Executor::Executor(std::shared_ptr<ApiPool> pool, CallBudget* budget, const Clock* clock, IsListed listed)
    : pool_(std::move(pool)), budget_(budget), clock_(clock), listed_(std::move(listed)) {}

Executor::Executor(std::unique_ptr<http::Client> client, github::AppCredentials* credentials, CallBudget* budget,
                   const Clock* clock, IsListed listed)
    : Executor(std::make_shared<ApiPool>([&client] { return std::move(client); }, credentials, 1), budget, clock,
               std::move(listed)) {}

bool Executor::Started(Verdict* verdict) {
  if (started_ || !before_write_ || !*before_write_) return true;
  absl::Status s = (*before_write_)();
  if (!s.ok()) {
    verdict->kind = Kind::kTransient;
    verdict->error = "ledger: " + std::string(s.message());
    mark_failed_ = true;
    mark_fenced_ = kafka::IsFenced(s);
    return false;
  }
  started_ = true;
  return true;
}

std::optional<absl::StatusOr<github::ApiResult>> Executor::Call(const github::ApiCall& call, bool write,
                                                                const std::atomic<bool>& stop, Verdict* verdict) {
  // The App's own endpoints (no repository) are authenticated by its JWT:
  // installation 0 in the budget.
  absl::StatusOr<int64_t> installation = 0;
  if (!call.repo.empty()) {
    // No grant is held yet: wait as long as it takes (or until stopped).
    auto lease = pool_->Take(stop, std::chrono::hours(24 * 365));
    if (!lease) return std::nullopt;
    installation = (*lease)->Installation(call.repo);
  }
  if (!installation.ok()) return absl::StatusOr<github::ApiResult>(installation.status());
  verdict->installation_id = *installation;
  auto unwanted = [this] { return wanted_ && *wanted_ && !(*wanted_)(); };
  for (;;) {
    if (!AwaitGrant(*budget_, *clock_, *installation, write, [&stop] { return stop.load(); })) return std::nullopt;
    if (granted_ && *granted_) (*granted_)();  // the scheduler's admission ends at the first (it runs once)
    if (write && !Started(verdict)) {
      budget_->Observe(*installation, write, 0, {}, false);
      return absl::StatusOr<github::ApiResult>(absl::UnavailableError(verdict->error));
    }
    // Marked, then a wait for a connection: the partition may have gone to
    // another member meanwhile (its revoke cancels the job), and then the
    // write is its next owner's to make, not this one's.
    auto lease = pool_->Take(stop, pool_->grant_wait());
    if (lease && !(write && unwanted())) {
      auto result = (*lease)->Call(call);
      ObserveAnswer(*budget_, *installation, write, result);
      return result;
    }
    // Not made: the grant counts as spent, unused (the budget's books expect
    // a granted call within its lease). Without a connection in that time
    // (every one busy: GitHub slow) a new grant is asked for; a write stays
    // marked meanwhile.
    budget_->Observe(*installation, write, 0, {}, false);
    if (write && unwanted()) {
      return absl::StatusOr<github::ApiResult>(absl::UnavailableError("no longer wanted before its call"));
    }
    if (stop.load()) return std::nullopt;
  }
}

bool AwaitGrant(CallBudget& budget, const Clock& clock, int64_t installation, bool write,
                const std::function<bool()>& stopped) {
  while (auto wait = budget.Acquire(installation, write)) {
    // Sleep in short steps, so a stop is not held up by a long reset.
    while (!stopped() && clock.Now() < *wait) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stopped()) return false;
  }
  return true;
}

void ObserveAnswer(CallBudget& budget, int64_t installation, bool write,
                   const absl::StatusOr<github::ApiResult>& result) {
  budget.Observe(installation, write, result.ok() ? result->status : 0,
                 result.ok() ? result->headers : std::map<std::string, std::string>{},
                 result.ok() && IsSecondaryLimit(*result));
}

Verdict Executor::Execute(const v1::GitHubRequest& request, const std::atomic<bool>& stop,
                          const BeforeWrite& before_write, const std::function<bool()>& wanted,
                          const std::function<void()>& granted) {
  started_ = false;
  mark_failed_ = mark_fenced_ = false;
  before_write_ = &before_write;
  wanted_ = &wanted;
  granted_ = &granted;
  Verdict v;
  switch (request.call_case()) {
    case v1::GitHubRequest::kDispatch: v = Dispatch(request, stop); break;
    case v1::GitHubRequest::kRerun: v = Rerun(request.repo(), request.rerun().run_id(), stop); break;
    case v1::GitHubRequest::kSuiteRerun: v = SuiteRerun(request, stop); break;
    case v1::GitHubRequest::kCheckRun: v = CheckRun(request, stop); break;
    case v1::GitHubRequest::kComment: v = Comment(request, stop); break;
    case v1::GitHubRequest::kRedelivery: v = Redeliver(request, stop); break;
    case v1::GitHubRequest::CALL_NOT_SET:
      v.kind = Kind::kPermanent;
      v.error = "request names no GitHub call";
  }
  // The call methods classify the answer anew; the mark's failure is
  // this attempt's, whatever the verdict says.
  v.before_write = mark_failed_;
  v.fenced = mark_fenced_;
  before_write_ = nullptr;
  wanted_ = nullptr;
  granted_ = nullptr;
  return v;
}

#define RELAY_CALL_OR_STOP(result, call, write)                        \
  auto result##_opt = Call(call, write, stop, &stopped);               \
  if (!result##_opt) {                                                 \
    stopped.kind = Kind::kTransient;                                   \
    stopped.error = "stopping";                                        \
    return stopped;                                                    \
  }                                                                    \
  auto& result = *result##_opt

Verdict Executor::Dispatch(const v1::GitHubRequest& r, const std::atomic<bool>& stop) {
  Verdict stopped;
  github::ApiCall call{bhttp::verb::post, "/repos/" + r.repo() + "/dispatches", r.dispatch().client_payload_json(),
                       r.repo(), {{"X-Relay-Idempotency-Key", r.id()}}};
  RELAY_CALL_OR_STOP(result, call, true);
  return Classify(result, "POST /repos/{owner}/{repo}/dispatches");
}

Verdict Executor::Redeliver(const v1::GitHubRequest& r, const std::atomic<bool>& stop) {
  Verdict stopped;
  github::ApiCall call{bhttp::verb::post,
                       "/app/hook/deliveries/" + std::to_string(r.redelivery().delivery_id()) + "/attempts", "", "",
                       {{"X-Relay-Idempotency-Key", r.id()}}};
  RELAY_CALL_OR_STOP(result, call, true);
  return Classify(result, "POST /app/hook/deliveries/{delivery_id}/attempts");
}

Verdict Executor::Rerun(const std::string& repo, int64_t run_id, const std::atomic<bool>& stop) {
  Verdict stopped;
  github::ApiCall call{bhttp::verb::post, "/repos/" + repo + "/actions/runs/" + std::to_string(run_id) +
                                              "/rerun-failed-jobs",
                       "", repo, {}};
  RELAY_CALL_OR_STOP(result, call, true);
  Verdict v = Classify(result, "POST /repos/{owner}/{repo}/actions/runs/{id}/rerun-failed-jobs");
  // "This workflow is already running": what was asked is happening.
  if (v.kind == Kind::kPermanent && v.http_status == 403 && absl::StrContains(v.error, "already running")) {
    v.kind = Kind::kNoOp;
  }
  return v;
}

Verdict Executor::SuiteRerun(const v1::GitHubRequest& r, const std::atomic<bool>& stop) {
  Verdict stopped;
  Verdict last{Kind::kNoOp, 0, "", "GET /repos/{owner}/{repo}/check-suites/{id}/check-runs", 0};
  for (int page = 1;; ++page) {
    github::ApiCall list{bhttp::verb::get,
                         "/repos/" + r.repo() + "/check-suites/" + std::to_string(r.suite_rerun().check_suite_id()) +
                             "/check-runs?per_page=100&page=" + std::to_string(page),
                         "", r.repo(), {}};
    RELAY_CALL_OR_STOP(result, list, false);
    Verdict listed = Classify(result, "GET /repos/{owner}/{repo}/check-suites/{id}/check-runs");
    if (listed.kind != Kind::kDone) return listed;
    boost::system::error_code ec;
    json::value doc = json::parse(result->body, ec);
    const json::object* o = ec ? nullptr : doc.if_object();
    const json::value* runs = o ? o->if_contains("check_runs") : nullptr;
    if (!runs || !runs->is_array()) {
      listed.kind = Kind::kTransient;
      listed.error = "check-suite listing without check_runs";
      return listed;
    }
    for (const auto& run : runs->as_array()) {
      if (!run.is_object()) continue;
      const auto& cr = run.as_object();
      auto str = [&](const char* k) {
        auto* v = cr.if_contains(k);
        return v && v->is_string() ? std::string(v->as_string()) : std::string();
      };
      // Only this app's check runs: one without an app is not ours.
      const json::value* app = cr.if_contains("app");
      const json::value* id = app && app->is_object() ? app->as_object().if_contains("id") : nullptr;
      if (!r.suite_rerun().app_id().empty() && (!id || json::serialize(*id) != r.suite_rerun().app_id())) continue;
      std::string conclusion = str("conclusion");
      if (conclusion != "failure" && conclusion != "timed_out" && conclusion != "cancelled") continue;
      auto ref = ParseCheckRun(str("name"), str("external_id"));
      if (!ref || (listed_ && !listed_(ref->downstream_repo))) continue;
      Verdict v = Rerun(ref->downstream_repo, ref->run_id, stop);
      if (v.kind != Kind::kDone && v.kind != Kind::kNoOp) return v;  // retried whole; a re-run is idempotent enough
      last = v;
    }
    if (runs->as_array().size() < 100) break;
  }
  return last;
}

Verdict Executor::CheckRun(const v1::GitHubRequest& r, const std::atomic<bool>& stop) {
  Verdict stopped;
  const auto& c = r.check_run();
  // Found again by external_id: a retry or a replay updates the one there is.
  // filter=all: GitHub's default (latest) lists only the newest run of a
  // name, and a job's re-run attempts share its name.
  github::ApiCall find{bhttp::verb::get,
                       "/repos/" + r.repo() + "/commits/" + c.head_sha() + "/check-runs?check_name=" +
                           UrlEncode(c.name()) + "&filter=all&per_page=100",
                       "", r.repo(), {}};
  RELAY_CALL_OR_STOP(found, find, false);
  Verdict looked = Classify(found, "GET /repos/{owner}/{repo}/commits/{ref}/check-runs");
  if (looked.kind != Kind::kDone) return looked;
  int64_t existing = 0;
  boost::system::error_code ec;
  json::value doc = json::parse(found->body, ec);
  if (const json::object* o = ec ? nullptr : doc.if_object()) {
    if (const json::value* runs = o->if_contains("check_runs"); runs && runs->is_array()) {
      for (const auto& run : runs->as_array()) {
        const json::object* cr = run.if_object();
        const json::value* ext = cr ? cr->if_contains("external_id") : nullptr;
        if (ext && ext->is_string() && ext->as_string() == c.external_id()) existing = cr->at("id").to_number<int64_t>();
      }
    }
  }
  json::object body{{"name", c.name()}, {"external_id", c.external_id()}, {"status", c.status()}};
  if (!c.details_url().empty()) body["details_url"] = c.details_url();
  if (!c.conclusion().empty()) body["conclusion"] = c.conclusion();
  if (!c.title().empty() || !c.summary().empty()) body["output"] = json::object{{"title", c.title()}, {"summary", c.summary()}};
  if (existing == 0) {
    body["head_sha"] = c.head_sha();
    github::ApiCall create{bhttp::verb::post, "/repos/" + r.repo() + "/check-runs", json::serialize(body), r.repo(), {}};
    RELAY_CALL_OR_STOP(created, create, true);
    return Classify(created, "POST /repos/{owner}/{repo}/check-runs");
  }
  github::ApiCall update{bhttp::verb::patch, "/repos/" + r.repo() + "/check-runs/" + std::to_string(existing),
                         json::serialize(body), r.repo(), {}};
  RELAY_CALL_OR_STOP(updated, update, true);
  return Classify(updated, "PATCH /repos/{owner}/{repo}/check-runs/{id}");
}

Verdict Executor::Comment(const v1::GitHubRequest& r, const std::atomic<bool>& stop) {
  Verdict stopped;
  const auto& c = r.comment();
  if (c.marker().empty() || c.body().find(c.marker()) == std::string::npos) {
    return Verdict{Kind::kPermanent, 0, "comment body must contain its marker", "", 0};
  }
  // Find-and-update by marker, every page: never a second comment.
  int64_t existing = 0;
  for (int page = 1; existing == 0; ++page) {
    github::ApiCall list{bhttp::verb::get,
                         "/repos/" + r.repo() + "/issues/" + std::to_string(c.issue_number()) +
                             "/comments?per_page=100&page=" + std::to_string(page),
                         "", r.repo(), {}};
    RELAY_CALL_OR_STOP(listed, list, false);
    Verdict v = Classify(listed, "GET /repos/{owner}/{repo}/issues/{id}/comments");
    if (v.kind != Kind::kDone) return v;
    boost::system::error_code ec;
    json::value doc = json::parse(listed->body, ec);
    if (ec || !doc.is_array()) break;
    for (const auto& comment : doc.as_array()) {
      const json::object* co = comment.if_object();
      const json::value* body = co ? co->if_contains("body") : nullptr;
      if (body && body->is_string() && std::string_view(body->as_string()).find(c.marker()) != std::string_view::npos) {
        existing = co->at("id").to_number<int64_t>();
      }
    }
    if (doc.as_array().size() < 100) break;
  }
  std::string body = json::serialize(json::object{{"body", c.body()}});
  if (existing == 0) {
    github::ApiCall create{bhttp::verb::post, "/repos/" + r.repo() + "/issues/" + std::to_string(c.issue_number()) + "/comments",
                           body, r.repo(), {}};
    RELAY_CALL_OR_STOP(created, create, true);
    return Classify(created, "POST /repos/{owner}/{repo}/issues/{id}/comments");
  }
  github::ApiCall update{bhttp::verb::patch, "/repos/" + r.repo() + "/issues/comments/" + std::to_string(existing), body,
                         r.repo(), {}};
  RELAY_CALL_OR_STOP(updated, update, true);
  return Classify(updated, "PATCH /repos/{owner}/{repo}/issues/comments/{id}");
}

#undef RELAY_CALL_OR_STOP

}  // namespace relay::dispatch
