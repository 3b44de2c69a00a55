#include "relay/dispatch/shared_budget.h"

#include <limits>

#include "relay/base/log.h"
#include "relay/base/random.h"

namespace relay::dispatch {

using namespace std::chrono_literals;

namespace {

// An own record at least this often, so the estimate of the broker's clock
// stays fresh when the instance is quiet; and how soon a probe not read
// back (not written, or the log not read to its end yet) is sent again.
constexpr auto kReanchorEvery = 30s;
constexpr auto kProbeRetry = 5s;

int64_t SteadyMs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

// --- the broker's clock -------------------------------------------------------

void BrokerClock::Saw(int64_t log_ms, TimePoint read, bool own) {
  const int64_t offset = log_ms - SteadyMs(read);
  if (own) {
    // Fresh: replaces a bound the two clocks' drift may have made too high.
    offset_ms_ = offset;
    anchored_ = true;
  } else if (!seen_ || offset > offset_ms_) {
    offset_ms_ = offset;
  }
  seen_ = true;
}

int64_t BrokerClock::EarliestMs(TimePoint now) const {
  return seen_ ? SteadyMs(now) + offset_ms_ : std::numeric_limits<int64_t>::min();
}

// --- the ledger ---------------------------------------------------------------

std::optional<BudgetLedger::Grant> BudgetLedger::Apply(const v1::BudgetRecord& r, int64_t log_ms) {
  clock_.AdvanceTo(log_ms);
  const int64_t now = clock_.UnixMillis();
  // Claims nobody released in time (their instance vanished) leave the
  // books as made: every instance does this at the same log time.
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (now - it->second.at_ms >= hold_.count()) {
      rules_.Release(it->second.installation, it->second.write, it->second.granted, 0);
      it = claims_.erase(it);
    } else {
      ++it;
    }
  }
  switch (r.kind_case()) {
    case v1::BudgetRecord::kClaim: {
      const auto& c = r.claim();
      Grant g{r.instance(), r.seq(), c.installation(), c.write(), 0, now, 0};
      Budget::TimePoint retry{};
      g.granted = c.count() > 0 ? rules_.AcquireN(c.installation(), c.write(), c.count(), &retry) : 0;
      if (g.granted > 0) {
        claims_[{r.instance(), r.seq()}] = Claim{c.installation(), c.write(), g.granted, now};
      } else {
        g.retry_at_ms = std::chrono::duration_cast<std::chrono::milliseconds>(retry.time_since_epoch()).count();
      }
      return g;
    }
    case v1::BudgetRecord::kRelease: {
      const auto& rel = r.release();
      auto it = claims_.find({r.instance(), rel.claim_seq()});
      int64_t installation = 0;
      if (it != claims_.end()) {
        installation = it->second.installation;
        int64_t used = std::clamp<int64_t>(rel.used(), 0, it->second.granted);
        rules_.Release(installation, it->second.write, used, it->second.granted - used);
        claims_.erase(it);
      }
      if (installation != 0 && rel.remaining() >= 0) {
        rules_.Learn(installation, 200,
                     {{"x-ratelimit-remaining", std::to_string(rel.remaining())},
                      {"x-ratelimit-reset", std::to_string(rel.reset_unix())}},
                     false);
      }
      return std::nullopt;
    }
    case v1::BudgetRecord::kObservation: {
      const auto& o = r.observation();
      if (o.pause_ms() > 0) {
        rules_.Learn(o.installation(), 429, {{"retry-after", std::to_string((o.pause_ms() + 999) / 1000)}}, true);
      }
      return std::nullopt;
    }
    case v1::BudgetRecord::kProbe:  // its log time is all it brings
    case v1::BudgetRecord::KIND_NOT_SET:
      break;
  }
  return std::nullopt;
}

int64_t BudgetLedger::paused_until_ms(int64_t installation) const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(rules_.paused_until(installation).time_since_epoch())
      .count();
}

// --- the shared budget --------------------------------------------------------

SharedBudget::SharedBudget(SharedBudgetOptions options, kafka::Producer* producer, const Clock* clock,
                           prometheus::Registry* metrics)
    : options_(std::move(options)),
      producer_(producer),
      clock_(clock),
      claims_(prometheus::BuildCounter()
                  .Name("relay_github_budget_claims_total")
                  .Help("Claims on the shared GitHub budget (dispatch.budget) this instance made, by result "
                        "(granted: some calls; denied: none, the ceilings or a limit were reached)")
                  .Register(*metrics)),
      given_back_(prometheus::BuildCounter()
                      .Name("relay_github_budget_calls_given_back_total")
                      .Help("Granted calls never made: given back unused (lease over, or the grant came late)")
                      .Register(*metrics)
                      .Add({})),
      ledger_(options_.budget, options_.hold) {}

