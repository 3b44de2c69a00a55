#include "relay/dispatch/redeliveries.h"

#include <algorithm>
#include <vector>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/base/log.h"
#include "relay/dispatch/executor.h"
#include "relay/dispatch/ledger.h"

namespace relay::dispatch {
namespace {

namespace json = boost::json;
namespace bhttp = boost::beast::http;
using namespace std::chrono_literals;

// The rel="next" target of a Link header, as a path (scheme, host and the
// API's path prefix taken off); empty when there is none.
std::string NextPage(const std::string& link, const std::string& prefix) {
  for (absl::string_view part : absl::StrSplit(link, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.find("rel=\"next\"") == absl::string_view::npos) continue;
    auto lt = part.find('<'), gt = part.find('>');
    if (lt == absl::string_view::npos || gt == absl::string_view::npos || gt < lt) return "";
    std::string url(part.substr(lt + 1, gt - lt - 1));
    auto scheme = url.find("://");
    std::string path = scheme == std::string::npos ? url : url.substr(std::min(url.size(), url.find('/', scheme + 3)));
    if (!prefix.empty() && absl::StartsWith(path, prefix)) path = path.substr(prefix.size());
    return path;
  }
  return "";
}

}  // namespace

Reconciler::Reconciler(RedeliveryOptions options, Parts parts, prometheus::Registry& metrics)
    : options_(std::move(options)),
      parts_(std::move(parts)),
      scans_(prometheus::BuildCounter()
                 .Name("relay_redelivery_scans_total")
                 .Help("Listings of the App's webhook deliveries by the redelivery reconciler, by result")
                 .Register(metrics)),
      listed_(prometheus::BuildCounter()
                  .Name("relay_redelivery_attempts_listed_total")
                  .Help("Delivery attempts read from GET /app/hook/deliveries")
                  .Register(metrics)
                  .Add({})),
      requests_(prometheus::BuildCounter()
                    .Name("relay_redelivery_requests_total")
                    .Help("Redeliveries asked of GitHub, by reason: failed (no successful attempt), not_recorded "
                          "(GitHub delivered it, github.webhooks never got it)")
                    .Register(metrics)),
      results_(prometheus::BuildCounter()
                   .Name("relay_redelivery_results_total")
                   .Help("Answers to redelivery requests, by result (accepted: 202; failed)")
                   .Register(metrics)),
      requested_before_(prometheus::BuildCounter()
                            .Name("relay_redelivery_requested_before_total")
                            .Help("Guids still undelivered that were left alone: requested once within the window")
                            .Register(metrics)
                            .Add({})),
      owner_gauge_(prometheus::BuildGauge()
                       .Name("relay_redelivery_owner")
                       .Help("1 on the dispatch instance that runs the redelivery reconciler")
                       .Register(metrics)
                       .Add({})),
      last_scan_(prometheus::BuildGauge()
                     .Name("relay_redelivery_last_scan_timestamp_seconds")
                     .Help("When the last listing of deliveries ended well")
                     .Register(metrics)
                     .Add({})),
      checkpoint_(prometheus::BuildGauge()
                      .Name("relay_redelivery_checkpoint_timestamp_seconds")
                      .Help("Where the next listing stops: the oldest attempt not yet decided")
                      .Register(metrics)
                      .Add({})) {
  for (const char* r : {"ok", "error"}) scans_.Add({{"result", r}});
  for (const char* r : {"failed", "not_recorded"}) requests_.Add({{"reason", r}});
  for (const char* r : {"accepted", "failed"}) results_.Add({{"result", r}});
}

Reconciler::~Reconciler() { Stop(); }

absl::Status Reconciler::Start() {
  // What intake recorded: every delivery id in github.webhooks within the window.
  kafka::FollowerOptions fo;
  fo.bootstrap = options_.bootstrap;
  fo.client_id = options_.client_id + "-redeliveries";
  fo.topic = options_.webhooks_topic;
  fo.from_beginning = true;
  fo.max_fetch_wait = 100ms;
  auto follower = parts_.follower(fo, [this](const kafka::ConsumedRecord& r) {
    const std::string* id = r.FindHeader(kafka::kDeliveryHeader);
    int64_t oldest = parts_.clock->UnixMillis() - options_.window.count() - 24 * 3'600'000LL;
    if (!id || r.timestamp_ms < oldest) return;
    std::lock_guard lock(mu_);
    recorded_[*id] = r.timestamp_ms;
    // Bounded by the window: forget what GitHub can no longer redeliver.
    if (recorded_.size() % 4096 == 0) {
      std::erase_if(recorded_, [oldest](const auto& kv) { return kv.second < oldest; });
    }
  });
  if (!follower.ok()) return follower.status();
  follower_ = std::move(*follower);

  kafka::ConsumerOptions co;
  co.bootstrap = options_.bootstrap;
  co.group_id = options_.group_id;
  co.client_id = options_.client_id;
  co.topics = {options_.topic};
  co.on_assign = [this](const std::vector<kafka::TopicPartition>&) {
    if (auto s = Load(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    owner_ = true;
    owner_gauge_.Set(1);
    cv_.notify_all();
    log::Info("redelivery reconciler: this instance scans", {{"requested", static_cast<int64_t>(requested_.size())}});
    return absl::OkStatus();
  };
  co.on_revoke = [this](const std::vector<kafka::TopicPartition>&) {
    std::lock_guard lock(mu_);
    owner_ = false;
    owner_gauge_.Set(0);
  };
  auto consumer = parts_.consumer(co);
  if (!consumer.ok()) return consumer.status();
  consumer_ = std::move(*consumer);
  consumer_thread_ = std::thread([this] {
    absl::Status ended = consumer_->Run([this](const kafka::ConsumedRecord& r) {
      v1::RedeliveryRecord rec;
      if (!rec.ParseFromString(r.value)) return kafka::PoisonError("not a relay.v1.RedeliveryRecord");
      Apply(rec, r.timestamp_ms);
      return absl::OkStatus();
    });
    if (!ended.ok()) log::Error("redelivery reconciler: consumer ended", {{"error", ended.ToString()}});
  });
  scan_thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Reconciler::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (consumer_) consumer_->Stop();
  if (consumer_thread_.joinable()) consumer_thread_.join();
  if (scan_thread_.joinable()) scan_thread_.join();
  follower_.reset();
}

void Reconciler::Apply(const v1::RedeliveryRecord& r, int64_t log_ms) {
  std::lock_guard lock(mu_);
  switch (r.kind_case()) {
    case v1::RedeliveryRecord::kRequested:
      requested_[r.requested().guid()] = r.requested().at_unix_ms();
      break;
    case v1::RedeliveryRecord::kResult:
      answered_.insert(r.result().guid());
      break;
    case v1::RedeliveryRecord::kCheckpoint:
      resume_from_ms_ = std::max(resume_from_ms_, r.checkpoint().resume_from_unix_ms());
      last_scanned_ms_ = std::max(last_scanned_ms_, r.checkpoint().scanned_at_unix_ms());
      break;
    case v1::RedeliveryRecord::kScan:
      // A request older than the last scan was served by it.
      if (r.scan().at_unix_ms() > last_scanned_ms_ || log_ms > last_scanned_ms_) {
        scan_asked_since_ = std::min(scan_asked_since_.value_or(INT64_MAX), r.scan().since_unix_ms());
        cv_.notify_all();
      }
      break;
    default:
      break;
  }
}

absl::Status Reconciler::Load() {
  auto reader = parts_.reader();
  if (!reader.ok()) return reader.status();
  auto read = (*reader)->ReadToEnd(options_.topic, {}, [this](const kafka::ConsumedRecord& r) {
    v1::RedeliveryRecord rec;
    if (rec.ParseFromString(r.value) && rec.kind_case() != v1::RedeliveryRecord::kScan) Apply(rec, r.timestamp_ms);
    return absl::OkStatus();
  });
  return read.status();
}

void Reconciler::Loop() {
  int64_t next_ms = 0;
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, 1s);
    if (stop_) break;
    int64_t now = parts_.clock->UnixMillis();
    bool periodic = options_.interval.count() > 0 && now >= next_ms;
    if (!owner_ || (!scan_asked_since_ && !periodic)) continue;
    int64_t window_start = now - options_.window.count();
    int64_t since = scan_asked_since_ ? std::max(*scan_asked_since_, window_start)
                                      : std::max(window_start, resume_from_ms_ - 300'000);
    scan_asked_since_.reset();
    lock.unlock();
    absl::Status st = Scan(since);
    lock.lock();
    scans_.Add({{"result", st.ok() ? "ok" : "error"}}).Increment();
    if (!st.ok()) log::Warn("redelivery scan failed", {{"error", st.ToString()}});
    now = parts_.clock->UnixMillis();
    next_ms = now + (st.ok() ? options_.interval.count() : std::min<int64_t>(options_.interval.count(), 30'000));
  }
}

absl::StatusOr<github::ApiResult> Reconciler::Get(github::Api& api, const std::string& path) {
  // A read under the one budget, as the App's own (installation 0).
  bool granted = AwaitGrant(*parts_.budget, *parts_.clock, 0, false, [this] {
    std::lock_guard lock(mu_);
    return stop_;
  });
  if (!granted) return absl::CancelledError("stopping");
  auto r = api.Call(github::ApiCall{bhttp::verb::get, path, "", "", {}});
  ObserveAnswer(*parts_.budget, 0, false, r);
  return r;
}

absl::Status Reconciler::Append(const std::string& key, const v1::RedeliveryRecord& r) {
  return SendAndWait(parts_.producer, kafka::MessageRecord(options_.topic, key, r));
}

absl::Status Reconciler::Scan(int64_t since_ms) {
  // Intake's record must be complete up to now, or a delivery it holds
  // would look lost.
  for (int i = 0; !follower_->CaughtUp(); ++i) {
    if (i >= 600) return absl::UnavailableError("still reading " + options_.webhooks_topic);
    std::this_thread::sleep_for(100ms);
  }
  github::Api api(parts_.client(), parts_.credentials);
  std::map<std::string, Guid> guids;
  int64_t attempts = 0, pages = 0, newest_ms = 0;
  for (std::string path = "/app/hook/deliveries?per_page=100"; !path.empty();) {
    auto r = Get(api, path);
    if (!r.ok()) return r.status();
    if (r->status != 200) return absl::UnavailableError(absl::StrCat("GET ", path, ": HTTP ", r->status));
    ++pages;
    boost::system::error_code ec;
    json::value page = json::parse(r->body, ec);
    if (ec || !page.is_array()) return absl::UnavailableError("GET " + path + ": not a JSON array");
    int64_t oldest_on_page = INT64_MAX;
    for (const auto& d : page.as_array()) {
      if (!d.is_object()) continue;
      const auto& o = d.as_object();
      auto str = [&](const char* k) {
        const json::value* v = o.if_contains(k);
        return v && v->is_string() ? std::string(v->as_string()) : std::string();
      };
      const json::value* id = o.if_contains("id");
      const json::value* code = o.if_contains("status_code");
      auto at = github::ParseIsoTime(str("delivered_at"));
      if (!id || !id->is_int64() || str("guid").empty() || !at) continue;
      ++attempts;
      int64_t ms = *at * 1000;
      oldest_on_page = std::min(oldest_on_page, ms);
      newest_ms = std::max(newest_ms, ms);
      Guid& g = guids[str("guid")];
      g.latest_id = std::max(g.latest_id, id->as_int64());
      g.first_ms = std::min(g.first_ms, ms);
      g.event = str("event");
      g.action = str("action");
      int64_t status = code && code->is_int64() ? code->as_int64() : 0;
      if (status >= 200 && status < 300) {
        g.ok = true;
        g.first_ok_ms = std::min(g.first_ok_ms, ms);
      }
    }
    listed_.Increment(static_cast<double>(page.as_array().size()));
    if (oldest_on_page < since_ms) break;  // older pages were decided by earlier scans
    path = NextPage(r->headers.count("link") ? r->headers.at("link") : "", options_.api_path_prefix);
  }

  int64_t now = parts_.clock->UnixMillis();
  int64_t window_start = now - options_.window.count();
  int64_t resume_from = newest_ms > 0 ? newest_ms : now - options_.grace.count();
  struct Candidate {
    std::string guid, reason;
    const Guid* g;
  };
  std::vector<Candidate> candidates;
  v1::RedeliveryCheckpoint cp;
  {
    std::lock_guard lock(mu_);
    for (const auto& [guid, g] : guids) {
      if (g.first_ms < since_ms || g.first_ms < window_start) continue;  // decided before, or past redelivery
      std::string reason;
      if (!g.ok) {
        reason = "failed";
        cp.set_failed(cp.failed() + 1);
      } else if (!recorded_.count(guid)) {
        if (g.first_ok_ms > now - options_.grace.count()) {
          resume_from = std::min(resume_from, g.first_ms);  // intake may not have recorded it yet
          continue;
        }
        reason = "not_recorded";
        cp.set_not_recorded(cp.not_recorded() + 1);
      } else {
        continue;
      }
      // Requested within the window: never again, unless the request was
      // dropped unsent (queued when its instance stopped: no answer long
      // after the scheduler's retry deadline).
      auto it = requested_.find(guid);
      bool dropped = it != requested_.end() && !answered_.count(guid) &&
                     it->second < now - options_.unanswered_after.count();
      if (it != requested_.end() && it->second >= window_start && !dropped) {
        cp.set_requested_before(cp.requested_before() + 1);
        requested_before_.Increment();
        continue;
      }
      candidates.push_back({guid, reason, &g});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.g->first_ms < b.g->first_ms; });
  if (static_cast<int>(candidates.size()) > options_.max_per_scan) {
    resume_from = std::min(resume_from, candidates[options_.max_per_scan].g->first_ms);
    candidates.resize(options_.max_per_scan);
  }
  for (const Candidate& c : candidates) {
    {
      // Another instance takes over, or this one stops: it asks the rest.
      std::lock_guard lock(mu_);
      if (stop_ || !owner_) return absl::AbortedError("no longer the reconciler");
    }
    // Recorded (acknowledged) first: whatever happens next, this guid is
    // not requested again within the window.
    v1::RedeliveryRecord rec;
    auto* req = rec.mutable_requested();
    req->set_guid(c.guid);
    req->set_delivery_id(c.g->latest_id);
    req->set_event(c.g->event);
    req->set_action(c.g->action);
    req->set_reason(c.reason);
    req->set_delivered_at_unix_ms(c.g->first_ms);
    req->set_at_unix_ms(now);
    if (auto s = Append(c.guid, rec); !s.ok()) return s;
    {
      std::lock_guard lock(mu_);
      requested_[c.guid] = now;
    }
    requests_.Add({{"reason", c.reason}}).Increment();
    v1::GitHubRequest call;
    call.set_id(absl::StrCat("redelivery/", c.guid, "/", now));
    call.set_level(0);  // below every other write
    call.set_delivery_id(c.guid);
    call.set_requested_at_unix_ms(now);
    auto* rd = call.mutable_redelivery();
    rd->set_delivery_id(c.g->latest_id);
    rd->set_guid(c.guid);
    rd->set_reason(c.reason);
    parts_.scheduler->Submit(std::move(call), [this, guid = c.guid](JobResult result) {
      bool ok = result.kind == JobResult::Kind::kDone;
      results_.Add({{"result", ok ? "accepted" : "failed"}}).Increment();
      v1::RedeliveryRecord done;
      auto* res = done.mutable_result();
      res->set_guid(guid);
      res->set_http_status(static_cast<int>(result.http_status));
      res->set_result(ok ? "accepted" : "failed");
      res->set_error(result.error);
      res->set_at_unix_ms(parts_.clock->UnixMillis());
      {
        std::lock_guard lock(mu_);
        answered_.insert(guid);
      }
      // The answer, for operators; the `requested` record is what counts.
      parts_.producer->Send(kafka::MessageRecord(options_.topic, guid, done), [guid](absl::Status s) {
        if (!s.ok()) log::Warn("redelivery result not recorded", {{"guid", guid}, {"error", s.ToString()}});
      });
      if (!ok) log::Warn("redelivery refused", {{"guid", guid}, {"error", result.error}});
    });
  }
  cp.set_scanned_at_unix_ms(now);
  cp.set_listed_since_unix_ms(since_ms);
  cp.set_resume_from_unix_ms(resume_from);
  cp.set_attempts(attempts);
  cp.set_guids(static_cast<int64_t>(guids.size()));
  cp.set_requested(static_cast<int64_t>(candidates.size()));
  cp.set_pages(pages);
  v1::RedeliveryRecord checkpoint;
  *checkpoint.mutable_checkpoint() = cp;
  if (auto s = Append("checkpoint", checkpoint); !s.ok()) return s;
  {
    std::lock_guard lock(mu_);
    resume_from_ms_ = std::max(resume_from_ms_, resume_from);
    last_scanned_ms_ = std::max(last_scanned_ms_, now);
  }
  last_scan_.Set(static_cast<double>(now) / 1000);
  checkpoint_.Set(static_cast<double>(resume_from) / 1000);
  log::Info("redelivery scan", {{"since_ms", since_ms},
                                {"attempts", attempts},
                                {"guids", static_cast<int64_t>(guids.size())},
                                {"requested", static_cast<int64_t>(candidates.size())},
                                {"requested_before", cp.requested_before()}});
  return absl::OkStatus();
}

}  // namespace relay::dispatch
