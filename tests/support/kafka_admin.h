// Creates test-only topics on the real broker (the broker runs with
// auto.create.topics.enable=false, as production should).
#pragma once

#include <map>
#include <string>

namespace relay::testing {

// Creates `topic` with `partitions` partitions; OK if it exists. Returns an
// empty string on success, the error otherwise.
// `configs`: topic settings (e.g. cleanup.policy=compact).
std::string CreateTopic(const std::string& bootstrap, const std::string& topic, int partitions,
                        const std::map<std::string, std::string>& configs = {});

// Bootstrap address of the broker the ctest `kafka` fixture started
// (tools/kafka/kafka-dev writes it to $RELAY_IT_KAFKA_DIR/bootstrap).
std::string FixtureBootstrap();

}  // namespace relay::testing
