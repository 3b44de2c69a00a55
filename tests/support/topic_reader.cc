#include "support/topic_reader.h"

#include <librdkafka/rdkafka.h>

#include <map>

namespace relay::testing {

std::vector<kafka::ConsumedRecord> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                             std::chrono::milliseconds timeout, std::string* error) {
  std::vector<kafka::ConsumedRecord> out;
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", "relay-test-reader", err, sizeof err);  // required, never joined
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  rd_kafka_conf_set(conf, "fetch.message.max.bytes", "33554432", err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!rk) {
    *error = err;
    return out;
  }
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk, topic.c_str(), nullptr);
  rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, static_cast<int>(timeout.count()));
  rd_kafka_topic_destroy(rkt);
  if (e || md->topic_cnt != 1 || md->topics[0].err) {
    *error = std::string("metadata: ") + rd_kafka_err2str(e ? e : md->topics[0].err);
    if (md) rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    return out;
  }
  std::map<int32_t, int64_t> high;  // partition -> end offset
  rd_kafka_topic_partition_list_t* assign = rd_kafka_topic_partition_list_new(md->topics[0].partition_cnt);
  for (int i = 0; i < md->topics[0].partition_cnt; ++i) {
    int32_t p = md->topics[0].partitions[i].id;
    int64_t lo = 0, hi = 0;
    rd_kafka_query_watermark_offsets(rk, topic.c_str(), p, &lo, &hi, static_cast<int>(timeout.count()));
    if (hi > lo) {
      high[p] = hi;
      rd_kafka_topic_partition_list_add(assign, topic.c_str(), p)->offset = lo;
    }
  }
  rd_kafka_metadata_destroy(md);
  rd_kafka_assign(rk, assign);
  rd_kafka_topic_partition_list_destroy(assign);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!high.empty() && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (!m) {
      // The last offsets may hold no record (a transaction marker, a
      // compacted gap): the position says when a partition is done.
      rd_kafka_topic_partition_list_t* pos = rd_kafka_topic_partition_list_new(static_cast<int>(high.size()));
      for (const auto& [p, hi] : high) rd_kafka_topic_partition_list_add(pos, topic.c_str(), p);
      if (rd_kafka_position(rk, pos) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < pos->cnt; ++i) {
          auto it = high.find(pos->elems[i].partition);
          if (it != high.end() && pos->elems[i].offset >= it->second) high.erase(it);
        }
      }
      rd_kafka_topic_partition_list_destroy(pos);
      continue;
    }
    if (!m->err) {
      kafka::ConsumedRecord r;
      r.topic = topic;
      r.partition = m->partition;
      r.offset = m->offset;
      if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
      if (m->payload) r.value.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* value;
        size_t size;
        for (size_t i = 0; !rd_kafka_header_get_all(hdrs, i, &name, &value, &size); ++i) {
          r.headers.push_back({name, std::string(static_cast<const char*>(value), size)});
        }
      }
      out.push_back(std::move(r));
      auto it = high.find(m->partition);
      if (it != high.end() && m->offset + 1 >= it->second) high.erase(it);
    }
    rd_kafka_message_destroy(m);
  }
  if (!high.empty()) *error = "timed out before the end of " + std::to_string(high.size()) + " partitions";
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

}  // namespace relay::testing
