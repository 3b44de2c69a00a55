#include "relay/dispatch/redeliveries.h"

#include <algorithm>
#include <set>
#include <vector>

#include <boost/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
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
                   .Help("Answers to redelivery requests, by result (accepted: 202; failed; unsent: the copy "
                         "ended before its POST, asked for again)")
                   .Register(metrics)),
      requested_before_(prometheus::BuildCounter()
                            .Name("relay_redelivery_requested_before_total")
                            .Help("Guids still undelivered that were left alone: requested once within the window "
                                  "(its POST went out, or may have, or its copy may still go out)")
                            .Register(metrics)
                            .Add({})),
      asked_again_(prometheus::BuildCounter()
                       .Name("relay_redelivery_asked_again_total")
                       .Help("Guids asked for again: recorded as requested before, never sent (the copy ended "
                             "unsent, or its instance stopped with it queued)")
                       .Register(metrics)
                       .Add({})),
      remembered_(prometheus::BuildGauge()
                      .Name("relay_redelivery_guids_remembered")
                      .Help("Guids the reconciler remembers as asked for (those within the window)")
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
  for (const char* r : {"accepted", "failed", "unsent"}) results_.Add({{"result", r}});
}

Reconciler::~Reconciler() { Stop(); }

int64_t Reconciler::RecordedFrom() const {
  // A day before the window: a guid delivered at the window's start was
  // recorded after it, whatever the two hosts' clocks say.
  return parts_.clock->UnixMillis() - options_.window.count() - 24 * 3'600'000LL;
}