absl::StatusOr<std::unique_ptr<SharedBudget>> SharedBudget::Start(SharedBudgetOptions options,
                                                                 kafka::Producer* producer,
                                                                 const kafka::FollowerFactory& followers,
                                                                 kafka::Admin& admin, const Clock* clock,
                                                                 prometheus::Registry* metrics) {
  if (options.instance.empty()) {
    options.instance = RandomHex(8);
  }
  if (options.hold < options.lease * 2) {
    return absl::InvalidArgumentError("the budget's hold must be at least twice its lease");
  }
  // Every grant is decided at its claim's log time, and "now" is read off
  // the log times: with CreateTime they would be each writer's own clock.
  auto topic = admin.DescribeTopic(options.topic, 10s);
  if (!topic.ok()) {
    return absl::Status(topic.status().code(), "the shared GitHub budget: " + std::string(topic.status().message()));
  }
  if (absl::Status st = kafka::CheckLogAppendTime(*topic); !st.ok()) {
    return absl::FailedPreconditionError(
        "the shared GitHub budget decides on the broker's clock: " + std::string(st.message()) +
        "; set it: kafka-configs --alter --entity-type topics --entity-name " + options.topic +
        " --add-config message.timestamp.type=LogAppendTime");
  }
  std::unique_ptr<SharedBudget> b(new SharedBudget(std::move(options), producer, clock, metrics));
  kafka::FollowerOptions fo;
  fo.bootstrap = b->options_.bootstrap;
  fo.client_id = "relay-dispatch-budget";
  fo.topic = b->options_.topic;
  fo.from_beginning = true;
  fo.max_fetch_wait = 5ms;  // a grant waits for this read
  SharedBudget* self = b.get();
  auto follower = followers(fo, [self](const kafka::ConsumedRecord& r) { self->OnRecord(r); });
  if (!follower.ok()) return follower.status();
  {
    std::lock_guard lock(b->mu_);
    b->follower_ = std::move(*follower);
  }
  {
    // The broker's clock is known once this is read back.
    std::lock_guard lock(b->mu_);
    b->ProbeLocked();
  }
  b->ticker_ = std::thread([self] { self->Tick(); });
  log::Info("shared GitHub budget", {{"topic", self->options_.topic}, {"instance", self->options_.instance}});
  return b;
}

SharedBudget::~SharedBudget() {
  Close();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  std::unique_ptr<kafka::Follower> follower;
  {
    std::lock_guard lock(mu_);
    follower = std::move(follower_);
  }
  follower.reset();  // joins its thread: no OnRecord after this
}

void SharedBudget::Send(v1::BudgetRecord record) {
  int64_t seq = record.seq();
  bool claim = record.has_claim();
  // Read back, its log time against this says what time it is on the broker.
  last_sent_ = sent_at_[seq] = clock_->Now();
  producer_->Send(kafka::MessageRecord(options_.topic, "budget", record, "", 0),
                  [this, seq, claim](absl::Status st) {
                    if (st.ok()) return;
                    log::Warn("budget record not written", {{"seq", seq}, {"error", std::string(st.message())}});
                    if (!claim) return;  // a release lost: its claim counts until `hold`
                    // A claim not written asks nothing: asked again (by the
                    // ticker: this may run inside Send, under mu_). One that
                    // was written after all still comes back and is used.
                    std::lock_guard lock(failed_mu_);
                    failed_claims_.push_back(seq);
                  });
}

void SharedBudget::ProbeLocked() {
  v1::BudgetRecord r;
  r.set_instance(options_.instance);
  r.set_seq(++seq_);
  r.mutable_probe();
  Send(std::move(r));
}

int64_t SharedBudget::BrokerNowLocked() const {
  return std::max(ledger_.now_ms(), broker_.EarliestMs(clock_->Now()));
}

bool SharedBudget::PlentifulLocked(const Key& key) const {
  const int64_t ample = kAheadFactor * options_.max_claim;
  int64_t remaining = ledger_.Remaining(key.first);  // -1: no answer yet
  if (remaining >= 0 && remaining < ample) return false;
  return !key.second || ledger_.WritesLeft() >= ample;
}

