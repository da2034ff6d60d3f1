// GPT-2 trained as llm.c and nanoGPT train it. Run:
//   build/examples/gpt2 --model tiny --steps 50 --sample 32               (synthetic tokens)
//   build/examples/gpt2 --model d12 --data datasets/fortunes/ --amp bf16  (train.bin, val.bin)
//   mpirun -np 2 build/examples/gpt2 --distributed ...                    (data-parallel)
// Model (gpt2_model.h): learned token and position embeddings, pre-LayerNorm blocks with causal
// attention and a 4x tanh-GELU MLP, a final LayerNorm, the head tied to wte; Hugging Face's state
// dict, so --init-from loads a user's model.safetensors of GPT-2. Training: AdamW (0.9, 0.95,
// eps 1e-8), weight decay on the 2-D tensors only, linear warm-up then cosine decay to
// --final-lr-frac of the peak, gradients clipped to norm 1, accumulated over micro-batches up to
// --total-batch-tokens. Batches read the token stream in order as llm.c's loader does: each
// micro-batch is the next B*T+1 tokens, cut into B rows of T (and their targets one later).
// tools/gpt2_torch.py is the PyTorch twin (same streams, --save-init's weights, same schedule).
// --sample decodes its tokens with GPT-2's tokenizer when --vocab-dir holds the vocabulary
// (tools/fetch-gpt2-vocab.sh) and --vocab is GPT-2's 50257, and prints token ids otherwise.
// --amp fp8 runs the forward (and validation) in an amp::Fp8Autocast region with a delayed-scaling
// amp::Fp8Recipe whose state goes in the checkpoints: cuBLASLt fp8 GEMMs on a GPU of compute
// capability 8.9+, bfloat16 on older GPUs, the emulation on the CPU (docs/AMP.md, "fp8").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <halfgrad.h>

#include "common.h"
#include "data/gpt2_tokenizer.h"
#include "data/token_file.h"
#include "data_parallel.h"
#include "gpt2_model.h"
#include "graph_step.h"

namespace {

using hg::Tensor;

// SplitMix64 counters (as char_transformer's): the twin draws exactly the same numbers in Python.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t stream_key(uint64_t seed, uint64_t stream) { return splitmix64(seed + splitmix64(stream)); }
enum Stream : uint64_t { kTrainTokens = 1, kValTokens = 2, kSampling = 3 };

// A token stream: random tokens, a pure function of (seed, stream, position), or a token file.
class TokenStream {
 public:
  static TokenStream synthetic(uint64_t seed, Stream stream, int64_t vocab) {
    TokenStream s;
    s.key_ = stream_key(seed, stream);
    s.vocab_ = static_cast<uint64_t>(vocab);
    return s;
  }
  // llm.c's token file, mapped and checked by hg::data::TokenFile (magic, version, the count
  // against the size, every token below `vocab`); its problems throw "[token_file] <path>: ...".
  static TokenStream file(const std::string& path, int64_t vocab) {
    TokenStream s;
    s.file_.emplace(path, static_cast<int32_t>(vocab));
    return s;
  }
  int64_t size() const { return file_ ? file_->size() : INT64_MAX / 2; }
  int64_t at(int64_t pos) const {
    if (file_) return file_->data()[pos];
    return static_cast<int64_t>(splitmix64(key_ + static_cast<uint64_t>(pos)) % vocab_);
  }
  // Rows of T tokens from `pos` (row r starts at pos + r T) and their targets one later.
  std::pair<Tensor, Tensor> batch(int64_t pos, int64_t rows, int64_t T) const {
    std::vector<int64_t> x(static_cast<size_t>(rows * T)), y(x.size());
    for (int64_t i = 0; i < rows * T; ++i) {
      x[static_cast<size_t>(i)] = at(pos + i);
      y[static_cast<size_t>(i)] = at(pos + i + 1);
    }
    return {hg::tensor(x, {rows, T}), hg::tensor(y, {rows, T})};
  }
  // Where the micro-batch after the one at `pos` starts: B*T on, back to 0 when the next would
  // run past the end (a file's epoch ends).
  int64_t advance(int64_t pos, int64_t B, int64_t T) const {
    pos += B * T;
    return pos + B * T + 1 > size() ? 0 : pos;
  }

