// build_stage(): the second of a Trainer's three construction steps (trainer_state.hpp).
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <optional>

#include "comm/mpi_communicator.hpp"
#include "core/error.hpp"
#include "core/torch_error.hpp"
#include "core/log.hpp"
#include "core/memory_limit.hpp"
#include "model/gpt.hpp"
#include "model/layer_timing.hpp"
#include "model/model.hpp"
#include "parallel/element_partition.hpp"
#include "train/host_memory_budget.hpp"
#include "train/memory_check.hpp"
#include "train/plan_text.hpp"
#include "train/step.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

namespace {

// run.cuda_graph where a replayed micro-step does what the eager one would
// (parallel/micro_step_graph.hpp); elsewhere one line says why not, and the run goes on eagerly:
// a deck written for one node's GPU may be run at other layouts unchanged.
void replay_micro_steps_if_possible(const config::Deck& deck, const Connection& conn, StageParts& st) {
  std::string why_not;
  if (!conn.torch_device.is_cuda())
    why_not = "the run is on the CPU";
  else if (st.plan->pp() > 1)
    why_not = fmt::format("parallel.pp is {} (the graph needs one stage)", st.plan->pp());
  else if (conn.dp_comm->size() > 1)
    why_not = fmt::format("dp is {} (the gradient all-reduce's hooks decide on the host)", conn.dp_comm->size());
  else if (deck.parallel.zero != 0)
    why_not = fmt::format("parallel.zero is {} (the graph needs ZeRO 0)", deck.parallel.zero);
  else if (!st.pipeline->replay_micro_steps())
    why_not = "this build has no CUDA";
  if (!why_not.empty()) log::info("run.cuda_graph = true is not used: {}; micro-steps run eagerly", why_not);
}

// What ranks compare to know they read the same dataset: its splits' sizes and sample shape, its
// vocabulary or classes, and the file's size.
std::string dataset_fingerprint(const std::string& path, const data::SplitReader& train, const data::SplitReader& test) {
  std::string shape;
  for (const int64_t d : train.sample_shape()) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  return fmt::format("{} train and {} test samples of {}, {} {}, {} bytes", train.size(), test.size(), shape,
                     train.classes(), train.tokens() ? "vocab" : "classes", ec ? 0 : bytes);
}

// Opens both splits on every rank; the verdict (and message) is the same everywhere.
void open_dataset(const config::Deck& deck, const Connection& conn, StageParts& st) {
  std::string error;
  try {
    const int64_t seq_len = deck.model.kind == "gpt" ? deck.model.seq_len : 0;
    st.train_split = std::make_shared<data::SplitReader>(deck.data.path, "train", seq_len);
    st.test_split = std::make_shared<data::SplitReader>(deck.data.path, "test", seq_len);
    const int64_t needed = deck.optim.global_batch;
    error = vocab_problem(deck, *st.train_split);
    if (error.empty() && st.train_split->size() < needed)
      error = fmt::format("data.path {}: /train has {} samples, fewer than one global batch (optim.global_batch = {})",
                          deck.data.path, st.train_split->size(), needed);
    if (error.empty() && st.test_split->sample_shape() != st.train_split->sample_shape())
      error = fmt::format("data.path {}: /test samples differ in shape from /train samples", deck.data.path);
    // Each rank reads its share of both splits' checksummed blocks: a damaged byte in an image
    // trains silently otherwise.
    for (auto* split : {st.train_split.get(), st.test_split.get()}) {
      if (!error.empty() || !deck.data.verify_checksums) break;
      error = split->find_damaged_rows(conn.world.rank, conn.world.size);
    }
    // Each rank scans its share of both splits: tokens always (an id >= vocab would index past
    // the embedding), float inputs when asked.
    for (auto* split : {st.train_split.get(), st.test_split.get()}) {
      if (!error.empty() || !(split->tokens() || deck.data.check_finite)) break;
      const int64_t n = split->size(), r = conn.world.rank, w = conn.world.size;
      error = split->find_bad_values(n * r / w, n * (r + 1) / w);
    }
  } catch (const BadInput& e) {
    error = e.what();
  }
  // Every rank must read the same data: per-node copies staged differently would train on a mix
  // of them and fault, if at all, far from the cause.
  const std::string mine = error.empty() ? dataset_fingerprint(deck.data.path, *st.train_split, *st.test_split) : "";
  const std::string differs = comm::differs_from_most(conn.world.comm, mine, "dataset");
  if (error.empty() && !differs.empty())
    error = fmt::format("data.path {}: {}. Every rank must read the same file: is a node's copy out of date?",
                        deck.data.path, differs);
  comm::agree_or_throw(conn.world.comm, error);
}


// What `make` returns on every rank, or the bad input one rank met (a layer its host could not
// allocate), on every rank: no rank waits in a collective for one that left.
template <class Make>
auto agreed(const Connection& conn, Make make) {
  std::optional<decltype(make())> made;
  std::string error;
  try {
    made.emplace(make());
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(conn.world.comm, error);
  return std::move(*made);
}

// parallel.balance = time: rank 0 times every layer of the model on the run's device, one
// micro-batch as training runs it, building them one by one (it never holds the whole model,
// which may not fit one rank: why it is pipelined), and every rank cuts by those same times.
void measure_layer_times(const config::Deck& deck, const Connection& conn, const model::InputSpec& input,
                         std::vector<model::LayerInfo>& layers) {
  std::vector<double> seconds(layers.size(), 0.0);
  std::string error;
  if (conn.world.rank == 0) {
    try {
      torch::manual_seed(static_cast<uint64_t>(deck.run.seed));
      seconds = model::time_layers(deck, input, config::resolved_micro_batch(deck, conn.world.size), conn.torch_device,
                                   optim::compute_type(deck.optim.precision));
      if (seconds.size() != layers.size())
        error = fmt::format("parallel.balance = time: timed {} layers of a model of {}", seconds.size(), layers.size());
    } catch (const std::exception& e) {
      error = std::string("parallel.balance = time: timing the model's layers failed: ") + message_of(e);
    }
  }
  comm::agree_or_throw(conn.world.comm, error);
  MPI_CHECK(MPI_Bcast(seconds.data(), static_cast<int>(seconds.size()), MPI_DOUBLE, 0, conn.world.comm));
  for (size_t l = 0; l < layers.size(); ++l) layers[l].seconds = seconds[l];
}

// Which layers each stage got and, when measured, their time: the imbalance a bubble comes from.
void log_cut(const parallel::Plan& plan) {
  std::string stages;
  for (int s = 0; s < plan.pp(); ++s) {
    std::string runs;  // each chunk's first..last layer
    for (int c = 0; c < plan.virtual_stages(); ++c) {
      const auto [begin, end] = plan.chunk_layers(s, c);
      const auto& first = plan.layers()[static_cast<size_t>(begin)].name;
      const auto& last = plan.layers()[static_cast<size_t>(end - 1)].name;
      runs += (c ? " + " : "") + (end - begin == 1 ? first : first + ".." + last);
    }
    stages += fmt::format("{}stage {} {}", s ? " | " : "", s, runs);
    if (plan.stage_seconds(s) > 0) stages += fmt::format(" {:.2f} ms", plan.stage_seconds(s) * 1e3);
  }
  log::info("pipeline cut by {}: {}{}", plan.cut_by(), stages,
            plan.cut_by() == "measured time" ? " (forward + backward per micro-batch)" : "");
  if (plan.cut_by() == "measured time") {
    std::string each;
    for (const auto& l : plan.layers()) each += fmt::format(" {} {:.2f}", l.name, l.seconds * 1e3);
    log::info("layer times (ms):{}", each);
  }
}

// The layers built against the ones described from the deck (model/describe_model.hpp), in the
// same order. A difference is trident's fault: the plan's sizes, stages and buffers would not be
// the model's.
void check_built_as_described(const std::vector<model::LayerInfo>& built,
                              const std::vector<model::LayerInfo>& described) {
  TRIDENT_CHECK(built.size() == described.size(),
                fmt::format("{} layers built where {} were described", built.size(), described.size()));
  for (size_t i = 0; i < built.size(); ++i) {
    const std::string difference = model::layer_difference(built[i], described[i]);
    TRIDENT_CHECK(difference.empty(), "the model built is not the one described from the deck: " + difference);
  }
}

}  // namespace

StageParts build_stage(const config::Deck& deck, const Connection& conn, bool weights_from_checkpoint) {
  StageParts st;
  open_dataset(deck, conn, st);
  st.sampler = std::make_unique<data::GlobalSampler>(st.train_split->size(), deck.optim.global_batch,
                                                     static_cast<uint64_t>(deck.run.seed));
  const int64_t per_epoch = st.sampler->steps_per_epoch();
  // The data cursor counts the run's samples (steps x global batch) in 64 bits: a run past that
  // wrapped to a negative step count, or faulted reading samples at no index.
  const int64_t most_steps = std::numeric_limits<int64_t>::max() / deck.optim.global_batch;
  if (deck.run.max_steps > most_steps)
    fatal_all(fmt::format("run.max_steps: {} is out of range (at most {} steps of optim.global_batch = {} samples)",
                          deck.run.max_steps, most_steps, deck.optim.global_batch));
  if (deck.run.max_steps == 0 && per_epoch > 0 && deck.run.epochs > most_steps / per_epoch)
    fatal_all(fmt::format("run.epochs: {} is out of range (at most {} epochs of {} steps of optim.global_batch = {} "
                          "samples)",
                          deck.run.epochs, most_steps / per_epoch, per_epoch, deck.optim.global_batch));
  st.total_steps = deck.run.max_steps > 0 ? deck.run.max_steps : deck.run.epochs * per_epoch;
  st.epochs = st.total_steps / per_epoch + (st.total_steps % per_epoch != 0 ? 1 : 0);  // (no + per_epoch - 1: it overflows)

  // The model from the seed, on the CPU (the same initial weights on every device), layer by
  // layer. The plan cuts its layer list into stages; at pp > 1 or under ZeRO-3 that list is
  // described from the deck (model/describe_model.hpp) and, after the memory check, only this
  // rank's stage is made (each layer's weights drawn from a seed of its own, model.hpp), so no rank
  // holds, or spends the time to initialise, the whole model; under ZeRO-3 each layer's parameters
  // are reduced to this rank's partition as the layer is made, so not even the stage is ever whole.
  // (Otherwise, at pp = 1, the whole model is built before the memory check, which counts it as
  // what the rank holds already: it is, until the flat buffers take its parameters over.) A layer a
  // host cannot allocate at all is bad input on every rank (agreed). A resume's checkpoint fills
  // every parameter next: no layer needs to draw its weights then, and under ZeRO-3 a layer
  // outside the rank's partition never does.
  const bool draw = !weights_from_checkpoint;
  const model::InputSpec input = input_spec(deck, *st.train_split);
  const auto seed = static_cast<uint64_t>(deck.run.seed);
  const bool partitioned = deck.parallel.zero == 3;
  torch::manual_seed(seed);
  model::LayerStack whole{nullptr};
  std::vector<model::LayerInfo> layers;
  // What the plan counts for the attention's backward (the memory check's figure): as this build's
  // attention keeps it.
  const model::AttentionKeeps attention = model::attention_keeps();
  if (deck.parallel.pp == 1 && !partitioned) {
    {
      // The ranks of a node build the whole model at once: a build past their memory limit is
      // refused as it goes, each rank within its share, naming the keys, instead of an OOM kill
      // before the memory check below (which counts the built model) could speak.
      const HostShare share = host_memory_share(deck, conn);
      const HostMemoryBudget budget(share.bytes, share.ranks,
                                    share.text + "; at parallel.pp = 1 every rank builds the whole model, where ZeRO-3 "
                                                 "(parallel.zero = 3) keeps a partition of each layer as it is "
                                                 "made and a pipeline (parallel.pp) builds a stage on each");
      whole = agreed(conn, [&] { return model::build(deck, input, draw); });
    }
    // The description, checked against what was built, carries the plan's estimates too.
    layers = model::describe_model(deck, input, attention);
    check_built_as_described(model::describe_layers(whole, input), layers);
  } else {
    layers = agreed(conn, [&] { return model::describe_model(deck, input, attention); });
    if (deck.parallel.pp > 1 && deck.parallel.balance == "time" && deck.parallel.boundaries.empty())
      measure_layer_times(deck, conn, input, layers);
  }
  st.plan = std::make_unique<parallel::Plan>(deck, conn.world.size, std::move(layers), input.sample_shape);
  if (st.plan->pp() > 1) log_cut(*st.plan);
  // Before the stage's model state is allocated: a deck that cannot fit is refused here, not
  // OOM-killed later.
  check_memory_fits(deck, conn, *st.plan);
  // This rank's layers, chunk after chunk (one chunk but for the interleaved schedule): the model
  // its flat buffers, gradient strategy and checkpoints see; the pipeline runs each chunk as a
  // slice of it.
  const int stage = conn.topology->stage();
  std::optional<model::PartitionedStage> own_partition;
  if (whole) {
    st.model = whole;
  } else {
    torch::manual_seed(seed);
    const std::vector<int> kept = st.plan->stage_layer_indices(stage);
    if (partitioned) {
      const auto range = parallel::ElementPartition(st.plan->stage_parameters(stage), conn.dp_comm->size())
                             .range(conn.dp_comm->rank());
      own_partition = agreed(
          conn, [&] { return model::build_layers_partitioned(deck, input, kept, range.begin, range.end, draw); });
      st.model = own_partition->model;
    } else {
      st.model = agreed(conn, [&] { return model::build_layers(deck, input, kept, draw); });
    }
    std::vector<model::LayerInfo> described;  // this stage's layers of the plan's list
    for (int l : kept) described.push_back(st.plan->layers().at(static_cast<size_t>(l)));
    check_built_as_described(model::describe_layers(st.model, input), described);
  }
  // Every rank of a dp group built the same stage from the seed, unless some nodes' LibTorch
  // draws the numbers differently: compared on the host, before anything is on a device. A
  // partitioned stage is compared by the hash of a layer every rank drew: each element lives in
  // one rank's partition only, so the model is one model whatever the ranks drew; only its buffers
  // are made identical. Weights a checkpoint fills next are not compared.
  {
    comm::MpiCommunicator dp_group(conn.topology->dp_group());
    std::vector<at::Tensor> state = own_partition || !draw ? std::vector<at::Tensor>{} : st.model->parameters();
    for (const auto& b : st.model->buffers()) state.push_back(b);
    const bool params_differed = own_partition && !comm::same_on_every_rank(dp_group, own_partition->content_hash);
    if ((comm::make_identical(dp_group, state) || params_differed) && dp_group.rank() == 0)
      log::info_all("warning: the ranks of this stage's dp group built different initial weights from run.seed (a "
                    "different LibTorch or CPU on some nodes?): {}",
                    params_differed ? "each rank's ZeRO-3 partition keeps the values it drew, so the model differs "
                                      "from the one a single node would build"
                                    : "this rank's were broadcast to them");
  }
  comm::Communicator& gradients = conn.pp_gradient_comm ? *conn.pp_gradient_comm : *conn.pp_comm;
  st.pipeline = std::make_unique<parallel::Pipeline>(*conn.pp_comm, gradients, stage, st.plan->pp(),
                                                     parallel::stage_chunks(*st.plan, stage, st.model),
                                                     deck.parallel.schedule);

  // The parameters go to the device through the flat buffer, one tensor at a time, never as a
  // second whole copy; ZeRO-3 moves only its partition.
  if (own_partition)
    st.flat = std::make_unique<optim::FlatParams>(*st.model, conn.torch_device, std::move(own_partition->partition),
                                                  own_partition->begin);
  else
    st.flat =
        std::make_unique<optim::FlatParams>(*st.model, conn.torch_device, /*flat_gradients=*/deck.parallel.zero < 2);
  st.grad_sync = parallel::make_grad_sync(deck, *st.flat, st.model, *conn.dp_comm);
  model::move_buffers(*st.model, conn.torch_device);
  release_free_heap();  // the parameters the flat buffer copied (and the balance = time layers timed)
  st.optimizer = optim::make_optimizer(deck, /*fused=*/!forced_step_decisions().empty());
  st.schedule = {deck.optim.lr_schedule, deck.optim.lr, deck.optim.min_lr, deck.optim.warmup_steps, st.total_steps};
  st.pipeline->set_compute(optim::compute_type(deck.optim.precision), conn.torch_device);
  if (deck.run.cuda_graph) replay_micro_steps_if_possible(deck, conn, st);
  if (deck.optim.precision == "fp16") st.scaler = std::make_unique<optim::LossScaler>();
  return st;
}

}  // namespace trident::train
