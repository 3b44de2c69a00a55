// The producing edge of every service: send a record, learn once whether the
// broker made it durable.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

struct GroupMember;  // consumer.h

// Offsets a transaction commits for a consumer group, as one of its
// members (ProducerOptions::group_offsets).
struct GroupOffsets {
  std::shared_ptr<const GroupMember> member;
  std::map<TopicPartition, int64_t> next_offsets;  // the next record to read, per partition
};

// Called exactly once per Send, on a producer-owned thread (or, when the
// record cannot even be queued, on the caller's): OK means every in-sync
// replica has the record (acks=all). Must not block for long.
//
// Status codes: Unavailable (not acknowledged within the delivery timeout,
// broker down, queue full: a retry may succeed; the record may still have
// been written), InvalidArgument / NotFound / PermissionDenied (Kafka
// refuses this record permanently: too large, no such topic, not
// authorized), Aborted (the record failed on several producer instances in
// a row), Cancelled (the producer closed).
using DeliveryCallback = absl::AnyInvocable<void(absl::Status) &&>;

// True for the delivery results with which Kafka refuses a record for good
// (InvalidArgument, NotFound, PermissionDenied): sending the same record
// again cannot help; someone must fix the record, the topic or the ACLs.
bool IsPermanentProduceError(const absl::Status& status);

// Thread-safe.
class Producer {
 public:
  virtual ~Producer() = default;
  // Takes ownership of `record`. A failure to enqueue (local queue full,
  // producer closing) is reported through `done` too, never thrown.
  virtual void Send(Record record, DeliveryCallback done) = 0;
  // As Send, and the callback also gets the offset the broker gave the
  // record (-1 when it failed, or when this producer cannot tell: the
  // default, which the transactional producer keeps).
  using OffsetCallback = absl::AnyInvocable<void(absl::Status, int64_t offset) &&>;
  virtual void SendReported(Record record, OffsetCallback done) {
    Send(std::move(record), [done = std::move(done)](absl::Status s) mutable { std::move(done)(std::move(s), -1); });
  }
  // Waits until every record sent so far has had its callback, or timeout.
  virtual absl::Status Flush(std::chrono::milliseconds timeout) = 0;
  // False while no broker connection is up (for /readyz).
  virtual bool Connected() const = 0;
};

