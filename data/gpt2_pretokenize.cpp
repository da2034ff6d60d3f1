// GPT-2's pre-tokenisation regex, written out by hand over UTF-8 code points.
//
// Why by hand: the regex needs \p{L} and \p{N}, which std::regex lacks. ICU would do, but it is a
// large run-time dependency for two character classes; a table of ~150 ranges generated once from
// Python's unicodedata (tools/gen-gpt2-unicode.py) is enough, and a hand-written scanner can treat
// bytes that are not valid UTF-8 as characters of their own, which no regex library does.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/gpt2_tokenizer.h"
#include "data/gpt2_unicode_table.inc"

namespace hg::data {

namespace {

enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// JavaScript's \s above ASCII (ECMAScript WhiteSpace and LineTerminator), which the reference
// encoder (gpt-3-encoder's JavaScript regex) uses.
bool is_js_space(uint32_t cp) {
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

Cls classify_non_ascii(uint32_t cp) {
  if (is_js_space(cp)) return kSpace;
  const auto& r = gpt2_unicode::kRanges;
  const auto* it = std::upper_bound(std::begin(r), std::end(r), cp,
                                    [](uint32_t c, const gpt2_unicode::Range& x) { return c < x.first; });
  if (it == std::begin(r)) return kOther;
  --it;
  return cp <= it->last ? static_cast<Cls>(it->cls) : kOther;
}

constexpr Cls ascii_class(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return kLetter;
  if (c >= '0' && c <= '9') return kNumber;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;
  return kOther;
}

struct Char {
  size_t len;
  Cls cls;
};

bool cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// The code point starting at text[i] (strict UTF-8: no overlong forms, surrogates or values past
// U+10FFFF). A byte that does not start a valid sequence is a character of its own, class Other.
Char char_at(std::string_view text, size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  const unsigned char b = s[i];
  if (b < 0x80) return {1, ascii_class(b)};
  uint32_t cp = 0;
  size_t len = 0;
  if (b >= 0xC2 && b <= 0xDF) {
    if (i + 1 < n && cont(s[i + 1])) {
      cp = (uint32_t{b} & 0x1F) << 6 | (s[i + 1] & 0x3F);
      len = 2;
    }
  } else if (b >= 0xE0 && b <= 0xEF) {
    if (i + 2 < n && cont(s[i + 1]) && cont(s[i + 2])) {
      const unsigned char c1 = s[i + 1];
      if ((b != 0xE0 || c1 >= 0xA0) && (b != 0xED || c1 <= 0x9F)) {
        cp = (uint32_t{b} & 0x0F) << 12 | (uint32_t{c1} & 0x3F) << 6 | (s[i + 2] & 0x3F);
        len = 3;
      }
    }
  } else if (b >= 0xF0 && b <= 0xF4) {
    if (i + 3 < n && cont(s[i + 1]) && cont(s[i + 2]) && cont(s[i + 3])) {
      const unsigned char c1 = s[i + 1];
      if ((b != 0xF0 || c1 >= 0x90) && (b != 0xF4 || c1 <= 0x8F)) {
        cp = (uint32_t{b} & 0x07) << 18 | (uint32_t{c1} & 0x3F) << 12 | (uint32_t{s[i + 2]} & 0x3F) << 6 |
             (s[i + 3] & 0x3F);
        len = 4;
      }
    }
  }
  if (len == 0) return {1, kOther};
  return {len, classify_non_ascii(cp)};
}

// 's 't 're 've 'm 'll 'd: the regex's first alternatives, tried in this order, case-sensitive.
size_t contraction_length(std::string_view rest) {
  for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
    if (rest.starts_with(c)) return c.size();
  return 0;
}

}  // namespace

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(text.size() / 4 + 1);
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (text[i] == '\'') {
      if (const size_t len = contraction_length(text.substr(i))) {
        out.push_back(text.substr(i, len));
        i += len;
        continue;
      }
    }
    const Char first = char_at(text, i);
    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional ASCII space, then a run of one class.
    size_t j = i;
    Cls cls = first.cls;
    if (text[i] == ' ' && i + 1 < n) {
      const Char second = char_at(text, i + 1);
      if (second.cls != kSpace) {
        j = i + 1;
        cls = second.cls;
      }
    }
    if (cls != kSpace) {
      size_t e = j;
      while (e < n) {
        const Char c = char_at(text, e);
        if (c.cls != cls) break;
        e += c.len;
      }
      out.push_back(text.substr(i, e - i));
      i = e;
      continue;
    }
    // A run of spaces: "\s+(?!\S)" takes all of it at the end of the text, else all but its last
    // character (which then starts the next piece, e.g. " word"); "\s+" takes a lone one.
    size_t e = i, last = i;
    while (e < n) {
      const Char c = char_at(text, e);
      if (c.cls != kSpace) break;
      last = e;
      e += c.len;
    }
    const size_t end = (e == n || last == i) ? e : last;
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

}  // namespace hg::data
