#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "framework/error.h"
#include "serialize/file.h"

namespace hg::data {

namespace {
// 2^40 tokens (2 TB) is past any corpus; a larger count in a header is corruption.
constexpr int64_t kMaxTokens = int64_t{1} << 40;
constexpr int32_t kMaxTokenFileVocab = 65536;  // uint16 tokens

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

void write_token_file(const std::string& path, std::span<const uint16_t> tokens, int32_t vocab_size) {
  HG_CHECK(vocab_size >= 1 && vocab_size <= kMaxTokenFileVocab, "write_token_file",
           "{}: vocabulary size {} does not fit uint16 tokens (1 to {})", path, vocab_size, kMaxTokenFileVocab);
  HG_CHECK(static_cast<int64_t>(tokens.size()) <= kMaxTokens && tokens.size() <= INT32_MAX, "write_token_file",
           "{}: {} tokens are more than the header's int32 count holds", path, tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i)
    HG_CHECK(tokens[i] < vocab_size, "write_token_file",
             "{}: token {} at position {} is not below the vocabulary size {}", path, tokens[i], i, vocab_size);
  std::array<int32_t, 256> header{};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = vocab_size;
  write_file_atomic(path, "write_token_file",
                    {std::string_view(reinterpret_cast<const char*>(header.data()), sizeof(header)),
                     std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size_bytes())});
}

TokenFile::TokenFile(const std::string& path, int32_t vocab_size) : path_(path) {
  constexpr std::string_view op = "token_file";
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  HG_CHECK(f.fd >= 0, op, "{}: cannot open the file: {}", path, std::strerror(errno));
  struct stat st {};
  HG_CHECK(::fstat(f.fd, &st) == 0, op, "{}: cannot stat the file: {}", path, std::strerror(errno));
  HG_CHECK(S_ISREG(st.st_mode), op, "{}: is not a regular file", path);
  const auto bytes = static_cast<int64_t>(st.st_size);
  HG_CHECK(bytes >= kTokenFileHeaderBytes, op, "{}: truncated: {} bytes, shorter than the {}-byte header", path, bytes,
           kTokenFileHeaderBytes);
  void* map = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_PRIVATE, f.fd, 0);
  HG_CHECK(map != MAP_FAILED, op, "{}: cannot map the file: {}", path, std::strerror(errno));
  const auto len = static_cast<size_t>(bytes);
  mapping_ = std::shared_ptr<void>(map, [len](void* p) { ::munmap(p, len); });

  int32_t header[4];
  std::memcpy(header, map, sizeof(header));
  HG_CHECK(header[0] == kTokenFileMagic, op, "{}: bad magic number {} (a token file starts with {})", path, header[0],
           kTokenFileMagic);
  HG_CHECK(header[1] == kTokenFileVersion, op, "{}: version {} is not supported (expected {}: uint16 tokens)", path,
           header[1], kTokenFileVersion);
  const int64_t count = header[2];
  HG_CHECK(count >= 0, op, "{}: negative token count {} in the header", path, count);
  const int64_t have = (bytes - kTokenFileHeaderBytes) / 2;
  HG_CHECK((bytes - kTokenFileHeaderBytes) % 2 == 0 && have == count, op,
           "{}: the header says {} tokens ({} bytes) but {} bytes follow it ({})", path, count, 2 * count,
           bytes - kTokenFileHeaderBytes, have < count ? "truncated" : "extra bytes");
  const int32_t recorded = header[3];
  HG_CHECK(recorded >= 0 && recorded <= kMaxTokenFileVocab, op, "{}: vocabulary size {} in the header is not 0 to {}",
           path, recorded, kMaxTokenFileVocab);
  HG_CHECK(vocab_size >= 0 && vocab_size <= kMaxTokenFileVocab, op,
           "{}: the expected vocabulary size {} is not 1 to {}", path, vocab_size, kMaxTokenFileVocab);
  HG_CHECK(recorded == 0 || vocab_size == 0 || recorded == vocab_size, op,
           "{}: the header's vocabulary size is {}, expected {}", path, recorded, vocab_size);
  vocab_size_ = recorded != 0 ? recorded : vocab_size;
  HG_CHECK(vocab_size_ > 0, op,
           "{}: the header records no vocabulary size (an llm.c file?); pass the size to check against", path);
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(map) + kTokenFileHeaderBytes);
  count_ = count;
  // One pass now, so a batch never holds an id an embedding table would index out of range.
  for (int64_t i = 0; i < count_; ++i)
    HG_CHECK(tokens_[i] < vocab_size_, op, "{}: token {} at position {} is not below the vocabulary size {}", path,
             tokens_[i], i, vocab_size_);
}

}  // namespace hg::data
