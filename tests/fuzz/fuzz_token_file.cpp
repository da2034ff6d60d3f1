// libFuzzer target: hg::data::TokenFile on arbitrary bytes. The first input byte picks the
// vocabulary size the reader asks for (0: the header's; else 1 << (byte % 17)); the rest is the
// file. A file that opens must hold count tokens, each below the vocabulary size, and a
// TokenDataset over it must serve windows or refuse with an hg::Error. Anything else is a finding.
#include <halfgrad.h>
#include <unistd.h>

#include <cstdio>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int32_t vocab = data[0] == 0 ? 0 : int32_t{1} << (data[0] % 17);
  const std::string path = "/tmp/hg-fuzz-" + std::to_string(::getpid()) + "-tokens.bin";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 1) std::fwrite(data + 1, 1, size - 1, f);
  std::fclose(f);
  try {
    const hg::data::TokenFile file(path, vocab);
    if (file.size() < 0 || file.vocab_size() < 1) __builtin_trap();
    for (const uint16_t t : file.tokens())
      if (t >= file.vocab_size()) __builtin_trap();
  } catch (const hg::Error&) {
  }
  return 0;
}
