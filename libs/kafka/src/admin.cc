#include "relay/kafka/admin.h"

#include <librdkafka/rdkafka.h>

#include <mutex>

#include "relay/base/status.h"
#include "relay/kafka/errors.h"
#include "relay/kafka/security.h"

namespace relay::kafka {
namespace {

class KafkaAdmin final : public Admin {
 public:
  ~KafkaAdmin() override {
    if (rk_) rd_kafka_destroy(rk_);
  }

  absl::Status Start(const std::string& bootstrap, const std::string& client_id) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "client.id", client_id.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(std::string("kafka admin: ") + err);
    }
    if (absl::Status s = ApplySecurity(conf); !s.ok()) {
      rd_kafka_conf_destroy(conf);
      return s;
    }
    RouteLogs(conf);
    // A producer handle: the admin API needs a handle of either kind, and
    // this one never produces.
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(std::string("kafka admin: ") + err);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TopicDescription> DescribeTopic(const std::string& topic,
                                                 std::chrono::milliseconds timeout) override {
    std::lock_guard lock(mu_);
    TopicDescription d;
    d.name = topic;
    RELAY_RETURN_IF_ERROR(Metadata(topic, timeout, &d));
    RELAY_RETURN_IF_ERROR(Configs(topic, timeout, &d));
    return d;
  }

 private:
  absl::Status Metadata(const std::string& topic, std::chrono::milliseconds timeout, TopicDescription* d) {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk_, 0, rkt, &md, static_cast<int>(timeout.count()));
    rd_kafka_topic_destroy(rkt);
    if (e) return ToStatus(e, ("metadata of topic " + topic).c_str());
    absl::Status status = absl::OkStatus();
    if (md->topic_cnt != 1) {
      status = absl::UnavailableError("metadata of topic " + topic + ": no answer for the topic");
    } else if (md->topics[0].err) {
      status = md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                   ? absl::NotFoundError("topic " + topic + " does not exist")
                   : ToStatus(md->topics[0].err, ("topic " + topic).c_str());
    } else {
      d->partitions = md->topics[0].partition_cnt;
      d->replication_factor = d->partitions > 0 ? md->topics[0].partitions[0].replica_cnt : 0;
    }
    rd_kafka_metadata_destroy(md);
    return status;
  }

  absl::Status Configs(const std::string& topic, std::chrono::milliseconds timeout, TopicDescription* d) {
    char err[512];
    rd_kafka_ConfigResource_t* resource = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic.c_str());
    rd_kafka_AdminOptions_t* options = rd_kafka_AdminOptions_new(rk_, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    rd_kafka_AdminOptions_set_request_timeout(options, static_cast<int>(timeout.count()), err, sizeof err);
    rd_kafka_queue_t* queue = rd_kafka_queue_new(rk_);
    rd_kafka_DescribeConfigs(rk_, &resource, 1, options, queue);
    rd_kafka_event_t* ev = rd_kafka_queue_poll(queue, static_cast<int>(timeout.count()) + 1000);
    absl::Status status = absl::UnavailableError("describe configs of " + topic + ": no answer in time");
    if (ev) {
      if (rd_kafka_event_error(ev)) {
        status = ToStatus(rd_kafka_event_error(ev), ("describe configs of " + topic).c_str());
      } else {
        size_t n = 0;
        const rd_kafka_ConfigResource_t** results =
            rd_kafka_DescribeConfigs_result_resources(rd_kafka_event_DescribeConfigs_result(ev), &n);
        if (n == 1 && rd_kafka_ConfigResource_error(results[0])) {
          status = ToStatus(rd_kafka_ConfigResource_error(results[0]), ("describe configs of " + topic).c_str());
        } else if (n == 1) {
          size_t entries = 0;
          const rd_kafka_ConfigEntry_t** configs = rd_kafka_ConfigResource_configs(results[0], &entries);
          for (size_t i = 0; i < entries; ++i) {
            const char* value = rd_kafka_ConfigEntry_value(configs[i]);
            d->configs[rd_kafka_ConfigEntry_name(configs[i])] = value ? value : "";
          }
          status = absl::OkStatus();
        }
      }
      rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(queue);
    rd_kafka_AdminOptions_destroy(options);
    rd_kafka_ConfigResource_destroy(resource);
    return status;
  }

  std::mutex mu_;
  rd_kafka_t* rk_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Admin>> NewKafkaAdmin(const std::string& bootstrap, const std::string& client_id) {
  if (bootstrap.empty()) return absl::InvalidArgumentError("kafka admin: bootstrap is empty");
  auto admin = std::make_unique<KafkaAdmin>();
  if (auto s = admin->Start(bootstrap, client_id); !s.ok()) return s;
  return std::unique_ptr<Admin>(std::move(admin));
}

absl::Status CheckTopicAccepts(const TopicDescription& topic, int64_t max_record_bytes) {
  auto it = topic.configs.find("max.message.bytes");
  if (it == topic.configs.end()) {
    return absl::FailedPreconditionError("topic " + topic.name + ": max.message.bytes not reported by the broker");
  }
  int64_t limit = 0;
  try {
    limit = std::stoll(it->second);
  } catch (const std::exception&) {
    return absl::FailedPreconditionError("topic " + topic.name + ": max.message.bytes '" + it->second +
                                         "' is not a number");
  }
  int64_t needed = max_record_bytes + kRecordBatchOverhead;
  if (limit < needed) {
    return absl::FailedPreconditionError("topic " + topic.name + ": max.message.bytes is " + std::to_string(limit) +
                                         ", records of up to " + std::to_string(max_record_bytes) +
                                         " bytes need at least " + std::to_string(needed) +
                                         " (deploy/kafka/topics.txt declares it)");
  }
  return absl::OkStatus();
}

absl::Status CheckLogAppendTime(const TopicDescription& topic) {
  auto it = topic.configs.find("message.timestamp.type");
  if (it == topic.configs.end()) {
    return absl::FailedPreconditionError("topic " + topic.name +
                                         ": message.timestamp.type not reported by the broker");
  }
  if (it->second != "LogAppendTime") {
    return absl::FailedPreconditionError("topic " + topic.name + ": message.timestamp.type is " +
                                         (it->second.empty() ? std::string("empty") : it->second) +
                                         ", LogAppendTime needed (records stamped by the broker's clock; "
                                         "deploy/kafka/topics.txt declares it)");
  }
  return absl::OkStatus();
}

}  // namespace relay::kafka
