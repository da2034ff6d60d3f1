// HMAC-SHA-256 for the store's challenge-response (the token never crosses the wire, only keyed
// hashes of fresh nonces), through OpenSSL's libcrypto (Debian: libssl-dev) rather than a hash
// written here: a well-kept, audited implementation. tests/distributed/test_store.cpp checks the
// wrappers against the published FIPS 180-4 and RFC 4231 vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hg::distributed {

using Digest = std::array<uint8_t, 32>;

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);
// Compares without an early exit, so the time taken says nothing about where a guess went wrong.
bool digests_equal(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace hg::distributed
