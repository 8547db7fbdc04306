// The largest power of two not above a number: the core of halving-doubling
// (the ranks past it fold into partners), the link probe's pairs, and any
// size rounded down to a power of two. One definition, so that the algorithm,
// its cost formula and the probe cannot disagree about the core.
#pragma once

#include <cstdint>

namespace gradsync {

// 1 for values below 2 (a group of one rank is its own core).
constexpr int64_t LargestPowerOfTwoAtMost(int64_t n) {
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

}  // namespace gradsync
