#include "train/safe_stop.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace trident::train {

namespace {
// Variable `name` as a positive number; 0 when unset, empty or anything else.
double positive_number_of(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  char* end = nullptr;
  const double number = std::strtod(text, &end);
  return end && *end == '\0' && std::isfinite(number) && number > 0 ? number : 0;
}
}  // namespace

double signal_lead_seconds() { return positive_number_of("TRIDENT_SIGNAL_LEAD_S"); }

double job_end_time() { return positive_number_of("TRIDENT_JOB_END_TIME"); }

double job_time_limit_seconds() { return positive_number_of("TRIDENT_JOB_TIME_LIMIT_S"); }

double job_start_time() { return positive_number_of("TRIDENT_JOB_START_TIME"); }

double launch_seconds(double job_start, double process_start, double time_limit_s) {
  if (!(job_start > 0)) return 0;
  const double launch = process_start - job_start;
  if (!(launch > 0) || (time_limit_s > 0 && launch >= time_limit_s)) return 0;
  return launch;
}

ChainLinks chain_links() {
  const double link = positive_number_of("TRIDENT_CHAIN_LINK"), links = positive_number_of("TRIDENT_CHAIN_LINKS");
  const bool whole = link == std::floor(link) && links == std::floor(links) && links < 1e9;
  if (!whole || !(link >= 1) || link > links) return {};
  return {static_cast<int64_t>(link), static_cast<int64_t>(links)};
}

ChainOutlook chain_outlook(double rest_s, double time_limit_s, double lead_s, double startup_s) {
  const double per_link_s = time_limit_s - std::max(lead_s, 0.0) - std::max(startup_s, 0.0);
  if (!(per_link_s > 0)) return {per_link_s, -1};
  return {per_link_s, static_cast<int64_t>(std::ceil(std::max(rest_s, 0.0) / per_link_s))};
}

std::optional<StopBeforeTheEnd> stop_before_the_end(double end_time, double lead_s, double now, double eta_s,
                                                    int64_t steps_done, int64_t total_steps) {
  if (!(end_time > 0)) return std::nullopt;
  const double stop_in_s = end_time - std::max(lead_s, 0.0) - now;
  if (!(stop_in_s > 0) || !(eta_s > stop_in_s)) return std::nullopt;
  const auto ahead = static_cast<double>(total_steps - steps_done);
  return StopBeforeTheEnd{stop_in_s, steps_done + static_cast<int64_t>(ahead * stop_in_s / eta_s), eta_s - stop_in_s};
}

bool JobEndTelling::tell(int64_t step, double rest_s) {
  if (told_before()) {
    const bool behind = rest_s >= 2 * told_rest_s_ && rest_s >= told_rest_s_ + 60;
    lines_behind_ = behind ? lines_behind_ + 1 : 0;
    if (lines_behind_ < 2) return false;
  }
  told_step_ = step;
  told_rest_s_ = rest_s;
  lines_behind_ = 0;
  return true;
}

std::string signal_lead_warning(double lead_s, const SafeStop& stop) {
  if (!(lead_s > 0) || lead_s >= stop.needed_s()) return "";
  const double asked = std::ceil(1.5 * stop.needed_s());
  // snprintf, not fmt: this file builds without LibTorch (whose fmt the CUDA flavour uses) for its test.
  // A signal during a step waits for the step; during an evaluation, for its stretch to the next
  // check for a signal; the longer of the two is named.
  char work[160];
  if (stop.evaluation_s > stop.step_s)
    std::snprintf(work, sizeof work, "an evaluation's stretch between its checks for a signal %.2f s", stop.evaluation_s);
  else
    std::snprintf(work, sizeof work, "step %.2f s", stop.step_s);
  char in_flight[96] = "";
  if (stop.in_flight_s > 0)
    std::snprintf(in_flight, sizeof in_flight, " + the background save it may find in flight %.2f s", stop.in_flight_s);
  char text[900];
  std::snprintf(text, sizeof text,
                "the job's signal comes %g s before its end (TRIDENT_SIGNAL_LEAD_S, the job script's "
                "--signal=B:USR1@%g), but finishing a step and saving takes %.2f s here (%s%s + save %.2f s): a "
                "stop at the time limit would be killed mid-save. Ask for at least --signal=B:USR1@%g",
                lead_s, lead_s, stop.needed_s(), work, in_flight, stop.save_s, asked);
  return text;
}

}  // namespace trident::train
