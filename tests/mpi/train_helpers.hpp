#pragma once
// Training a tiny model in-process over a communicator, and comparing the results.
#include <gtest/gtest.h>
#include <mpi.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "config/deck.hpp"
#include "test_data.hpp"
#include "train/trainer.hpp"

namespace trident::test_support {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// 5 steps of a global batch of 32 in micro-batches of 8 on the synthetic set.
inline config::Deck tiny_deck(const std::string& kind, const std::string& name) {
  config::Deck d;
  d.run.name = name;
  d.run.max_steps = 5;
  d.run.log_every = 1;
  d.run.threads = 1;
  d.data.path = synthetic_dataset();
  d.model.kind = kind;
  d.model.hidden = "32,16";
  d.optim.global_batch = 32;
  d.optim.micro_batch = "8";
  d.optim.lr = 1e-2;
  return d;
}

struct Trained {
  std::vector<std::pair<std::string, torch::Tensor>> params;  // this rank's stage, model order
  train::Result result;
  std::string output_dir;
};

// Trains `deck` over `comm` (MPI_COMM_WORLD: dp = world; MPI_COMM_SELF: each rank alone).
inline Trained train_on(config::Deck deck, MPI_Comm comm, const std::string& tag) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  // One folder per run: shared by the ranks of a run over MPI_COMM_WORLD, one per rank for
  // the single-rank runs on MPI_COMM_SELF.
  deck.run.output_dir = shared_scratch_dir() + "/" + deck.run.name + "_" + tag +
                        (comm == MPI_COMM_SELF ? "_r" + std::to_string(world_rank()) : "");
  const auto errors = config::validate(deck, {size, false});
  EXPECT_TRUE(errors.empty()) << (errors.empty() ? "" : errors.front());
  train::Trainer trainer(deck, comm);
  Trained out;
  out.result = trainer.run();
  out.params = trainer.full_parameters();
  out.output_dir = deck.run.output_dir;
  return out;
}

// Trains `deck` over `comm` in `dir`, resuming as `resume` says (--resume never | auto | PATH).
inline Trained run_in(config::Deck deck, MPI_Comm comm, const std::string& dir, const std::string& resume) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  deck.run.output_dir = dir;
  EXPECT_TRUE(config::validate(deck, {size, false}).empty());
  train::Trainer trainer(deck, comm, resume);
  Trained out;
  out.result = trainer.run();
  out.params = trainer.full_parameters();
  out.output_dir = dir;
  return out;
}

inline std::string dir_for(const std::string& name, MPI_Comm comm) {
  // One folder per run; runs on MPI_COMM_SELF get one per rank.
  return shared_scratch_dir() + "/" + name + (comm == MPI_COMM_SELF ? "_r" + std::to_string(world_rank()) : "");
}

// How far apart (max_relative_difference) parameters and AdamW state trained under two layouts may
// be. The layouts sum gradients in other orders (micro-batches, dp ranks, ZeRO's reduce-scatter),
// and AdamW's normalised steps carry those last-bit differences into the weights: over run.seed 1-5
// the tiny decks' 2-5 steps were up to 3.3e-5 apart (2026-11-28, the code before and after layers
// got seeds of their own alike; 1e-6 held for some seeds only). A layout error is a step's size:
// AdamW moves an element by up to lr = 1e-2, two orders above this.
constexpr double kLayoutTolerance = 1e-4;

// max over the parameters of `a` of max|a - b| / max|b|, matched by name (b may hold more:
// the whole model against one pipeline stage).
inline double max_relative_difference(const Trained& a, const Trained& b) {
  double worst = 0;
  for (const auto& [name, value] : a.params) {
    const auto it = std::find_if(b.params.begin(), b.params.end(), [&](const auto& p) { return p.first == name; });
    if (it == b.params.end()) {
      ADD_FAILURE() << "parameter " << name << " missing from the reference";
      return 1.0;
    }
    const double scale = std::max(it->second.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (value - it->second).abs().max().item<double>() / scale);
  }
  return worst;
}

// |a - b| / |b| over all the parameters of `a` together (2-norms), matched by name: where a few
// elements may differ by a rounding flip (bf16), the size of the whole difference, which a lost
// or misplaced gradient makes of the order of the training's own movement.
inline double relative_norm_difference(const Trained& a, const Trained& b) {
  double difference = 0, reference = 0;
  for (const auto& [name, value] : a.params) {
    const auto it = std::find_if(b.params.begin(), b.params.end(), [&](const auto& p) { return p.first == name; });
    if (it == b.params.end()) {
      ADD_FAILURE() << "parameter " << name << " missing from the reference";
      return 1.0;
    }
    difference += (value.to(torch::kDouble) - it->second.to(torch::kDouble)).pow(2).sum().item<double>();
    reference += it->second.to(torch::kDouble).pow(2).sum().item<double>();
  }
  return std::sqrt(difference / std::max(reference, 1e-300));
}

// Every logged gradient norm (before clipping) of `a` equals `b`'s within `tolerance`, relative.
// The norm shows the gradient's scale, which clipping on every step and Adam's division by its
// second moment hide from the parameters: a reduce that sums instead of averaging, or
// micro-steps never divided, change the norms on every layout.
inline void expect_same_gradient_norms(const Trained& a, const Trained& b, const std::string& what,
                                       double tolerance = 1e-5) {
  const auto& x = a.result.logged_grad_norms;
  const auto& y = b.result.logged_grad_norms;
  ASSERT_FALSE(y.empty()) << what << ": no gradient norm logged";
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_GT(y[i], 0.0) << what << ": log " << i;
    EXPECT_NEAR(x[i], y[i], tolerance * y[i]) << what << ": gradient norm of log " << i;
  }
}

// Plain SGD (no momentum, no clipping, no weight decay): each update is lr times the gradient,
// so the parameters themselves show the gradient's scale.
inline config::Deck plain_sgd(config::Deck deck, double lr = 0.1) {
  deck.optim.name = "sgd";
  deck.optim.lr = lr;
  deck.optim.momentum = 0;
  deck.optim.clip_grad_norm = 0;
  deck.optim.weight_decay = 0;
  return deck;
}

}  // namespace trident::test_support
