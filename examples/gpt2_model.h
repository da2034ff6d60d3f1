// GPT-2 (Radford et al. 2019) as a module tree whose state dict is Hugging Face's: the names
// (transformer.h.{i}.attn.c_attn.weight, ...) and the layouts (Conv1D weights stored [in, out]),
// so a user's model.safetensors of GPT-2 loads by name and ours load in transformers. Used by
// examples/gpt2.cpp and tests/tools/gpt2_hf_logits.cpp; tools/gpt2_torch.py is the PyTorch twin.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <halfgrad.h>

namespace gpt2 {

using hg::Tensor;

struct Config {
  int64_t layers = 2, heads = 2, embd = 64, context = 64;
  int64_t vocab = 50257;  // real tokens: targets, inputs and logits use only these
  // wte's rows: vocab rounded up to a multiple of 128 (50257 -> 50304, as llm.c) so the
  // embedding's GEMM-facing dimension is aligned. The extra rows start at zero, are excluded from
  // the head (see GPT2::forward) and never appear as inputs, so they get no gradient and stay zero.
  int64_t padded_vocab() const { return (vocab + 127) / 128 * 128; }
};

// --model: d12 is GPT-2 small (124M), d6 and d4 the shallower llm.c sizes, tiny for tests.
inline Config named_config(const std::string& name) {
  if (name == "d12") return {12, 12, 768, 1024};
  if (name == "d6") return {6, 6, 384, 1024};
  if (name == "d4") return {4, 4, 256, 1024};
  if (name == "tiny") return {2, 2, 64, 64};
  hg::fail("gpt2", "unknown --model '{}' (d12, d6, d4 or tiny)", name);
}

inline void check_config(const Config& c) {
  HG_CHECK(c.layers >= 1 && c.heads >= 1 && c.embd >= 1 && c.context >= 1 && c.vocab >= 2, "gpt2",
           "sizes must be positive (layers {}, heads {}, embd {}, context {}, vocab {})", c.layers, c.heads, c.embd,
           c.context, c.vocab);
  HG_CHECK(c.embd % c.heads == 0, "gpt2", "--heads {} does not divide --embd {}", c.heads, c.embd);
}

// Hugging Face's Conv1D: y = x W + b with W [in, out] (nn.Linear's transpose). linear() takes the
// transposed view as it is: the GEMM reads W directly, no copy.
class Conv1D : public hg::nn::Module {
 public:
  Conv1D(int64_t in, int64_t out) : Module("Conv1D") {
    register_parameter("weight", weight, hg::zeros({in, out}));
    register_parameter("bias", bias, hg::zeros({out}));
  }
  Tensor forward(const Tensor& x) override { return hg::linear(x, weight.t(), bias); }
  Tensor weight, bias;
};

class Attention : public hg::nn::Module {
 public:
  Attention(const Config& c) : Module("GPT2Attention"), heads_(c.heads) {
    c_attn = register_module("c_attn", std::make_shared<Conv1D>(c.embd, 3 * c.embd));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(c.embd, c.embd));
  }
  // x [B, T, C] -> [B, T, C], causal.
  Tensor forward(const Tensor& x) override {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / heads_;
    const Tensor qkv = (*c_attn)(x);
    auto split = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, heads_, hd}).transpose(1, 2); };
    const Tensor y = hg::scaled_dot_product_attention(split(0), split(1), split(2), Tensor(), 0.0, true);
    return (*c_proj)(y.transpose(1, 2).reshape({B, T, C}));
  }
  std::shared_ptr<Conv1D> c_attn, c_proj;

 private:
  int64_t heads_;
};

