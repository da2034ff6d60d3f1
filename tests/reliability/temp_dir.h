// A fresh directory under $TMPDIR, removed with its contents when the object goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace hg::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "hg-reliability-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace hg::test