 private:
  std::optional<hg::data::TokenFile> file_;  // empty: synthetic
  uint64_t key_ = 0, vocab_ = 1;
};

struct Train {
  int64_t batch = 4, steps = 20, warmup = 700, total_batch_tokens = 0, val_every = 0, val_batches = 10;
  double lr = 6e-4, final_lr_frac = 0.1, weight_decay = 0.1, grad_clip = 1.0;
  bool fused_loss = true;  // --loss fused (cross_entropy_fused_) or plain (cross_entropy)
};

// Linear warm-up over the first `warmup` steps (lr (step + 1) / warmup), then a cosine from lr to
// lr * final_lr_frac at the last step; a closed form of the step, so a resumed run needs no state.
double lr_at(const Train& t, int64_t step) {
  if (step < t.warmup) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup);
  const double progress =
      static_cast<double>(step - t.warmup) / static_cast<double>(std::max<int64_t>(1, t.steps - t.warmup));
  const double min_lr = t.lr * t.final_lr_frac;
  return min_lr + 0.5 * (t.lr - min_lr) * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

// `fp8`: the forward and the loss in an fp8 region with that recipe (--amp fp8).
Tensor loss_of(hg::nn::Module& net, const Tensor& x, const Tensor& y, std::optional<hg::Dtype> amp, int64_t vocab,
               bool fused = true, const hg::amp::Fp8Recipe* fp8 = nullptr) {
  hg::amp::AutocastGuard autocast(x.device().type, amp, amp.has_value());
  std::optional<hg::amp::Fp8Autocast> fp8_region;
  if (fp8) fp8_region.emplace(x.device().type, *fp8);
  const Tensor logits = net(x);  // over the padded vocabulary with the fused loss (set_padded_logits)
  // The fused loss writes the logits' gradient over them (no second logits-sized tensor) and
  // leaves the padding columns out; the loss is float32 under autocast, as cross_entropy's.
  if (!fused) return hg::cross_entropy(logits.reshape({-1, vocab}), y.reshape({-1}));
  return hg::cross_entropy_fused_(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}), hg::Reduction::Mean, -100,
                                  0.0, vocab);
}

// Mean loss of the first `batches` micro-batches of the stream (the same ones every time).
double evaluate(gpt2::GPT2& model, const TokenStream& s, const Train& t, int64_t T, hg::Device device,
                std::optional<hg::Dtype> amp, const hg::amp::Fp8Recipe* fp8) {
  hg::NoGradGuard no_grad;
  model.eval();
  double total = 0;
  int64_t pos = 0;
  for (int64_t i = 0; i < t.val_batches; ++i) {
    auto [x, y] = s.batch(pos, t.batch, T);
    total += loss_of(model, x.to(device), y.to(device), amp, model.config().vocab, true, fp8).item<double>();
    pos = s.advance(pos, t.batch, T);
  }
  model.train();
  return total / static_cast<double>(t.val_batches);
}

