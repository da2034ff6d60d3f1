// Tokenizes the fortune(6) collections (Debian's fortunes and fortunes-min, strfile text: the
// fortunes separated by lines holding '%') with GPT-2's tokenizer into llm.c-style token files
// train.bin and val.bin, each fortune preceded by <|endoftext|>. The last --val-percent of each
// collection's fortunes go to val.bin, so both splits draw from every collection. Prints the
// counts, the encode speed and the unigram entropy of the train split.
// Usage: gpt2_prepare [--fortunes DIR] [--vocab DIR] [--out DIR] [--val-percent P]
#include <halfgrad.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>

#include "serialize/file.h"

namespace fs = std::filesystem;

namespace {

// Not prose: pictures drawn in characters.
const std::set<std::string> kSkipped = {"ascii-art"};

// The fortunes of one strfile text file, without their '%' lines; blank ones dropped.
std::vector<std::string> split_fortunes(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string_view line(text.data() + pos, end - pos);
    pos = end;
    if (line == "%\n" || line == "%") {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += line;
    }
  }
  out.push_back(std::move(cur));
  std::erase_if(out, [](const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; });
  return out;
}

double unigram_entropy_nats(const std::vector<uint16_t>& tokens) {
  std::vector<int64_t> counts(65536, 0);
  for (uint16_t t : tokens) ++counts[t];
  double h = 0;
  const auto n = static_cast<double>(tokens.size());
  for (int64_t c : counts)
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizes the fortune collections with GPT-2's BPE into train.bin and val.bin"};
  std::string fortunes_dir = "/usr/share/games/fortunes", vocab_dir = "datasets/gpt2", out_dir = "datasets/fortunes";
  int val_percent = 10;
  app.add_option("--fortunes", fortunes_dir, "the strfile collections (Debian: fortunes, fortunes-min)");
  app.add_option("--vocab", vocab_dir, "encoder.json and vocab.bpe (tools/fetch-gpt2-vocab.sh)");
  app.add_option("--out", out_dir, "where train.bin and val.bin go");
  app.add_option("--val-percent", val_percent, "the last P% of each collection's fortunes form val.bin")
      ->check(CLI::Range(1, 50));
  CLI11_PARSE(app, argc, argv);
  try {
    const hg::data::Gpt2Tokenizer tok(vocab_dir);
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fortunes_dir, ec)) {
      const std::string name = e.path().filename().string();
      // .dat: strfile's index; .u8: symlinks to the same text; skipped: not prose.
      if (e.is_symlink() || !e.is_regular_file() || name.ends_with(".dat") || kSkipped.contains(name)) continue;
      names.push_back(name);
    }
    HG_CHECK(!ec, "gpt2_prepare", "{}: cannot list the directory: {}", fortunes_dir, ec.message());
    HG_CHECK(!names.empty(), "gpt2_prepare", "{}: no fortune files (Debian: apt-get install fortunes)", fortunes_dir);
    std::sort(names.begin(), names.end());

    std::vector<uint16_t> train, val;
    int64_t n_train = 0, n_val = 0, bytes = 0;
    double encode_seconds = 0;
    for (const std::string& name : names) {
      const std::vector<char> raw = hg::read_regular_file(fortunes_dir + "/" + name, "gpt2_prepare", 64 << 20);
      const std::vector<std::string> fortunes = split_fortunes(std::string(raw.begin(), raw.end()));
      const size_t first_val = fortunes.size() - fortunes.size() * static_cast<size_t>(val_percent) / 100;
      for (size_t i = 0; i < fortunes.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::vector<int32_t> ids = tok.encode(fortunes[i]);
        encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        bytes += static_cast<int64_t>(fortunes[i].size());
        std::vector<uint16_t>& dst = i < first_val ? train : val;
        (i < first_val ? n_train : n_val) += 1;
        dst.push_back(static_cast<uint16_t>(tok.eot_token()));
        for (int32_t id : ids) dst.push_back(static_cast<uint16_t>(id));
      }
    }
    fs::create_directories(out_dir);
    const std::string train_path = out_dir + "/train.bin", val_path = out_dir + "/val.bin";
    hg::data::write_token_file(train_path, train, tok.vocab_size());
    hg::data::write_token_file(val_path, val, tok.vocab_size());
    // Read back through the loader's checks.
    const hg::data::TokenFile train_file(train_path, tok.vocab_size()), val_file(val_path, tok.vocab_size());
    fmt::print("gpt2_prepare: {} collections from {}, {} fortunes ({} train, {} val), {} bytes of text\n", names.size(),
               fortunes_dir, n_train + n_val, n_train, n_val, bytes);
    fmt::print("gpt2_prepare: {}: {} tokens; {}: {} tokens ({:.2f} bytes per token)\n", train_path, train_file.size(),
               val_path, val_file.size(), static_cast<double>(bytes) / static_cast<double>(train.size() + val.size()));
    fmt::print("gpt2_prepare: encode {:.2f} MB/s ({} bytes in {:.3f} s, one thread)\n", bytes / encode_seconds / 1e6,
               bytes, encode_seconds);
    fmt::print("gpt2_prepare: unigram entropy of train.bin: {:.4f} nats ({:.4f} bits)\n", unigram_entropy_nats(train),
               unigram_entropy_nats(train) / std::log(2.0));
  } catch (const hg::Error& e) {
    fmt::print(stderr, "gpt2_prepare: {}\n", e.what());
    return 1;
  }
  return 0;
}
