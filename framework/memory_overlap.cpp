#include "framework/memory_overlap.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace hg {

namespace {
// Addresses are offset + sum(stride * index); sums of products of int64 values are done in 128
// bits so no layout, however hostile, overflows the arithmetic.
using Wide = __int128;

Wide floor_div(Wide a, Wide b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
Wide ceil_div(Wide a, Wide b) { return -floor_div(-a, b); }
Wide wabs(Wide a) { return a < 0 ? -a : a; }
Wide wgcd(Wide a, Wide b) {
  while (b != 0) a = std::exchange(b, a % b);
  return a;
}

// coef * x with x an integer in [lo, hi] (coef > 0).
struct Term {
  Wide coef, lo, hi;
};

// Whether sum(coef_k * x_k) == d has a solution: a bounded branch-and-bound over the terms,
// largest coefficient first. For layouts that view ops make (each stride beyond the reach of the
// smaller ones) every level has at most two candidates; the budget turns anything worse into
// TooHard instead of work that grows with the tensor.
class Solver {
 public:
  explicit Solver(std::vector<Term> terms) : terms_(std::move(terms)) {
    // Equal coefficients merge into one term (the sum of two integer ranges is a range).
    std::sort(terms_.begin(), terms_.end(), [](const Term& a, const Term& b) { return a.coef > b.coef; });
    std::vector<Term> merged;
    for (const Term& t : terms_) {
      if (!merged.empty() && merged.back().coef == t.coef) {
        merged.back().lo += t.lo;
        merged.back().hi += t.hi;
      } else {
        merged.push_back(t);
      }
    }
    terms_ = std::move(merged);
    const size_t n = terms_.size();
    min_.assign(n + 1, 0), max_.assign(n + 1, 0), gcd_.assign(n + 1, 0);
    for (size_t k = n; k-- > 0;) {
      min_[k] = min_[k + 1] + terms_[k].coef * terms_[k].lo;
      max_[k] = max_[k + 1] + terms_[k].coef * terms_[k].hi;
      gcd_[k] = wgcd(gcd_[k + 1], terms_[k].coef);
    }
  }

  const std::vector<Term>& terms() const { return terms_; }
  Wide suffix_max(size_t k) const { return max_[k]; }
  bool exhausted() const { return budget_ < 0; }

  // Whether terms k.. can sum to d.
  bool solve(size_t k, Wide d) {
    if (k == terms_.size()) return d == 0;
    if (d < min_[k] || d > max_[k] || d % gcd_[k] != 0) return false;
    if (--budget_ < 0) return false;
    const Term& t = terms_[k];
    const Wide lo = std::max(t.lo, ceil_div(d - max_[k + 1], t.coef));
    const Wide hi = std::min(t.hi, floor_div(d - min_[k + 1], t.coef));
    for (Wide x = lo; x <= hi && budget_ >= 0; ++x)
      if (solve(k + 1, d - t.coef * x)) return true;
    return false;
  }

 private:
  std::vector<Term> terms_;
  std::vector<Wide> min_, max_, gcd_;  // over terms k.. (suffixes)
  int budget_ = 4096;
};

bool empty(const Tensor& t) { return t.numel() == 0; }

// The terms of t's addresses relative to its offset, sign folded into the range (sign = -1 for
// the side subtracted in an equation a == b).
void add_terms(std::vector<Term>& terms, const Tensor& t, int sign) {
  for (size_t k = 0; k < t.shape().size(); ++k) {
    const int64_t n = t.shape()[k], s = t.strides()[k];
    if (n <= 1 || s == 0) continue;
    const Wide reach = n - 1;
    const bool up = (s > 0) == (sign > 0);
    terms.push_back({wabs(s), up ? Wide(0) : -reach, up ? reach : Wide(0)});
  }
}

// The lowest and highest byte t touches (t not empty).
std::pair<Wide, Wide> byte_range(const Tensor& t) {
  const Wide size = static_cast<Wide>(element_size(t.dtype()));
  Wide lo = t.offset(), hi = t.offset();
  for (size_t k = 0; k < t.shape().size(); ++k) {
    const Wide reach = static_cast<Wide>(t.shape()[k] - 1) * t.strides()[k];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo * size, hi * size + size - 1};
}

// Whether read, broadcast to written's shape, puts each element at written's address for it.
bool same_places(const Tensor& written, const Tensor& read) {
  if (written.offset() != read.offset() || read.dim() > written.dim()) return false;
  const size_t lead = written.shape().size() - read.shape().size();
  for (size_t k = 0; k < written.shape().size(); ++k) {
    if (written.shape()[k] <= 1) continue;
    const bool present = k >= lead && read.shape()[k - lead] == written.shape()[k];
    if (!present || read.strides()[k - lead] != written.strides()[k]) return false;
  }
  return true;
}

std::string geometry(const Tensor& t) {
  return fmt::format("shape {} strides {} offset {}", t.shape(), t.strides(), t.offset());
}
}  // namespace

MemOverlap internal_overlap(const Tensor& t) {
  if (!t.defined() || t.numel() <= 1 || t.is_contiguous()) return MemOverlap::No;  // the common case, at once
  for (size_t k = 0; k < t.shape().size(); ++k)
    if (t.shape()[k] > 1 && t.strides()[k] == 0) return MemOverlap::Partial;
  std::vector<Term> terms;
  add_terms(terms, t, 1);
  const size_t dims = terms.size();
  Solver solver(terms);
  if (solver.terms().size() < dims) return MemOverlap::Partial;  // two dims with one stride
  // Two elements collide when a nonzero difference of indices t_k in [-(n-1), n-1] sums to zero.
  // Take the largest-stride dim where it is nonzero, with t_k > 0: the smaller dims must make
  // -coef_k * t_k, which they can reach only while coef_k * t_k is within their span.
  std::vector<Term> sym = solver.terms();
  for (Term& s : sym) {
    const Wide width = s.hi - s.lo;
    s.lo = -width, s.hi = width;
  }
  Solver diffs(sym);
  for (size_t k = 0; k < diffs.terms().size(); ++k) {
    const Term& d = diffs.terms()[k];
    const Wide most = std::min(d.hi, diffs.suffix_max(k + 1) / d.coef);
    for (Wide x = 1; x <= most && !diffs.exhausted(); ++x)
      if (diffs.solve(k + 1, -d.coef * x)) return MemOverlap::Partial;
  }
  return diffs.exhausted() ? MemOverlap::TooHard : MemOverlap::No;
}

MemOverlap overlap(const Tensor& written, const Tensor& read) {
  if (!written.defined() || !read.defined() || written.storage() != read.storage()) return MemOverlap::No;
  if (empty(written) || empty(read)) return MemOverlap::No;
  const auto [wlo, whi] = byte_range(written);
  const auto [rlo, rhi] = byte_range(read);
  if (whi < rlo || rhi < wlo) return MemOverlap::No;
  // Different element sizes (no view op makes them): the byte ranges meet, so refuse.
  if (element_size(written.dtype()) != element_size(read.dtype())) return MemOverlap::Partial;
  if (same_places(written, read)) return MemOverlap::Full;
  // Interleaved views (x[:, 0] and x[:, 1], or the two halves of a last dim) meet in range but
  // share no element: solve offset_w + sum(sw * i) == offset_r + sum(sr * j) over the indices.
  std::vector<Term> terms;
  add_terms(terms, written, 1);
  add_terms(terms, read, -1);
  Solver solver(std::move(terms));
  const bool met = solver.solve(0, static_cast<Wide>(read.offset()) - written.offset());
  if (met) return MemOverlap::Partial;
  return solver.exhausted() ? MemOverlap::TooHard : MemOverlap::No;
}

void assert_no_internal_overlap(const Tensor& t, std::string_view op) {
  HG_CHECK(internal_overlap(t) != MemOverlap::Partial, op,
           "more than one element of the written tensor refers to the same memory location ({}, e.g. an expanded "
           "view); clone() it first",
           geometry(t));
}

void assert_no_partial_overlap(const Tensor& written, const Tensor& read, std::string_view op) {
  HG_CHECK(overlap(written, read) != MemOverlap::Partial, op,
           "some elements of an input ({}) and of the written tensor ({}) refer to the same memory location; "
           "clone() the input first",
           geometry(read), geometry(written));
}

void assert_no_overlap(const Tensor& a, const Tensor& b, std::string_view op) {
  const MemOverlap o = overlap(a, b);
  HG_CHECK(o != MemOverlap::Partial && o != MemOverlap::Full, op,
           "two tensors ({} and {}) that the op writes and reads separately share memory; clone() one first",
           geometry(a), geometry(b));
}

}  // namespace hg
