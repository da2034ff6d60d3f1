// A character-level GPT trained on Debian's word list (package wamerican). Run:
//   build/examples/char_transformer --steps 1000 --amp bf16 --sample 10
// Data-parallel (each rank takes an equal part of every global batch; docs/DISTRIBUTED.md):
//   mpirun -np 2 build/examples/char_transformer --steps 1000 --distributed
// Data: lower-cased words of /usr/share/dict/american-english using only a-z and ', each framed by
// a boundary token, split 90/10 by a seeded shuffle of the words; training batches are random
// windows of --context characters of the concatenated training words. Model: token + position
// embeddings, --layers pre-norm blocks (causal self-attention, GELU MLP), a final LayerNorm and an
// output head tied to the token embedding. tools/char_transformer_torch.py is its PyTorch twin: the
// same split, batches, model, initialisation and schedule (the random streams below are portable).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "common.h"
#include "data_parallel.h"

namespace {

using hg::Tensor;

// SplitMix64 counters: the twin draws exactly the same numbers in Python.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(seed + splitmix64(stream)); }
enum Stream : uint64_t { kShuffle = 1, kBatches = 2, kSampling = 3 };

// Token 0 is the word boundary; 1..26 are a..z; 27 is the apostrophe.
constexpr int64_t kVocab = 28;
int64_t token_of(char c) { return c == '\'' ? 27 : c - 'a' + 1; }
char char_of(int64_t t) { return t == 27 ? '\'' : static_cast<char>('a' + t - 1); }

struct Corpus {
  std::vector<int64_t> train, val;  // token streams: boundary w1 boundary w2 ... boundary
  int64_t train_words = 0, val_words = 0;
};

Corpus load_words(const std::string& path, uint64_t seed) {
  std::ifstream in(path);
  HG_CHECK(in.good(), "char_transformer", "cannot read {} (install Debian's wamerican: tools/setup-debian.sh)", path);
  std::vector<std::string> words;
  std::map<std::string, bool> seen;
  for (std::string line; std::getline(in, line);) {
    for (char& c : line) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool ok = !line.empty() &&
                    std::all_of(line.begin(), line.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '\''; });
    if (ok && !seen[line]) {  // first occurrence only: "Apple" and "apple" are one word
      seen[line] = true;
      words.push_back(line);
    }
  }
  HG_CHECK(words.size() >= 20, "char_transformer", "{}: only {} usable words", path, words.size());
  const uint64_t key = stream_key(seed, kShuffle);
  for (size_t i = words.size() - 1; i > 0; --i) std::swap(words[i], words[splitmix64(key + i) % (i + 1)]);
  const size_t n_val = words.size() / 10;
  Corpus c;
  c.train_words = static_cast<int64_t>(words.size() - n_val);
  c.val_words = static_cast<int64_t>(n_val);
  auto append = [](std::vector<int64_t>& s, const std::string& w) {
    for (char ch : w) s.push_back(token_of(ch));
    s.push_back(0);
  };
  c.train.push_back(0);
  c.val.push_back(0);
  for (size_t i = 0; i < words.size(); ++i) append(i < words.size() - n_val ? c.train : c.val, words[i]);
  return c;
}

// Windows of `context` tokens starting at `starts`: inputs and next-token targets [B, T].
std::pair<Tensor, Tensor> windows(const std::vector<int64_t>& s, const std::vector<int64_t>& starts, int64_t T) {
  const auto B = static_cast<int64_t>(starts.size());
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      x[static_cast<size_t>(b * T + t)] = s[static_cast<size_t>(starts[static_cast<size_t>(b)] + t)];
      y[static_cast<size_t>(b * T + t)] = s[static_cast<size_t>(starts[static_cast<size_t>(b)] + t + 1)];
    }
  return {hg::tensor(x, {B, T}), hg::tensor(y, {B, T})};
}

struct Config {
  int64_t layers = 2, heads = 4, embd = 64, context = 32, batch = 32, steps = 1000, warmup = 100;
  double lr = 3e-3, weight_decay = 0.1, dropout = 0.0;
};

