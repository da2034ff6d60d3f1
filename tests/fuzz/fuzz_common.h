// Shared by the libFuzzer targets: the loaders take paths, so each input is written to a file.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

inline std::string fuzz_input_file(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/hg-fuzz-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}
