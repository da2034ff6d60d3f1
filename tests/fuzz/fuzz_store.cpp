// libFuzzer target: the rendezvous store's request parser (distributed/store_protocol.h) on
// arbitrary bytes, as rank 0's store reads them from a client: in chunks of varying size, with or
// without a token, against small limits so the refusals are reached too.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "distributed/store_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool auth = data[0] & 1;
  const size_t chunk = 1 + (data[0] >> 1);  // 1..128 bytes per recv
  hg::distributed::StoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 4096;
  limits.max_total_bytes = 8192;
  hg::distributed::ByteBudget budget{limits.max_total_bytes, 0};
  {
    hg::distributed::RequestParser parser(limits, budget, auth);
    const char* p = reinterpret_cast<const char*>(data) + 1;
    const char* end = reinterpret_cast<const char*>(data) + size;
    bool refused = false;
    while (p < end && !refused) {
      const char* stop = p + std::min<size_t>(chunk, end - p);
      while (p < stop && !refused) {
        const char* before = p;
        auto s = parser.feed(&p, stop);
        if (p < before || p > stop) __builtin_trap();
        if (s == hg::distributed::RequestParser::Status::Refused) {
          refused = true;
        } else if (s == hg::distributed::RequestParser::Status::Done) {
          const auto& r = parser.request();
          if (r.key.size() > limits.max_key_bytes || r.value.size() > limits.max_value_bytes) __builtin_trap();
          if (r.kind == 'S') budget.release(parser.take_reserved());  // as if stored and overwritten
          parser.reset();
        } else if (p != stop) {
          __builtin_trap();  // NeedMore must have used every byte
        }
      }
    }
    if (budget.used > budget.limit) __builtin_trap();
  }
  if (budget.used != 0) __builtin_trap();  // every reservation released
  return 0;
}