// Waiting for one acknowledgement: hand Callback() (or OffsetCallback())
// to exactly one Send, then Wait. The callback may run after a Wait that
// timed out (it then only records the result).
class Ack {
 public:
  Ack();
  // Copyable (they share the Ack's state), for callers that keep callbacks
  // in std::function.
  std::function<void(absl::Status)> Callback();
  std::function<void(absl::Status, int64_t)> OffsetCallback();
  // The broker's offset for the record (-1 when the producer cannot tell),
  // or the delivery's error (the codes of DeliveryCallback). Without a
  // timeout it waits for the callback, which every producer runs within its
  // delivery timeout; with one, past it: Unavailable "not acknowledged
  // within <timeout> ms" (the record may still be written).
  absl::StatusOr<int64_t> Wait(std::optional<std::chrono::milliseconds> timeout = std::nullopt);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// The partition (of `partitions`) relay's producers put a record keyed
// `key` in, when the record names none: librdkafka's default partitioner
// (consistent_random: CRC-32 of the key). -1 for an empty key (spread at
// random).
int32_t KeyPartition(std::string_view key, int32_t partitions);

// Send, then wait for the acknowledgement (Ack::Wait): the one way relay
// sends a record and blocks until it is durable. OK, or the delivery's error.
absl::Status SendAndWait(Producer& producer, Record record,
                         std::optional<std::chrono::milliseconds> timeout = std::nullopt);
// As SendAndWait, and the record's offset (SendReported; -1 when unknown).
absl::StatusOr<int64_t> SendAndWaitForOffset(Producer& producer, Record record,
                                              std::optional<std::chrono::milliseconds> timeout = std::nullopt);

struct ProducerOptions {
  std::string bootstrap;                     // "host:port,host:port"
  std::string client_id = "relay";
  // Upper bound on the time from Send to the callback, retries and re-sends
  // after a producer recreation included (librdkafka message.timeout.ms,
  // plus relay's own deadline for re-sent records). Past it the callback
  // gets Unavailable.
  std::chrono::milliseconds delivery_timeout{5000};
  std::chrono::milliseconds linger{2};
  std::string compression = "lz4";
  int64_t queue_max_messages = 200'000;
  int64_t queue_max_kbytes = 512 * 1024;     // bounded memory for in-flight records
  int64_t message_max_bytes = 32 * 1024 * 1024;
  // How many times a record may be re-sent after the producer was recreated
  // because of a fatal (idempotence) error.
  int max_recreations_per_record = 3;
  // Raw librdkafka properties, applied last. The ones that carry relay's
  // guarantees (acks, idempotence, timeouts, retries, in-flight limits) are
  // refused: see kProtectedProducerProperties.
  std::map<std::string, std::string> extra;
  // Set: a transactional producer (below) with this fixed id, for a role
  // only one process may hold (lifecycle's leader).
  std::string transactional_id;
  // Transactional only. Set: every transaction also commits these offsets
  // for the member's group (asked on the committer thread before each
  // commit), so the group coordinator refuses the whole transaction, and
  // none of its records becomes visible, once the member is no longer in
  // the group's current generation (KIP-447: a member that lost its
  // partitions without knowing it is fenced). An error from it, or no
  // member or no offsets, aborts the transaction (its records fail with
  // Unavailable): a transaction is never committed unfenced.
  std::function<absl::StatusOr<GroupOffsets>()> group_offsets;
  // Transactional only: how long a transaction may stay open
  // (transaction.timeout.ms). A transaction left open by a process that
  // died blocks read_committed readers of its partitions, and with
  // group_offsets the group's committed offsets (KIP-447's stable offset
  // fetch), until the broker aborts it: this long, plus up to its check
  // interval (transaction.abort.timed.out.transaction.cleanup.interval.ms,
  // 10 s by default). 0: twice the delivery timeout, at least 10 s.
  std::chrono::milliseconds transaction_timeout{0};
  // Transactional only. Set when the id is this process's alone (it carries
  // a random part): no other producer can hold it, so a fatal error is not a
  // new holder's fencing but the broker refusing this handle's state (seen:
  // EndTxn answered INVALID_TXN_STATE under load, after which librdkafka
  // refuses every call). The producer then makes a new handle of the same
  // id (init_transactions, which ends what the old one left open) and goes
  // on; the records in hand fail with Unavailable (none became visible).
  // Never for an id shared by design (a role's leader): there a fatal error
  // is the new holder's fence, and a new handle would fence it in turn.
  bool renew_after_fatal = false;
};

// The transactional producer (ProducerOptions::transactional_id): records
// become visible to read_committed consumers (librdkafka's default, so every
// relay consumer) only in committed transactions, and making one fences
// every earlier producer of the same id at the broker: its open transaction
// is aborted and its later writes are refused, whatever it believes. Sends
// are grouped: each transaction carries what was sent while the previous
// one committed; a callback runs once its transaction committed (OK), was
// aborted (Unavailable: none of its records is visible), or once the
// producer was fenced (FencedError, for this and every later Send; a fenced
// producer is never recreated: that would fence the new holder in turn).
// With group_offsets, a transaction the group coordinator refuses (its
// member is stale: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) is aborted and its
// records fail with GroupFencedError; the producer goes on (the member may
// rejoin).
// Making it blocks until the fencing is done (init_transactions).
absl::Status FencedError(std::string_view reason);
bool IsFenced(const absl::Status& status);
absl::Status GroupFencedError(std::string_view reason);
bool IsGroupFenced(const absl::Status& status);

// librdkafka properties `extra` may not set: they would weaken acks=all,
// idempotence, per-key order or the delivery bound.
inline constexpr const char* kProtectedProducerProperties[] = {
    "acks", "request.required.acks", "enable.idempotence", "enable.gapless.guarantee",
    "message.timeout.ms", "delivery.timeout.ms", "retries", "message.send.max.retries",
    "max.in.flight", "max.in.flight.requests.per.connection", "delivery.report.only.error",
    "bootstrap.servers", "metadata.broker.list", "transactional.id", "transaction.timeout.ms"};

// Idempotent (enable.idempotence=true, acks=all) librdkafka producer.
// Errors are classified once, in errors.cc. When librdkafka raises a fatal
// error (librdkafka 2.0.2 can do so for idempotence sequence problems, e.g.
// OUT_OF_ORDER_SEQUENCE_NUMBER or a producer-id/epoch mismatch), the
// producer is recreated and every record it still held is sent again on the
// new one, in the order of the Sends, before any record sent after the
// error: nothing handed to Send is dropped because of it, and records of one
// key stay in order. Such a re-send may duplicate a record that the broker
// had already written; consumers deduplicate by the record's id (see
// docs/architecture.md). If a new handle cannot be made, recreation is
// retried every second while records past their deadline are failed, so no
// callback waits longer than delivery_timeout (plus one poll interval).
absl::StatusOr<std::unique_ptr<Producer>> NewKafkaProducer(ProducerOptions options,
                                                          prometheus::Registry* metrics);

// For fault-injection tests only: makes the producer's current librdkafka
// handle raise a fatal error, as librdkafka does on idempotence failures.
void TestRaiseFatalError(Producer* producer);
// For fault-injection tests only: the next `count` attempts to make a new
// librdkafka handle fail, as rd_kafka_new can (out of memory, threads).
void TestFailRecreations(Producer* producer, int count);

}  // namespace relay::kafka
