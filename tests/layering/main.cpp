// Linked against one layer (and the layers below it) only: if that layer used a symbol from a
// layer above it, this program would fail to link.
#include "framework/tensor.h"

int main() { return hg::Tensor().defined() ? 1 : 0; }
