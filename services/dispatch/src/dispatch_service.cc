#include "relay/dispatch/dispatch_service.h"

#include <condition_variable>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <tuple>

#include "absl/strings/ascii.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "relay/allowlist/allowlist.h"
#include "relay/auth/relay_token.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/dispatch/key_cutover.h"
#include "dispatch_metrics.h"
#include "relay/dispatch/ledger.h"
#include "relay/dispatch/replay_guard.h"
#include "relay/github/api.h"
#include "relay/kafka/reader.h"
#include "relay/service/group_consumer.h"
#include "relay/v1/dispatch.pb.h"
#include "relay/v1/webhook.pb.h"

namespace relay::dispatch {
namespace {

using namespace std::chrono_literals;
using kafka::TopicPartition;

// One write this process is carrying out, shared by every record (of this
// batch or a later retry of it) that asks for it.
class InFlight {
 public:
  InFlight(TopicPartition input, v1::GitHubRequest request, bool repeated)
      : input(std::move(input)), request(std::move(request)), repeated(repeated) {}
  const TopicPartition input;
  const v1::GitHubRequest request;
  const bool repeated;  // STARTED in the ledger: in flight at a crash
  // Set before the job is submitted: the dead letter (relay-redriven-from)
  // whose redrive asked for this write; a write that fails again carries it
  // back to the DLQ, so relayctl does not redrive it by itself.
  std::string redriven_from;

  void Finish(bool recorded) {
    std::lock_guard lock(mu_);
    finished_ = true;
    recorded_ = recorded;
    cv_.notify_all();
  }
  // True when finished by `deadline`; *recorded: its result is durable.
  bool WaitUntil(std::chrono::steady_clock::time_point deadline, bool* recorded) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [this] { return finished_; })) return false;
    *recorded = recorded_;
    return true;
  }
  bool finished() {
    std::lock_guard lock(mu_);
    return finished_;
  }
  // Both under the service's in_flight_mu_: a write either starts (writing)
  // before its partition is revoked, or never (cancelled).
  bool cancelled = false;  // its input partition went to another member
  bool writing = false;    // its STARTED is being written or written: it may reach GitHub

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool finished_ = false;
  bool recorded_ = false;
};

class DispatchService final : public service::Service {
 public:
  static absl::StatusOr<std::unique_ptr<service::Service>> Start(DispatchSettings settings,
                                                                  service::Runtime& runtime) {
    return service::Wired(std::unique_ptr<DispatchService>(new DispatchService(std::move(settings), runtime)), runtime);
  }

  ~DispatchService() override {
    Stop();
    // Its last callbacks (records that never got an answer) run now, while
    // the members they touch still exist; stopped_ makes them only finish.
    producer_.reset();
  }

  bool Drain(std::chrono::milliseconds budget) override {
    return service::StopThenFlush(budget, [this] { Stop(); }, *producer_);
  }

 private:
  DispatchService(DispatchSettings settings, service::Runtime& runtime)
      : settings_(std::move(settings)),
        clock_(&runtime.clock()),
        m_(runtime.metrics()) {}

