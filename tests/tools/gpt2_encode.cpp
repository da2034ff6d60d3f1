// The halfgrad side of tests/tools/gpt2_twin.sh: encodes each file with hg::data::Gpt2Tokenizer,
// prints its token ids as one JSON array a line, and fails when decoding does not give the file's
// bytes back. Usage: gpt2_encode VOCAB_DIR FILE...
#include <halfgrad.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gpt2_encode VOCAB_DIR FILE...\n");
    return 2;
  }
  try {
    const hg::data::Gpt2Tokenizer tok(argv[1]);
    for (int a = 2; a < argc; ++a) {
      std::ifstream in(argv[a], std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::vector<int32_t> ids = tok.encode(text);
      std::string line = "[";
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) line += ',';
        line += std::to_string(ids[i]);
      }
      std::printf("%s]\n", line.c_str());
      if (tok.decode(ids) != text) {
        std::fprintf(stderr, "gpt2_encode: %s: decode(encode(text)) differs from the text\n", argv[a]);
        return 1;
      }
    }
  } catch (const hg::Error& e) {
    std::fprintf(stderr, "gpt2_encode: %s\n", e.what());
    return 1;
  }
  return 0;
}