class Mlp : public hg::nn::Module {
 public:
  Mlp(const Config& c) : Module("GPT2MLP") {
    c_fc = register_module("c_fc", std::make_shared<Conv1D>(c.embd, 4 * c.embd));
    c_proj = register_module("c_proj", std::make_shared<Conv1D>(4 * c.embd, c.embd));
  }
  // c_proj(gelu_new(c_fc(x))), GPT-2's "gelu_new" being the tanh approximation, as one op: on CUDA
  // the GELU and both biases ride on the GEMMs' epilogues (the same values as the three ops).
  Tensor forward(const Tensor& x) override {
    return hg::linear_gelu_linear(x, c_fc->weight.t(), c_fc->bias, c_proj->weight.t(), c_proj->bias);
  }
  std::shared_ptr<Conv1D> c_fc, c_proj;
};

// Pre-LayerNorm: h = x + attn(ln_1(x)), then h + mlp(ln_2(h)).
class Block : public hg::nn::Module {
 public:
  Block(const Config& c) : Module("GPT2Block") {
    ln_1 = register_module("ln_1", std::make_shared<hg::nn::LayerNorm>(c.embd));
    attn = register_module("attn", std::make_shared<Attention>(c));
    ln_2 = register_module("ln_2", std::make_shared<hg::nn::LayerNorm>(c.embd));
    mlp = register_module("mlp", std::make_shared<Mlp>(c));
  }
  // The residual add after attention and ln_2 are one op (add_layer_norm: the same values; under
  // autocast ln_2's output comes in the region's dtype, as the MLP's GEMM reads it).
  Tensor forward(const Tensor& x) override {
    const hg::AddLayerNorm h = hg::add_layer_norm((*attn)((*ln_1)(x)), x, {x.size(-1)}, ln_2->weight, ln_2->bias);
    return h.sum + (*mlp)(h.normalized);
  }
  std::shared_ptr<hg::nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<Mlp> mlp;
};

class Transformer : public hg::nn::Module {
 public:
  Transformer(const Config& c) : Module("GPT2Model") {
    wte = register_module("wte", std::make_shared<hg::nn::Embedding>(c.padded_vocab(), c.embd));
    wpe = register_module("wpe", std::make_shared<hg::nn::Embedding>(c.context, c.embd));
    h = register_module("h", std::make_shared<hg::nn::ModuleList>());
    for (int64_t i = 0; i < c.layers; ++i) h->push_back(std::make_shared<Block>(c));
    ln_f = register_module("ln_f", std::make_shared<hg::nn::LayerNorm>(c.embd));
  }
  std::shared_ptr<hg::nn::Embedding> wte, wpe;
  std::shared_ptr<hg::nn::ModuleList> h;
  std::shared_ptr<hg::nn::LayerNorm> ln_f;
};

class GPT2 : public hg::nn::Module {
 public:
  explicit GPT2(const Config& c) : Module("GPT2LMHeadModel"), config_(c) {
    check_config(c);
    transformer = register_module("transformer", std::make_shared<Transformer>(c));
    // llm.c's initialisation: matrices and embeddings N(0, 0.02), the two residual projections
    // N(0, 0.02 / sqrt(2 layers)), biases 0, norms 1; wte's padding rows 0.
    for (auto& [name, p] : named_parameters()) {
      if (name.ends_with("bias")) hg::nn::init::zeros_(p);
      if (p.dim() < 2) continue;
      const bool residual = name.ends_with("c_proj.weight");
      hg::nn::init::normal_(p, 0.0, residual ? 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)) : 0.02);
    }
    hg::NoGradGuard no_grad;
    transformer->wte->weight.narrow(0, c.vocab, c.padded_vocab() - c.vocab).zero_();
  }

  // idx [B, T] int64 with T <= context -> logits [B, T, vocab]: the head is wte's first `vocab`
  // rows (tied), so the logits are exactly Hugging Face's [.., 50257]. After
  // set_padded_logits(true), [B, T, padded_vocab] instead, as llm.c's: the head is all of wte,
  // each row of logits stays 16-byte aligned and the GEMM's dimensions multiples of 16 (the fused
  // classifier's vector loads and fp8 want both); the padding columns are 0 and must be left out
  // of the loss: cross_entropy_fused_(..., classes = vocab) does that.
  Tensor forward(const Tensor& idx) override {
    HG_CHECK(idx.dim() == 2, "gpt2", "token ids must be [batch, time], got shape {}", idx.shape());
    const int64_t T = idx.size(1);
    HG_CHECK(T >= 1 && T <= config_.context, "gpt2", "a sequence of {} tokens does not fit the model's {} positions", T,
             config_.context);
    Tensor x = (*transformer->wte)(idx) + (*transformer->wpe)(hg::arange(T).to(idx.device()));
    for (const auto& block : *transformer->h) x = (*block)(x);
    const Tensor head =
        padded_logits_ ? transformer->wte->weight : transformer->wte->weight.narrow(0, 0, config_.vocab);
    return hg::linear((*transformer->ln_f)(x), head);
  }
  // The real vocabulary's logits [B, T, vocab] whichever form forward gives (for sampling).
  Tensor logits(const Tensor& idx) {
    const Tensor l = (*this)(idx);
    return l.size(-1) == config_.vocab ? l : l.narrow(-1, 0, config_.vocab);
  }
  void set_padded_logits(bool on) { padded_logits_ = on; }
  bool padded_logits() const { return padded_logits_; }
  const Config& config() const { return config_; }
  std::shared_ptr<Transformer> transformer;

 private:
  Config config_;
  bool padded_logits_ = false;
};

