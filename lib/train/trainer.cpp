#include "train/trainer.hpp"

#include <torch/torch.h>

#include <exception>
#include <thread>

#include <cmath>
#include <csignal>

#include "checkpoint/checkpoint.hpp"
#include "comm/backend.hpp"
#include "comm/cuda_runtime.hpp"
#include "comm/device_placement.hpp"
#include "comm/mpi_communicator.hpp"
#include "comm/progress.hpp"
#include "comm/watchdog.hpp"
#include "comm/world.hpp"
#include "parallel/element_partition.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "optim/device_step.hpp"
#include "optim/flat_params.hpp"
#include "optim/optimizer.hpp"
#include "optim/precision.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/pipeline.hpp"
#include "parallel/layer_cut.hpp"
#include "parallel/topology.hpp"
#include "report/report.hpp"
#include "train/plan.hpp"
#include "train/run_folder.hpp"
#include "train/run_summary.hpp"
#include "train/step.hpp"
#include "train/step_profiler.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

double sum_over_ranks(Trainer::State& s, double local) { return s.world_comm->reduce_number(local, comm::Reduce::sum); }
double max_over_ranks(Trainer::State& s, double local) { return s.world_comm->reduce_number(local, comm::Reduce::max); }

// The mean over replicas of a value only the last stage has (0 on other stages).
double replica_mean(Trainer::State& s, double last_stage_value) {
  return sum_over_ranks(s, s.pipeline->last() ? last_stage_value : 0.0) / s.topology->dp();
}

namespace {
// Set by SIGUSR1 / SIGTERM (SLURM's --signal=B:USR1@N, preemption); acted on at a step boundary.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int signal) { g_stop_signal = signal; }
}  // namespace

namespace {

int threads_per_rank(const config::Deck& deck, const comm::World& world) {
  if (deck.run.threads > 0) return static_cast<int>(deck.run.threads);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1, static_cast<int>(cores) / world.local_size);
}

// run.device -> this rank's device from the node's ranks and the GPUs it sees (one rank per
// GPU; comm/device_placement.hpp), made current before any CUDA or NCCL call of the run.
void choose_device(Trainer::State& s) {
  comm::PlacementQuery query;
  query.requested = s.deck.run.device;
  query.local_rank = s.world.local_rank;
  query.local_size = s.world.local_size;
  query.visible_devices = comm::cuda_visible_devices();
  query.host = s.world.host;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) query.cuda_visible_devices = visible;
  const comm::Placement placement = comm::place_device(query);
  comm::agree_or_throw(s.world.comm, placement.ok() ? "" : "run.device: " + placement.error);
  // Every rank on a GPU or none: the backend (auto: nccl or mpi) and the collectives must be the
  // same on every rank. run.device = auto on an allocation whose nodes differ is bad input.
  const auto cuda_ranks =
      static_cast<int>(s.world_comm->reduce_number(placement.is_cuda() ? 1.0 : 0.0, comm::Reduce::sum));
  comm::agree_or_throw(s.world.comm,
                       cuda_ranks == 0 || cuda_ranks == s.world.size
                           ? ""
                           : fmt::format("run.device = {}: {} of the {} ranks see a GPU and the others none ({} "
                                         "on {}: {}); ask for nodes alike, or set run.device = cpu",
                                         s.deck.run.device, cuda_ranks, s.world.size,
                                         placement.is_cuda() ? "a GPU" : "none", s.world.host, placement.device));
  s.device = placement.device;
  s.cuda_index = placement.cuda_index;
  if (placement.is_cuda()) {
    comm::cuda_set_device(placement.cuda_index);
    s.torch_device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(placement.cuda_index));
    // optim.precision = fp32 on a GPU: matmuls and convolutions on TF32 tensor cores (10-bit
    // mantissa inputs, fp32 accumulation), as PyTorch's float32_matmul_precision = "high". The
    // cuBLAS and cuDNN switches only: the CPU's (oneDNN) matmuls stay fp32. Process-wide; the
    // environment's NVIDIA_TF32_OVERRIDE=0 turns it off (tests/gpu does).
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
  }
}

