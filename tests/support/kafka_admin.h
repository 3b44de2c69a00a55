// Creates test-only topics on the real broker (the broker runs with
// auto.create.topics.enable=false, as production should).
#pragma once

#include <string>

namespace relay::testing {

// Creates `topic` with `partitions` partitions; OK if it exists. Returns an
// empty string on success, the error otherwise.
std::string CreateTopic(const std::string& bootstrap, const std::string& topic, int partitions);

}  // namespace relay::testing