 public:
  // Called once, by service::Wired (Start): clients, routes, checks, tasks.
  absl::Status Wire(service::Runtime& runtime) {
    const auto& s = settings_;
    auto& metrics = runtime.metrics();
    RELAY_ASSIGN_OR_RETURN(allowlist_, allowlist::AllowlistFile::Open(s.allowlist_file, &metrics));
    RELAY_ASSIGN_OR_RETURN(auth::RelayTokenKeys keys, auth::RelayTokenKeys::Load(s.token_keys_file));
    keys_ = std::make_unique<auth::RelayTokenKeys>(std::move(keys));
    RELAY_ASSIGN_OR_RETURN(auth::RsaKey app_key, auth::RsaKey::LoadPem(s.private_key_file));
    if (!app_key.is_private()) return absl::InvalidArgumentError("github.private_key_file: not a private key");
    credentials_ = std::make_unique<github::AppCredentials>(s.app_id, std::move(app_key), clock_);
    http::ClientOptions client_options;
    client_options.request_timeout = s.request_timeout;
    client_options.ca_file = s.ca_file;
    client_options.user_agent = "relay-dispatch";
    // Fail at start on a bad URL or CA file rather than in every worker.
    RELAY_RETURN_IF_ERROR(http::Client::New(s.api_url, client_options).status());
    RELAY_ASSIGN_OR_RETURN(producer_, runtime.factories().producer(s.kafka, &metrics));
    RELAY_ASSIGN_OR_RETURN(reader_, runtime.factories().reader(s.kafka.bootstrap));
    RELAY_ASSIGN_OR_RETURN(int ledger_partitions, reader_->Partitions(s.topics.ledger));
    // STARTED marks go through a transaction that also commits the input
    // offsets as this member of the group (KIP-447): the group coordinator
    // refuses it once another member owns the partitions, and no GitHub
    // call follows a refused mark (Fence below).
    kafka::ProducerOptions fenced = s.kafka;
    fenced.client_id = s.kafka.client_id + "-started";
    fenced.transactional_id = s.group_id + ".started." + RandomHex(8);
    fenced.group_offsets = [this] { return Fence(); };
    // A mark's transaction takes milliseconds; one left open by an instance
    // that died holds its partitions' takeover until the broker aborts it.
    fenced.transaction_timeout = 5s;
    // The id is this process's alone (its random part): a fatal error is not
    // a takeover (the group's offsets are the fence), so a new handle carries
    // on rather than every later mark failing until a restart.
    fenced.renew_after_fatal = true;
    RELAY_ASSIGN_OR_RETURN(started_producer_, runtime.factories().producer(fenced, &metrics));
    ledger_ = std::make_unique<Ledger>(s.topics.ledger, ledger_partitions, producer_.get(), started_producer_.get(),
                                       reader_.get(), clock_);
    // What the ledger remembers bounds what dispatch acts on (a record older
    // than that could repeat writes it forgot): read from the topic itself.
    // One admin client for the start's checks (this and the budget's below).
    RELAY_ASSIGN_OR_RETURN(std::unique_ptr<kafka::Admin> admin,
                           runtime.factories().admin(s.kafka.bootstrap, s.kafka.client_id + "-admin"));
    RELAY_ASSIGN_OR_RETURN(kafka::TopicDescription ledger_topic, admin->DescribeTopic(s.topics.ledger, 10s));
    RELAY_ASSIGN_OR_RETURN(ledger_retention_ms_, RetentionMs(ledger_topic));
    label_facts_table_ = std::make_unique<LabelFacts>(s.topics.labels, reader_.get());
    // Read-only: the ledgers of partitions records had under repository keys.
    old_key_ledger_ = std::make_unique<Ledger>(s.topics.ledger, ledger_partitions, producer_.get(), producer_.get(),
                                               reader_.get(), clock_);
    RELAY_ASSIGN_OR_RETURN(webhook_partitions_, reader_->Partitions(s.topics.webhooks));
    // One budget for every instance: grants decided on dispatch.budget.
    SharedBudgetOptions bo;
    bo.bootstrap = s.kafka.bootstrap;
    bo.topic = s.topics.budget;
    bo.budget = s.budget;
    bo.lease = s.budget_lease;
    bo.hold = s.budget_lease + s.request_timeout + 10s;
    bo.max_claim = std::max(1, s.scheduler.concurrency);
    // Asked once, at start: dispatch.budget's records must carry the broker's clock.
    RELAY_ASSIGN_OR_RETURN(budget_, SharedBudget::Start(bo, producer_.get(), runtime.factories().follower, *admin,
                                                        clock_, &metrics));
    // github.max_concurrency connections, shared by github.workers workers.
    auto connections = std::make_shared<ApiPool>(
        [this, client_options] { return std::move(*http::Client::New(settings_.api_url, client_options)); },
        credentials_.get(), s.scheduler.concurrency, s.budget_lease);
    scheduler_ = std::make_unique<Scheduler>(
        s.scheduler,
        [this, connections] {
          return std::make_unique<Executor>(connections, budget_.get(), clock_,
                                            [this](const std::string& repo) {
                                              return allowlist_->Current()->Find(repo) != nullptr;
                                            });
        },
        clock_, &metrics);
    // The redelivery reconciler: its requests go through the same
    // scheduler and budget, at the lowest priority.
    RedeliveryOptions ro = s.redeliveries;
    ro.bootstrap = s.kafka.bootstrap;
    ro.webhooks_topic = s.topics.webhooks;
    ro.client_id = s.kafka.client_id;
    // A killed owner's partition moves after kafka.session_timeout, as the main group's do.
    ro.consumer_extra["session.timeout.ms"] = std::to_string(s.session_timeout.count());
    ro.consumer_extra["heartbeat.interval.ms"] = std::to_string(std::max<int64_t>(1000, s.session_timeout.count() / 3));
    reconciler_ = std::make_unique<Reconciler>(
        ro,
        Reconciler::Parts{
            [this, client_options] { return std::move(*http::Client::New(settings_.api_url, client_options)); },
            credentials_.get(), budget_.get(), scheduler_.get(), producer_.get(), runtime.factories().follower,
            [&runtime, b = s.kafka.bootstrap] { return runtime.factories().reader(b); },
            [&runtime, this, &metrics](kafka::ConsumerOptions o) {
              return runtime.factories().consumer(std::move(o), producer_.get(), &metrics);
            },
            clock_, [&runtime](const absl::Status& why) { runtime.Fatal("redeliveries", why); }},
        metrics);
    RELAY_RETURN_IF_ERROR(reconciler_->Start());

    cutover_ = std::make_unique<KeyCutover>(KafkaProgress(s.kafka.bootstrap, s.topics.webhooks, s.group_id), clock_,
                                            1s, &metrics);
    kafka::ConsumerOptions co = service::GroupOptions(s.kafka, s.group_id, {s.topics.webhooks, s.topics.requests});
    // A batch waits batch_wait for its writes before it is retried: the
    // consumer's own backoff on top of that stays short.
    co.retry_backoff_min = 100ms;
    co.retry_backoff_max = 1s;
    service::SetSessionTimeout(co, s.session_timeout);
    // Set, not left to librdkafka's default: revoke_wait is bounded by it.
    co.extra["max.poll.interval.ms"] = std::to_string(s.max_poll_interval.count());
    co.on_assign = [this](const std::vector<TopicPartition>& tps) {
      RELAY_RETURN_IF_ERROR(ledger_->Load(tps));
      // The facts already published, before this member publishes more.
      bool webhooks = std::any_of(tps.begin(), tps.end(), [this](const TopicPartition& tp) {
        return tp.topic == settings_.topics.webhooks;
      });
      return webhooks ? label_facts_table_->Load() : absl::OkStatus();
    };
    co.on_revoke = [this](const std::vector<TopicPartition>& tps) { Revoked(tps); };
    RELAY_ASSIGN_OR_RETURN(consumer_, service::GroupConsumer::Open(runtime, std::move(co), producer_.get()));
    {
      std::lock_guard lock(fence_mu_);
      member_of_ = &consumer_->consumer();
    }
    runtime.AddReadinessCheck("budget", [b = budget_.get()] { return b->Health(); });
    runtime.Every(s.allowlist_reload, [this] { (void)allowlist_->Refresh(); });
    runtime.Every(1s, [this] { m_.budget_gauge.Set(static_cast<double>(budget_->WritesLeftInWindow())); });

    kafka::BatchOptions batches;
    batches.max_records = s.batch_records;
    batches.max_wait = s.batch_linger;  // short: a dispatch's latency starts at the webhook
    consumer_->Start(batches, [this](kafka::Batch& b) { return HandleBatch(b); });
    log::Info("relay-dispatch configured",
              {{"upstream", s.planner.upstream_repo},
               {"api", s.api_url},
               {"repos", static_cast<int64_t>(allowlist_->Current()->entries().size())},
               {"max_writes_per_minute", s.budget.max_writes_per_minute},
               {"budget_scope", std::string(BudgetScopeName(s.budget.scope))},
               {"ledger_retention_ms", ledger_retention_ms_},
               {"concurrency", s.scheduler.concurrency}});
    return absl::OkStatus();
  }

