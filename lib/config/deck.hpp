#pragma once
// The input deck: one documented struct. Each key is declared once below, with its type,
// default and meaning; the struct members, the Boost.Program_options description, the
// `--help-deck` text and report.json's "deck" object are all generated from these lists, so
// a key cannot exist without its documentation (tests/unit/deck_test.cpp pins the key list).
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

// X(section, key, type, default, help)
#define TRIDENT_DECK_RUN(X)                                                                     \
  X(run, name, std::string, "trident", "name of the run (not . or ..); ${name} in output_dir expands to it") \
  X(run, output_dir, std::string, "runs/${name}",                                               \
    "where report.json, metrics.jsonl, evaluations.jsonl, goodput.jsonl and checkpoints/ go (relative to the working directory; ${name} is its one variable: no $VAR, no ~)") \
  X(run, seed, int64_t, 1234, "seed of the model initialisation and the data order (>= 0)")            \
  X(run, epochs, int64_t, 2, "passes over the training split (>= 1; ignored when max_steps > 0)")     \
  X(run, max_steps, int64_t, 0, "optimizer steps to run (>= 0); 0 = epochs x steps per epoch")         \
  X(run, log_every, int64_t, 50, "steps between progress lines and metrics.jsonl records (>= 1)")      \
  X(run, eval_every_steps, int64_t, 0,                                                         \
    "steps between evaluations of the test split (>= 0) besides the one after each epoch, e.g. for a token model trained by max_steps within one epoch; 0 = after each epoch only. Each evaluation is a progress line and a record in evaluations.jsonl") \
  X(run, eval_samples, int64_t, 0,                                                             \
    "run.eval_every_steps' evaluations: the test split's first N samples (0 = all of it, as is a number past its size; at least parallel.dp otherwise). The evaluations after each epoch (the last one's is report.json's final) take the whole split") \
  X(run, device, std::string, "auto", "auto | cpu | cuda (auto: cuda when this build and the node have GPUs)") \
  X(run, threads, int64_t, 0, "intra-op threads per rank (at most 1024); 0 = the CPUs the rank may run on (its affinity: --cpus-per-task, -bind-to, taskset), each shared equally among the node's ranks that may run on it") \
  X(run, fail_timeout_s, double, 30.0,                                                          \
    "abort the job when a rank is dead or makes no progress for this long (heartbeats; 1 to 1e6 seconds); 0 = off") \
  X(run, requeue_lock_wait_s, double, 300.0,                                                    \
    "a requeued Slurm job (or jobs/restart_chain.sh's next link) whose run.output_dir is still locked by an earlier lifetime of the same job (or the previous link), which Slurm has ended (its node failed: the file system keeps the lock until it gives up on the node, NFSv4 after its ~90 s lease), waits this long for it (0 to 1e6 seconds), then exits 2") \
  X(run, check_memory, bool, true,                                                              \
    "refuse at start-up (exit 2) a model state (with, in an fp32 run on the host, what the layers keep for the backward of the micro-batches in flight) larger than the memory the node's ranks share (cgroup limits, MemTotal + swap, the GPU's), and at pp = 1 a whole-model build past each rank's share of it; false = skip both") \
  X(run, peak_tflops, double, 0.0,                                                              \
    "token models (gpt): peak TFLOP/s per rank for MFU (>= 0.001); 0 = the GPU's dense bf16/fp16 peak in bf16/fp16 (H100/H200 989, A100 312), else no MFU") \
  X(run, cuda_graph, bool, false,                                                               \
    "on a GPU at pp = 1, dp = 1, parallel.zero = 0: capture a micro-step's forward and backward once as a CUDA graph (after 2 eager micro-steps) and replay it, so the host launches one graph instead of each kernel; elsewhere ignored, with a log line saying why")

#define TRIDENT_DECK_DATA(X)                                                                    \
  X(data, path, std::string, "data/fashion_mnist.h5",                                          \
    "HDF5 dataset with groups /train and /test holding inputs and labels (or tokens, for gpt); relative to the working directory")                      \
  X(data, prefetch, int64_t, 2, "micro-batches read ahead by a background thread (0 to 1024); 0 = read inline") \
  X(data, check_finite, bool, false, "scan the float inputs for NaN/Inf when opening the dataset") \
  X(data, verify_checksums, bool, true,                                                         \
    "check the dataset's CRC-32 blocks (prepare-data writes them) when opening it, each rank its share; false = skip")

#define TRIDENT_DECK_MODEL(X)                                                                   \
  X(model, kind, std::string, "cnn", "model from the registry: mlp | cnn | gpt (gpt trains on a token dataset)") \
  X(model, hidden, std::string, "256,128", "mlp: comma-separated hidden layer widths")          \
  X(model, layers, int64_t, 4, "gpt: transformer blocks (>= 1)")                                       \
  X(model, heads, int64_t, 4, "gpt: attention heads per block (>= 1; d_model must be divisible by it)") \
  X(model, d_model, int64_t, 256, "gpt: embedding width (>= 1)")                                       \
  X(model, seq_len, int64_t, 128, "gpt: tokens per sample (context length, >= 1); a sample is seq_len + 1 tokens") \
  X(model, vocab, int64_t, 0, "gpt: vocabulary size (>= the dataset's); 0 = the dataset's 'vocab' attribute") \
  X(model, recompute, bool, false,                                                              \
    "gpt: full activation recomputation ('activation checkpointing'): each transformer block keeps only its input for the backward and runs again there, so its activations are not held between forward and backward (about 1/3 more compute; under parallel.schedule = zb-h1 at pp >= 2 twice: its input and weight gradients run apart)")

