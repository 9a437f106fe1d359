#pragma once
// `trident compare A.h5 B.h5`: two checkpoints tensor by tensor and their training state (step,
// data cursor, optimizer steps, loss scale, the epoch's loss so far), e.g. a resumed run's final
// file against an uninterrupted run's, or a run under another layout against the first. The deck
// and the layout that wrote each file are listed, not compared: two runs of one model differ in
// their output folders, and checkpoints do not depend on the layout.
#include <string>

namespace trident::checkpoint {

struct Comparison {
  std::string text;   // what differs, tensor by tensor, and a verdict line
  int differing = 0;  // tensors and training-state values that differ (beyond the tolerance)
};

// Every tensor of both files is read (checked against its CRC-32s: a damaged file is BadInput).
// A tensor is equal when it is bit for bit, or, with `relative_tolerance` > 0, when its largest
// element difference is at most that times the largest magnitude in `a`'s tensor. The saved RNG
// states (one per rank) are compared when both files were written by as many ranks.
Comparison compare(const std::string& a, const std::string& b, double relative_tolerance = 0);

}  // namespace trident::checkpoint
