#include "distributed/sha256.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "framework/error.h"

namespace hg::distributed {

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int n = 0;
  HG_CHECK(EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr) == 1 && n == out.size(),
           "distributed", "store: SHA-256 failed in libcrypto");
  return out;
}

Digest hmac_sha256(std::string_view key, std::string_view message) {
  HG_CHECK(key.size() <= 65536, "distributed", "store: a token of {} bytes is too long (at most 65536)", key.size());
  Digest out{};
  unsigned int n = 0;
  const auto* msg = reinterpret_cast<const unsigned char*>(message.data());
  HG_CHECK(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), msg, message.size(), out.data(), &n) &&
               n == out.size(),
           "distributed", "store: HMAC-SHA-256 failed in libcrypto");
  return out;
}

bool digests_equal(const uint8_t* a, const uint8_t* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace hg::distributed
