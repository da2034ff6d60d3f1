// libFuzzer target: hg::load and hg::load_metadata on arbitrary bytes, then a reduction over
// every tensor. Anything but success or hg::Error (a crash, a sanitizer report, another
// exception) is a finding.
#include <halfgrad.h>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz_input_file(data, size);
  try {
    for (const auto& [name, t] : hg::load(path)) (void)t.to(hg::kFloat64).sum().item<double>();
  } catch (const hg::Error&) {
  }
  try {
    (void)hg::load_metadata(path);
  } catch (const hg::Error&) {
  }
  return 0;
}
