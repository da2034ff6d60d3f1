// einsum: parses the equation into integer labels per operand dim, then lowers it to public ops
// (permute, reshape, slice, expand, sum, bmm), so every step has its own gradient (and second
// gradient) and bmm its lower-precision autocast row, as PyTorch's einsum. Operands are
// contracted left to right: each pair becomes one bmm over [batch, kept-left, summed] x
// [batch, summed, kept-right], after the labels no later step needs are summed away.
#include "framework/ops/einsum.h"

#include <algorithm>
#include <map>
#include <string>

#include "framework/ops/matmul.h"
#include "framework/ops/reduce.h"
#include "framework/ops/views.h"

namespace hg {

namespace {
constexpr const char* kEinsumName = "einsum";
// Letters are labels 0..51 (A-Z then a-z, so implicit outputs sort as PyTorch's); the dims "..."
// stands for are labels kEllipsisBase + k, k counted so that they align from the right.
constexpr int kEllipsisBase = 64;

using EinsumLabels = std::vector<int>;

struct EinsumTerm {
  EinsumLabels letters_before, letters_after;  // around "..."
  bool ellipsis = false;
};

int einsum_label_of(char c) { return c >= 'A' && c <= 'Z' ? c - 'A' : 26 + (c - 'a'); }

EinsumTerm parse_einsum_term(std::string_view s, std::string_view equation) {
  EinsumTerm t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.') {
      HG_CHECK(s.substr(i, 3) == "..." && !t.ellipsis, kEinsumName, "'.' must come as one \"...\" per operand, in '{}'",
               equation);
      t.ellipsis = true;
      i += 2;
      continue;
    }
    HG_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), kEinsumName,
             "invalid character '{}' in '{}': labels are letters", c, equation);
    (t.ellipsis ? t.letters_after : t.letters_before).push_back(einsum_label_of(c));
  }
  return t;
}

// An operand as a tensor and one label per dim (repeated labels already taken on the diagonal).
struct EinsumOperand {
  Tensor t;
  EinsumLabels labels;
};

// The diagonal over every label that occurs twice or more in one operand: the two dims moved last,
// flattened, and every (n + 1)-th element kept.
EinsumOperand einsum_diagonals(EinsumOperand op) {
  for (;;) {
    int64_t p1 = -1, p2 = -1;
    for (size_t i = 0; i < op.labels.size() && p1 < 0; ++i)
      for (size_t j = i + 1; j < op.labels.size(); ++j)
        if (op.labels[i] == op.labels[j]) {
          p1 = static_cast<int64_t>(i), p2 = static_cast<int64_t>(j);
          break;
        }
    if (p1 < 0) return op;
    const int64_t n = op.t.size(p1);
    HG_CHECK(op.t.size(p2) == n, kEinsumName, "label repeated in one operand has sizes {} and {}", n, op.t.size(p2));
    std::vector<int64_t> perm;
    EinsumLabels labels;
    Shape shape;
    for (int64_t d = 0; d < op.t.dim(); ++d) {
      if (d == p1 || d == p2) continue;
      perm.push_back(d);
      labels.push_back(op.labels[static_cast<size_t>(d)]);
      shape.push_back(op.t.size(d));
    }
    perm.push_back(p1);
    perm.push_back(p2);
    labels.push_back(op.labels[static_cast<size_t>(p1)]);
    shape.push_back(n * n);
    Tensor flat = reshape(permute(op.t, perm), shape);
    op.t = slice(flat, -1, 0, n * n, n + 1);
    op.labels = labels;
  }
}

// Sums the dims whose labels are not in `keep`.
EinsumOperand einsum_sum_unneeded(EinsumOperand op, const std::vector<bool>& keep) {
  std::vector<int64_t> dims;
  EinsumLabels rest;
  for (size_t i = 0; i < op.labels.size(); ++i) {
    if (keep[static_cast<size_t>(op.labels[i])])
      rest.push_back(op.labels[i]);
    else
      dims.push_back(static_cast<int64_t>(i));
  }
  if (!dims.empty()) op.t = sum(op.t, dims);
  op.labels = rest;
  return op;
}

int64_t einsum_position(const EinsumLabels& labels, int label) {
  return std::find(labels.begin(), labels.end(), label) - labels.begin();
}