// The state dict as Hugging Face writes GPT2LMHeadModel's: wte with the real vocabulary's rows
// (the padding is all zeros) and no lm_head.weight (tied; save_pretrained omits it too).
inline hg::StateDict hf_state_dict(const GPT2& model) {
  hg::StateDict sd = model.state_dict();
  Tensor& wte = sd.at("transformer.wte.weight");
  wte = wte.narrow(0, 0, model.config().vocab);
  return sd;
}

// Loads a GPT-2 state dict by name: ours, save_pretrained's (transformer.* and maybe a tied
// lm_head.weight) or the hub's model.safetensors (GPT2Model's names without "transformer." and
// the attn.bias / attn.masked_bias causal-mask buffers, which are skipped). wte may have the real
// vocabulary's rows (padded here with zeros) or the padded count. `source` names the file in errors.
inline void load_hf_state_dict(GPT2& model, const hg::StateDict& in, const std::string& source) {
  const Config& c = model.config();
  hg::StateDict sd;
  Tensor lm_head;
  for (const auto& [key, value] : in) {
    if (key == "lm_head.weight") {
      lm_head = value;
      continue;
    }
    if (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias")) continue;
    sd[key.starts_with("transformer.") ? key : "transformer." + key] = value;
  }
  auto wte = sd.find("transformer.wte.weight");
  if (wte != sd.end()) {
    const Tensor w = wte->second;
    HG_CHECK(w.dim() == 2 && w.size(1) == c.embd && (w.size(0) == c.vocab || w.size(0) == c.padded_vocab()), "gpt2",
             "{}: transformer.wte.weight has shape {}, the model wants [{} or {}, {}] (check --embd and --vocab)",
             source, w.shape(), c.vocab, c.padded_vocab(), c.embd);
    if (lm_head.defined()) {
      HG_CHECK(lm_head.shape() == w.shape() && (lm_head - w).abs().max().item<double>() == 0.0, "gpt2",
               "{}: lm_head.weight (shape {}) is not transformer.wte.weight: this GPT-2 ties its head", source,
               lm_head.shape());
    }
    if (w.size(0) != c.padded_vocab()) {
      Tensor padded = hg::zeros({c.padded_vocab(), c.embd}, w.dtype());
      padded.narrow(0, 0, c.vocab).copy_(w);
      wte->second = padded;
    }
  }
  try {
    model.load_state_dict(sd);
  } catch (const hg::Error& e) {
    hg::fail("gpt2", "{}: {}", source, e.what());
  }
}

}  // namespace gpt2