 private:

  void Stop() {
    if (stopping_.exchange(true)) return;
    if (consumer_) consumer_->Stop();
    if (reconciler_) reconciler_->Stop();  // submits to the scheduler: stopped first
    if (scheduler_) scheduler_->Stop();
    // No call is in progress: what this instance holds of the shared
    // budget goes back to the others.
    if (budget_) budget_->Close();
    // Results of the last writes are recorded from producer callbacks: let
    // them land (they chain the ledger entry), then stop the retries.
    if (producer_) (void)producer_->Flush(settings_.kafka.delivery_timeout * 3);
    stopped_ = true;
    std::unique_lock lock(retry_mu_);
    retry_cv_.wait(lock, [this] { return retrying_ == 0; });
  }

  // --- the consumer side -----------------------------------------------------

  absl::Status HandleBatch(kafka::Batch& batch) {
    auto list = allowlist_->Current();
    HoldBatchStarts(batch);
    std::vector<std::shared_ptr<InFlight>> waits;
    std::vector<RecordPlan*> facts;
    // The key cut-over (key_cutover.h): a record keyed the new way waits,
    // with the rest of its partition, until every record keyed the old way
    // before it is handled, in every partition.
    for (size_t i = 0; i < batch.records().size(); ++i) {
      const kafka::ConsumedRecord& rec = batch.records()[i];
      if (rec.topic == settings_.topics.webhooks && !batch.IsHeld(rec) && !cutover_->MayHandle(rec)) batch.Hold(i);
    }
    for (size_t i = 0; i < batch.records().size(); ++i) {
      const kafka::ConsumedRecord& rec = batch.records()[i];
      if (batch.IsHeld(rec)) continue;
      TopicPartition input{rec.topic, rec.partition};
      Position where{rec.topic, rec.partition, rec.offset};
      // A record of a batch that comes again keeps the plan it got the
      // first time: an allowlist reloaded in between must not widen or
      // narrow a fan-out already under way.
      // Planned once: a batch that comes again neither re-plans nor
      // re-counts its records (refusals included).
      auto cached = planned_.find(where);
      if (cached == planned_.end()) {
        auto planned = PlanRecord(rec, *list);
        RecordPlan plan;
        if (planned.ok()) {
          plan = std::move(*planned);
        } else {
          plan.poison = std::string(planned.status().message());
        }
        cached = planned_.emplace(where, std::move(plan)).first;
      }
      RecordPlan& plan = cached->second;
      // A dead letter sent back by `relayctl dlq redrive` after a fix: a
      // write the ledger shows FAILED (GitHub never took it) is tried once
      // more, once per redriven record (a batch that comes again does not
      // retry it again). A copy made by `relayctl replay` is a replay: skipped.
      const bool redrive =
          rec.FindHeader(kafka::kRedrivenFromHeader) != nullptr && rec.FindHeader(kafka::kReplayedFromHeader) == nullptr;
      if (!plan.poison.empty()) {
        batch.Reject(i, plan.poison);
        continue;
      }
      if (plan.labels && !plan.labels_sent) facts.push_back(&plan);
      std::vector<v1::GitHubRequest> requests = plan.requests;
      for (auto& request : requests) {
        auto state = ledger_->Get(input, request.id());
        if (state == v1::LedgerEntry::STATE_UNSPECIFIED && plan.old_key_partition >= 0) {
          RELAY_ASSIGN_OR_RETURN(auto before, OldKeyState(plan.old_key_partition, request.id()));
          if (before != v1::LedgerEntry::STATE_UNSPECIFIED) {
            m_.skipped.Increment();
            continue;
          }
        }
        bool retry_failed = redrive && state == v1::LedgerEntry::FAILED && plan.redriven.insert(request.id()).second;
        if (state == v1::LedgerEntry::DONE || state == v1::LedgerEntry::SUPERSEDED ||
            (state == v1::LedgerEntry::FAILED && !retry_failed)) {
          m_.skipped.Increment();
          continue;
        }
        if (auto job = Track(input, std::move(request), state == v1::LedgerEntry::STARTED, retry_failed,
                             redrive ? *rec.FindHeader(kafka::kRedrivenFromHeader) : std::string())) {
          waits.push_back(std::move(job));
        } else {
          m_.skipped.Increment();
        }
      }
    }
    // In order, each once: sent again after a newer one (a batch that comes
    // again), an older fact would be the PR's last record for a while.
    for (RecordPlan* fact : facts) {
      RELAY_RETURN_IF_ERROR(kafka::SendAndWait(*producer_, *fact->labels));
      fact->labels_sent = true;
    }
    // Writes go on in the background; the batch is done when they are.
    auto deadline = std::chrono::steady_clock::now() + settings_.batch_wait;
    size_t pending = 0, unrecorded = 0;
    for (auto& w : waits) {
      bool recorded = false;
      if (!w->WaitUntil(deadline, &recorded)) {
        ++pending;
      } else if (!recorded) {
        ++unrecorded;
      }
    }
    if (pending + unrecorded > 0) {
      return absl::UnavailableError(std::to_string(pending) + " GitHub writes still in progress, " +
                                    std::to_string(unrecorded) + " not recorded; the batch comes again");
    }
    // Every record of the batch is handled: a later reading of them (a
    // group moved back) is a replay, and asks for nothing new.
    std::map<TopicPartition, int64_t> handled;
    for (const auto& rec : batch.records()) {
      if (rec.topic != settings_.topics.webhooks || batch.IsHeld(rec)) continue;
      int64_t& next = handled[{rec.topic, rec.partition}];
      next = std::max(next, rec.offset + 1);
    }
    for (const auto& [tp, next] : handled) RELAY_RETURN_IF_ERROR(ledger_->MarkHandled(tp, next));
    for (const auto& rec : batch.records()) planned_.erase({rec.topic, rec.partition, rec.offset});
    std::lock_guard lock(fence_mu_);
    for (const auto& rec : batch.records()) batch_starts_.erase({rec.topic, rec.partition});
    return absl::OkStatus();
  }