// One pairwise contraction: a's and b's shared labels that `keep` names are batch dims, the
// other shared ones are summed by the product.
EinsumOperand einsum_contract(const EinsumOperand& a, const EinsumOperand& b, const std::vector<bool>& keep) {
  EinsumLabels batch, a_only, b_only, summed;
  for (int l : a.labels) {
    const bool shared = einsum_position(b.labels, l) < static_cast<int64_t>(b.labels.size());
    (shared ? (keep[static_cast<size_t>(l)] ? batch : summed) : a_only).push_back(l);
  }
  for (int l : b.labels)
    if (einsum_position(a.labels, l) == static_cast<int64_t>(a.labels.size())) b_only.push_back(l);
  // Shared labels broadcast: a size 1 on one side expands to the other's size.
  auto size_in = [](const EinsumOperand& op, int l) { return op.t.size(einsum_position(op.labels, l)); };
  auto common = [&](int l) { return std::max(size_in(a, l), size_in(b, l)); };
  auto arrange = [&](const EinsumOperand& op, const std::vector<const EinsumLabels*>& groups) {
    std::vector<int64_t> perm;
    Shape expanded;
    for (const EinsumLabels* g : groups)
      for (int l : *g) {
        perm.push_back(einsum_position(op.labels, l));
        const bool shared = g == &batch || g == &summed;
        expanded.push_back(shared ? common(l) : size_in(op, l));
      }
    return expand(permute(op.t, perm), expanded);
  };
  auto product = [](const EinsumLabels& ls, auto&& size) {
    int64_t p = 1;
    for (int l : ls) p *= size(l);
    return p;
  };
  const auto a_size = [&](int l) { return size_in(a, l); };
  const auto b_size = [&](int l) { return size_in(b, l); };
  const int64_t nb = product(batch, common), m = product(a_only, a_size), k = product(summed, common),
                n = product(b_only, b_size);
  const Tensor lhs = reshape(arrange(a, {&batch, &a_only, &summed}), {nb, m, k});
  const Tensor rhs = reshape(arrange(b, {&batch, &summed, &b_only}), {nb, k, n});
  Shape out_shape;
  EinsumOperand r;
  for (int l : batch) out_shape.push_back(common(l)), r.labels.push_back(l);
  for (int l : a_only) out_shape.push_back(size_in(a, l)), r.labels.push_back(l);
  for (int l : b_only) out_shape.push_back(size_in(b, l)), r.labels.push_back(l);
  r.t = reshape(bmm(lhs, rhs), out_shape);
  return r;
}
}  // namespace