absl::Status Reconciler::Start() {
  // What intake recorded: the delivery ids of github.webhooks, read from
  // the window's start (offsets_for_times), not from the topic's.
  kafka::FollowerOptions fo;
  fo.bootstrap = options_.bootstrap;
  fo.client_id = options_.client_id + "-redeliveries";
  fo.topic = options_.webhooks_topic;
  fo.from_unix_ms = RecordedFrom();
  fo.max_fetch_wait = 100ms;
  auto follower = parts_.follower(fo, [this](const kafka::ConsumedRecord& r) {
    const std::string* id = r.FindHeader(kafka::kDeliveryHeader);
    int64_t oldest = RecordedFrom();
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
  co.extra = options_.consumer_extra;
  co.on_assign = [this](const std::vector<kafka::TopicPartition>&) {
    if (auto s = Load(); !s.ok()) return s;
    std::lock_guard lock(mu_);
    owner_ = true;
    owner_gauge_.Set(1);
    cv_.notify_all();
    log::Info("redelivery reconciler: this instance scans", {{"remembered", static_cast<int64_t>(asked_.size())},
                                                             {"asks", static_cast<int64_t>(asks_.size())}});
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
      Apply(rec, r.offset);
      return absl::OkStatus();
    });
    if (ended.ok()) return;
    log::Error("redelivery reconciler: consumer ended", {{"error", ended.ToString()}});
    bool stopping;
    {
      std::lock_guard lock(mu_);
      stopping = stop_;
    }
    if (!stopping && parts_.fatal) parts_.fatal(ended);
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

size_t Reconciler::Remembered() const {
  std::lock_guard lock(mu_);
  return asked_.size();
}

void Reconciler::Apply(const v1::RedeliveryRecord& r, int64_t offset) {
  std::lock_guard lock(mu_);
  // GitHub redelivers nothing older than the window: not remembered.
  int64_t window_start = parts_.clock->UnixMillis() - options_.window.count();
  switch (r.kind_case()) {
    case v1::RedeliveryRecord::kRequested: {
      const auto& q = r.requested();
      if ((q.delivered_at_unix_ms() > 0 ? q.delivered_at_unix_ms() : q.at_unix_ms()) < window_start) break;
      Asked& a = asked_[q.guid()];
      if (a.requested_ms > q.at_unix_ms()) break;  // an older copy's, read again
      a.requested_ms = q.at_unix_ms();
      a.delivered_ms = q.delivered_at_unix_ms();
      a.request_id = q.request_id();
      a.unsent = false;
      // Written before copies recorded their start: whether it went out
      // is unknown, so never again.
      if (q.request_id().empty()) a.started = true;
      break;
    }
    case v1::RedeliveryRecord::kStarted: {
      if (!asked_.count(r.started().guid()) && r.started().at_unix_ms() < window_start) break;
      Asked& a = asked_[r.started().guid()];
      if (a.requested_ms == 0) a.requested_ms = r.started().at_unix_ms();
      a.started = true;
      break;
    }
    case v1::RedeliveryRecord::kResult: {
      const auto& res = r.result();
      auto it = asked_.find(res.guid());
      if (it != asked_.end() && res.result() == "unsent" && !it->second.started &&
          it->second.request_id == res.request_id()) {
        it->second.unsent = true;
      }
      break;
    }
    case v1::RedeliveryRecord::kCheckpoint:
      resume_from_ms_ = std::max(resume_from_ms_, r.checkpoint().resume_from_unix_ms());
      served_end_ = std::max(served_end_, r.checkpoint().served_scan_end());
      asks_.erase(asks_.begin(), asks_.lower_bound(served_end_));
      break;
    case v1::RedeliveryRecord::kScan:
      // Pending until a complete listing serves it (checkpoints say which).
      if (offset >= served_end_) {
        asks_[offset] = r.scan().since_unix_ms();
        cv_.notify_all();
      }
      break;
    default:
      break;
  }
  if (asked_.size() % 1024 == 0) Prune(parts_.clock->UnixMillis());
  remembered_.Set(static_cast<double>(asked_.size()));
}

void Reconciler::Prune(int64_t now_ms) {
  // GitHub redelivers nothing older than the window: neither is remembered.
  int64_t window_start = now_ms - options_.window.count();
  std::erase_if(asked_, [window_start](const auto& kv) {
    const Asked& a = kv.second;
    return (a.delivered_ms > 0 ? a.delivered_ms : a.requested_ms) < window_start;
  });
  int64_t oldest = now_ms - options_.window.count() - 24 * 3'600'000LL;
  std::erase_if(recorded_, [oldest](const auto& kv) { return kv.second < oldest; });
  remembered_.Set(static_cast<double>(asked_.size()));
}

absl::Status Reconciler::Load() {
  auto reader = parts_.reader();
  if (!reader.ok()) return reader.status();
  auto read = (*reader)->ReadToEnd(options_.topic, {}, [this](const kafka::ConsumedRecord& r) {
    v1::RedeliveryRecord rec;
    if (rec.ParseFromString(r.value)) Apply(rec, r.offset);
    return absl::OkStatus();
  });
  if (!read.ok()) return read.status();
  std::lock_guard lock(mu_);
  Prune(parts_.clock->UnixMillis());
  return absl::OkStatus();
}

void Reconciler::Loop() {
  int64_t next_ms = 0;  // the next round of a listing under way (a retry), or the next periodic listing
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, 1s);
    if (stop_) break;
    if (!owner_) {
      listing_.reset();  // the next owner lists for itself; the asks stay in the log
      continue;
    }
    int64_t now = parts_.clock->UnixMillis();
    bool due = listing_ ? now >= next_ms : !asks_.empty() || (options_.interval.count() > 0 && now >= next_ms);
    if (!due) continue;
    if (!listing_) listing_ = NewListing(now);
    lock.unlock();
    absl::StatusOr<bool> reached = Round(*listing_);
    absl::Status st = reached.status();
    if (reached.ok() && *reached) st = Complete(*listing_);
    lock.lock();
    now = parts_.clock->UnixMillis();
    if (!st.ok()) {
      // The listing is kept, with its cursor and the asks it serves: the
      // retry goes on where it failed.
      scans_.Add({{"result", "error"}}).Increment();
      log::Warn("redelivery scan failed; it resumes from its cursor",
                {{"error", st.ToString()}, {"in_ms", options_.retry_after.count()}});
      next_ms = now + options_.retry_after.count();
    } else if (!*reached) {
      next_ms = now;  // a long listing: its next round
    } else {
      scans_.Add({{"result", "ok"}}).Increment();
      listing_.reset();
      next_ms = now + options_.interval.count();
    }
  }
}