  // Where each partition of the batch in hand starts: every record before
  // it was handled and its offset stored, so committing it (with a STARTED
  // mark's transaction) never moves the group's offset past unfinished work
  // nor back behind what the consumer committed.
  void HoldBatchStarts(const kafka::Batch& batch) {
    std::map<TopicPartition, int64_t> starts;
    for (const auto& rec : batch.records()) {
      auto [it, fresh] = starts.try_emplace({rec.topic, rec.partition}, rec.offset);
      if (!fresh) it->second = std::min(it->second, rec.offset);
    }
    std::lock_guard lock(fence_mu_);
    for (const auto& [tp, start] : starts) batch_starts_[tp] = start;
  }

  // What a STARTED mark's transaction commits, and as whom (the producer's
  // committer thread asks before each commit): this member as the group
  // knows it now, and the starts of the batches in hand. A member another
  // generation replaced is refused by the coordinator: the transaction
  // aborts, the marks fail, and their writes never reach GitHub.
  absl::StatusOr<kafka::GroupOffsets> Fence() {
    kafka::GroupOffsets out;
    std::lock_guard lock(fence_mu_);
    if (!member_of_) return absl::UnavailableError("not consuming yet");
    out.member = member_of_->Member();
    out.next_offsets = batch_starts_;
    return out;
  }