Tensor einsum(std::string_view equation_in, const TensorList& tensors) {
  std::string equation;
  for (char c : equation_in)
    if (c != ' ') equation.push_back(c);
  HG_CHECK(!tensors.empty(), kEinsumName, "expected at least one operand");
  const size_t arrow = equation.find("->");
  HG_CHECK(arrow == std::string::npos || equation.find("->", arrow + 2) == std::string::npos, kEinsumName,
           "more than one '->' in '{}'", equation_in);
  const std::string lhs = equation.substr(0, arrow);
  std::vector<EinsumTerm> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_einsum_term(std::string_view(lhs).substr(start, comma - start), equation_in));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  HG_CHECK(terms.size() == tensors.size(), kEinsumName, "'{}' names {} operands but {} were given", equation_in,
           terms.size(), tensors.size());
  // Each operand's labels, with its "..." dims (aligned from the right across operands).
  int64_t ellipsis_dims = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    HG_CHECK(tensors[i].defined(), kEinsumName, "operand {} is undefined", i);
    const auto letters = static_cast<int64_t>(terms[i].letters_before.size() + terms[i].letters_after.size());
    const int64_t dims = tensors[i].dim();
    HG_CHECK(terms[i].ellipsis ? dims >= letters : dims == letters, kEinsumName,
             "operand {} has {} dims but its subscripts '{}' name {}", i, dims, equation_in, letters);
    if (terms[i].ellipsis) ellipsis_dims = std::max(ellipsis_dims, dims - letters);
  }
  std::vector<EinsumOperand> ops;
  std::vector<int> count(kEllipsisBase + 64, 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    EinsumOperand op{tensors[i], terms[i].letters_before};
    if (terms[i].ellipsis) {
      const int64_t e =
          tensors[i].dim() - static_cast<int64_t>(terms[i].letters_before.size() + terms[i].letters_after.size());
      for (int64_t k = ellipsis_dims - e; k < ellipsis_dims; ++k)
        op.labels.push_back(kEllipsisBase + static_cast<int>(k));
    }
    op.labels.insert(op.labels.end(), terms[i].letters_after.begin(), terms[i].letters_after.end());
    for (int l : op.labels) ++count[static_cast<size_t>(l)];
    ops.push_back(std::move(op));
  }
  HG_CHECK(ellipsis_dims <= 64, kEinsumName, "too many dims under \"...\"");
  // The output's labels: explicit, or "..." then the letters seen once, in label order.
  EinsumLabels out;
  bool any_ellipsis = false;
  for (const EinsumTerm& t : terms) any_ellipsis |= t.ellipsis;
  if (arrow != std::string::npos) {
    const EinsumTerm t = parse_einsum_term(std::string_view(equation).substr(arrow + 2), equation_in);
    for (const EinsumLabels* part : {&t.letters_before, &t.letters_after}) {
      if (part == &t.letters_after && t.ellipsis) {
        HG_CHECK(any_ellipsis || ellipsis_dims == 0, kEinsumName, "'...' in the output of '{}' but in no operand",
                 equation_in);
        for (int64_t k = 0; k < ellipsis_dims; ++k) out.push_back(kEllipsisBase + static_cast<int>(k));
      }
      for (int l : *part) {
        HG_CHECK(count[static_cast<size_t>(l)] > 0, kEinsumName, "output label '{}' of '{}' is in no operand",
                 static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26), equation_in);
        HG_CHECK(einsum_position(out, l) == static_cast<int64_t>(out.size()), kEinsumName,
                 "output label '{}' of '{}' appears twice", static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26),
                 equation_in);
        out.push_back(l);
      }
    }
  } else {
    for (int64_t k = 0; k < ellipsis_dims; ++k) out.push_back(kEllipsisBase + static_cast<int>(k));
    for (int l = 0; l < 52; ++l)
      if (count[static_cast<size_t>(l)] == 1) out.push_back(l);
  }
  // Sizes must agree per label (or be 1, which broadcasts), as PyTorch's.
  std::map<int, int64_t> size_of;
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i] = einsum_diagonals(std::move(ops[i]));
    for (size_t d = 0; d < ops[i].labels.size(); ++d) {
      const int64_t s = ops[i].t.size(static_cast<int64_t>(d));
      auto [it, fresh] = size_of.emplace(ops[i].labels[d], s);
      HG_CHECK(fresh || it->second == s || it->second == 1 || s == 1, kEinsumName,
               "operand {} has size {} for a label whose size elsewhere is {}", i, s, it->second);
      if (!fresh && it->second == 1) it->second = s;
    }
  }
  // Left to right: before each step, what the output and the operands still to come need.
  std::vector<bool> in_out(count.size(), false);
  for (int l : out) in_out[static_cast<size_t>(l)] = true;
  auto needed_after = [&](size_t i) {
    std::vector<bool> keep = in_out;
    for (size_t j = i + 1; j < ops.size(); ++j)
      for (int l : ops[j].labels) keep[static_cast<size_t>(l)] = true;
    return keep;
  };
  EinsumOperand acc = ops[0];
  for (size_t i = 1; i < ops.size(); ++i) {
    std::vector<bool> keep = needed_after(i);
    // EinsumLabels only one side holds and nothing later needs are summed first; shared ones the product sums.
    std::vector<bool> keep_a = keep, keep_b = keep;
    for (int l : ops[i].labels) keep_a[static_cast<size_t>(l)] = true;
    for (int l : acc.labels) keep_b[static_cast<size_t>(l)] = true;
    acc = einsum_contract(einsum_sum_unneeded(acc, keep_a), einsum_sum_unneeded(ops[i], keep_b), keep);
  }
  acc = einsum_sum_unneeded(acc, in_out);
  // EinsumLabels the operands lacked (size 1 under "..." broadcasting) are not possible here: every
  // output label is in some operand. Order the dims as the output names them.
  std::vector<int64_t> perm;
  for (int l : out) perm.push_back(einsum_position(acc.labels, l));
  return perm.empty() ? acc.t : permute(acc.t, perm);
}

}  // namespace hg