// parallel.backend, where ranks of a node sharing a GPU are found by their GPUs' UUIDs (one
// visible device per rank cannot tell a node with one GPU from SLURM's --gpus-per-task=1).
std::string choose_backend(Trainer::State& s) {
  std::string sharing;
  if (s.cuda_index >= 0) {
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(s.world.comm, MPI_COMM_TYPE_SHARED, s.world.rank, MPI_INFO_NULL, &node));
    constexpr int kIdBytes = 64;
    std::vector<char> mine(kIdBytes, '\0'), all(static_cast<size_t>(kIdBytes) * s.world.local_size);
    const std::string uuid = comm::cuda_device_uuid(s.cuda_index);
    std::copy_n(uuid.begin(), std::min<size_t>(uuid.size(), kIdBytes - 1), mine.begin());
    std::vector<int> world_ranks(s.world.local_size);
    MPI_CHECK(MPI_Allgather(mine.data(), kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, node));
    MPI_CHECK(MPI_Allgather(&s.world.rank, 1, MPI_INT, world_ranks.data(), 1, MPI_INT, node));
    MPI_CHECK(MPI_Comm_free(&node));
    std::vector<std::string> ids;
    for (int i = 0; i < s.world.local_size; ++i) ids.emplace_back(all.data() + static_cast<size_t>(i) * kIdBytes);
    sharing = comm::ranks_sharing_a_gpu(ids, world_ranks, s.world.host);
  }
  // Every rank takes the same backend: a sharing node anywhere decides for all. The lowest rank
  // that saw one describes it.
  const int first_sharing = static_cast<int>(
      s.world_comm->reduce_number(sharing.empty() ? s.world.size : s.world.rank, comm::Reduce::min));
  if (first_sharing < s.world.size) {
    int length = static_cast<int>(sharing.size());
    MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, first_sharing, s.world.comm));
    sharing.resize(static_cast<size_t>(length));
    MPI_CHECK(MPI_Bcast(sharing.data(), length, MPI_CHAR, first_sharing, s.world.comm));
  }
  const comm::BackendChoice choice = comm::choose_backend(s.deck.parallel.backend, s.cuda_index >= 0, sharing);
  comm::agree_or_throw(s.world.comm, choice.error);
  if (!choice.note.empty()) log::warn("{}", choice.note);
  return choice.backend;
}

