// Token files, llm.c's layout: a header of 256 int32 (magic 20240520, version 1, the token count,
// the vocabulary size), then the tokens as uint16. llm.c leaves the vocabulary size 0; such files
// load when the reader says the size.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace hg::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int64_t kTokenFileHeaderBytes = 256 * 4;

// Writes `tokens` to `path` atomically (a crash leaves the old file or the whole new one).
// Throws "[write_token_file] <path>: ..." when a token is not below `vocab_size`, the size is not
// in 1..65536 (uint16 tokens), or the write fails.
void write_token_file(const std::string& path, std::span<const uint16_t> tokens, int32_t vocab_size);

// A token file mapped read-only, checked when opened: magic, version, the count against the
// file's size, every token below the vocabulary size. Each problem throws a one-line
// "[token_file] <path>: ..." hg::Error. Copies share the mapping. The mapping stays valid while
// the file is replaced (write_token_file renames a new file over it; the old one lives on).
class TokenFile {
 public:
  // `vocab_size` 0 takes the header's; otherwise the header's must be 0 (llm.c) or equal it.
  explicit TokenFile(const std::string& path, int32_t vocab_size = 0);

  int64_t size() const { return count_; }
  int32_t vocab_size() const { return vocab_size_; }
  const uint16_t* data() const { return tokens_; }
  std::span<const uint16_t> tokens() const { return {tokens_, static_cast<size_t>(count_)}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::shared_ptr<void> mapping_;
  const uint16_t* tokens_ = nullptr;
  int64_t count_ = 0;
  int32_t vocab_size_ = 0;
};

}  // namespace hg::data