  // The writes and facts one input record asks for; an error is poison.
  struct RecordPlan {
    std::vector<v1::GitHubRequest> requests;
    std::optional<kafka::Record> labels;
    bool labels_sent = false;  // acked: a batch that comes again does not send it again
    std::string poison;  // set: the record goes to the DLQ with this reason
    std::set<std::string> redriven;  // request ids retried for this redriven record
    // Keyed the new way: the partition its repository key gave it before
    // the cut-over, when another (-1: none).
    int32_t old_key_partition = -1;
  };

  // A write's state in the ledger of the partition a delivery had under
  // repository keys (key_cutover.h): the same delivery recorded under both
  // keys (redelivered by hand across the cut-over) is made once. Read once a
  // partition, after the cut-over passed (those entries are final then; one
  // left STARTED is its own partition's owner's to repeat). STARTED, DONE
  // or FAILED there: skipped here.
  absl::StatusOr<v1::LedgerEntry::State> OldKeyState(int32_t partition, const std::string& id) {
    TopicPartition old{settings_.topics.webhooks, partition};
    if (old_key_loaded_.insert(partition).second) {
      if (absl::Status loaded = old_key_ledger_->Load({old}); !loaded.ok()) {
        old_key_loaded_.erase(partition);
        return loaded;
      }
    }
    return old_key_ledger_->Get(old, id);
  }
  absl::StatusOr<RecordPlan> PlanRecord(const kafka::ConsumedRecord& rec, const allowlist::Allowlist& list) {
    RecordPlan out;
    if (rec.topic == settings_.topics.webhooks) {
      v1::WebhookRecord webhook;
      if (!webhook.ParseFromString(rec.value)) {
        m_.events.Add({{"event", "undecodable"}, {"outcome", "poison"}}).Increment();
        return absl::InvalidArgumentError("not a relay.v1.WebhookRecord");
      }
      auto plan = PlanWebhook(webhook, list, *keys_, settings_.planner, clock_->UnixMillis());
      if (!plan.ok()) {
        m_.events.Add({{"event", webhook.event()}, {"outcome", "poison"}}).Increment();
        return plan.status();
      }
      m_.events.Add({{"event", webhook.event()}, {"outcome", plan->ignored.empty() ? "relayed" : "ignored"}}).Increment();
      std::string detail;
      std::string why = NotFresh(rec, webhook.received_at_unix_ms(), ledger_->HandledThrough({rec.topic, rec.partition}),
                                 clock_->UnixMillis(), ledger_retention_ms_, &detail);
      if (!why.empty()) {
        if (!detail.empty()) log::Warn("webhook record not acted on", {{"delivery_id", webhook.delivery_id()}, {"reason", detail}});
        if (!plan->requests.empty()) m_.not_fresh.Add({{"reason", why}}).Increment(static_cast<double>(plan->requests.size()));
        if (plan->labels) m_.label_facts.Add({{"result", why}}).Increment();
        return out;
      }
      out.requests = std::move(plan->requests);
      for (const auto& [repo, reason] : plan->filtered) m_.filtered.Add({{"reason", reason}}).Increment();
      if (int64_t from = 0; HasOrderedKeys(rec, &from)) {
        int32_t old = kafka::KeyPartition(webhook.repository(), webhook_partitions_);
        out.old_key_partition = old != rec.partition ? old : -1;
      }
      if (plan->labels) {
        const auto& l = *plan->labels;
        bool newer = label_facts_table_->Offer(l);
        m_.label_facts.Add({{"result", newer ? "published" : "older"}}).Increment();
        if (newer) {
          out.labels = kafka::MessageRecord(settings_.topics.labels, l.upstream_repo() + "#" + std::to_string(l.number()),
                                            l, l.delivery_id());
        }
      }
      return out;
    }
    v1::GitHubRequest request;
    if (!request.ParseFromString(rec.value)) {
      m_.requests_refused.Increment();
      return absl::InvalidArgumentError("not a relay.v1.GitHubRequest");
    }
    if (absl::Status valid = ValidateRequest(request, list, settings_.planner); !valid.ok()) {
      m_.requests_refused.Increment();
      log::Warn("github.requests record refused", {{"request_id", request.id()}, {"repo", request.repo()},
                                                   {"reason", std::string(valid.message())}});
      return valid;
    }
    out.requests.push_back(std::move(request));
    return out;
  }

