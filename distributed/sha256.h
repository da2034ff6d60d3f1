// SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the store's challenge-response: the
// token never crosses the wire, only keyed hashes of fresh nonces. Written here (80 lines) rather
// than linking a crypto library for two functions; tests/distributed/test_store.cpp checks both
// against the published vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hg::distributed {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);
// Compares without an early exit, so the time taken says nothing about where a guess went wrong.
bool digests_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace hg::distributed
