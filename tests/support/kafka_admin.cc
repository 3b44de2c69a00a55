#include "support/kafka_admin.h"

#include <librdkafka/rdkafka.h>

#include "support/subprocess.h"

namespace relay::testing {

std::string CreateTopic(const std::string& bootstrap, const std::string& topic, int partitions,
                        const std::map<std::string, std::string>& configs) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  if (!rk) return err;
  rd_kafka_NewTopic_t* nt = rd_kafka_NewTopic_new(topic.c_str(), partitions, 1, err, sizeof err);
  for (const auto& [k, v] : configs) rd_kafka_NewTopic_set_config(nt, k.c_str(), v.c_str());
  rd_kafka_queue_t* q = rd_kafka_queue_new(rk);
  rd_kafka_CreateTopics(rk, &nt, 1, nullptr, q);
  std::string result = "timed out";
  if (rd_kafka_event_t* ev = rd_kafka_queue_poll(q, 30000)) {
    const rd_kafka_CreateTopics_result_t* res = rd_kafka_event_CreateTopics_result(ev);
    size_t n = 0;
    const rd_kafka_topic_result_t** topics = rd_kafka_CreateTopics_result_topics(res, &n);
    if (rd_kafka_event_error(ev)) {
      result = rd_kafka_event_error_string(ev);
    } else if (n == 1 && (rd_kafka_topic_result_error(topics[0]) == RD_KAFKA_RESP_ERR_NO_ERROR ||
                          rd_kafka_topic_result_error(topics[0]) == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)) {
      result = "";
    } else if (n == 1) {
      result = rd_kafka_topic_result_error_string(topics[0]);
    }
    rd_kafka_event_destroy(ev);
  }
  rd_kafka_queue_destroy(q);
  rd_kafka_NewTopic_destroy(nt);
  rd_kafka_destroy(rk);
  return result;
}

std::string FixtureBootstrap() {
  std::string b = ReadFile(Env("RELAY_IT_KAFKA_DIR") + "/bootstrap");
  return b.substr(0, b.find('\n'));
}

}  // namespace relay::testing