#define TRIDENT_DECK_PARALLEL(X)                                                                \
  X(parallel, dp, std::string, "auto", "data-parallel replicas; auto = world size / pp")        \
  X(parallel, pp, int64_t, 1, "pipeline stages; the model's layer list is cut into pp contiguous runs") \
  X(parallel, boundaries, std::string, "",                                                      \
    "first layer of stages 1..pp-1, e.g. 2,5; empty = cut by parallel.balance")                 \
  X(parallel, balance, std::string, "params",                                                   \
    "how an automatic cut balances the stages: params (parameter count) | time (each layer's forward + backward, measured at start-up)") \
  X(parallel, zero, int64_t, 0, "ZeRO stage within each dp group: 0 (DDP) | 1 (optimizer state) | 2 (+ gradients) | 3 (+ parameters)")            \
  X(parallel, schedule, std::string, "1f1b",                                                    \
    "pipeline schedule: gpipe | 1f1b | zb-h1 (1f1b with each backward split: weight gradients fill the bubbles) | interleaved (Megatron's interleaved 1f1b over parallel.virtual_stages chunks per rank)") \
  X(parallel, virtual_stages, int64_t, 1,                                                       \
    "interleaved: model chunks per rank (2 to 1024); the layers are cut into pp x v chunks, rank r holding chunks r, r + pp, ...") \
  X(parallel, backend, std::string, "auto", "collectives: auto | mpi | nccl (auto: nccl for CUDA tensors, mpi for CPU ones and for ranks sharing a GPU)") \
  X(parallel, bucket_mb, double, 25.0, "gradient all-reduce bucket size in MiB (> 0, at most 1048576)")

#define TRIDENT_DECK_OPTIM(X)                                                                   \
  X(optim, name, std::string, "adamw", "adamw | sgd (with momentum)")                           \
  X(optim, lr, double, 1e-3, "peak learning rate (> 0)")                                              \
  X(optim, lr_schedule, std::string, "constant", "constant | cosine (after warmup)")            \
  X(optim, warmup_steps, int64_t, 0, "steps of linear warmup from 0 to lr (>= 0)")                     \
  X(optim, min_lr, double, 0.0, "cosine: learning rate at the last step, when the warmup leaves 2 steps or more (0 <= min_lr <= lr)")                       \
  X(optim, weight_decay, double, 0.0, "decoupled weight decay (adamw) or L2 term (sgd), >= 0, lr x weight_decay < 1")        \
  X(optim, momentum, double, 0.9, "sgd momentum, in [0, 1)")                                               \
  X(optim, beta1, double, 0.9, "adamw first-moment decay, in [0, 1)")                                      \
  X(optim, beta2, double, 0.999, "adamw second-moment decay, in [0, 1)")                                   \
  X(optim, eps, double, 1e-8, "adamw denominator epsilon (>= 1.17549e-38, a normal float32)")                                      \
  X(optim, global_batch, int64_t, 256, "samples per optimizer step over all ranks (fixed under strong scaling)") \
  X(optim, micro_batch, std::string, "auto",                                                    \
    "samples per rank per micro-step; accumulation = global_batch / (micro_batch x dp); auto = the " \
    "largest divisor of global_batch / dp that is <= max_micro_batch, so one deck runs at any dp") \
  X(optim, max_micro_batch, int64_t, 64,                                                        \
    "micro_batch = auto: the largest micro-batch to pick (lower it when a micro-batch does not fit in memory)") \
  X(optim, clip_grad_norm, double, 1.0, "clip gradients to this global L2 norm (>= 1e-6); 0 = off")       \
  X(optim, precision, std::string, "fp32", "fp32 | bf16 | fp16: bf16/fp16 matmuls under autocast, fp32 master weights; fp16 (GPU) adds dynamic loss scaling")

#define TRIDENT_DECK_CHECKPOINT(X)                                                              \
  X(checkpoint, every_steps, int64_t, 0,                                                        \
    "save every N steps (and always at the end, and on SIGUSR1/SIGTERM/SIGINT); 0 = off")              \
  X(checkpoint, every_minutes, double, 0.0, "save every N minutes (rank 0's clock); 0 = off")   \
  X(checkpoint, keep_last, int64_t, 2, "checkpoints kept (>= 1); older ones are pruned")               \
  X(checkpoint, async, bool, true,                                                              \
    "periodic saves are written by a background thread while training goes on (training waits " \
    "only for the file's layout, the commit at a later step, and a save still in flight when the " \
    "next is due); the final save and a signal's save are whole before the run ends")

