// libFuzzer target over what downstream CI sends the collector: callback
// bodies (ParseCallback) and test reports (the streaming JUnit XML parser,
// fed in chunks split where the input says, and the JSON equivalent).
// The first byte picks the parser; for JUnit the second picks the chunk size.
//   tools/dev fuzz [SECONDS]
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "relay/collector/callback.h"
#include "relay/collector/junit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  std::string_view in(reinterpret_cast<const char*>(data) + 2, size - 2);
  switch (data[0] % 3) {
    case 0: {
      auto parsed = relay::collector::ParseCallback(in);
      if (parsed.ok()) (void)relay::collector::JobId(parsed->request);
      break;
    }
    case 1: {
      relay::collector::ReportOptions options;
      auto parser = relay::collector::NewJUnitParser(options, [](relay::collector::TestCase&&) { return absl::OkStatus(); });
      size_t chunk = 1 + data[1] % 64;
      absl::Status st;
      for (size_t at = 0; at < in.size() && st.ok(); at += chunk) st = parser->Feed(in.substr(at, chunk));
      if (st.ok()) (void)parser->Finish();
      break;
    }
    default: {
      relay::collector::ReportOptions options;
      auto parser = relay::collector::NewJsonReportParser(options, [](relay::collector::TestCase&&) { return absl::OkStatus(); });
      if (parser->Feed(in).ok()) (void)parser->Finish();
      break;
    }
  }
  return 0;
}