// Opens both splits on every rank; the verdict (and message) is the same everywhere.
void open_dataset(Trainer::State& s) {
  std::string error;
  try {
    const int64_t seq_len = s.deck.model.kind == "gpt" ? s.deck.model.seq_len : 0;
    s.train_split = std::make_shared<data::SplitReader>(s.deck.data.path, "train", seq_len);
    s.test_split = std::make_shared<data::SplitReader>(s.deck.data.path, "test", seq_len);
    const int64_t needed = s.deck.optim.global_batch;
    if (s.deck.model.vocab > 0 && s.deck.model.vocab < s.train_split->classes())
      error = fmt::format("model.vocab = {} is smaller than the vocabulary of data.path {} (attribute 'vocab' = {})",
                          s.deck.model.vocab, s.deck.data.path, s.train_split->classes());
    else if (s.train_split->size() < needed)
      error = fmt::format("data.path {}: /train has {} samples, fewer than one global batch (optim.global_batch = {})",
                          s.deck.data.path, s.train_split->size(), needed);
    else if (s.test_split->sample_shape() != s.train_split->sample_shape())
      error = fmt::format("data.path {}: /test samples differ in shape from /train samples", s.deck.data.path);
    // Each rank scans its share of both splits: tokens always (an id >= vocab would index past
    // the embedding), float inputs when asked.
    for (auto* split : {s.train_split.get(), s.test_split.get()}) {
      if (!error.empty() || !(split->tokens() || s.deck.data.check_finite)) break;
      const int64_t n = split->size(), r = s.world.rank, w = s.world.size;
      error = split->find_bad_values(n * r / w, n * (r + 1) / w);
    }
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(s.world.comm, error);
}


// Every rank builds the same model from the seed; the broadcast inside each stage's dp group
// makes sure the replicas start identical whatever the library does with the seed.
void broadcast_model(Trainer::State& s) {
  torch::NoGradGuard no_grad;
  for (auto& p : s.model->parameters()) s.dp_comm->broadcast(p, 0);
  for (auto& b : s.model->buffers()) s.dp_comm->broadcast(b, 0);
}

// Builds the whole model, cuts its layer list into stages and keeps this rank's stage. One
// sample's shape between layers gives the shapes the stages exchange.
void build_stage(Trainer::State& s) {
  const auto& deck = s.deck;
  const model::InputSpec input = input_spec(deck, *s.train_split);
  torch::manual_seed(static_cast<uint64_t>(deck.run.seed));
  auto whole = model::build(deck, input);
  const auto shapes = model::layer_shapes(whole, input);  // shapes[l]: input of layer l
  const auto layer_params = model::layer_parameter_counts(whole);
  const int pp = s.topology->pp(), stage = s.topology->stage();
  const auto first = parallel::cut_layers(layer_params, pp, parallel::parse_boundaries(deck.parallel.boundaries));
  const int begin = first[static_cast<size_t>(stage)];
  const int end = stage + 1 < pp ? first[static_cast<size_t>(stage) + 1] : static_cast<int>(layer_params.size());
  s.stage_layers = {begin, end};
  // Checkpoint entries for every stage: each parameter's place in its stage's flat buffer.
  std::vector<int> stage_of_layer(layer_params.size());
  for (int st = 0; st < pp; ++st)
    for (int l = first[static_cast<size_t>(st)]; l < (st + 1 < pp ? first[static_cast<size_t>(st) + 1] : static_cast<int>(layer_params.size())); ++l)
      stage_of_layer[static_cast<size_t>(l)] = st;
  auto stage_of = [&](const std::string& name) {
    for (size_t l = 0; l < whole->layers().size(); ++l)
      if (name.rfind(whole->layers()[l].name + ".", 0) == 0) return stage_of_layer[l];
    return 0;
  };
  std::vector<int64_t> stage_offset(static_cast<size_t>(pp), 0);
  for (const auto& p : whole->named_parameters()) {
    const int st = stage_of(p.key());
    s.all_params.push_back({p.key(), p.value().sizes().vec(), st, stage_offset[static_cast<size_t>(st)], p.value().numel()});
    stage_offset[static_cast<size_t>(st)] += p.value().numel();
  }
  for (const auto& b : whole->named_buffers())
    if (b.value().is_floating_point())
      s.all_buffers.push_back({b.key(), b.value().sizes().vec(), stage_of(b.key()), 0, b.value().numel()});
  s.model = model::LayerStack(std::vector<model::Layer>(whole->layers().begin() + begin, whole->layers().begin() + end));
  // Built on the CPU from the seed (the same initial weights on every device), then moved.
  s.model->to(s.torch_device);
  comm::Communicator& gradients = s.pp_gradient_comm ? *s.pp_gradient_comm : *s.pp_comm;
  s.pipeline = std::make_unique<parallel::Pipeline>(*s.pp_comm, gradients, stage, pp, s.model,
                                                    shapes[static_cast<size_t>(begin)],
                                                    shapes[static_cast<size_t>(end)], deck.parallel.schedule);
}

struct Evaluation {
  double loss = 0, accuracy = 0;
};

// The test split is evaluated in chunks of this many samples. On a GPU a forward holds a chunk's
// activations in device memory (1000 GPT-2 samples of logits are ~200 GB in fp32), so a chunk
// is the micro-batch that training already fits; on the CPU, 1000 (fewer pipeline exchanges).
int64_t evaluation_chunk(const Trainer::State& s) { return s.torch_device.is_cuda() ? s.micro_batch : 1000; }

Evaluation evaluate_test_split(Trainer::State& s, int64_t chunk_samples = 0) {
  torch::NoGradGuard no_grad;
  s.model->eval();
  // Each replica evaluates its share of the test split, in chunks every stage agrees on.
  const auto share = data::even_share(s.test_split->size(), s.topology->dp_rank(), s.topology->dp());
  double loss_sum = 0, correct = 0;
  const int64_t chunk = chunk_samples > 0 ? chunk_samples : evaluation_chunk(s);
  auto& pipe = *s.pipeline;
  for (int64_t begin = share.begin; begin < share.end; begin += chunk) {
    const int64_t end = std::min(share.end, begin + chunk);
    const auto [loss, right] = pipe.evaluate(end - begin, [&] {
      data::MicroBatch b;
      s.test_split->read_range(begin, end, pipe.first() ? &b.inputs : nullptr, pipe.last() ? &b.labels : nullptr);
      return b;
    });
    loss_sum += loss;
    correct += right;
  }
  s.model->train();
  // Only last stages hold results: the sum over the world is the sum over replicas.
  auto totals = torch::tensor({loss_sum, correct}, torch::kDouble);
  s.world_comm->all_reduce_sum(totals);
  const double n = static_cast<double>(s.test_split->size() * s.test_split->targets_per_sample());
  return {totals[0].item<double>() / n, totals[1].item<double>() / n};
}

// Fault injection for the watchdog tests: TRIDENT_TEST_STALL=RANK:STEP makes that rank's main
// thread stop at that step boundary for good (a stuck process whose heartbeat thread lives on).
void stall_if_asked(int rank, int64_t step) {
  static const char* spec = std::getenv("TRIDENT_TEST_STALL");
  if (!spec) return;
  int stall_rank = -1;
  long long stall_step = -1;
  if (std::sscanf(spec, "%d:%lld", &stall_rank, &stall_step) != 2 || stall_rank != rank || stall_step != step) return;
  std::fprintf(stderr, "trident: test: rank %d stalls after step %lld (TRIDENT_TEST_STALL)\n", rank, stall_step);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}


// ---- checkpoints

// This rank's CUDA generator (its device's default one).
at::Generator cuda_generator(const Trainer::State& s) { return at::globalContext().defaultGenerator(s.torch_device); }

std::string checkpoint_dir(const Trainer::State& s) { return s.deck.run.output_dir + "/checkpoints"; }

// This rank's part of the stage's flat buffers: the same partition ZeRO uses, so under
// zero 0 the dp replicas split the writing and under ZeRO each writes what it owns.
data::Range owned_range(const Trainer::State& s) {
  return parallel::ElementPartition(s.flat->numel(), s.topology->dp()).range(s.topology->dp_rank());
}

void save_checkpoint(Trainer::State& s, int64_t step) {
  Stopwatch watch;
  const auto range = owned_range(s);
  const int64_t n = range.end - range.begin;
  checkpoint::Shard shard;
  shard.stage = s.topology->stage();
  shard.begin = range.begin;
  shard.end = range.end;
  // A GPU rank's shard is copied to host memory first: the writer checksums and writes bytes
  // through host pointers (on the CPU .cpu() is the tensor itself).
  shard.params = (s.grad_sync->params_partitioned() ? s.grad_sync->optimizer_params()
                                                   : s.grad_sync->full_params().narrow(0, range.begin, n))
                     .cpu();
  for (auto& [name, state] : s.optimizer->state())
    shard.states.emplace_back(name, (s.grad_sync->sharded() ? state : state.narrow(0, range.begin, n)).cpu());
  if (s.topology->dp_rank() == 0)
    for (const auto& b : s.model->named_buffers())
      if (b.value().is_floating_point()) shard.buffers.emplace_back(b.key(), b.value().cpu());
  shard.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  if (s.torch_device.is_cuda()) shard.cuda_rng_state = cuda_generator(s).get_state();
  std::vector<std::string> state_names;
  for (auto& st : s.optimizer->state()) state_names.push_back(st.first);
  checkpoint::Meta meta;
  meta.step = step;
  meta.epoch = s.sampler->epoch_of(step);
  meta.cursor = s.sampler->cursor_of(step);
  meta.optimizer_steps = s.optimizer->steps();
  meta.global_batch = s.deck.optim.global_batch;
  meta.world = s.world.size;
  meta.dp = s.topology->dp();
  meta.pp = s.topology->pp();
  meta.zero = static_cast<int>(s.deck.parallel.zero);
  meta.deck = config::deck_to_ini(s.deck);
  meta.trident_version = TRIDENT_VERSION;
  meta.torch_version = TORCH_VERSION;
  if (s.scaler) {
    meta.loss_scale = s.scaler->scale();
    meta.loss_scale_good_steps = s.scaler->good_steps();
    meta.skipped_steps = s.scaler->skipped_steps();
  }
  const std::string path = checkpoint::save(checkpoint_dir(s), meta, s.all_params, state_names, s.all_buffers, shard,
                                            s.world.comm, static_cast<int>(s.deck.checkpoint.keep_last));
  const double seconds = watch.seconds();
  s.times.checkpoint += seconds;
  ++s.saves;
  s.bytes_written += sum_over_ranks(s, 4.0 * static_cast<double>(n * (1 + static_cast<int64_t>(state_names.size()))));
  log::info("checkpoint {} written in {:.2f} s", path, seconds);
}

// Restores parameters, optimizer state, buffers and the step from `path`, whatever layout wrote it.
void load_checkpoint(Trainer::State& s, const std::string& path) {
  Stopwatch watch;
  std::string error;
  try {
    checkpoint::Reader reader(path);
    const auto& meta = reader.meta();
    if (meta.global_batch != s.deck.optim.global_batch)
      fatal_all(fmt::format("checkpoint {}: written with optim.global_batch = {}; resuming needs the same global "
                            "batch (its data cursor is sample {})", path, meta.global_batch, meta.cursor));
    if (meta.step > s.total_steps)
      fatal_all(fmt::format("checkpoint {}: it is at step {}, beyond this run's {} steps (run.max_steps / "
                            "run.epochs); raise them or start fresh with --resume never", path, meta.step,
                            s.total_steps));
    reader.check_shapes("params", s.all_params);
    reader.check_shapes("buffers", s.all_buffers);
    std::vector<checkpoint::TensorEntry> mine;
    for (const auto& t : s.all_params)
      if (t.stage == s.topology->stage()) mine.push_back(t);
    const int64_t n = s.flat->numel();
    const auto range = owned_range(s);
    torch::NoGradGuard no_grad;
    if (s.grad_sync->params_partitioned())
      s.grad_sync->optimizer_params().copy_(reader.read_flat("params", mine, range.begin, range.end));
    else
      s.grad_sync->full_params().copy_(reader.read_flat("params", mine, 0, n));
    s.optimizer->allocate_state(s.grad_sync->optimizer_params());
    for (auto& [name, state] : s.optimizer->state()) {
      const bool part = s.grad_sync->sharded();
      state.copy_(reader.read_flat("optim/" + name, mine, part ? range.begin : 0, part ? range.end : n));
    }
    s.optimizer->set_steps(meta.optimizer_steps);
    // fp16 continues with the saved loss scale (a checkpoint of an fp32/bf16 run has none: the
    // scaler starts afresh).
    if (s.scaler && meta.loss_scale > 0)
      s.scaler->restore(meta.loss_scale, meta.loss_scale_good_steps, meta.skipped_steps);
    for (auto& b : s.model->named_buffers())
      if (b.value().is_floating_point()) b.value().copy_(reader.read_tensor("/buffers/" + b.key()).view(b.value().sizes()));
    // Every rank continues its own random stream when the world size is the one that wrote the
    // file; under another world size the streams cannot map one to one and stay as seeded.
    // (Training itself draws no random numbers after initialisation: the data order comes
    // from run.seed and the step, so resuming is exact either way.)
    if (meta.world == s.world.size) {
      if (const at::Tensor rng = reader.read_rng_state(s.world.rank); rng.defined()) {
        at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the default one
        std::lock_guard<std::mutex> lock(generator.mutex());
        generator.set_state(rng);
      }
      // The CUDA generator likewise, when this run and the writer both trained on GPUs (a file
      // written on CPUs has none; a GPU file read on CPUs has one nobody needs).
      if (s.torch_device.is_cuda())
        if (const at::Tensor rng = reader.read_rng_state(s.world.rank, "cuda"); rng.defined()) {
          at::Generator generator = cuda_generator(s);
          std::lock_guard<std::mutex> lock(generator.mutex());
          generator.set_state(rng);
        }
    }
    s.start_step = meta.step;
    s.bytes_read += 4.0 * static_cast<double>(n * (1 + static_cast<int64_t>(s.optimizer->state().size())));
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(s.world.comm, error);
  s.read_seconds = watch.seconds();
  s.resumed_from = path;
}

}  // namespace

Trainer::Trainer(const config::Deck& deck, MPI_Comm comm, const std::string& resume) : s_(std::make_unique<State>()) {
  auto& s = *s_;
  s.deck = deck;
  s.world = comm::World::from(comm);
  s.world_comm = std::make_unique<comm::MpiCommunicator>(s.world.comm);
  // The folder is this run's before anything in it is read or written; a second run into it
  // stops here (bad input, naming the owner).
  s.run_folder = RunFolder::claim(deck.run.output_dir, comm);
  try {
    construct(resume);
  } catch (const BadInput&) {
    s.run_folder->abandon();  // bad input writes nothing: not even the folder
    throw;
  }
}

// Everything a run needs before its first step, in the order the verdicts depend on each other.
void Trainer::construct(const std::string& resume) {
  auto& s = *s_;
  const auto& deck = s.deck;
  s.threads = threads_per_rank(deck, s.world);
  torch::set_num_threads(s.threads);
  choose_device(s);

  const auto dp = static_cast<int>(config::resolved_dp(deck, s.world.size));
  s.topology = std::make_unique<parallel::Topology>(s.world.comm, dp, static_cast<int>(deck.parallel.pp));
  // parallel.backend = auto: NCCL for CUDA tensors, MPI for CPU ones and for ranks sharing a GPU.
  const std::string backend = choose_backend(s);
  s.dp_comm = comm::make_communicator(backend, s.topology->dp_group(), deck.run.fail_timeout_s);
  s.pp_comm = comm::make_communicator(backend, s.topology->pp_group(), deck.run.fail_timeout_s);
  if (backend == "nccl" && s.topology->pp() > 1)
    s.pp_gradient_comm = comm::make_communicator(backend, s.topology->pp_group(), deck.run.fail_timeout_s);

  // Which checkpoint to resume from is settled first: a bad --resume PATH is bad input. The
  // ranks verify it together, and that time counts as reading it (report.json read_gb_per_s).
  std::string note, path, error;
  Stopwatch verifying;
  try {
    path = checkpoint::resolve_resume(checkpoint_dir(s), resume, note, s.world.comm);
  } catch (const BadInput& e) {
    error = e.what();
  }
  comm::agree_or_throw(s.world.comm, error);
  const double verify_seconds = verifying.seconds();
  if (s.world.rank == 0 && resume != "never") log::info("{}", note);

  s.micro_batch = config::resolved_micro_batch(deck, s.world.size);
  s.accumulation = deck.optim.global_batch / (s.micro_batch * dp);

  open_dataset(s);
  s.sampler = std::make_unique<data::GlobalSampler>(s.train_split->size(), deck.optim.global_batch,
                                                    static_cast<uint64_t>(deck.run.seed));
  const int64_t per_epoch = s.sampler->steps_per_epoch();
  s.total_steps = deck.run.max_steps > 0 ? deck.run.max_steps : deck.run.epochs * per_epoch;
  s.epochs = (s.total_steps + per_epoch - 1) / per_epoch;

  build_stage(s);
  broadcast_model(s);
  s.flat = std::make_unique<optim::FlatParams>(*s.model, s.torch_device);
  s.grad_sync = parallel::make_grad_sync(deck, *s.flat, s.model, *s.dp_comm);
  s.optimizer = optim::make_optimizer(deck, /*fused=*/!forced_step_decisions().empty());
  s.schedule = {deck.optim.lr_schedule, deck.optim.lr, deck.optim.min_lr, deck.optim.warmup_steps, s.total_steps};
  s.pipeline->set_compute(optim::compute_type(deck.optim.precision), s.torch_device);
  if (deck.optim.precision == "fp16") s.scaler = std::make_unique<optim::LossScaler>();

  if (!path.empty()) {
    load_checkpoint(s, path);
    s.read_seconds += verify_seconds;
  }
  choose_step_decisions(s);  // after the load: an fp16 run continues from the saved scale
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  s.watchdog = std::make_unique<comm::Watchdog>(s.world.comm, deck.run.fail_timeout_s);
}

// A Trainer dropped without run() (or after one that threw on every rank) still has its
// watchdog running. When no exception is on its way, every rank is here at the same point:
// stop it collectively, so no heartbeat is left in flight on its communicator (MPI reuses a freed
// communicator's context, and a stale beat would then match a later receive). On an error path
// the non-collective destructor ends the thread, as before.
Trainer::~Trainer() {
  if (s_->watchdog && std::uncaught_exceptions() == 0) s_->watchdog->stop();
}

std::pair<double, double> Trainer::evaluate(int64_t chunk) {
  const Evaluation e = evaluate_test_split(*s_, chunk);
  return {e.loss, e.accuracy};
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::full_parameters() {
  const at::Tensor full = s_->grad_sync->full_params();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& slot : s_->flat->slots)
    out.emplace_back(slot.name, full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone());
  return out;
}

std::vector<std::pair<std::string, at::Tensor>> Trainer::full_optimizer_state() {
  auto& s = *s_;
  const int64_t n = s.flat->numel();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (auto& [state_name, state] : s.optimizer->state()) {
    if (!state.defined()) continue;  // the same on every rank: no step taken, nothing loaded
    at::Tensor full = state;
    if (s.grad_sync->sharded()) {  // this rank's partition: owned_range(s), as ZeRO cuts it
      full = at::empty({n}, state.options());
      s.dp_comm->all_gather_v(state, full, parallel::ElementPartition(n, s.topology->dp()).counts(0, n));
    }
    for (const auto& slot : s.flat->slots)
      out.emplace_back(state_name + "/" + slot.name, full.narrow(0, slot.offset, slot.numel).view(slot.shape).clone());
  }
  return out;
}

namespace {

void log_layout(const Trainer::State& s) {
  const auto& deck = s.deck;
  const auto& topo = *s.topology;
  log::info("trident {} | LibTorch {} | {}", TRIDENT_VERSION, TORCH_VERSION, topo.describe());
  std::string nodes;
  for (const auto& n : s.world.node_names) nodes += (nodes.empty() ? "" : ",") + n;
  log::info("layout: world {} on {} node(s) [{}] | dp {} x pp {} | zero {} | backend {} | device {} | "
            "gradients {} | {} thread(s)/rank | global batch {} = micro {} x dp {} x accumulation {}",
            s.world.size, s.world.node_count, nodes, topo.dp(), topo.pp(), deck.parallel.zero, s.dp_comm->backend(),
            s.device, s.grad_sync->name(), s.threads, deck.optim.global_batch, s.micro_batch, topo.dp(), s.accumulation);
  log::info("model {}: stage {} runs layers [{}, {}) with {} parameters | data {}: {} train / {} test samples, "
            "{} steps/epoch, {} steps",
            deck.model.kind, topo.stage(), s.stage_layers.first, s.stage_layers.second, s.flat->numel(), deck.data.path,
            s.train_split->size(), s.test_split->size(), s.sampler->steps_per_epoch(), s.total_steps);
  log::info("resolved deck:\n{}", config::deck_to_ini(deck));
}

// A requeued job whose run had already finished: the checkpoint holds the trained model and
// report.json / metrics.jsonl describe that run. Rewriting them from zero steps would put zero
// throughput and no losses where the real figures are; evaluate and leave them be.
Result already_trained(Trainer::State& s) {
  const Evaluation done = evaluate_test_split(s);
  log::info("nothing to train: {} is at step {} of {}; report.json and metrics.jsonl left as they are | test "
            "loss {:.4f} | test accuracy {:.2f}%",
            s.resumed_from, s.start_step, s.total_steps, done.loss, 100.0 * done.accuracy);
  s.watchdog->stop();
  Result result;
  result.steps = s.total_steps;
  result.first_step = s.start_step;
  result.resumed_from = s.resumed_from;
  result.test_loss = done.loss;
  result.test_accuracy = done.accuracy;
  return result;
}

// What happens at a step boundary, agreed by every rank: log (every run.log_every steps and the
// last), save (checkpoint.every_steps, checkpoint.every_minutes by rank 0's clock, a stop
// signal; never the last step, which the end of the run saves), stop (SIGUSR1/SIGTERM on any
// rank). One small all-reduce per step, on the host.
struct StepBoundary {
  bool log = false, save = false, stop = false;
};

StepBoundary agree_at_step_end(Trainer::State& s, int64_t steps_done, const Stopwatch& since_save) {
  const auto& deck = s.deck;
  std::vector<double> flags{g_stop_signal != 0 ? 1.0 : 0.0,
                            s.world.rank == 0 && deck.checkpoint.every_minutes > 0 &&
                                    since_save.seconds() >= 60.0 * deck.checkpoint.every_minutes
                                ? 1.0
                                : 0.0};
  s.world_comm->reduce_numbers(flags, comm::Reduce::max);
  const bool by_steps = deck.checkpoint.every_steps > 0 && steps_done % deck.checkpoint.every_steps == 0;
  StepBoundary due;
  due.stop = flags[0] != 0;
  due.save = (due.stop || flags[1] != 0 || by_steps) && steps_done < s.total_steps;
  due.log = steps_done % deck.run.log_every == 0 || steps_done == s.total_steps;
  return due;
}

std::string eta_text(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, (total / 60) % 60);
  return fmt::format("{}m{:02}s", total / 60, total % 60);
}

// The progress a run shows: the log line and metrics.jsonl (rank 0) every run.log_every steps,
// with the samples/s of the steps since the last one, and the Result's loss series.
class ProgressLog {
 public:
  ProgressLog(const Trainer::State& s, Result& result) : s_(s), result_(result) {
    if (s.world.rank == 0)
      metrics_ = std::make_unique<report::MetricsLog>(s.deck.run.output_dir + "/metrics.jsonl", s.start_step > 0);
  }
  void step_done() { ++window_steps_; }
  // After an epoch's evaluation: its time is not the next window's.
  void restart_window() {
    window_.reset();
    window_steps_ = 0;
  }
  void close() { metrics_.reset(); }

  void log(Trainer::State& s, int64_t steps_done, int64_t epoch, double lr, const StepTally& tally) {
    const auto& deck = s.deck;
    const double loss = replica_mean(s, tally.last_loss);
    const double rate = static_cast<double>(window_steps_ * deck.optim.global_batch) / window_.seconds();
    const double eta = static_cast<double>(s.total_steps - steps_done) * window_.seconds() / window_steps_;
    log::info("epoch {}/{} | step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} samples/s | ETA {}",
              epoch + 1, s.epochs, steps_done, s.total_steps, loss, lr, tally.last_norm, rate, eta_text(eta));
    if (metrics_) {
      report::MetricsRecord record{steps_done, epoch, loss, lr, rate, tally.last_norm, {}, {}};
      if (s.scaler) {
        record.loss_scale = s.scaler->scale();
        record.skipped_steps = s.scaler->skipped_steps();
      }
      metrics_->write(record);
    }
    result_.logged_losses.emplace_back(steps_done, loss);
    result_.logged_grad_norms.push_back(tally.last_norm);
    restart_window();
  }

 private:
  const Trainer::State& s_;
  Result& result_;
  std::unique_ptr<report::MetricsLog> metrics_;
  Stopwatch window_;
  int64_t window_steps_ = 0;
};

// The epoch's training micro-batches for this rank: only the first stage reads inputs and only
// the last reads labels; middle stages read nothing (null).
std::unique_ptr<data::Prefetcher> open_train_loader(Trainer::State& s, int64_t first, int64_t end) {
  const auto& pipe = *s.pipeline;
  const auto& topo = *s.topology;
  if (!pipe.first() && !pipe.last()) return nullptr;
  return data::make_train_loader(s.train_split, *s.sampler, first, end, s.micro_batch, topo.dp_rank(), topo.dp(),
                                 static_cast<int>(s.deck.data.prefetch), pipe.first(), pipe.last(),
                                 /*pin_memory=*/s.torch_device.is_cuda());
}

}  // namespace

