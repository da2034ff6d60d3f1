// Bad GPT-2 vocabularies and token files: every committed case in tests/data/bad-inputs/gpt2-vocab
// (encoder.json, a NUL byte, vocab.bpe: the format fuzz_vocab reads) is a one-line hg::Error
// naming the file at fault, as are huge files and token files cut short.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/cpu/helpers.h"
#include "tests/reliability/temp_dir.h"

namespace fs = std::filesystem;
using namespace hg;
using hg::test::TempDir;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The error loading the vocabulary in `input`, split into the two files under `dir`.
std::string load_error(const TempDir& dir, const std::string& input) {
  const size_t nul = input.find('\0');
  std::ofstream(dir.path / "encoder.json", std::ios::binary) << input.substr(0, nul);
  std::ofstream(dir.path / "vocab.bpe", std::ios::binary) << (nul == std::string::npos ? "" : input.substr(nul + 1));
  try {
    data::Gpt2Tokenizer tok(dir.path.string());
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bad inputs: every committed GPT-2 vocabulary case is a one-line hg::Error naming the file") {
  // What each case's message must say (the file at fault, then the problem).
  const std::map<std::string, std::vector<std::string>> expected = {
      {"handmade-truncated-json.vocab", {"encoder.json: not valid JSON", "parse error"}},
      {"handmade-id-is-string.vocab", {"encoder.json: key \"<|endoftext|>\" maps to a string"}},
      {"handmade-nested-object.vocab", {"encoder.json: key \"a\" maps to an object"}},
      {"handmade-array.vocab", {"encoder.json: expected a JSON object of token ids, found an array"}},
      {"handmade-float-id.vocab", {"encoder.json: key \"<|endoftext|>\" has the non-integer id 260.5"}},
      {"handmade-negative-id.vocab", {"encoder.json: key \"<|endoftext|>\" has the negative id -1"}},
      {"handmade-duplicate-id.vocab", {"encoder.json: the id 259 is given to two keys"}},
      {"handmade-id-gap.vocab", {"encoder.json: key \"<|endoftext|>\" has the id 4000000, but the 261 ids"}},
      {"handmade-duplicate-key.vocab", {"encoder.json: key \"he\" appears twice"}},
      {"handmade-missing-byte.vocab", {"encoder.json: has no token for the byte 0x41"}},
      {"handmade-key-outside-alphabet.vocab", {"encoder.json: key \"\u4e00\" has a character outside"}},
      {"handmade-merge-unknown-symbol.vocab", {"vocab.bpe: line 6: symbol \"zz\" is not a token of"}},
      {"handmade-merge-used-before-made.vocab", {"vocab.bpe: line 2: symbol \"he\" is used before a merge makes it"}},
      {"handmade-merge-result-unknown.vocab", {"vocab.bpe: line 6: the merge of \"o o\" makes a token that is not"}},
      {"handmade-merge-duplicate.vocab", {"vocab.bpe: line 6: the merge \"l l\" appears twice"}},
      {"handmade-merge-three-fields.vocab", {"vocab.bpe: line 6 is \"a b c\", expected two symbols"}},
      {"handmade-bpe-no-final-newline.vocab", {"vocab.bpe: does not end with a newline"}},
      {"handmade-bpe-no-version.vocab", {"vocab.bpe: does not start with a '#version' line"}},
      {"handmade-bpe-blank-line.vocab", {"vocab.bpe: line 6 is \"\", expected two symbols"}},
      {"handmade-empty.vocab", {"encoder.json: not valid JSON"}},
  };
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(HG_TEST_DATA_DIR) / "bad-inputs" / "gpt2-vocab")) {
    const std::string name = entry.path().filename().string();
    INFO(name);
    TempDir dir;
    const std::string msg = load_error(dir, read_all(entry.path()));
    CHECK_MESSAGE(msg.starts_with("[gpt2_tokenizer] " + dir.path.string() + "/"), msg);
    CHECK_MESSAGE(msg.find('\n') == std::string::npos, msg);
    const auto it = expected.find(name);
    if (it != expected.end())
      for (const std::string& f : it->second) CHECK_MESSAGE(msg.find(f) != std::string::npos, msg);
    ++cases;
  }
  CHECK(cases == static_cast<int>(expected.size()));
}

TEST_CASE("bad inputs: a huge or special GPT-2 vocabulary file is refused before it is read") {
  TempDir dir;
  {
    std::ofstream(dir.path / "encoder.json") << "{}";
    std::ofstream(dir.path / "vocab.bpe") << "#version: 0.2\n";
  }
  // Sparse: 65 MB that take no disk.
  REQUIRE(::truncate((dir.path / "encoder.json").c_str(), 65 << 20) == 0);
  hg::test::check_error([&] { data::Gpt2Tokenizer tok(dir.path.string()); },
                        {"[gpt2_tokenizer]", "encoder.json", "68157440 bytes, more than"});
  fs::remove(dir.path / "encoder.json");
  fs::create_directory(dir.path / "encoder.json");
  hg::test::check_error([&] { data::Gpt2Tokenizer tok(dir.path.string()); },
                        {"[gpt2_tokenizer]", "encoder.json", "a directory"});
}

TEST_CASE("bad inputs: a token file cut short, padded or oversized is a one-line hg::Error") {
  TempDir dir;
  const std::string path = (dir.path / "train.bin").string();
  std::vector<uint16_t> tokens(1000, 7);
  data::write_token_file(path, tokens, 50257);
  const std::string good = read_all(path);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{1023}, size_t{1024}, good.size() - 1, good.size() - 2}) {
    INFO(cut);
    std::ofstream(path, std::ios::binary) << good.substr(0, cut);
    hg::test::check_error([&] { data::TokenDataset ds(path, {.batch_size = 1, .seq_len = 8}); },
                          {"[token_file] " + path + ": "});
  }
  std::ofstream(path, std::ios::binary) << good << "xx";
  hg::test::check_error([&] { data::TokenFile f(path); }, {"says 1000 tokens", "extra bytes"});
  // A header claiming 2^31 - 1 tokens over a short file.
  std::string huge = good;
  const int32_t big = INT32_MAX;
  std::memcpy(huge.data() + 8, &big, 4);
  std::ofstream(path, std::ios::binary) << huge;
  hg::test::check_error([&] { data::TokenFile f(path); }, {"says 2147483647 tokens", "truncated"});
}