// The GPT: pre-norm TransformerEncoderLayers with a causal mask, tied input/output embedding.
class CharGPT : public hg::nn::Module {
 public:
  explicit CharGPT(const Config& c) : Module("CharGPT") {
    tok_emb = register_module("tok_emb", std::make_shared<hg::nn::Embedding>(kVocab, c.embd));
    pos_emb = register_module("pos_emb", std::make_shared<hg::nn::Embedding>(c.context, c.embd));
    const hg::nn::TransformerEncoderLayerOptions block{
        .dim_feedforward = 4 * c.embd, .dropout = c.dropout, .activation = "gelu", .norm_first = true};
    for (int64_t i = 0; i < c.layers; ++i)
      blocks.push_back(register_module(fmt::format("block{}", i),
                                       std::make_shared<hg::nn::TransformerEncoderLayer>(c.embd, c.heads, block)));
    ln_f = register_module("ln_f", std::make_shared<hg::nn::LayerNorm>(c.embd));
    // GPT-2's scheme, mirrored by the twin: every matrix and embedding N(0, 0.02), biases 0, norms 1.
    for (auto& [name, p] : named_parameters()) {
      if (p.dim() >= 2) hg::nn::init::normal_(p, 0.0, 0.02);
      if (name.ends_with("bias")) hg::nn::init::zeros_(p);
    }
  }
  // idx [B, T] -> logits [B, T, vocab]
  Tensor forward(const Tensor& idx) override {
    const int64_t T = idx.size(1);
    Tensor x = tok_emb->forward(idx) + pos_emb->forward(hg::arange(T).to(idx.device()));
    for (auto& block : blocks) x = block->forward(x, Tensor(), /*is_causal=*/true);
    return hg::linear(ln_f->forward(x), tok_emb->weight);  // the head is the token embedding
  }
  std::shared_ptr<hg::nn::Embedding> tok_emb, pos_emb;
  std::vector<std::shared_ptr<hg::nn::TransformerEncoderLayer>> blocks;
  std::shared_ptr<hg::nn::LayerNorm> ln_f;
};

Tensor loss_of(hg::nn::Module& model, const Tensor& x, const Tensor& y, std::optional<hg::Dtype> amp) {
  hg::amp::AutocastGuard autocast(x.device().type, amp, amp.has_value());
  const Tensor logits = model(x);
  return hg::cross_entropy(logits.reshape({-1, kVocab}), y.reshape({-1}));  // float32 under autocast
}

// Mean loss over `count` windows spread evenly over the stream (the same ones every time).
double evaluate(CharGPT& model, const std::vector<int64_t>& s, int64_t count, const Config& c, hg::Device device,
                std::optional<hg::Dtype> amp) {
  hg::NoGradGuard no_grad;
  model.eval();
  const auto span = static_cast<int64_t>(s.size()) - c.context - 1;
  count = std::min(count, span + 1);
  double total = 0;
  for (int64_t first = 0; first < count; first += c.batch) {
    std::vector<int64_t> starts;
    for (int64_t w = first; w < std::min(count, first + c.batch); ++w) starts.push_back(w * span / count);
    auto [x, y] = windows(s, starts, c.context);
    total += loss_of(model, x.to(device), y.to(device), amp).item<double>() * static_cast<double>(starts.size());
  }
  model.train();
  return total / static_cast<double>(count);
}

// Entropy (nats) of the training stream's character frequencies: what a model without context gets.
double unigram_entropy(const std::vector<int64_t>& s) {
  std::vector<double> n(kVocab);
  for (int64_t t : s) n[static_cast<size_t>(t)] += 1;
  double h = 0;
  for (double k : n)
    if (k > 0) h -= k / static_cast<double>(s.size()) * std::log(k / static_cast<double>(s.size()));
  return h;
}

