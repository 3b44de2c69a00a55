#include "relay/kafka/cluster_admin.h"

#include <librdkafka/rdkafka.h>

#include "absl/cleanup/cleanup.h"
#include "rdkafka_util.h"
#include "relay/kafka/errors.h"

namespace relay::kafka {
namespace {

std::string ErrorText(const rd_kafka_error_t* e) { return e ? rd_kafka_error_string(e) : ""; }

class KafkaClusterAdmin final : public ClusterAdmin {
 public:
  explicit KafkaClusterAdmin(std::chrono::milliseconds timeout) : timeout_(static_cast<int>(timeout.count())) {}
  ~KafkaClusterAdmin() override {
    if (rk_) rd_kafka_destroy(rk_);
  }

  absl::Status Start(const std::string& bootstrap) {
    bootstrap_ = bootstrap;
    auto rk = internal::NewUngroupedConsumer("kafka admin",
                                             {{"bootstrap.servers", bootstrap},
                                              {"client.id", "relayctl"},
                                              {"fetch.wait.max.ms", "10"},
                                              {"fetch.error.backoff.ms", "10"},
                                              // TimestampAt learns at once that only
                                              // transaction markers are left.
                                              {"enable.partition.eof", "true"},
                                              // Quiet about an unreachable broker: the first
                                              // metadata call reports it, once.
                                              {"log_level", "0"}},
                                             {});
    if (!rk.ok()) return rk.status();
    rk_ = *rk;
    if (auto t = Topics(); !t.ok()) return t.status();
    return absl::OkStatus();
  }

  absl::StatusOr<std::map<std::string, int>> Topics() override {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk_, 1, nullptr, &md, timeout_);
    if (e) {
      return absl::UnavailableError("cannot reach Kafka at " + bootstrap_ + ": " + rd_kafka_err2str(e));
    }
    std::map<std::string, int> out;
    for (int i = 0; i < md->topic_cnt; ++i) {
      std::string name = md->topics[i].topic;
      if (name.starts_with("__") || md->topics[i].err) continue;
      out[name] = md->topics[i].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
    return out;
  }

  absl::StatusOr<std::map<int32_t, PartitionOffsets>> Offsets(const std::string& topic) override {
    auto n = PartitionCount(topic);
    if (!n.ok()) return n.status();
    std::map<int32_t, PartitionOffsets> out;
    for (int32_t p = 0; p < *n; ++p) {
      PartitionOffsets o;
      rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk_, topic.c_str(), p, &o.low, &o.high, timeout_);
      if (e) return ToStatus(e, ("offsets of " + topic + "/" + std::to_string(p)).c_str());
      out[p] = o;
    }
    return out;
  }

  absl::StatusOr<std::map<int32_t, int64_t>> OffsetsForTime(const std::string& topic, int64_t unix_ms) override {
    auto n = PartitionCount(topic);
    if (!n.ok()) return n.status();
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(*n);
    absl::Cleanup free_list = [list] { rd_kafka_topic_partition_list_destroy(list); };
    for (int32_t p = 0; p < *n; ++p) rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = unix_ms;
    // The ends first: read after, they would take in records written
    // between the two requests, after the time (a replay --to-time now).
    auto ends = Offsets(topic);
    if (!ends.ok()) return ends.status();
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk_, list, timeout_);
    if (e) return ToStatus(e, ("offsets by time of " + topic).c_str());
    std::map<int32_t, int64_t> out;
    for (int i = 0; i < list->cnt; ++i) {
      const auto& tp = list->elems[i];
      if (tp.err) return ToStatus(tp.err, ("offset by time of " + topic + "/" + std::to_string(tp.partition)).c_str());
      // -1: no record at or after the time: the end.
      out[tp.partition] = tp.offset < 0 ? (*ends)[tp.partition].high : tp.offset;
    }
    return out;
  }