#define TRIDENT_DECK_FIELDS(X)                                                                  \
  TRIDENT_DECK_RUN(X) TRIDENT_DECK_DATA(X) TRIDENT_DECK_MODEL(X) TRIDENT_DECK_PARALLEL(X)       \
  TRIDENT_DECK_OPTIM(X) TRIDENT_DECK_CHECKPOINT(X)

namespace trident::config {

#define TRIDENT_DECK_MEMBER(section, key, type, default_value, help) type key = default_value;
struct RunSection { TRIDENT_DECK_RUN(TRIDENT_DECK_MEMBER) };
struct DataSection { TRIDENT_DECK_DATA(TRIDENT_DECK_MEMBER) };
struct ModelSection { TRIDENT_DECK_MODEL(TRIDENT_DECK_MEMBER) };
struct ParallelSection { TRIDENT_DECK_PARALLEL(TRIDENT_DECK_MEMBER) };
struct OptimSection { TRIDENT_DECK_OPTIM(TRIDENT_DECK_MEMBER) };
struct CheckpointSection { TRIDENT_DECK_CHECKPOINT(TRIDENT_DECK_MEMBER) };
#undef TRIDENT_DECK_MEMBER

struct Deck {
  RunSection run;
  DataSection data;
  ModelSection model;
  ParallelSection parallel;
  OptimSection optim;
  CheckpointSection checkpoint;
  std::string source = "(defaults)";  // the deck file, for messages
  std::map<std::string, int> lines;     // key -> its line in the deck file, to point messages at it
  std::map<std::string, std::string> overridden;  // key -> the --set that gave its value, for messages
  // Said at the start of a run: values of the deck file that hold a '#' with no blank before it,
  // which trident before 2026-11-26 read as a comment (the deck meant something else then).
  std::vector<std::string> notes;
};

// One key of the deck, as the generated description sees it.
struct FieldInfo {
  std::string section, key, type, default_text, help;
  std::string name() const { return section + "." + key; }
};
const std::vector<FieldInfo>& deck_fields();

// Reads an INI deck and applies `--set section.key=value` overrides. Every problem
// (missing file, syntax, unknown key, bad type) is collected; throws BadInput naming the deck
// and the keys when there is any, or, given `problems`, adds them there and returns the deck as
// far as it could be read (for validate_or_throw to list with the rules it breaks). A file that
// cannot be read as a deck at all throws either way. Expands ${name} in run.output_dir.
Deck load_deck(const std::string& path, const std::vector<std::string>& overrides,
               std::vector<std::string>* problems = nullptr);
// A leading UTF-8 byte-order mark is skipped; CRLF line endings are accepted. A '#' at the start
// of a line or after a blank begins a comment.
Deck parse_deck_text(const std::string& text, const std::string& source, const std::vector<std::string>& overrides,
                     std::vector<std::string>* problems = nullptr);
// A deck deck_to_ini wrote (a checkpoint's): its values read whole, a '#' in them included.
Deck parse_written_deck(const std::string& text, const std::string& source);

// What validation needs to know about where the run happens.
struct Environment {
  int world_size = 1;
  bool cuda_available = false;  // this build has CUDA and this node a GPU
  std::string no_cuda_reason = "this trident was built without CUDA or the node has no GPU";  // when not
};

// Every broken rule, one message each, each naming the key (and the deck file).
std::vector<std::string> validate(const Deck& deck, const Environment& env);
// Throws BadInput listing `earlier` (load_deck's problems) and validate()'s messages, if any:
// every broken rule of a deck in one message.
void validate_or_throw(const Deck& deck, const Environment& env, const std::vector<std::string>& earlier = {});
// A message that starts with a key ("parallel.boundaries: ...") pointed at where its value came
// from: "deck.ini:12: ..." or "--set parallel.boundaries=7: ..."; other messages as they are.
std::string locate(const Deck& deck, const std::string& message);
// Whether `text` names the deck key `key` as a word: "optim.lr (4)" does, "optim.lr_schedule" does not.
bool names_key(const std::string& text, const std::string& key);

// Resolved values that need the world size.
int64_t resolved_dp(const Deck& deck, int world_size);
// optim.micro_batch, with auto resolved for this world size; 0 when it cannot be (validate()
// says why).
int64_t resolved_micro_batch(const Deck& deck, int world_size);
std::vector<int64_t> hidden_sizes(const Deck& deck);

// Every key and its value as text, in declaration order: (section.key, value).
std::vector<std::pair<std::string, std::string>> deck_values(const Deck& deck);
// `trident train --help-deck`: an INI file of every key with its default and meaning.
std::string deck_help();
// The resolved deck as an INI file (printed by rank 0 at start).
std::string deck_to_ini(const Deck& deck);
// The keys whose values differ between two decks, as "section.key before -> after", in deck order.
std::vector<std::string> changed_keys(const Deck& before, const Deck& after);
// The same for two lists of deck_values() (and any pairs after them, e.g. --resume), by position.
std::vector<std::string> changed_values(const std::vector<std::pair<std::string, std::string>>& before,
                                        const std::vector<std::pair<std::string, std::string>>& after);

}  // namespace trident::config