// Generates words one character at a time from the boundary token.
std::vector<std::string> sample_words(CharGPT& model, int64_t count, const Config& c, hg::Device device,
                                      uint64_t seed) {
  hg::NoGradGuard no_grad;
  model.eval();
  const uint64_t key = stream_key(seed, kSampling);
  uint64_t draw = 0;
  std::vector<std::string> out;
  for (int64_t w = 0; w < count; ++w) {
    std::vector<int64_t> ctx{0};
    std::string word;
    while (word.size() < 40) {
      const auto n = static_cast<int64_t>(std::min<size_t>(ctx.size(), static_cast<size_t>(c.context)));
      const std::vector<int64_t> tail(ctx.end() - n, ctx.end());
      const Tensor logits = model(hg::tensor(tail, {1, n}).to(device)).select(1, n - 1).reshape({kVocab});
      const auto probs = hg::softmax(logits.to(hg::kFloat32), 0).to(hg::kCPU).to_vector<double>();
      // An inverse-CDF draw from a SplitMix64 uniform rather than hg::multinomial: the PyTorch twin
      // makes the same draws, so the two sample the same words from the same probabilities.
      const double u = static_cast<double>(splitmix64(key + draw++) >> 11) * 0x1p-53;
      int64_t t = kVocab - 1;
      double acc = 0;
      for (int64_t k = 0; k < kVocab; ++k) {
        acc += probs[static_cast<size_t>(k)];
        if (u < acc) {
          t = k;
          break;
        }
      }
      if (t == 0) break;
      word.push_back(char_of(t));
      ctx.push_back(t);
    }
    out.push_back(word);
  }
  model.train();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string words_path = "/usr/share/dict/american-english", device_name, amp_name = "off";
  int64_t sample = 0, eval_windows = 512, profile = 0;
  uint64_t seed = 0;
  bool distributed = false;
  std::string reduce_dtype = "off";
  CLI::App app{"Train a character-level GPT on a word list"};
  app.add_option("--words", words_path, "word list, one per line (Debian wamerican)")->capture_default_str();
  app.add_option("--layers", c.layers, "transformer blocks")
      ->capture_default_str()
      ->check(examples::whole_number(1, 64));
  app.add_option("--heads", c.heads, "attention heads (must divide --embd)")
      ->capture_default_str()
      ->check(examples::whole_number(1, 64));
  app.add_option("--embd", c.embd, "embedding width")->capture_default_str()->check(examples::whole_number(1, 4096));
  app.add_option("--context", c.context, "characters per window")
      ->capture_default_str()
      ->check(examples::whole_number(2, 4096));
  app.add_option("--batch-size", c.batch, "windows per step")
      ->capture_default_str()
      ->check(examples::whole_number(1, 1 << 16));
  app.add_option("--steps", c.steps, "optimizer steps")
      ->capture_default_str()
      ->check(examples::whole_number(1, 10'000'000));
  app.add_option("--warmup", c.warmup, "linear warm-up steps (at most steps / 10) before the cosine decay")
      ->capture_default_str()
      ->check(examples::whole_number(0, 10'000'000));
  app.add_option("--lr", c.lr, "peak learning rate (AdamW)")
      ->capture_default_str()
      ->check(examples::real_number(0, examples::kMaxLr));
  app.add_option("--dropout", c.dropout, "dropout in the blocks")
      ->capture_default_str()
      ->check(examples::real_number(0, 0.99));
  app.add_option("--eval-windows", eval_windows, "windows for the train/validation losses")
      ->capture_default_str()
      ->check(examples::whole_number(1, 1 << 20));
  app.add_option("--device", device_name, "cpu or cuda (default: cuda where a GPU is, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--amp", amp_name, "mixed precision: off, bf16, or fp16 (with a GradScaler)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_option("--sample", sample, "words to generate after training")
      ->capture_default_str()
      ->check(examples::whole_number(0, 100000));
  app.add_option("--seed", seed, "seed for the split, initialisation, batches and sampling")
      ->capture_default_str()
      ->check(examples::whole_number(0, examples::kMaxSeed));
  app.add_option("--profile", profile, "time every op over the last N steps and print the totals per op")
      ->capture_default_str()
      ->check(examples::whole_number(0, 10'000'000));
  app.add_flag("--distributed", distributed,
               "data-parallel over mpirun's ranks or torchrun-style variables: --batch-size is the global batch");
  app.add_option("--reduce-dtype", reduce_dtype, "with --distributed: all-reduce the gradients in bf16 or fp16 or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  int code = 0;
  if (!examples::parse_cli(app, argc, argv, code)) return code;
  return examples::run_main([&] {
    HG_CHECK(c.embd % c.heads == 0, "char_transformer", "--heads {} must divide --embd {}", c.heads, c.embd);
    examples::Args dev_args;
    dev_args.device = device_name;
    dev_args.amp = amp_name;
    const hg::Device device = examples::pick_device(dev_args);
    const std::optional<hg::Dtype> amp = examples::amp_dtype(dev_args);
    examples::DataParallel parallel(distributed, "char_transformer", c.batch, device, reduce_dtype);
    const Corpus corpus = load_words(words_path, seed);
    HG_CHECK(static_cast<int64_t>(corpus.val.size()) > c.context + 1, "char_transformer",
             "--context {} is longer than the validation stream ({} tokens)", c.context, corpus.val.size());
    if (parallel.is_main())
      fmt::print("{} training words ({} tokens), {} validation words ({} tokens)\n", corpus.train_words,
                 corpus.train.size(), corpus.val_words, corpus.val.size());

    hg::manual_seed(seed);
    auto gpt = std::make_shared<CharGPT>(c);
    CharGPT& model = *gpt;
    model.to(device);
    const std::shared_ptr<hg::nn::Module> net = parallel.wrap(gpt);  // DDP with --distributed
    // Two parameter groups: weight decay on the matrices, none on biases, norms and embeddings.
    hg::TensorList decay, no_decay;
    for (auto& [name, p] : model.named_parameters())
      (p.dim() >= 2 && !name.starts_with("tok_emb") && !name.starts_with("pos_emb") ? decay : no_decay).push_back(p);
    hg::optim::AdamW opt({{decay, {.lr = c.lr, .beta2 = 0.99, .weight_decay = c.weight_decay}},
                          {no_decay, {.lr = c.lr, .beta2 = 0.99, .weight_decay = 0.0}}});
    hg::amp::GradScaler scaler(device, {.enabled = amp_name == "fp16"});
    if (parallel.is_main())
      fmt::print("{} parameters, {} layers, {} heads, embd {}, context {}, {} rank(s)\n", model.num_parameters(),
                 c.layers, c.heads, c.embd, c.context, parallel.world());

    // Linear warm-up over at most a tenth of the run (lr * (step + 1) / warmup), then a cosine
    // decay to a tenth of the peak, stepped once per batch.
    const int64_t warmup = std::min(c.warmup, c.steps / 10);
    hg::optim::LinearLR warm_up(opt, 1.0 / static_cast<double>(std::max<int64_t>(warmup, 1)), 1.0,
                                std::max<int64_t>(warmup - 1, 1));
    hg::optim::CosineAnnealingLR decay_lr(opt, std::max<int64_t>(1, c.steps - warmup), 0.1 * c.lr);
    std::optional<hg::optim::SequentialLR> schedule;
    if (warmup > 0)
      schedule.emplace(opt, std::vector<hg::optim::LRScheduler*>{&warm_up, &decay_lr}, std::vector<int64_t>{warmup});
    hg::optim::LRScheduler& lr_schedule = schedule ? static_cast<hg::optim::LRScheduler&>(*schedule) : decay_lr;
    const uint64_t batch_key = stream_key(seed, kBatches);
    const auto span = static_cast<uint64_t>(corpus.train.size()) - static_cast<uint64_t>(c.context);
    std::vector<double> step_ms;
    double recent = 0;
    std::optional<hg::OpRecorder> recorder;  // --profile: alive over the last steps
    for (int64_t step = 0; step < c.steps; ++step) {
      if (profile > 0 && step == std::max<int64_t>(0, c.steps - profile)) recorder.emplace();
      const auto t0 = std::chrono::steady_clock::now();
      // The global batch's windows; with --distributed this rank takes its equal, contiguous part.
      const int64_t local = parallel.local_batch(c.batch), first = parallel.rank() * local;
      std::vector<int64_t> starts(static_cast<size_t>(local));
      for (int64_t b = 0; b < local; ++b)
        starts[static_cast<size_t>(b)] =
            static_cast<int64_t>(splitmix64(batch_key + static_cast<uint64_t>(step * c.batch + first + b)) % span);
      auto [x, y] = windows(corpus.train, starts, c.context);
      opt.zero_grad();
      const double lr = opt.lr();
      const Tensor loss = loss_of(*net, x.to(device), y.to(device), amp);
      scaler.scale(loss).backward();
      parallel.wait_for_gradients();  // averaged during backward; this checks every bucket was
      scaler.step(opt);               // fp16: skipped when the gradients overflowed
      scaler.update();
      lr_schedule.step();
      const double l = loss.item<double>();
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      recent = step == 0 ? l : 0.98 * recent + 0.02 * l;
      if (parallel.is_main() && ((step + 1) % std::max<int64_t>(1, c.steps / 10) == 0 || step + 1 == c.steps))
        fmt::print("step {}/{} loss {:.4f} (smoothed {:.4f}) lr {:.2e} {:.1f} ms/step\n", step + 1, c.steps, l, recent,
                   lr, step_ms.back());
    }

    if (recorder && parallel.is_main()) examples::print_op_profile(*recorder, std::min(profile, c.steps));
    recorder.reset();
    if (!parallel.is_main()) return 0;  // the replicas are identical: rank 0 evaluates and reports
    const double train_loss = evaluate(model, corpus.train, eval_windows, c, device, amp);
    const double val_loss = evaluate(model, corpus.val, eval_windows, c, device, amp);
    if (sample > 0) {
      for (const std::string& w : sample_words(model, sample, c, device, seed)) fmt::print("sample: {}\n", w);
    }
    std::sort(step_ms.begin(), step_ms.end());
    fmt::print(
        R"({{"model":"char_transformer","framework":"halfgrad","device":"{}","amp":"{}","seed":{},"steps":{},"layers":{},"heads":{},"embd":{},"context":{},"batch_size":{},"params":{},"unigram_entropy":{},"train_loss":{},"val_loss":{},"step_ms_median":{}}})"
        "\n",
        device.is_cpu() ? "cpu" : "cuda", amp_name, seed, c.steps, c.layers, c.heads, c.embd, c.context, c.batch,
        model.num_parameters(), examples::json_number(unigram_entropy(corpus.train), 4),
        examples::json_number(train_loss, 4), examples::json_number(val_loss, 4),
        examples::json_number(step_ms[step_ms.size() / 2], 2));
    return 0;
  });
}
