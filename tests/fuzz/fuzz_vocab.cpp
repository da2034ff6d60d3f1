// libFuzzer target: hg::data::Gpt2Tokenizer on an arbitrary vocabulary. The input is
// encoder.json, a NUL byte, then vocab.bpe (JSON text never holds a raw NUL); without a NUL it
// is all encoder.json and vocab.bpe is empty. A vocabulary that loads must encode the input itself
// and decode it back exactly. Anything but that or an hg::Error is a finding.
#include <halfgrad.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace {

std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = "/tmp/hg-fuzz-" + std::to_string(::getpid()) + "-" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = std::find(data, data + size, uint8_t{0});
  const size_t json_size = static_cast<size_t>(nul - data);
  const size_t bpe_offset = std::min(size, json_size + 1);
  const std::string encoder = write_file("encoder.json", data, json_size);
  const std::string vocab = write_file("vocab.bpe", data + bpe_offset, size - bpe_offset);
  try {
    const hg::data::Gpt2Tokenizer tok(encoder, vocab);
    const std::string text(reinterpret_cast<const char*>(data), size);
    if (tok.decode(tok.encode(text)) != text) __builtin_trap();
  } catch (const hg::Error&) {
  }
  return 0;
}