// Generates `count` tokens after <|endoftext|> (the last id) and the `prompt` tokens. Temperature
// 0 is greedy; top_k > 0 keeps the k largest logits (ties with the k-th kept too). The draws are
// SplitMix64 uniforms through the inverse CDF, in float64 on the host, so the twin makes the same
// choices (the twin has no prompt: without one the two agree).
std::vector<int64_t> sample_tokens(gpt2::GPT2& model, const std::vector<int64_t>& prompt, int64_t count,
                                   double temperature, int64_t top_k, hg::Device device, uint64_t seed) {
  hg::NoGradGuard no_grad;
  model.eval();
  const gpt2::Config& c = model.config();
  const uint64_t key = stream_key(seed, kSampling);
  std::vector<int64_t> ctx{c.vocab - 1}, out;
  ctx.insert(ctx.end(), prompt.begin(), prompt.end());
  for (int64_t i = 0; i < count; ++i) {
    const auto n = std::min<int64_t>(static_cast<int64_t>(ctx.size()), c.context);
    const std::vector<int64_t> tail(ctx.end() - n, ctx.end());
    std::vector<double> l =
        model.logits(hg::tensor(tail, {1, n}).to(device)).select(1, n - 1).to(hg::kCPU).to_vector<double>();
    int64_t token = std::max_element(l.begin(), l.end()) - l.begin();
    if (temperature > 0) {
      double threshold = -INFINITY;
      if (top_k > 0 && top_k < c.vocab) {
        std::vector<double> sorted = l;
        std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
        threshold = sorted[static_cast<size_t>(top_k - 1)];
      }
      const double top = l[static_cast<size_t>(token)];
      double sum = 0;
      for (double& v : l) sum += v = v >= threshold ? std::exp((v - top) / temperature) : 0.0;
      const double u = static_cast<double>(splitmix64(key + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * sum;
      double acc = 0;
      for (size_t k = 0; k < l.size(); ++k) {
        acc += l[k];
        if (l[k] > 0 && u < acc) {
          token = static_cast<int64_t>(k);
          break;
        }
      }
    }
    ctx.push_back(token);
    out.push_back(token);
  }
  model.train();
  return out;
}

// GPT-2's tokenizer for --sample's text, or nothing (with one line saying why) when `dir` lacks
// the vocabulary or the model's vocabulary is not GPT-2's: the samples are then printed as ids.
// A --prompt needs the tokenizer, so then its absence is an error.
std::optional<hg::data::Gpt2Tokenizer> sample_tokenizer(const std::string& dir, int64_t vocab, bool prompt) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::path(dir) / "encoder.json", ec) || !fs::exists(fs::path(dir) / "vocab.bpe", ec)) {
    HG_CHECK(!prompt, "gpt2",
             "--prompt needs GPT-2's vocabulary: no encoder.json and vocab.bpe in {} (bash "
             "tools/fetch-gpt2-vocab.sh puts them in datasets/gpt2)",
             dir);
    fmt::print("sample: no encoder.json and vocab.bpe in {} (bash tools/fetch-gpt2-vocab.sh): printing token ids\n",
               dir);
    return std::nullopt;
  }
  hg::data::Gpt2Tokenizer tokenizer(dir);  // a damaged file is an error, not a reason to print ids
  if (tokenizer.vocab_size() != vocab) {
    HG_CHECK(!prompt, "gpt2", "--prompt needs GPT-2's vocabulary: this model's --vocab is {}, GPT-2's {}", vocab,
             tokenizer.vocab_size());
    fmt::print("sample: --vocab {} is not GPT-2's {}: printing token ids\n", vocab, tokenizer.vocab_size());
    return std::nullopt;
  }
  return tokenizer;
}

// The training state in one safetensors file (written atomically by hg::save): the model under
// Hugging Face's names, the optimizer, the scaler, the fp8 recipe (--amp fp8), the next step and
// the data position. The sizes,
// seed and data source go in the metadata so a resume with other ones is refused. Batches and
// samples come from counters, not from a generator, so (seed, step, position) is the whole RNG state.
hg::Metadata run_metadata(const gpt2::Config& c, uint64_t seed, const std::string& data) {
  return {{"format", "halfgrad-gpt2-training"},   {"layers", std::to_string(c.layers)},
          {"heads", std::to_string(c.heads)},     {"embd", std::to_string(c.embd)},
          {"context", std::to_string(c.context)}, {"vocab", std::to_string(c.vocab)},
          {"seed", std::to_string(seed)},         {"data", data}};
}

void save_checkpoint(const std::string& path, const gpt2::GPT2& model, const hg::optim::Optimizer& opt,
                     const hg::amp::GradScaler& scaler, const hg::amp::Fp8Recipe* fp8, int64_t step, int64_t train_pos,
                     const hg::Metadata& meta) {
  hg::StateDict all = hg::with_prefix(gpt2::hf_state_dict(model), "model.");
  for (auto& [k, v] : hg::with_prefix(opt.state_dict(), "optim.")) all[k] = v;
  for (auto& [k, v] : hg::with_prefix(scaler.state_dict(), "scaler.")) all[k] = v;
  if (fp8)
    for (auto& [k, v] : hg::with_prefix(fp8->state_dict(), "fp8.")) all[k] = v;
  all["step"] = hg::scalar_tensor(static_cast<double>(step), hg::kInt64);
  all["data.train_pos"] = hg::scalar_tensor(static_cast<double>(train_pos), hg::kInt64);
  all["rng"] = hg::get_rng_state();  // what sampling (and any dropout) draws next
  hg::save(all, path, meta);
}