Reconciler::Listing Reconciler::NewListing(int64_t now_ms) {
  Listing l;
  int64_t window_start = now_ms - options_.window.count();
  int64_t dropped_before = now_ms - (options_.request_deadline + options_.unsent_margin).count();
  // Back to the last checkpoint (less 5 minutes: attempts listed late)...
  l.since_ms = resume_from_ms_ - 300'000;
  // ...and to every guid recorded as requested whose copy never went out
  // and never will: they are asked for again.
  for (const auto& [guid, a] : asked_) {
    if (!a.started && a.delivered_ms > 0 && (a.unsent || a.requested_ms < dropped_before)) {
      l.since_ms = std::min(l.since_ms, a.delivered_ms);
    }
  }
  // ...and to what operators asked for.
  l.serves_end = served_end_;
  for (const auto& [offset, since] : asks_) {
    l.since_ms = std::min(l.since_ms, since);
    l.serves_end = std::max(l.serves_end, offset + 1);
  }
  l.since_ms = std::max(l.since_ms, window_start);
  return l;
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
  return kafka::SendAndWait(*parts_.producer, kafka::MessageRecord(options_.topic, key, r));
}

absl::StatusOr<bool> Reconciler::Round(Listing& listing) {
  if (listing.reached) return true;  // its checkpoint failed: written again
  // Intake's record must be complete up to now, or a delivery it holds
  // would look lost.
  for (int i = 0; !follower_->CaughtUp(); ++i) {
    if (i >= 600) return absl::UnavailableError("still reading " + options_.webhooks_topic);
    std::this_thread::sleep_for(100ms);
  }
  github::Api api(parts_.client(), parts_.credentials);
  std::map<std::string, Guid> guids;
  const std::string round_start = listing.next_path;
  auto& counts = listing.counts;
  absl::Status failed;
  for (int pages = 0; pages < options_.max_pages && !listing.reached; ++pages) {
    std::string path = listing.next_path.empty() ? "/app/hook/deliveries?per_page=100" : listing.next_path;
    auto r = Get(api, path);
    if (r.ok() && r->status != 200) {
      // A cursor GitHub no longer takes: the listing starts over (what it
      // decided stays decided). Anything else: the same page again.
      bool refused = r->status >= 400 && r->status < 500 && r->status != 403 && r->status != 429 &&
                     !listing.next_path.empty();
      if (refused) listing.next_path.clear();
      r = absl::UnavailableError(absl::StrCat("GET ", path, ": HTTP ", r->status,
                                              refused ? " (cursor refused: listing again from the first page)" : ""));
    }
    boost::system::error_code ec;
    json::value page = r.ok() ? json::parse(r->body, ec) : json::value();
    if (r.ok() && (ec || !page.is_array())) r = absl::UnavailableError("GET " + path + ": not a JSON array");
    if (!r.ok()) {
      failed = r.status();
      counts.set_resumed(counts.resumed() + 1);
      break;
    }
    counts.set_pages(counts.pages() + 1);
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
      counts.set_attempts(counts.attempts() + 1);
      int64_t ms = *at * 1000;
      oldest_on_page = std::min(oldest_on_page, ms);
      listing.newest_ms = std::max(listing.newest_ms, ms);
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
    std::string next = NextPage(r->headers.count("link") ? r->headers.at("link") : "", options_.api_path_prefix);
    // Older pages were decided by earlier listings.
    if (oldest_on_page < listing.since_ms || next.empty()) {
      listing.reached = true;
    } else {
      listing.next_path = next;
    }
  }
  counts.set_rounds(counts.rounds() + 1);
  counts.set_guids(counts.guids() + static_cast<int64_t>(guids.size()));
  // What this round listed is decided now, a failed page or not: the
  // cursor is already past it.
  if (auto s = Decide(listing, guids); !s.ok()) {
    listing.next_path = round_start;
    listing.reached = false;
    return s;
  }
  if (!failed.ok()) return failed;
  return listing.reached;
}