  absl::StatusOr<std::vector<GroupDescription>> Groups() override {
    auto ev = Admin(RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPS, [&](rd_kafka_AdminOptions_t* o, rd_kafka_queue_t* q) {
      rd_kafka_ListConsumerGroups(rk_, o, q);
    });
    if (!ev.ok()) return ev.status();
    absl::Cleanup free_ev = [&] { rd_kafka_event_destroy(*ev); };
    const auto* result = rd_kafka_event_ListConsumerGroups_result(*ev);
    size_t n = 0;
    const rd_kafka_ConsumerGroupListing_t** groups = rd_kafka_ListConsumerGroups_result_valid(result, &n);
    std::vector<GroupDescription> out;
    for (size_t i = 0; i < n; ++i) {
      GroupDescription g;
      g.id = rd_kafka_ConsumerGroupListing_group_id(groups[i]);
      g.state = rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupListing_state(groups[i]));
      out.push_back(std::move(g));
    }
    return out;
  }

  absl::StatusOr<GroupDescription> DescribeGroup(const std::string& group) override {
    const char* names[] = {group.c_str()};
    auto ev = Admin(RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS, [&](rd_kafka_AdminOptions_t* o, rd_kafka_queue_t* q) {
      rd_kafka_DescribeConsumerGroups(rk_, names, 1, o, q);
    });
    if (!ev.ok()) return ev.status();
    absl::Cleanup free_ev = [&] { rd_kafka_event_destroy(*ev); };
    size_t n = 0;
    const rd_kafka_ConsumerGroupDescription_t** groups =
        rd_kafka_DescribeConsumerGroups_result_groups(rd_kafka_event_DescribeConsumerGroups_result(*ev), &n);
    if (n != 1) return absl::UnavailableError("describe group " + group + ": no answer for the group");
    if (const rd_kafka_error_t* e = rd_kafka_ConsumerGroupDescription_error(groups[0])) {
      return absl::UnavailableError("describe group " + group + ": " + ErrorText(e));
    }
    GroupDescription g;
    g.id = group;
    g.state = rd_kafka_consumer_group_state_name(rd_kafka_ConsumerGroupDescription_state(groups[0]));
    g.members = static_cast<int>(rd_kafka_ConsumerGroupDescription_member_count(groups[0]));
    return g;
  }

  absl::StatusOr<std::map<TopicPartition, int64_t>> CommittedOffsets(const std::string& group) override {
    rd_kafka_ListConsumerGroupOffsets_t* req = rd_kafka_ListConsumerGroupOffsets_new(group.c_str(), nullptr);
    absl::Cleanup free_req = [req] { rd_kafka_ListConsumerGroupOffsets_destroy(req); };
    auto ev = Admin(RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS, [&](rd_kafka_AdminOptions_t* o, rd_kafka_queue_t* q) {
      rd_kafka_ListConsumerGroupOffsets(rk_, &req, 1, o, q);
    });
    if (!ev.ok()) return ev.status();
    absl::Cleanup free_ev = [&] { rd_kafka_event_destroy(*ev); };
    size_t n = 0;
    const rd_kafka_group_result_t** groups =
        rd_kafka_ListConsumerGroupOffsets_result_groups(rd_kafka_event_ListConsumerGroupOffsets_result(*ev), &n);
    if (n != 1) return absl::UnavailableError("offsets of group " + group + ": no answer for the group");
    if (const rd_kafka_error_t* e = rd_kafka_group_result_error(groups[0])) {
      return absl::UnavailableError("offsets of group " + group + ": " + ErrorText(e));
    }
    std::map<TopicPartition, int64_t> out;
    const rd_kafka_topic_partition_list_t* parts = rd_kafka_group_result_partitions(groups[0]);
    for (int i = 0; parts && i < parts->cnt; ++i) {
      if (parts->elems[i].offset < 0) continue;  // nothing committed there
      out[{parts->elems[i].topic, parts->elems[i].partition}] = parts->elems[i].offset;
    }
    return out;
  }

  absl::Status SetCommittedOffsets(const std::string& group,
                                   const std::map<TopicPartition, int64_t>& offsets) override {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(offsets.size()));
    absl::Cleanup free_list = [list] { rd_kafka_topic_partition_list_destroy(list); };
    for (const auto& [tp, offset] : offsets) {
      rd_kafka_topic_partition_list_add(list, tp.topic.c_str(), tp.partition)->offset = offset;
    }
    rd_kafka_AlterConsumerGroupOffsets_t* req = rd_kafka_AlterConsumerGroupOffsets_new(group.c_str(), list);
    absl::Cleanup free_req = [req] { rd_kafka_AlterConsumerGroupOffsets_destroy(req); };
    auto ev = Admin(RD_KAFKA_ADMIN_OP_ALTERCONSUMERGROUPOFFSETS, [&](rd_kafka_AdminOptions_t* o, rd_kafka_queue_t* q) {
      rd_kafka_AlterConsumerGroupOffsets(rk_, &req, 1, o, q);
    });
    if (!ev.ok()) return ev.status();
    absl::Cleanup free_ev = [&] { rd_kafka_event_destroy(*ev); };
    size_t n = 0;
    const rd_kafka_group_result_t** groups =
        rd_kafka_AlterConsumerGroupOffsets_result_groups(rd_kafka_event_AlterConsumerGroupOffsets_result(*ev), &n);
    if (n != 1) return absl::UnavailableError("set offsets of group " + group + ": no answer for the group");
    if (const rd_kafka_error_t* e = rd_kafka_group_result_error(groups[0])) {
      if (rd_kafka_error_code(e) == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID) {
        return absl::FailedPreconditionError("group " + group + " has members: stop its consumers first");
      }
      return absl::UnavailableError("set offsets of group " + group + ": " + ErrorText(e));
    }
    const rd_kafka_topic_partition_list_t* parts = rd_kafka_group_result_partitions(groups[0]);
    for (int i = 0; parts && i < parts->cnt; ++i) {
      if (parts->elems[i].err == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID) {
        return absl::FailedPreconditionError("group " + group + " has members: stop its consumers first");
      }
      if (parts->elems[i].err) {
        return ToStatus(parts->elems[i].err, ("set offset of group " + group + " on " + parts->elems[i].topic + "/" +
                                              std::to_string(parts->elems[i].partition))
                                                 .c_str());
      }
    }
    return absl::OkStatus();
  }

  absl::Status DeleteGroup(const std::string& group) override {
    rd_kafka_DeleteGroup_t* req = rd_kafka_DeleteGroup_new(group.c_str());
    absl::Cleanup free_req = [req] { rd_kafka_DeleteGroup_destroy(req); };
    auto ev = Admin(RD_KAFKA_ADMIN_OP_DELETEGROUPS, [&](rd_kafka_AdminOptions_t* o, rd_kafka_queue_t* q) {
      rd_kafka_DeleteGroups(rk_, &req, 1, o, q);
    });
    if (!ev.ok()) return ev.status();
    absl::Cleanup free_ev = [&] { rd_kafka_event_destroy(*ev); };
    size_t n = 0;
    const rd_kafka_group_result_t** groups =
        rd_kafka_DeleteGroups_result_groups(rd_kafka_event_DeleteGroups_result(*ev), &n);
    if (n == 1) {
      if (const rd_kafka_error_t* e = rd_kafka_group_result_error(groups[0])) {
        return absl::UnavailableError("delete group " + group + ": " + ErrorText(e));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> TimestampAt(const std::string& topic, int32_t partition, int64_t offset) override {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, topic.c_str(), partition)->offset = offset;
    rd_kafka_resp_err_t e = rd_kafka_assign(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (e) return ToStatus(e, "assign");
    absl::Cleanup unassign = [this] { rd_kafka_assign(rk_, nullptr); };
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_);
    while (std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
      if (!m) continue;
      absl::Cleanup free_m = [m] { rd_kafka_message_destroy(m); };
      if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        return absl::NotFoundError("no record at " + topic + "/" + std::to_string(partition) + "@" +
                                   std::to_string(offset));
      }
      if (m->err) continue;
      if (m->offset < offset) continue;
      return rd_kafka_message_timestamp(m, nullptr);
    }
    return absl::DeadlineExceededError("no answer for " + topic + "/" + std::to_string(partition) + "@" +
                                       std::to_string(offset) + " in time");
  }

 private:
  absl::StatusOr<int> PartitionCount(const std::string& topic) {
    auto topics = Topics();
    if (!topics.ok()) return topics.status();
    auto it = topics->find(topic);
    if (it == topics->end()) return absl::NotFoundError("no topic " + topic);
    return it->second;
  }

  // Runs one admin request and returns its result event (the caller
  // destroys it), or the request's error.
  template <typename F>
  absl::StatusOr<rd_kafka_event_t*> Admin(rd_kafka_admin_op_t op, F&& request) {
    char err[512];
    rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk_, op);
    rd_kafka_AdminOptions_set_request_timeout(options, timeout_, err, sizeof err);
    rd_kafka_queue_t* queue = rd_kafka_queue_new(rk_);
    request(options, queue);
    rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, timeout_ + 1000);
    rd_kafka_queue_destroy(queue);
    rd_kafka_AdminOptions_destroy(options);
    if (!ev) return absl::UnavailableError("Kafka at " + bootstrap_ + " did not answer in time");
    if (rd_kafka_event_error(ev)) {
      auto s = ToStatus(rd_kafka_event_error(ev), rd_kafka_event_error_string(ev));
      rd_kafka_event_destroy(ev);
      return s;
    }
    return ev;
  }

  int timeout_;
  std::string bootstrap_;
  rd_kafka_t* rk_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterAdmin>> NewClusterAdmin(const std::string& bootstrap,
                                                              std::chrono::milliseconds timeout) {
  if (bootstrap.empty()) return absl::InvalidArgumentError("no Kafka bootstrap given");
  auto admin = std::make_unique<KafkaClusterAdmin>(timeout);
  if (auto s = admin->Start(bootstrap); !s.ok()) return s;
  return std::unique_ptr<ClusterAdmin>(std::move(admin));
}

}  // namespace relay::kafka
