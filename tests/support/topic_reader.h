// Reads a whole topic from the beginning to its current end, independently
// of relay's own consumer code: raw librdkafka, manual assignment of every
// partition, no consumer group, nothing committed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "relay/kafka/record.h"

namespace relay::testing {

// Every record in `topic` up to the high watermark seen at call time.
// Returns an empty vector and sets *error when the topic cannot be read.
std::vector<kafka::ConsumedRecord> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                             std::chrono::milliseconds timeout, std::string* error);

}  // namespace relay::testing