  // The job of a write: the one in progress (joined), or a new one; null
  // when the ledger says it ended meanwhile.
  std::shared_ptr<InFlight> Track(const TopicPartition& input, v1::GitHubRequest request, bool repeated,
                                  bool retry_failed = false, std::string redriven_from = "") {
    std::lock_guard lock(in_flight_mu_);
    auto it = in_flight_.find(request.id());
    if (it != in_flight_.end() && !it->second->cancelled) return it->second;
    // Looked up again under the lock: a job records DONE in the ledger
    // before it leaves in_flight_, so a write that ended since the batch's
    // first look is seen here and not made again.
    auto state = ledger_->Get(input, request.id());
    if (state == v1::LedgerEntry::DONE || state == v1::LedgerEntry::SUPERSEDED ||
        (state == v1::LedgerEntry::FAILED && !retry_failed)) {
      return nullptr;
    }
    auto job = std::make_shared<InFlight>(input, request, repeated);
    job->redriven_from = std::move(redriven_from);
    in_flight_[request.id()] = job;
    // A newer head of a PR supersedes only what came before it on the same
    // input partition (its order); the superseded one's end is written to
    // its own partition's ledger.
    // A repeated write (STARTED in the ledger: a crashed owner may have sent
    // it) is never coalesced: it is a started write, which always goes out.
    std::string coalesce = repeated ? "" : SupersedeKey(request);
    if (!coalesce.empty()) coalesce += "@" + input.topic + "/" + std::to_string(input.partition);
    scheduler_->Submit(
        std::move(request), [this, job](JobResult result) { Complete(job, std::move(result)); },
        [this, job] {
          std::lock_guard l(in_flight_mu_);
          return !job->cancelled;
        },
        [this, job] { return MarkStarted(job); }, std::move(coalesce));
    return job;
  }

  // Partitions going to another member: their writes not yet started are
  // dropped (they can no longer start: MarkStarted refuses), and the ones
  // that started get up to revoke_wait to finish, so their ledger entries
  // are there when the next owner reads. The whole group waits for this
  // (it runs in the rebalance callback), so the wait is bounded well under
  // the rebalance timeout whatever GitHub does: a write still running then
  // (a slow call, a backoff during an outage) is left STARTED in the ledger,
  // and its next owner makes it again, marked `repeated` and counted. Its
  // backoff here ends at its next attempt (it is no longer wanted).
  void Revoked(const std::vector<TopicPartition>& tps) {
    std::vector<std::shared_ptr<InFlight>> started;
    {
      std::lock_guard lock(in_flight_mu_);
      for (auto& [id, job] : in_flight_) {
        if (std::find(tps.begin(), tps.end(), job->input) == tps.end()) continue;
        job->cancelled = true;
        if (job->writing) started.push_back(job);
      }
    }
    auto deadline = std::chrono::steady_clock::now() + settings_.revoke_wait;
    size_t unfinished = 0;
    for (auto& job : started) {
      bool recorded = false;
      if (!job->WaitUntil(deadline, &recorded)) {
        ++unfinished;
        log::Warn("a started write did not finish within dispatch.revoke_wait; its partition moves on and its next "
                  "owner makes it again, marked repeated",
                  {{"request_id", job->request.id()}, {"repo", job->request.repo()},
                   {"revoke_wait_ms", settings_.revoke_wait.count()}});
      }
    }
    if (unfinished > 0) m_.revoked_in_doubt.Increment(static_cast<double>(unfinished));
    {
      std::lock_guard lock(fence_mu_);
      for (const auto& tp : tps) batch_starts_.erase(tp);
    }
    ledger_->Drop(tps);
    for (auto it = planned_.begin(); it != planned_.end();) {
      TopicPartition tp{std::get<0>(it->first), std::get<1>(it->first)};
      it = std::find(tps.begin(), tps.end(), tp) != tps.end() ? planned_.erase(it) : std::next(it);
    }
  }

  // Just before a write goes out.
  absl::Status MarkStarted(const std::shared_ptr<InFlight>& job) {
    {
      std::lock_guard lock(in_flight_mu_);
      if (job->cancelled) return absl::CancelledError("its input partition went to another member");
      job->writing = true;
    }
    return ledger_->Put(job->input, job->request, v1::LedgerEntry::STARTED);
  }

