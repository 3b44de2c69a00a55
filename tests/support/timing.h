// Upper bounds of timing assertions, scaled for slow builds: a deadline the
// code must honour is asserted near its value (a broken timeout must fail
// the test), but sanitizers make everything several times slower, so the
// slack above the value grows with them. RELAY_TEST_TIME_SCALE overrides.
#pragma once

#include <chrono>
#include <cstdlib>
#include <thread>

namespace relay::testing {

inline double TimeScale() {
  if (const char* s = std::getenv("RELAY_TEST_TIME_SCALE")) return std::atof(s) > 0 ? std::atof(s) : 1.0;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return 3.0;
#else
  return 1.0;
#endif
}

// `nominal` plus `slack` scaled: the latest a deadline of `nominal` may fire.
inline std::chrono::milliseconds Within(std::chrono::milliseconds nominal, std::chrono::milliseconds slack) {
  return nominal + std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(slack.count()) * TimeScale()));
}

// Polls `condition` every `poll` until it holds or `timeout` passes; returns
// its last value (assert on it: a wait that ran out must fail the test).
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= until) return condition();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace relay::testing