absl::Status Reconciler::Decide(Listing& listing, const std::map<std::string, Guid>& guids) {
  int64_t now = parts_.clock->UnixMillis();
  int64_t window_start = now - options_.window.count();
  int64_t dropped_before = now - (options_.request_deadline + options_.unsent_margin).count();
  auto& cp = listing.counts;
  std::vector<Candidate> candidates;
  std::set<std::string> again;
  {
    std::lock_guard lock(mu_);
    for (const auto& [guid, g] : guids) {
      if (g.first_ms < listing.since_ms || g.first_ms < window_start) continue;  // decided before, or past redelivery
      if (recorded_.count(guid)) continue;  // intake has it, whatever GitHub says
      std::string reason;
      if (!g.ok) {
        reason = "failed";
        cp.set_failed(cp.failed() + 1);
      } else if (g.first_ok_ms > now - options_.grace.count()) {
        listing.resume_from = std::min(listing.resume_from, g.first_ms);  // intake may not have recorded it yet
        continue;
      } else {
        reason = "not_recorded";
        cp.set_not_recorded(cp.not_recorded() + 1);
      }
      if (auto it = asked_.find(guid); it != asked_.end()) {
        const Asked& a = it->second;
        // Its POST went out, or may have: never again within the window,
        // whatever GitHub answered. Its copy may still go out: not yet.
        if (a.started || (!a.unsent && a.requested_ms >= dropped_before)) {
          cp.set_requested_before(cp.requested_before() + 1);
          requested_before_.Increment();
          continue;
        }
        again.insert(guid);  // recorded as requested, never sent
      }
      candidates.push_back({guid, reason, g});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.g.first_ms < b.g.first_ms; });
  size_t room = static_cast<size_t>(std::max<int64_t>(0, options_.max_per_scan - cp.requested()));
  if (candidates.size() > room) {
    listing.resume_from = std::min(listing.resume_from, candidates[room].g.first_ms);  // the rest: the next listing
    candidates.resize(room);
  }
  for (const Candidate& c : candidates) {
    RELAY_RETURN_IF_ERROR(Request(c));
    cp.set_requested(cp.requested() + 1);
    if (again.count(c.guid)) {
      cp.set_asked_again(cp.asked_again() + 1);
      asked_again_.Increment();
    }
  }
  return absl::OkStatus();
}

absl::Status Reconciler::Request(const Candidate& c) {
  {
    // Another instance takes over, or this one stops: it asks the rest.
    std::lock_guard lock(mu_);
    if (stop_ || !owner_) return absl::AbortedError("no longer the reconciler");
  }
  int64_t now = parts_.clock->UnixMillis();
  std::string id = absl::StrCat("redelivery/", c.guid, "/", now);
  // Recorded (acknowledged) before the copy exists: a copy lost unsent (a
  // kill) leaves this record, and the scans ask for its guid again.
  v1::RedeliveryRecord rec;
  auto* req = rec.mutable_requested();
  req->set_guid(c.guid);
  req->set_delivery_id(c.g.latest_id);
  req->set_event(c.g.event);
  req->set_action(c.g.action);
  req->set_reason(c.reason);
  req->set_delivered_at_unix_ms(c.g.first_ms);
  req->set_at_unix_ms(now);
  req->set_request_id(id);
  RELAY_RETURN_IF_ERROR(Append(c.guid, rec));
  auto copy = std::make_shared<Copy>();
  copy->guid = c.guid;
  copy->id = id;
  copy->deadline = parts_.clock->Now() + options_.request_deadline;
  {
    std::lock_guard lock(mu_);
    Asked& a = asked_[c.guid];
    a.requested_ms = now;
    a.delivered_ms = c.g.first_ms;
    a.request_id = id;
    a.unsent = false;
    remembered_.Set(static_cast<double>(asked_.size()));
  }
  requests_.Add({{"reason", c.reason}}).Increment();
  v1::GitHubRequest call;
  call.set_id(id);
  call.set_level(0);  // below every other write
  call.set_delivery_id(c.guid);
  call.set_requested_at_unix_ms(now);
  auto* rd = call.mutable_redelivery();
  rd->set_delivery_id(c.g.latest_id);
  rd->set_guid(c.guid);
  rd->set_reason(c.reason);
  parts_.scheduler->Submit(
      std::move(call), [this, copy](JobResult result) { Answer(*copy, result); },
      [this, copy] {
        std::lock_guard lock(mu_);
        return MayGo(*copy);
      },
      [this, copy] { return Starting(*copy); });
  return absl::OkStatus();
}

bool Reconciler::MayGo(const Copy& copy) const {
  // Never past its deadline (the scans ask again after it, plus a margin),
  // only the guid's latest copy, and only while no other copy went out.
  if (stop_ || !owner_ || parts_.clock->Now() >= copy.deadline) return false;
  auto it = asked_.find(copy.guid);
  return it != asked_.end() && it->second.request_id == copy.id && (!it->second.started || copy.claimed);
}