  // On a worker: record what happened, durably, then let the batch go.
  void Complete(const std::shared_ptr<InFlight>& job, JobResult result) {
    const v1::GitHubRequest& req = job->request;
    if (result.kind == JobResult::Kind::kSuperseded) {
      // Its partition moved meanwhile: the next owner decides (a late
      // SUPERSEDED entry would land over what it writes in the ledger).
      std::lock_guard lock(in_flight_mu_);
      if (job->cancelled) result.kind = JobResult::Kind::kCancelled;
    }
    if (result.kind == JobResult::Kind::kCancelled) {
      Forget(job, false);
      return;
    }
    bool ok = result.kind != JobResult::Kind::kFailed;
    // Superseded: never sent; its end is recorded (outcome, ledger) so the
    // record that asked for it is done, and a batch that comes again skips it.
    const bool superseded = result.kind == JobResult::Kind::kSuperseded;
    std::string kind(KindName(req));
    const char* result_name = result.kind == JobResult::Kind::kDone   ? "done"
                              : result.kind == JobResult::Kind::kNoOp ? "no_op"
                              : superseded                            ? "superseded"
                                                                      : "dead_lettered";
    m_.writes.Add({{"kind", kind}, {"result", result_name}}).Increment();
    if (!ok) m_.dead_letters.Add({{"reason", result.not_installed ? "app_not_installed" : "failed"}}).Increment();
    if (job->repeated && !superseded) m_.repeats.Increment();
    if (result.uncertain_retry) m_.uncertain.Increment();
    if (result.installation_id != 0) {
      m_.rate_remaining.Add({{"installation", std::to_string(result.installation_id)}})
          .Set(static_cast<double>(budget_->Remaining(result.installation_id)));
    }
    std::vector<kafka::Record> records;
    if (req.has_dispatch() && ok && !superseded) {
      m_.dispatches.Add({{"level", "L" + std::to_string(req.level())}}).Increment();
      const auto& d = req.dispatch();
      v1::DispatchRecord r;
      r.set_request_id(req.id());
      r.set_delivery_id(req.delivery_id());
      r.set_upstream_repo(d.upstream_repo());
      r.set_downstream_repo(req.repo());
      r.set_level(req.level());
      r.set_event(d.event());
      r.set_action(d.action());
      r.set_pr_number(d.pr_number());
      r.set_head_sha(d.head_sha());
      r.set_dispatched_at_unix_ms(clock_->UnixMillis());
      r.set_token_key_id(d.token_key_id());
      r.set_token_expires_at_unix(d.token_expires_at_unix());
      r.set_slimmed(d.slimmed());
      r.set_repeated(job->repeated || result.uncertain_retry);
      records.push_back(kafka::MessageRecord(settings_.topics.dispatches, req.repo(), r, req.delivery_id()));
    }
    if (!ok) {
      kafka::Record dead = kafka::MessageRecord(settings_.topics.failed, req.repo(), req, req.delivery_id());
      dead.headers.insert(dead.headers.end(), {{kafka::kDlqReasonHeader, result.error},
                                               {"relay-dlq-status", std::to_string(result.http_status)},
                                               {"relay-dlq-endpoint", result.endpoint}});
      if (!job->redriven_from.empty()) dead.headers.push_back({kafka::kRedrivenFromHeader, job->redriven_from});
      records.push_back(std::move(dead));
    }
    v1::GitHubOutcome outcome;
    outcome.set_request_id(req.id());
    outcome.set_kind(kind);
    outcome.set_repo(req.repo());
    outcome.set_endpoint(result.endpoint);
    outcome.set_http_status(static_cast<int>(result.http_status));
    outcome.set_attempts(result.attempts);
    outcome.set_result(result_name);
    outcome.set_error(result.error);
    outcome.set_finished_at_unix_ms(clock_->UnixMillis());
    outcome.set_latency_ms(result.latency.count());
    outcome.set_level(req.level());
    outcome.set_delivery_id(req.delivery_id());
    outcome.set_installation_id(result.installation_id);
    outcome.set_repeated(job->repeated || result.uncertain_retry);
    if (req.has_dispatch()) {
      outcome.set_upstream_repo(req.dispatch().upstream_repo());
      outcome.set_head_sha(req.dispatch().head_sha());
      outcome.set_pr_number(req.dispatch().pr_number());
    }
    if (superseded) outcome.set_superseded_by(result.superseded_by);
    records.push_back(kafka::MessageRecord(settings_.topics.outcomes, req.repo(), outcome, req.delivery_id()));
    // Recorded off the worker (it goes on to the next call): the records
    // together, then the ledger entry last: once it says DONE, nothing
    // above is sent again.
    auto c = std::make_shared<Completion>();
    c->job = job;
    c->records = std::move(records);
    c->state = superseded ? v1::LedgerEntry::SUPERSEDED : ok ? v1::LedgerEntry::DONE : v1::LedgerEntry::FAILED;
    RecordAsync(std::move(c));
  }

  struct Completion {
    std::shared_ptr<InFlight> job;
    std::vector<kafka::Record> records;
    v1::LedgerEntry::State state = v1::LedgerEntry::STATE_UNSPECIFIED;
    std::atomic<size_t> remaining{0};
    std::atomic<bool> failed{false};
    bool ledger_only = false;  // the records are in; only the ledger entry is missing
  };

