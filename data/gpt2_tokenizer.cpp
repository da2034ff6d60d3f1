#include "data/gpt2_tokenizer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>

#include "framework/error.h"
#include "serialize/file.h"

namespace hg::data {

namespace {

constexpr std::string_view kTokenizerOp = "gpt2_tokenizer";
// GPT-2's files are 1.0 MB and 0.45 MB; anything far larger is not a vocabulary.
constexpr uint64_t kMaxFileBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxTokenizerVocab = uint64_t{1} << 22;
// Pieces longer than this are split without the cache (they rarely repeat).
constexpr size_t kMaxCachedPiece = 128;
constexpr size_t kMaxCacheEntries = size_t{1} << 18;

// GPT-2 stores tokens as printable strings: byte b is code point b for the printable Latin-1
// bytes and 256 + k for the k-th other byte (bytes_to_unicode() in OpenAI's encoder.py).
struct ByteAlphabet {
  std::array<uint16_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};
  ByteAlphabet() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = static_cast<uint16_t>(printable ? b : 256 + extra++);
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// A key of encoder.json or a symbol of vocab.bpe (UTF-8, characters of the byte alphabet) as the
// bytes it stands for; nullopt when it holds another character.
std::optional<std::string> symbol_bytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto& a = alphabet();
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    uint32_t cp;
    if (b < 0x80) {
      cp = b;
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && i + 1 < s.size() && (s[i + 1] & 0xC0) == 0x80) {
      cp = (uint32_t{b} & 0x1F) << 6 | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // every character of the alphabet is below U+0800
    }
    if (cp >= a.to_byte.size() || a.to_byte[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(a.to_byte[cp]));
  }
  return out;
}

// Keys and symbols quoted for a one-line message: escaped, and cut when long.
std::string shown(std::string_view s) {
  if (s.size() > 40) return fmt::format("{:?}...", s.substr(0, 40));
  return fmt::format("{:?}", s);
}

std::string read_text(const std::string& path) {
  const std::vector<char> bytes = read_regular_file(path, kTokenizerOp, kMaxFileBytes);
  return std::string(bytes.begin(), bytes.end());
}

// encoder.json is one flat object {"token": id, ...}. A SAX handler reads it without building a
// document, so nesting, arrays or strings where ids belong stop the parse at once with a message
// that says which key was wrong.
class EncoderReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::pair<std::string, uint64_t>> entries;
  std::string error;