void SharedBudget::MaybeClaimLocked(const Key& key) {
  if (closed_) return;
  int64_t available = 0;
  for (const Lease& l : leases_[key]) available += l.granted - l.taken;
  int64_t want = waiting_[key] - available - claiming_[key];
  if (want <= 0) return;
  if (BrokerNowLocked() < denied_until_ms_[key]) return;
  int64_t count = std::min<int64_t>(want, options_.max_claim);
  // Ahead while plentiful: a claim costs a round trip on dispatch.budget
  // (appended, then read back) however many calls it asks for, and asking
  // only for the callers waiting made each wave of workers wait one. When
  // the windows hold many times max_claim, a whole max_claim is asked for,
  // so the next callers find a lease at once; what is not used within the
  // lease goes back at its release. Near a ceiling, only the callers
  // waiting are asked for: no instance sits on grants another needs.
  if (PlentifulLocked(key)) count = options_.max_claim;
  v1::BudgetRecord r;
  r.set_instance(options_.instance);
  r.set_seq(++seq_);
  r.mutable_claim()->set_installation(key.first);
  r.mutable_claim()->set_write(key.second);
  r.mutable_claim()->set_count(static_cast<int32_t>(count));
  claiming_[key] += count;
  pending_[r.seq()] = {key, count};
  Send(std::move(r));
}

std::optional<CallBudget::TimePoint> SharedBudget::Acquire(int64_t installation, bool write) {
  const Key key{installation, write};
  std::unique_lock lock(mu_);
  ++waiting_[key];
  auto deadline = std::chrono::steady_clock::now() + 100ms;
  std::optional<TimePoint> retry;
  for (;;) {
    if (ReadyLocked()) {
      // Both on the broker's clock, "now" at its earliest: a pause never
      // looks shorter than it is.
      int64_t now_ms = BrokerNowLocked();
      auto local = local_pause_until_ms_.find(ScopeKey(installation));
      int64_t paused = std::max(ledger_.paused_until_ms(installation),
                                local == local_pause_until_ms_.end() ? 0 : local->second);
      if (paused > now_ms) {
        retry = clock_->Now() + std::chrono::milliseconds(paused - now_ms);
        break;
      }
      for (Lease& l : leases_[key]) {
        if (l.taken < l.granted && clock_->Now() < l.expires) {
          ++l.taken;
          --waiting_[key];
          return std::nullopt;
        }
      }
      MaybeClaimLocked(key);
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) break;
  }
  --waiting_[key];
  if (retry) return *retry;
  int64_t denied = ReadyLocked() ? denied_until_ms_[key] - BrokerNowLocked() : 100;
  return clock_->Now() + std::chrono::milliseconds(std::clamp<int64_t>(denied, 5, 1000));
}

void SharedBudget::Observe(int64_t installation, bool write, unsigned status,
                           const std::map<std::string, std::string>& headers, bool secondary) {
  const Key key{installation, write};
  auto header = [&](const char* name) -> int64_t {
    auto it = headers.find(name);
    if (it == headers.end()) return -1;
    try {
      return std::stoll(it->second);
    } catch (...) {
      return -1;
    }
  };
  std::lock_guard lock(mu_);
  if (secondary || status == 429) {
    // Everyone the limit counts (the App, or this installation) pauses:
    // this instance at once, the others when they read it.
    int64_t retry_after = header("retry-after");
    int64_t pause = retry_after >= 0 ? retry_after * 1000 : options_.budget.secondary_pause.count();
    int64_t& until = local_pause_until_ms_[ScopeKey(installation)];
    until = std::max(until, BrokerNowLocked() + pause);
    v1::BudgetRecord r;
    r.set_instance(options_.instance);
    r.set_seq(++seq_);
    r.mutable_observation()->set_installation(installation);
    r.mutable_observation()->set_pause_ms(pause);
    Send(std::move(r));
  }
  auto& leases = leases_[key];
  for (auto it = leases.begin(); it != leases.end(); ++it) {
    if (it->answered >= it->taken) continue;
    ++it->answered;
    if (int64_t remaining = header("x-ratelimit-remaining"); remaining >= 0) {
      it->remaining = remaining;
      it->reset_unix = std::max<int64_t>(0, header("x-ratelimit-reset"));
    }
    if (it->answered == it->taken && (it->taken == it->granted || clock_->Now() >= it->expires)) {
      ReleaseLocked(key, *it);
      leases.erase(it);
    }
    break;
  }
  cv_.notify_all();
}

void SharedBudget::ReleaseLocked(const Key&, const Lease& lease) {
  if (lease.granted > lease.taken) given_back_.Increment(static_cast<double>(lease.granted - lease.taken));
  v1::BudgetRecord r;
  r.set_instance(options_.instance);
  r.set_seq(++seq_);
  auto* rel = r.mutable_release();
  rel->set_claim_seq(lease.seq);
  rel->set_used(static_cast<int32_t>(lease.taken));
  rel->set_remaining(lease.remaining);
  rel->set_reset_unix(lease.reset_unix);
  Send(std::move(r));
}

