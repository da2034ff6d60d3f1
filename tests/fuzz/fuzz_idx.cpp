// libFuzzer target: hg::data::read_idx on arbitrary bytes, then a conversion and a reduction.
#include <halfgrad.h>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz_input_file(data, size);
  try {
    const hg::Tensor t = hg::data::read_idx(path);
    (void)t.to(hg::kFloat32).sum().item<double>();
  } catch (const hg::Error&) {
  }
  return 0;
}