  void RecordAsync(std::shared_ptr<Completion> c) {
    c->remaining = c->records.size();
    // Copies: the last ack may arrive (and use `c`) before this loop ends.
    std::vector<kafka::Record> records = c->records;
    for (auto& record : records) {
      producer_->Send(std::move(record), [this, c](absl::Status s) {
        if (!s.ok()) c->failed = true;
        if (--c->remaining > 0) return;
        // Stopping: the producer is being torn down; nothing chains on.
        if (stopped_) return Forget(c->job, false);
        if (c->failed) return RetryRecording(c);
        ledger_->PutAsync(c->job->input, c->job->request, c->state, [this, c](absl::Status done) {
          if (done.ok()) return Forget(c->job, true);
          if (stopped_) return Forget(c->job, false);
          c->ledger_only = true;
          RetryRecording(c);
        });
      });
    }
  }

  // The slow path, when Kafka refused a result record: retried on a thread
  // of its own until the broker takes it (or the service stops).
  void RetryRecording(std::shared_ptr<Completion> c) {
    {
      std::lock_guard lock(retry_mu_);
      ++retrying_;
    }
    std::thread([this, c] {
      bool recorded = true;
      if (!c->ledger_only) {
        for (auto& record : c->records) recorded = recorded && SendUntilAcked(record);
      }
      recorded = recorded && PutUntilAcked(c->job->input, c->job->request, c->state);
      Forget(c->job, recorded);
      std::lock_guard lock(retry_mu_);
      if (--retrying_ == 0) retry_cv_.notify_all();
    }).detach();
  }

  void Forget(const std::shared_ptr<InFlight>& job, bool recorded) {
    {
      std::lock_guard lock(in_flight_mu_);
      auto it = in_flight_.find(job->request.id());
      if (it != in_flight_.end() && it->second == job) in_flight_.erase(it);
    }
    job->Finish(recorded);
  }

  // A result must not be lost once GitHub has it: retried until the broker
  // takes it, unless the service is stopping (then the batch is not
  // committed and the write counts as in flight at the stop).
  bool SendUntilAcked(kafka::Record record) {
    for (auto backoff = 100ms;; backoff = std::min(backoff * 2, std::chrono::milliseconds(5000))) {
      absl::Status s = kafka::SendAndWait(*producer_, record);
      if (s.ok()) return true;
      log::Warn("recording a GitHub write failed; retrying", {{"topic", record.topic}, {"error", std::string(s.message())}});
      if (stopped_) return false;
      std::this_thread::sleep_for(backoff);
    }
  }
  bool PutUntilAcked(const TopicPartition& input, const v1::GitHubRequest& req, v1::LedgerEntry::State state) {
    for (auto backoff = 100ms;; backoff = std::min(backoff * 2, std::chrono::milliseconds(5000))) {
      absl::Status s = ledger_->Put(input, req, state);
      if (s.ok()) return true;
      log::Warn("ledger write failed; retrying", {{"error", std::string(s.message())}});
      if (stopped_) return false;
      std::this_thread::sleep_for(backoff);
    }
  }

  DispatchSettings settings_;
  const Clock* clock_;
  DispatchMetrics m_;
  std::unique_ptr<allowlist::AllowlistFile> allowlist_;
  std::unique_ptr<auth::RelayTokenKeys> keys_;
  std::unique_ptr<github::AppCredentials> credentials_;
  std::unique_ptr<kafka::Producer> producer_;
  std::unique_ptr<kafka::TopicReader> reader_;
  std::unique_ptr<Ledger> ledger_;
  std::unique_ptr<KeyCutover> cutover_;  // the consuming thread's
  std::unique_ptr<Ledger> old_key_ledger_;  // read-only (OldKeyState); the consuming thread's
  std::set<int32_t> old_key_loaded_;
  int webhook_partitions_ = 0;
  int64_t ledger_retention_ms_ = 0;  // dispatch.ledger's, read at start (0: kept forever)
  std::unique_ptr<LabelFacts> label_facts_table_;
  std::unique_ptr<SharedBudget> budget_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Reconciler> reconciler_;
  std::unique_ptr<service::GroupConsumer> consumer_;
  // The fence of STARTED marks (Fence): declared after the consumer, so
  // the producer that asks for it goes first.
  std::mutex fence_mu_;
  kafka::Consumer* member_of_ = nullptr;
  std::map<TopicPartition, int64_t> batch_starts_;  // partitions of batches in hand
  std::unique_ptr<kafka::Producer> started_producer_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};  // result recording gives up from here on
  std::mutex retry_mu_;
  std::condition_variable retry_cv_;
  int retrying_ = 0;  // RetryRecording threads running
  std::mutex in_flight_mu_;
  std::map<std::string, std::shared_ptr<InFlight>> in_flight_;
  // Plans of records whose batch is not stored yet (consuming thread only).
  using Position = std::tuple<std::string, int32_t, int64_t>;
  std::map<Position, RecordPlan> planned_;
};

}  // namespace

service::Definition Definition() {
  return service::Define("relay-dispatch", LoadSettings, DispatchService::Start);
}

}  // namespace relay::dispatch
