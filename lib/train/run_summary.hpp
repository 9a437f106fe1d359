#pragma once
// report.json's figures for a finished run: the layout, losses, throughput and MFU, the phase
// times and memory (maxima over the ranks), one record per pipeline stage. Collective; every
// rank returns the summary (rank 0 writes it). The watchdog's fields are the caller's: they are
// final only once it has stopped.
#include "report/report.hpp"
#include "train/trainer_state.hpp"

namespace trident::train {

report::Summary summarize_run(Trainer::State& s, const Result& result, double train_seconds);

}  // namespace trident::train