  bool null() override { return wrong("null"); }
  bool boolean(bool) override { return wrong("a boolean"); }
  bool number_integer(number_integer_t v) override {
    if (depth_ != 1) return wrong("a number");
    if (v < 0) return stop(fmt::format("key {} has the negative id {}", shown(key_), v));
    return number_unsigned(static_cast<number_unsigned_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ != 1) return wrong("a number");
    if (v >= kMaxTokenizerVocab)
      return stop(fmt::format("key {} has the id {}, above the limit of {}", shown(key_), v, kMaxTokenizerVocab));
    entries.emplace_back(std::move(key_), v);
    return true;
  }
  bool number_float(number_float_t v, const string_t&) override {
    return stop(fmt::format("key {} has the non-integer id {}", shown(key_), v));
  }
  bool string(string_t&) override { return wrong("a string"); }
  bool binary(binary_t&) override { return wrong("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ != 0) return wrong("an object");
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return wrong("an array"); }
  bool end_array() override { return false; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    return stop(fmt::format("not valid JSON: {}", ex.what()));
  }

 private:
  bool wrong(std::string_view what) {
    if (depth_ == 0) return stop(fmt::format("expected a JSON object of token ids, found {}", what));
    return stop(fmt::format("key {} maps to {}, expected an integer token id", shown(key_), what));
  }
  bool stop(std::string message) {
    if (error.empty()) error = std::move(message);
    return false;
  }
  std::string key_;
  int depth_ = 0;
};

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& dir) : Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe") {}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_path, const std::string& vocab_path) {
  // ---- encoder.json: token string -> id, the ids exactly 0..n-1 ----
  std::unordered_map<std::string, int32_t> id_of;
  {
    const std::string text = read_text(encoder_path);
    EncoderReader reader;
    const bool ok = nlohmann::json::sax_parse(text, &reader);
    HG_CHECK(ok && reader.error.empty(), kTokenizerOp, "{}: {}", encoder_path,
             reader.error.empty() ? std::string("not a JSON object of token ids") : reader.error);
    const size_t n = reader.entries.size();
    HG_CHECK(n >= 257, kTokenizerOp,
             "{}: holds {} tokens; a byte-level vocabulary needs the 256 bytes and <|endoftext|>", encoder_path, n);
    token_bytes_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    id_of.reserve(n);
    for (auto& [key, id] : reader.entries) {
      HG_CHECK(id < n, kTokenizerOp, "{}: key {} has the id {}, but the {} ids must be 0 to {}", encoder_path,
               shown(key), id, n, n - 1);
      HG_CHECK(!seen[id], kTokenizerOp, "{}: the id {} is given to two keys (the second is {})", encoder_path, id,
               shown(key));
      std::optional<std::string> bytes = symbol_bytes(key);
      HG_CHECK(bytes.has_value(), kTokenizerOp, "{}: key {} has a character outside GPT-2's byte alphabet",
               encoder_path, shown(key));
      HG_CHECK(!bytes->empty(), kTokenizerOp, "{}: the empty key has the id {}", encoder_path, id);
      HG_CHECK(id_of.emplace(*bytes, static_cast<int32_t>(id)).second, kTokenizerOp, "{}: key {} appears twice",
               encoder_path, shown(key));
      seen[id] = true;
      token_bytes_[id] = std::move(*bytes);
    }
    for (int b = 0; b < 256; ++b) {
      const auto it = id_of.find(std::string(1, static_cast<char>(b)));
      HG_CHECK(it != id_of.end(), kTokenizerOp,
               "{}: has no token for the byte 0x{:02x}, so some text could not be encoded", encoder_path, b);
      byte_token_[b] = it->second;
    }
    const auto eot = id_of.find("<|endoftext|>");
    HG_CHECK(eot != id_of.end(), kTokenizerOp, "{}: has no <|endoftext|> token", encoder_path);
    eot_ = eot->second;
  }

  // ---- vocab.bpe: "#version" line, then one merge "a b" a line, ranked by order ----
  const std::string text = read_text(vocab_path);
  HG_CHECK(text.starts_with("#version"), kTokenizerOp,
           "{}: does not start with a '#version' line (not a vocab.bpe file?)", vocab_path);
  HG_CHECK(text.back() == '\n', kTokenizerOp, "{}: does not end with a newline (truncated?)", vocab_path);
  std::vector<bool> made(token_bytes_.size(), false);
  for (int b = 0; b < 256; ++b) made[byte_token_[b]] = true;
  size_t pos = text.find('\n') + 1;
  int32_t rank = 0;
  for (int64_t line = 2; pos < text.size(); ++line) {
    const size_t end = text.find('\n', pos);
    const std::string_view row(text.data() + pos, end - pos);
    pos = end + 1;
    const size_t space = row.find(' ');
    HG_CHECK(space != std::string_view::npos && space > 0 && space + 1 < row.size() &&
                 row.find(' ', space + 1) == std::string_view::npos,
             kTokenizerOp, "{}: line {} is {}, expected two symbols separated by one space", vocab_path, line,
             shown(row));
    std::array<int32_t, 2> ids{};
    std::string merged;
    for (int k = 0; k < 2; ++k) {
      const std::string_view sym = k == 0 ? row.substr(0, space) : row.substr(space + 1);
      const std::optional<std::string> bytes = symbol_bytes(sym);
      HG_CHECK(bytes.has_value(), kTokenizerOp, "{}: line {}: symbol {} has a character outside GPT-2's byte alphabet",
               vocab_path, line, shown(sym));
      const auto it = id_of.find(*bytes);
      HG_CHECK(it != id_of.end(), kTokenizerOp, "{}: line {}: symbol {} is not a token of {}", vocab_path, line,
               shown(sym), encoder_path);
      // Every symbol is a byte or the result of an earlier merge; encode() relies on it (a merge
      // never makes a pair that ranks before itself).
      HG_CHECK(made[it->second], kTokenizerOp, "{}: line {}: symbol {} is used before a merge makes it", vocab_path,
               line, shown(sym));
      ids[k] = it->second;
      merged += *bytes;
    }
    const auto result = id_of.find(merged);
    HG_CHECK(result != id_of.end(), kTokenizerOp, "{}: line {}: the merge of {} makes a token that is not in {}",
             vocab_path, line, shown(row), encoder_path);
    HG_CHECK(merges_.emplace(pair_key(ids[0], ids[1]), Merge{rank, result->second}).second, kTokenizerOp,
             "{}: line {}: the merge {} appears twice", vocab_path, line, shown(row));
    made[result->second] = true;
    ++rank;
  }
}

const std::string& Gpt2Tokenizer::token_bytes(int32_t id) const {
  HG_CHECK(id >= 0 && id < vocab_size(), kTokenizerOp, "decode: token id {} is outside the vocabulary of {}", id,
           vocab_size());
  return token_bytes_[static_cast<size_t>(id)];
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  for (std::string_view piece : gpt2_pretokenize(text)) {
    if (piece.size() == 1) {
      out.push_back(byte_token_[static_cast<unsigned char>(piece[0])]);
      continue;
    }
    if (piece.size() > kMaxCachedPiece) {
      bpe(piece, out);
      continue;
    }
    {
      std::lock_guard lock(*cache_mutex_);
      const auto it = cache_.find(std::string(piece));
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const size_t start = out.size();
    bpe(piece, out);
    std::lock_guard lock(*cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(start), out.end()));
  }
  return out;
}

// Merges the lowest-ranked adjacent pair, left to right among equals, until none is left: the
// reference's loop, in O(n log n) with a heap over a linked list instead of rescanning the word
// after each merge (a 1 MB run of one letter is one piece). Equal to the reference because a
// merge only makes pairs ranked after itself (checked when vocab.bpe is read), so all of one
// rank's merges happen before any later rank's, in position order.
void Gpt2Tokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> sym(n), next(n), prev(n);
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = byte_token_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  struct Entry {
    int32_t rank, pos, left, right, result;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Entry> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] >= n) return;
    const int32_t right = next[pos];
    const auto it = merges_.find(pair_key(sym[pos], sym[right]));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, pos, sym[pos], sym[right], it->second.result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const Entry e = heap.back();
    heap.pop_back();
    // Stale when either side has merged since the entry was pushed.
    if (!alive[e.pos] || sym[e.pos] != e.left || next[e.pos] >= n || sym[next[e.pos]] != e.right) continue;
    const int32_t q = next[e.pos];
    sym[e.pos] = e.result;
    alive[q] = false;
    next[e.pos] = next[q];
    if (next[q] < n) prev[next[q]] = e.pos;
    if (prev[e.pos] >= 0) push(prev[e.pos]);
    push(e.pos);
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(sym[i]);
}

}  // namespace hg::data