absl::Status Reconciler::Starting(Copy& copy) {
  {
    std::lock_guard lock(mu_);
    if (!MayGo(copy)) {
      return absl::FailedPreconditionError(
          "redelivery no longer to be sent: past its deadline, a newer copy, a takeover or a stop");
    }
    // Claimed before the record is written: a scan meanwhile leaves the guid alone.
    copy.claimed = true;
    asked_[copy.guid].started = true;
    if (copy.recorded) return absl::OkStatus();  // again, after a failure that never reached GitHub
  }
  v1::RedeliveryRecord rec;
  rec.mutable_started()->set_guid(copy.guid);
  rec.mutable_started()->set_request_id(copy.id);
  rec.mutable_started()->set_at_unix_ms(parts_.clock->UnixMillis());
  RELAY_RETURN_IF_ERROR(Append(copy.guid, rec));
  std::lock_guard lock(mu_);
  copy.recorded = true;
  return absl::OkStatus();
}

void Reconciler::Answer(Copy& copy, const JobResult& result) {
  std::string outcome;
  {
    std::lock_guard lock(mu_);
    outcome = !copy.recorded ? "unsent" : result.kind == JobResult::Kind::kDone ? "accepted" : "failed";
    auto it = asked_.find(copy.guid);
    if (!copy.recorded && it != asked_.end() && it->second.request_id == copy.id) {
      // It never went out (its claim, if any, was this copy's): the next
      // scan asks again.
      if (copy.claimed) it->second.started = false;
      it->second.unsent = !it->second.started;
    }
  }
  results_.Add({{"result", outcome}}).Increment();
  v1::RedeliveryRecord done;
  auto* res = done.mutable_result();
  res->set_guid(copy.guid);
  res->set_request_id(copy.id);
  res->set_http_status(static_cast<int>(result.http_status));
  res->set_result(outcome);
  res->set_error(result.error);
  res->set_at_unix_ms(parts_.clock->UnixMillis());
  // For operators, and for the next owner (an `unsent` copy is asked for
  // again at once); `requested` and `started` are what count.
  parts_.producer->Send(kafka::MessageRecord(options_.topic, copy.guid, done), [guid = copy.guid](absl::Status s) {
    if (!s.ok()) log::Warn("redelivery result not recorded", {{"guid", guid}, {"error", s.ToString()}});
  });
  if (outcome == "failed") log::Warn("redelivery refused", {{"guid", copy.guid}, {"error", result.error}});
  if (outcome == "unsent") log::Info("redelivery not sent; asked for again", {{"guid", copy.guid}, {"error", result.error}});
}

absl::Status Reconciler::Complete(Listing& listing) {
  int64_t now = parts_.clock->UnixMillis();
  int64_t resume_from =
      std::min(listing.resume_from, listing.newest_ms > 0 ? listing.newest_ms : now - options_.grace.count());
  v1::RedeliveryCheckpoint cp = listing.counts;
  cp.set_scanned_at_unix_ms(now);
  cp.set_listed_since_unix_ms(listing.since_ms);
  cp.set_resume_from_unix_ms(resume_from);
  cp.set_served_scan_end(listing.serves_end);
  v1::RedeliveryRecord checkpoint;
  *checkpoint.mutable_checkpoint() = cp;
  RELAY_RETURN_IF_ERROR(Append("checkpoint", checkpoint));
  {
    std::lock_guard lock(mu_);
    resume_from_ms_ = std::max(resume_from_ms_, resume_from);
    served_end_ = std::max(served_end_, listing.serves_end);
    asks_.erase(asks_.begin(), asks_.lower_bound(served_end_));
    Prune(now);
  }
  last_scan_.Set(static_cast<double>(now) / 1000);
  checkpoint_.Set(static_cast<double>(resume_from) / 1000);
  log::Info("redelivery scan", {{"since_ms", listing.since_ms},
                                {"attempts", cp.attempts()},
                                {"guids", cp.guids()},
                                {"pages", cp.pages()},
                                {"rounds", cp.rounds()},
                                {"requested", cp.requested()},
                                {"asked_again", cp.asked_again()},
                                {"requested_before", cp.requested_before()}});
  return absl::OkStatus();
}

}  // namespace relay::dispatch
