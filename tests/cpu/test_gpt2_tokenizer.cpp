// GPT-2's tokenizer on a tiny handmade vocabulary (the 256 bytes, a few merges, <|endoftext|>):
// the pre-tokenisation split, BPE merge order, byte round trips and bad arguments. The real
// vocabulary is checked token for token against the reference encoder by tests/tools/gpt2_twin.sh.
#include <filesystem>
#include <fstream>
#include <random>

#include "data/gpt2_tokenizer.h"
#include "helpers.h"

using namespace hg;
using hg::test::check_error;
using hg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

// GPT-2's byte -> code point table (bytes_to_unicode in OpenAI's encoder.py).
std::vector<int> byte_code_points() {
  std::vector<int> cp(256);
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cp[b] = printable ? b : 256 + extra++;
  }
  return cp;
}

// encoder.json and vocab.bpe with ids 0-255 for the bytes (in byte order), then one id for each
// merge's result, then <|endoftext|>. Merges are written in ASCII, so their symbols are themselves.
fs::path write_tiny_vocab(const std::string& name, const std::vector<std::pair<std::string, std::string>>& merges) {
  const fs::path dir = temp_dir(name);
  const std::vector<int> cp = byte_code_points();
  std::string json = "{";
  for (int b = 0; b < 256; ++b) json += fmt::format("\"\\u{:04x}\": {}, ", cp[b], b);
  std::string bpe = "#version: 0.2\n";
  int id = 256;
  for (const auto& [a, b] : merges) {
    json += fmt::format("\"{}{}\": {}, ", a, b, id++);
    bpe += a + " " + b + "\n";
  }
  json += fmt::format("\"<|endoftext|>\": {}}}", id);
  std::ofstream(dir / "encoder.json") << json;
  std::ofstream(dir / "vocab.bpe") << bpe;
  return dir;
}

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : data::gpt2_pretokenize(text)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST_CASE("gpt2 tokenizer: the pre-tokenisation split follows GPT-2's regex") {
  CHECK(pieces("Hello world") == V{"Hello", " world"});
  CHECK(pieces("I'm here, they'll see") == V{"I", "'m", " here", ",", " they", "'ll", " see"});
  CHECK(pieces("'S 's") == V{"'", "S", " '", "s"});  // case-sensitive; a space before ' is not a contraction
  CHECK(pieces("abc123 45x") == V{"abc", "123", " 45", "x"});
  CHECK(pieces("a!!?b ...") == V{"a", "!!?", "b", " ..."});
  // Whitespace: a run keeps its last space for the next word; at the end it stays whole.
  CHECK(pieces("a   b") == V{"a", "  ", " b"});
  CHECK(pieces("a\n\nb") == V{"a", "\n", "\n", "b"});
  CHECK(pieces("a \n b") == V{"a", " \n", " b"});
  CHECK(pieces("x  \t") == V{"x", "  \t"});
  CHECK(pieces("\tx") == V{"\t", "x"});
  // Unicode letters, numbers and spaces (U+00A0, U+3000 are \s; U+00BD and U+0663 are \p{N}).
  CHECK(pieces("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac") == V{"caf\xc3\xa9", " \xe6\x97\xa5\xe6\x9c\xac"});
  CHECK(pieces("1\xc2\xbd \xd9\xa3") == V{"1\xc2\xbd", " \xd9\xa3"});
  CHECK(pieces("a\xc2\xa0"
               "b") == V{"a", "\xc2\xa0", "b"});
  CHECK(pieces("\xf0\x9f\x91\x8d\xf0\x9f\x91\x8d!") == V{"\xf0\x9f\x91\x8d\xf0\x9f\x91\x8d!"});
  // Bytes that are not UTF-8 are characters of their own, neither letters, numbers nor spaces.
  CHECK(pieces("a\xff"
               "b \xfe\xc3") == V{"a", "\xff", "b", " \xfe\xc3"});
  CHECK(pieces("\xed\xa0\x80x") == V{"\xed\xa0\x80", "x"});  // an encoded surrogate is not UTF-8
  CHECK(pieces("").empty());
}

TEST_CASE("gpt2 tokenizer: the pieces cover any bytes exactly") {
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 4 == 0 ? " \n\t'a1\xc3\xa9"[rng() % 9] : rng() % 256);
    std::string joined;
    for (std::string_view p : data::gpt2_pretokenize(s)) {
      CHECK(!p.empty());
      joined += p;
    }
    CHECK(joined == s);
  }
}

TEST_CASE("gpt2 tokenizer: merges apply lowest rank first, left to right") {
  const fs::path dir = write_tiny_vocab("gpt2_tiny", {{"l", "l"}, {"h", "e"}, {"he", "ll"}, {"a", "a"}});
  const data::Gpt2Tokenizer tok(dir.string());
  CHECK(tok.vocab_size() == 261);
  CHECK(tok.eot_token() == 260);
  CHECK(tok.num_merges() == 4);
  CHECK(tok.encode("hello") == std::vector<int32_t>{258, 'o'});
  CHECK(tok.encode("hell hello") == std::vector<int32_t>{258, ' ', 258, 'o'});  // no merge joins ' ' and "hell"
  CHECK(tok.encode("aaaaa") == std::vector<int32_t>{259, 259, 'a'});
  CHECK(tok.encode("<|endoftext|>").size() > 1);  // ordinary text, never the eot id
  CHECK(tok.decode({258, 'o', 260}) == "hello<|endoftext|>");
  // A long piece (past the cache's limit) merges the same way.
  const std::string long_a(1001, 'a');
  const std::vector<int32_t> ids = tok.encode(long_a);
  CHECK(ids.size() == 501);
  CHECK(tok.decode(ids) == long_a);
  check_error([&] { tok.decode({261}); }, {"[gpt2_tokenizer]", "261", "outside the vocabulary of 261"});
  check_error([&] { tok.decode({-1}); }, {"[gpt2_tokenizer]", "-1"});
  fs::remove_all(dir);
}

TEST_CASE("gpt2 tokenizer: any byte string encodes and decodes back exactly") {
  const fs::path dir = write_tiny_vocab("gpt2_roundtrip", {{"l", "l"}, {"h", "e"}, {"\xc3\xa9", "e"}});
  const data::Gpt2Tokenizer tok(dir.string());
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    std::string s(rng() % 100, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    const std::vector<int32_t> ids = tok.encode(s);
    CHECK(tok.decode(ids) == s);
    CHECK(tok.encode(s) == ids);  // the cached path gives the same tokens
  }
  fs::remove_all(dir);
}

TEST_CASE("gpt2 tokenizer: missing vocabulary files name the file") {
  const fs::path dir = temp_dir("gpt2_missing");
  check_error([&] { data::Gpt2Tokenizer tok(dir.string()); }, {"[gpt2_tokenizer]", "encoder.json", "cannot open"});
  fs::remove_all(dir);
}
