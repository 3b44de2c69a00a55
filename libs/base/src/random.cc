#include "relay/base/random.h"

#include <openssl/rand.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>

#include "absl/strings/escaping.h"

namespace relay {

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(raw.size())) != 1) {
    static std::atomic<uint64_t> n{0};
    for (size_t i = 0; i < bytes; i += sizeof(uint64_t)) {
      uint64_t v = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                   (++n * 0x9E3779B97F4A7C15ull) ^ std::hash<const void*>{}(&raw);
      std::memcpy(raw.data() + i, &v, std::min(sizeof v, bytes - i));
    }
  }
  return absl::BytesToHexString(raw);
}

}  // namespace relay