void SharedBudget::CloseExpiredLocked() {
  auto now = clock_->Now();
  for (auto& [key, leases] : leases_) {
    for (auto it = leases.begin(); it != leases.end();) {
      // Calls still in flight keep their lease open until answered.
      if ((now >= it->expires || closed_) && it->answered == it->taken) {
        ReleaseLocked(key, *it);
        it = leases.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void SharedBudget::OnRecord(const kafka::ConsumedRecord& record) {
  v1::BudgetRecord r;
  if (!r.ParseFromString(record.value)) {
    log::Warn("unreadable budget record skipped", {{"offset", record.offset}});
    return;
  }
  const auto read_at = clock_->Now();
  std::lock_guard lock(mu_);
  std::optional<std::chrono::steady_clock::time_point> sent;
  if (r.instance() == options_.instance) {
    if (auto it = sent_at_.find(r.seq()); it != sent_at_.end()) {
      sent = it->second;
      sent_at_.erase(it);
    }
  }
  broker_.Saw(record.timestamp_ms, read_at, sent.has_value());
  auto grant = ledger_.Apply(r, record.timestamp_ms);
  if (grant && grant->instance == options_.instance) {
    const Key key{grant->installation, grant->write};
    if (auto it = pending_.find(grant->seq); it != pending_.end()) {
      claiming_[it->second.first] -= it->second.second;
      pending_.erase(it);
    }
    claims_.Add({{"result", grant->granted > 0 ? "granted" : "denied"}}).Increment();
    // The claim got its log time when it was appended, after it was sent:
    // on the broker's clock it is now at most (read - sent) old, measured on
    // one steady clock. Unknown when sent (longer ago than the hold): late.
    bool late = !sent || read_at - *sent > options_.lease / 2;
    if (grant->granted > 0 && (late || closed_)) {
      // Read back too late to be used safely within the hold (or closing):
      // given back unused at once.
      ReleaseLocked(key, Lease{grant->seq, grant->granted, 0, 0, {}, -1, 0});
    } else if (grant->granted > 0) {
      leases_[key].push_back(Lease{grant->seq, grant->granted, 0, 0, read_at + options_.lease, -1, 0});
    } else {
      denied_until_ms_[key] = std::max(grant->retry_at_ms, BrokerNowLocked() + 5);
    }
  }
  cv_.notify_all();
}

void SharedBudget::Tick() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, 25ms);
    std::vector<int64_t> failed;
    {
      std::lock_guard f(failed_mu_);
      failed.swap(failed_claims_);
    }
    for (int64_t seq : failed) {
      if (auto it = pending_.find(seq); it != pending_.end()) {
        claiming_[it->second.first] -= it->second.second;
        pending_.erase(it);
      }
    }
    CloseExpiredLocked();
    auto now = clock_->Now();
    // Own records not back within the hold never will be (or too late to
    // matter: a grant then is given back).
    for (auto it = sent_at_.begin(); it != sent_at_.end();) {
      it = now - it->second > options_.hold ? sent_at_.erase(it) : std::next(it);
    }
    if (!closed_ && now - last_sent_ >= (broker_.anchored() ? kReanchorEvery : kProbeRetry)) ProbeLocked();
    // Callers waiting for a denied key ask again once it may be granted.
    for (auto& [key, n] : waiting_) {
      if (n > 0 && ReadyLocked()) MaybeClaimLocked(key);
    }
  }
}

void SharedBudget::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  CloseExpiredLocked();
}

absl::Status SharedBudget::Health() const {
  std::lock_guard lock(mu_);
  if (!follower_) return absl::UnavailableError("not started");
  if (absl::Status h = follower_->Health(); !h.ok()) return h;
  if (!follower_->CaughtUp()) return absl::UnavailableError("reading " + options_.topic + " to its end");
  if (!broker_.anchored()) {
    return absl::UnavailableError("waiting for its probe on " + options_.topic + " (the broker's clock)");
  }
  return absl::OkStatus();
}

int64_t SharedBudget::Remaining(int64_t installation) const {
  std::lock_guard lock(mu_);
  return ledger_.Remaining(installation);
}

int64_t SharedBudget::WritesLeftInWindow() const {
  std::lock_guard lock(mu_);
  return ledger_.WritesLeft();
}

}  // namespace relay::dispatch