// Returns the step to continue from and sets the data position.
int64_t load_checkpoint(const std::string& path, gpt2::GPT2& model, hg::optim::Optimizer& opt,
                        hg::amp::GradScaler& scaler, hg::amp::Fp8Recipe* fp8, const hg::Metadata& meta, int64_t steps,
                        int64_t& train_pos) {
  const hg::Metadata saved = hg::load_metadata(path);
  for (const auto& [k, v] : meta) {
    const auto it = saved.find(k);
    HG_CHECK(it != saved.end() && it->second == v, "gpt2", "{}: the checkpoint has {} '{}', this run '{}'", path, k,
             it == saved.end() ? "no" : it->second, v);
  }
  const hg::StateDict all = hg::load(path);
  gpt2::load_hf_state_dict(model, hg::strip_prefix(all, "model."), path);
  opt.load_state_dict(hg::strip_prefix(all, "optim."));
  scaler.load_state_dict(hg::strip_prefix(all, "scaler."));
  // A run may change --amp on resume: an fp8 run from another's checkpoint starts a fresh recipe.
  const hg::StateDict fp8_state = hg::strip_prefix(all, "fp8.");
  if (fp8 && !fp8_state.empty()) {
    fp8->load_state_dict(fp8_state);
  } else if (fp8) {
    fmt::print("{}: no fp8 recipe state (not an --amp fp8 run): the recipe starts afresh\n", path);
  }
  HG_CHECK(all.count("step") && all.count("data.train_pos"), "gpt2", "{}: no 'step' or 'data.train_pos' entry", path);
  train_pos = hg::state_count(all.at("data.train_pos"), "gpt2", "data.train_pos", 0, int64_t{1} << 52);
  if (all.count("rng")) hg::set_rng_state(all.at("rng"));
  return hg::state_count(all.at("step"), "gpt2", "step", 0, steps);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "tiny", data = "synthetic", device_name, amp_name = "off", save, resume, save_init;
  std::string loss_name = "fused";
  std::string init_from, reduce_dtype = "off", vocab_dir = "datasets/gpt2", prompt;
  int64_t layers = 0, heads = 0, embd = 0, context = 0, vocab = 50257, sample = 0, top_k = 0, print_every = 0;
  int64_t save_every = 0, threads = 0, stop_after = 0, profile = 0;
  std::string dump_logits, trace;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool distributed = false;
  bool cuda_graph = false;
  Train t;
  CLI::App app{"Train GPT-2 (llm.c's recipe) on synthetic tokens or a token file"};
  app.add_option("--model", model_name, "d12 (124M), d6, d4 or tiny")
      ->capture_default_str()
      ->check(CLI::IsMember({"d12", "d6", "d4", "tiny"}));
  app.add_option("--layers", layers, "override the model's blocks")->check(examples::whole_number(1, 256));
  app.add_option("--heads", heads, "override its attention heads (must divide the width)")
      ->check(examples::whole_number(1, 256));
  app.add_option("--embd", embd, "override its width")->check(examples::whole_number(1, 16384));
  app.add_option("--context", context, "override its positions (the sequence length T)")
      ->check(examples::whole_number(1, 1 << 16));
  app.add_option("--vocab", vocab, "real vocabulary size (wte is padded to a multiple of 128)")
      ->capture_default_str()
      ->check(examples::whole_number(2, 65536));
  app.add_option("--data", data, "synthetic, or a prefix PATH with PATHtrain.bin and PATHval.bin (llm.c format)")
      ->capture_default_str();
  app.add_option("--init-from", init_from, "start from a GPT-2 safetensors file (Hugging Face names)");
  app.add_option("--save-init", save_init, "write the initial weights (Hugging Face names) before training");
  app.add_option("--batch-size", t.batch, "rows per micro-batch (split over the ranks with --distributed)")
      ->capture_default_str()
      ->check(examples::whole_number(1, 1 << 16));
  app.add_option("--total-batch-tokens", t.total_batch_tokens,
                 "tokens per optimizer step, accumulated over micro-batches (default: one micro-batch)")
      ->check(examples::whole_number(1, int64_t{1} << 40));
  app.add_option("--steps", t.steps, "optimizer steps")
      ->capture_default_str()
      ->check(examples::whole_number(0, 100'000'000));
  app.add_option("--warmup", t.warmup, "linear warm-up steps, at most steps / 10")
      ->capture_default_str()
      ->check(examples::whole_number(0, 100'000'000));
  app.add_option("--lr", t.lr, "peak learning rate")
      ->capture_default_str()
      ->check(examples::real_number(0, examples::kMaxLr));
  app.add_option("--final-lr-frac", t.final_lr_frac, "the cosine ends at this fraction of --lr")
      ->capture_default_str()
      ->check(examples::real_number(0, 1));
  app.add_option("--weight-decay", t.weight_decay, "AdamW weight decay of the 2-D tensors")
      ->capture_default_str()
      ->check(examples::real_number(0, 10));
  app.add_option("--grad-clip", t.grad_clip, "clip the gradients' total norm to this (0: off)")
      ->capture_default_str()
      ->check(examples::real_number(0, 1e6));
  app.add_option("--loss", loss_name,
                 "fused: cross_entropy_fused_ (the logits' gradient written over them), plain: cross_entropy")
      ->capture_default_str()
      ->check(CLI::IsMember({"fused", "plain"}));
  app.add_option("--val-every", t.val_every, "validation loss every N steps (0: at the end only)")
      ->capture_default_str()
      ->check(examples::whole_number(0, 100'000'000));
  app.add_option("--val-batches", t.val_batches, "micro-batches of the validation loss")
      ->capture_default_str()
      ->check(examples::whole_number(1, 1 << 20));
  app.add_option("--print-every", print_every, "progress line every N steps (default: steps / 10)")
      ->check(examples::whole_number(1, 100'000'000));
  app.add_option("--device", device_name, "cpu or cuda (default: cuda where a GPU is, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--amp", amp_name,
                 "mixed precision: off, bf16, fp16 (with a GradScaler), or fp8 (amp::Fp8Autocast with delayed "
                 "scaling; cuBLASLt fp8 GEMMs on compute capability 8.9+, emulated on the CPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16", "fp8"}));
  app.add_option("--threads", threads, "CPU threads (sets HG_NUM_THREADS)")->check(examples::whole_number(1, 1024));
  app.add_option("--save", save, "write a checkpoint (safetensors) at the end and every --save-every steps");
  app.add_option("--save-every", save_every, "steps between checkpoints (0: at the end only)")
      ->check(examples::whole_number(0, 100'000'000));
  app.add_option("--stop-after", stop_after,
                 "end this run after N steps, as if interrupted (the schedule still follows --steps; with --resume)")
      ->check(examples::whole_number(1, 100'000'000));
  app.add_option("--dump-logits", dump_logits,
                 "write the float32 logits of the first validation micro-batch (safetensors 'logits', 'tokens') "
                 "before training, to check a loaded model against another implementation");
  app.add_option("--resume", resume, "continue from a checkpoint written by --save");
  CLI::Option* profile_opt =
      app.add_option("--profile", profile, "time every op over the last N steps and print the totals per op")
          ->check(examples::whole_number(1, 100'000'000));
  app.add_option("--trace", trace, "with --profile: write those steps as a Chrome trace (Perfetto, chrome://tracing)")
      ->needs(profile_opt);
  CLI::Option* sample_opt = app.add_option("--sample", sample, "tokens to generate after training")
                                ->capture_default_str()
                                ->check(examples::whole_number(0, 1 << 20));
  app.add_option("--vocab-dir", vocab_dir,
                 "GPT-2's encoder.json and vocab.bpe, to print --sample as text (absent: as token ids)")
      ->capture_default_str();
  app.add_option("--prompt", prompt, "with --sample: continue this text (after <|endoftext|>)")->needs(sample_opt);
  app.add_option("--temperature", temperature, "sampling temperature (0: greedy)")
      ->capture_default_str()
      ->check(examples::real_number(0, 100));
  app.add_option("--top-k", top_k, "sample among the k most likely tokens (0: all)")
      ->capture_default_str()
      ->check(examples::whole_number(0, 65536));
  app.add_option("--seed", seed, "seed of the initialisation, the synthetic tokens and sampling")
      ->capture_default_str()
      ->check(examples::whole_number(0, examples::kMaxSeed));
  app.add_flag("--distributed", distributed,
               "data-parallel over mpirun's ranks or torchrun-style variables: --batch-size is the global one");
  app.add_option("--reduce-dtype", reduce_dtype, "with --distributed: all-reduce the gradients in bf16 or fp16 or off")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
  app.add_flag("--cuda-graph", cuda_graph,
               "capture the training step in a CUDA graph after 3 warm-up steps and replay it (--device cuda, one "
               "micro-batch per step)");
  int code = 0;
  if (!examples::parse_cli(app, argc, argv, code)) return code;
  if (threads > 0) ::setenv("HG_NUM_THREADS", std::to_string(threads).c_str(), 1);  // before the pool starts
  return examples::run_main([&] {
    gpt2::Config c = gpt2::named_config(model_name);
    if (layers) c.layers = layers;
    if (heads) c.heads = heads;
    if (embd) c.embd = embd;
    if (context) c.context = context;
    c.vocab = vocab;
    gpt2::check_config(c);
    const int64_t T = c.context;
    t.warmup = std::min(t.warmup, t.steps / 10);
    t.fused_loss = loss_name == "fused";
    examples::Args dev_args;
    dev_args.device = device_name;
    dev_args.amp = amp_name;
    dev_args.cuda_graph = cuda_graph;
    dev_args.distributed = distributed;
    const hg::Device device = examples::pick_device(dev_args);
    const std::optional<hg::Dtype> amp = examples::amp_dtype(dev_args);  // none for fp8: its region is bf16's
    HG_CHECK(!(cuda_graph && amp_name == "fp8"), "--cuda-graph",
             "cannot replay --amp fp8 yet: the recipe's scale update runs on the host's schedule between steps");
    std::optional<hg::amp::Fp8Recipe> fp8_recipe;
    if (amp_name == "fp8") fp8_recipe.emplace();
    hg::amp::Fp8Recipe* fp8 = fp8_recipe ? &*fp8_recipe : nullptr;
    examples::DataParallel parallel(distributed, "gpt2", t.batch, device, reduce_dtype);
    const int64_t micro_tokens = t.batch * T;
    if (t.total_batch_tokens == 0) t.total_batch_tokens = micro_tokens;
    HG_CHECK(t.total_batch_tokens % micro_tokens == 0, "gpt2",
             "--total-batch-tokens {} is not a multiple of one micro-batch's {} tokens (--batch-size {} x context {})",
             t.total_batch_tokens, micro_tokens, t.batch, T);
    const int64_t accum = t.total_batch_tokens / micro_tokens;
    HG_CHECK(
        !cuda_graph || accum == 1, "--cuda-graph",
        "captures a step of one micro-batch; --total-batch-tokens {} makes {} (leave it at --batch-size x context)",
        t.total_batch_tokens, accum);

    const bool synthetic = data == "synthetic";
    const TokenStream train = synthetic ? TokenStream::synthetic(seed, kTrainTokens, c.vocab)
                                        : TokenStream::file(data + "train.bin", c.vocab);
    const TokenStream val =
        synthetic ? TokenStream::synthetic(seed, kValTokens, c.vocab) : TokenStream::file(data + "val.bin", c.vocab);
    for (const auto& [s, name] : {std::pair{&train, "train"}, std::pair{&val, "val"}})
      HG_CHECK(s->size() >= micro_tokens + 1, "gpt2", "{}{}.bin: {} tokens, fewer than one micro-batch's {} + 1", data,
               name, s->size(), micro_tokens);

    // Before training, so a missing vocabulary or a bad prompt does not wait for the run's end.
    std::optional<hg::data::Gpt2Tokenizer> tokenizer;
    std::vector<int64_t> prompt_tokens;
    if (sample > 0 && parallel.is_main()) {
      tokenizer = sample_tokenizer(vocab_dir, c.vocab, !prompt.empty());
      if (tokenizer)
        for (const int32_t id : tokenizer->encode(prompt)) prompt_tokens.push_back(id);
    }

    hg::manual_seed(seed);
    auto gpt = std::make_shared<gpt2::GPT2>(c);
    gpt2::GPT2& model = *gpt;
    if (!init_from.empty()) gpt2::load_hf_state_dict(model, hg::load(init_from), init_from);
    if (!save_init.empty() && parallel.is_main()) hg::save(gpt2::hf_state_dict(model), save_init);
    model.to(device);
    model.set_padded_logits(t.fused_loss);  // the fused loss leaves the padding columns out
    const std::shared_ptr<hg::nn::Module> net = parallel.wrap(gpt);
    // nanoGPT's groups: weight decay on every 2-D tensor (the matrices and embeddings), none on
    // biases and norms.
    hg::TensorList decay, no_decay;
    for (auto& [name, p] : model.named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    hg::optim::AdamW opt(
        {{decay, {.lr = t.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = t.weight_decay}},
         {no_decay, {.lr = t.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.0}}});
    hg::amp::GradScaler scaler(device, {.enabled = amp_name == "fp16"});
    const hg::Metadata meta = run_metadata(c, seed, data);
    if (!save.empty() && parallel.is_main()) hg::check_save_path(save);
    int64_t start = 0, train_pos = 0;
    if (!resume.empty()) {
      start = load_checkpoint(resume, model, opt, scaler, fp8, meta, t.steps, train_pos);
      if (parallel.is_main()) fmt::print("resumed from {} at step {}\n", resume, start);
    }
    if (parallel.is_main())
      fmt::print(
          "{} parameters, {} layers, {} heads, embd {}, context {}, vocab {} (padded {}), {} micro-batch(es) of "
          "{} x {} per step, {} rank(s)\n",
          model.num_parameters(), c.layers, c.heads, c.embd, T, c.vocab, c.padded_vocab(), accum, t.batch, T,
          parallel.world());
    if (fp8 && parallel.is_main()) {
      if (device.is_cpu())
        fmt::print("amp fp8: EMULATED on the CPU (the fp8 casts and scales, float32 GEMMs): for checking, not speed\n");
      else if (!hg::amp::fp8_gemm_available(device))
        fmt::print(
            "amp fp8: this GPU has no fp8 GEMMs (compute capability below 8.9): linear and mm run in "
            "bfloat16, counted as fallbacks\n");
      else
        fmt::print("amp fp8: cuBLASLt fp8 GEMMs (E4M3 forward, E5M2 gradients)\n");
    }

    if (!dump_logits.empty() && parallel.is_main()) {
      hg::NoGradGuard no_grad;
      auto [x, y] = val.batch(0, t.batch, T);
      hg::save({{"logits", model.logits(x.to(device)).to(hg::kFloat32).to(hg::kCPU)}, {"tokens", x}}, dump_logits);
    }
    const int64_t local = parallel.local_batch(t.batch);
    const int64_t end = stop_after > 0 ? std::min(t.steps, start + stop_after) : t.steps;
    if (print_every == 0) print_every = std::max<int64_t>(1, t.steps / 10);
    std::vector<double> step_ms;
    double last_loss = NAN, recent = 0, val_loss = NAN;
    std::optional<hg::OpRecorder> recorder;  // --profile: alive over the last steps
    // --cuda-graph: the whole step (forward, backward, clipping, scaler, AdamW) captured once after
    // warm-up and replayed; the loss and the gradient norm are read after each replay.
    Tensor norm_t;
    examples::GraphedStep graphed(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          const Tensor loss = loss_of(*net, x, y, amp, c.vocab, t.fused_loss, fp8);
          scaler.scale(loss).backward();
          if (t.grad_clip > 0) {
            scaler.unscale_(opt);
            norm_t = hg::optim::clip_grad_norm_(opt.params(), t.grad_clip);
          }
          scaler.step(opt);
          scaler.update();
          return loss.detach();
        },
        cuda_graph);
    for (int64_t step = start; step < end; ++step) {
      if (profile > 0 && step == std::max(start, end - profile)) recorder.emplace();
      if (t.val_every > 0 && step % t.val_every == 0 && parallel.is_main()) {
        val_loss = evaluate(model, val, t, T, device, amp, fp8);
        fmt::print("step {}/{} val loss {:.6f}\n", step, t.steps, val_loss);
      }
      const auto t0 = std::chrono::steady_clock::now();
      const double lr = lr_at(t, step);
      opt.set_lr(lr);  // the device scalars a replay reads too
      double loss_sum = 0, norm = 0;
      if (cuda_graph) {
        auto [x, y] = train.batch(train_pos, local, T);
        train_pos = train.advance(train_pos, t.batch, T);
        loss_sum = graphed(x.to(device), y.to(device)).item<double>();
        if (t.grad_clip > 0) norm = norm_t.item<double>();
      } else {
        opt.zero_grad();
        for (int64_t micro = 0; micro < accum; ++micro) {
          // This rank's contiguous rows of the global micro-batch.
          auto [x, y] = train.batch(train_pos + parallel.rank() * local * T, local, T);
          train_pos = train.advance(train_pos, t.batch, T);
          std::optional<hg::nn::DistributedDataParallel::NoSyncGuard> accumulate;
          if (micro + 1 < accum) parallel.no_sync(accumulate);
          const Tensor loss =
              loss_of(*net, x.to(device), y.to(device), amp, c.vocab, t.fused_loss, fp8) / static_cast<double>(accum);
          scaler.scale(loss).backward();
          loss_sum += loss.item<double>();
        }
        parallel.wait_for_gradients();
        if (t.grad_clip > 0) {
          scaler.unscale_(opt);  // clip the true gradients (fp16)
          norm = hg::optim::clip_grad_norm_(opt.params(), t.grad_clip).item<double>();
        }
        scaler.step(opt);
        scaler.update();
      }
      loss_sum = parallel.mean(loss_sum);  // every rank's rows, as the twin's one process sees them
      last_loss = loss_sum;
      step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      recent = step == start ? loss_sum : 0.98 * recent + 0.02 * loss_sum;
      if (parallel.is_main() && ((step + 1) % print_every == 0 || step + 1 == t.steps))
        fmt::print("step {}/{} loss {:.6f} (smoothed {:.4f}) lr {:.2e} norm {:.4f} {:.1f} ms/step {:.0f} tok/s\n",
                   step + 1, t.steps, loss_sum, recent, lr, norm, step_ms.back(),
                   static_cast<double>(t.total_batch_tokens) / step_ms.back() * 1000.0);
      if (!save.empty() && parallel.is_main() && ((save_every > 0 && (step + 1) % save_every == 0) || step + 1 == end))
        save_checkpoint(save, model, opt, scaler, fp8, step + 1, train_pos, meta);
    }

    if (recorder && parallel.is_main()) {
      examples::print_op_profile(*recorder, std::min(profile, end - start));
      if (!trace.empty()) hg::write_chrome_trace(*recorder, trace);
    }
    recorder.reset();
    if (!parallel.is_main()) return 0;  // the replicas are identical: rank 0 evaluates and reports
    val_loss = evaluate(model, val, t, T, device, amp, fp8);
    fmt::print("step {}/{} val loss {:.6f}\n", t.steps, t.steps, val_loss);
    if (fp8)
      fmt::print("amp fp8: {} GEMMs in fp8 ({}), {} linear/mm calls fell back to bfloat16\n", fp8->gemms(),
                 device.is_cpu() ? "emulated" : "cuBLASLt", fp8->fallbacks());
    if (sample > 0) {
      const std::vector<int64_t> tokens = sample_tokens(model, prompt_tokens, sample, temperature, top_k, device, seed);
      if (tokenizer)
        fmt::print("sample: {}{}\n", prompt, tokenizer->decode(std::vector<int32_t>(tokens.begin(), tokens.end())));
      else
        fmt::print("sample: {}\n", fmt::join(tokens, " "));
    }
    std::vector<double> sorted = step_ms;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];
    fmt::print(
        R"({{"model":"gpt2","framework":"halfgrad","device":"{}","amp":"{}","seed":{},"steps":{},"layers":{},"heads":{},"embd":{},"context":{},"vocab":{},"batch_size":{},"total_batch_tokens":{},"params":{},"train_loss":{},"val_loss":{},"step_ms_median":{},"tokens_per_s":{}}})"
        "\n",
        device.is_cpu() ? "cpu" : "cuda", amp_name, seed, t.steps, c.layers, c.heads, c.embd, T, c.vocab, t.batch,
        t.total_batch_tokens, model.num_parameters(), examples::json_number(last_loss, 6),
        examples::json_number(val_loss, 6), examples::json_number(median, 2),
        examples::json_number(median > 0 ? static_cast<double>(t.total_batch_tokens) / median * 1000.0 : 0.0, 0));
    return 0;
  });
}
