// Checkpoint saves: killed at each point of a save the previous file still loads bit for bit;
// stale temporaries are cleaned; symlinks, special files, modes and long names behave.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/cpu/helpers.h"
#include "tests/reliability/temp_dir.h"

namespace fs = std::filesystem;
using namespace hg;
using hg::test::check_error;
using hg::test::TempDir;

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

int count_temporaries(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

StateDict state(double v) { return {{"w", full({64, 64}, v)}, {"b", full({64}, v, kBFloat16)}}; }

}  // namespace

TEST_CASE("save: a save killed at any point leaves the previous checkpoint intact") {
  TempDir dir;
  const fs::path target = dir.path / "ckpt.safetensors";
  save(state(1.0), target.string());
  const std::string before = file_bytes(target);
  for (const char* point : {"header", "tensor", "fsync", "close"}) {
    INFO(point);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The tensors are contiguous CPU tensors, so the save runs no kernels (no pool threads,
      // which do not exist in a forked child).
      ::setenv("HG_TEST_SAVE_KILL_AT", point, 1);
      try {
        save(state(2.0), target.string());
      } catch (...) {
      }
      ::_exit(3);  // not reached when the hook fires
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    CHECK(file_bytes(target) == before);
    const StateDict loaded = load(target.string());
    CHECK(loaded.at("w").sum().item<double>() == 64 * 64);
    CHECK(count_temporaries(dir.path) == 1);  // the killed save's temporary
    // The next save removes it (the writer is dead: its lock is gone).
    save(state(1.0), target.string());
    CHECK(count_temporaries(dir.path) == 0);
    CHECK(file_bytes(target) == before);
  }
  // Killed just after the rename: the new file is complete.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("HG_TEST_SAVE_KILL_AT", "rename", 1);
    try {
      save(state(3.0), target.string());
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(load(target.string()).at("w").sum().item<double>() == 3 * 64 * 64);
  CHECK(count_temporaries(dir.path) == 0);
}

TEST_CASE("save: symlinks, special files, modes, long names, early path checks") {
  TempDir dir;
  // A symlink is followed: its target is written and the link stays a link.
  const fs::path real = dir.path / "real.st", link = dir.path / "link.st";
  save(state(1.0), real.string());
  fs::create_symlink("real.st", link);
  save(state(5.0), link.string());
  CHECK(fs::is_symlink(link));
  CHECK(load(real.string()).at("w").sum().item<double>() == 5 * 64 * 64);
  // A dangling symlink writes its (new) target.
  fs::create_symlink("new-target.st", dir.path / "dangling.st");
  save(state(1.0), (dir.path / "dangling.st").string());
  CHECK(fs::is_regular_file(dir.path / "new-target.st"));
  CHECK(fs::is_symlink(dir.path / "dangling.st"));
  // Special files and directories are refused, never replaced.
  const fs::path fifo = dir.path / "fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  check_error([&] { save(state(1.0), fifo.string()); }, {"[save]", "not a regular file"});
  CHECK(fs::is_fifo(fifo));
  check_error([&] { check_save_path(fifo.string()); }, {"[save]", "not a regular file"});
  fs::create_directory(dir.path / "adir");
  check_error([&] { save(state(1.0), (dir.path / "adir").string()); }, {"[save]", "not a regular file"});
  check_error([&] { check_save_path((dir.path / "missing-dir" / "x.st").string()); },
              {"[save]", "directory does not exist"});
  check_save_path((dir.path / "fine.st").string());
  // The mode of a new file follows the umask; a replaced file keeps its mode.
  const mode_t old_mask = ::umask(022);
  save(state(1.0), (dir.path / "mode.st").string());
  CHECK((fs::status(dir.path / "mode.st").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read));
  ::chmod((dir.path / "mode.st").c_str(), 0640);
  save(state(2.0), (dir.path / "mode.st").string());
  CHECK((fs::status(dir.path / "mode.st").permissions() & fs::perms::all) ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  ::umask(old_mask);
  // A 248-character name (legal: NAME_MAX is 255) works.
  const fs::path long_name = dir.path / (std::string(245, 'n') + ".st");
  REQUIRE(long_name.filename().string().size() == 248);
  save(state(1.0), long_name.string());
  CHECK(load(long_name.string()).size() == 2);
  CHECK(count_temporaries(dir.path) == 0);
}