Result Trainer::run() {
  auto& s = *s_;
  Stopwatch wall;
  log_layout(s);
  if (s.start_step >= s.total_steps) return already_trained(s);

  Result result;
  result.first_step = s.start_step;
  result.resumed_from = s.resumed_from;
  ProgressLog progress(s, result);
  StepTally tally;
  if (s.scaler) tally.skipped_steps = s.scaler->skipped_steps();
  Evaluation last_eval;
  double train_seconds = 0;
  int64_t epoch_steps = 0;
  Stopwatch since_save;
  const int64_t per_epoch = s.sampler->steps_per_epoch();
  StepProfiler profiler(s.deck.run.output_dir, s.world.rank, s.cuda_index);
  for (int64_t epoch = s.sampler->epoch_of(std::min(s.start_step, s.total_steps - 1)); epoch < s.epochs; ++epoch) {
    const int64_t first = std::max(epoch * per_epoch, s.start_step), end = std::min(s.total_steps, (epoch + 1) * per_epoch);
    if (first >= end) continue;
    const auto loader = open_train_loader(s, first, end);
    Stopwatch epoch_watch;
    tally.epoch_loss_sum = 0;
    if (s.device_step) s.device_step->reset_loss_sum();
    epoch_steps = 0;
    // ---- the training loop
    for (int64_t step = first; step < end; ++step) {
      profiler.before_step(step);
      train_step(s, step, loader.get(), tally);
      profiler.after_step(step);
      ++epoch_steps;
      progress.step_done();
      comm::progress().step.store(step + 1, std::memory_order_relaxed);
      stall_if_asked(s.world.rank, step + 1);
      const StepBoundary due = agree_at_step_end(s, step + 1, since_save);
      // The device's decisions reach the host where the host needs them (a divergence stops here).
      if (s.device_step && (due.log || due.save || due.stop || step + 1 == end)) read_device_step(s, tally);
      if (due.log) progress.log(s, step + 1, epoch, s.schedule.at(step), tally);
      if (due.save) {
        save_checkpoint(s, step + 1);
        since_save.reset();
      }
      if (due.stop) {
        progress.close();
        s.watchdog->stop();
        throw StoppedBySignal(fmt::format("stopped by a signal after step {}; checkpoint committed in {}", step + 1,
                                          checkpoint_dir(s)));
      }
    }
    // ---- end of epoch: evaluation
    if (loader) s.times.data_wait += loader->wait_seconds();
    train_seconds += epoch_watch.seconds();
    {
      ScopedTimer t(s.times.evaluation);
      last_eval = evaluate_test_split(s);
    }
    log::info("epoch {}/{} done | train loss {:.4f} | test loss {:.4f} | test accuracy {:.2f}%", epoch + 1, s.epochs,
              replica_mean(s, tally.epoch_loss_sum / std::max<int64_t>(1, epoch_steps)), last_eval.loss,
              100.0 * last_eval.accuracy);
    progress.restart_window();
  }

  // ---- end of run: the trained model, the result, report.json
  if (s.start_step < s.total_steps || s.saves == 0) save_checkpoint(s, s.total_steps);
  progress.close();
  result.steps = s.total_steps;
  result.train_loss = replica_mean(s, tally.epoch_loss_sum / std::max<int64_t>(1, epoch_steps));
  result.test_loss = last_eval.loss;
  result.test_accuracy = last_eval.accuracy;
  train_seconds = max_over_ranks(s, train_seconds);
  result.samples_per_s = static_cast<double>((s.total_steps - s.start_step) * s.deck.optim.global_batch) /
                         std::max(train_seconds, 1e-9);
  s.times.comm_exposed = s.grad_sync->exposed_comm_seconds();
  s.times.total = wall.seconds();
  report::Summary summary = summarize_run(s, result, train_seconds);
  s.watchdog->stop();
  summary.watchdog_timeout_s = s.watchdog->enabled() ? s.deck.run.fail_timeout_s : 0.0;
  summary.watchdog_cpu_s = max_over_ranks(s, s.watchdog->thread_cpu_seconds());
  if (s.world.rank == 0) report::write_report_json(s.deck.run.output_dir + "/report.json", summary);
  log::info("done: {} steps in {:.1f} s | {:.0f} samples/s | test accuracy {:.2f}% | report {}/report.json",
            s.total_steps, s.times.total, result.samples_per_s, 100.0 * result.test_accuracy, s.deck.run.output_dir);
  return result;
}

}  // namespace trident::train
