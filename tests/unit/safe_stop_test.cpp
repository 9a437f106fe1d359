// A job's signal lead (TRIDENT_SIGNAL_LEAD_S, the job script's --signal=B:USR1@N) against what a
// stop takes here (a step, or an evaluation's stretch between checks for a signal, and a save):
// warned when too short, with the lead to ask for; a run whose ETA goes past its job's end, and
// whether the links after a restart chain's job finish it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "train/safe_stop.hpp"

using namespace trident::train;

TEST(SafeStop, WarnsWhenTheSignalComesTooLateAndNamesTheLeadNeeded) {
  const SafeStop stop{30.0, 90.0};  // a 30 s step and a 90 s save: 120 s
  EXPECT_EQ(signal_lead_warning(120.0, stop), "");
  EXPECT_EQ(signal_lead_warning(0.0, stop), "");  // unknown: no warning
  const std::string warning = signal_lead_warning(60.0, stop);
  EXPECT_NE(warning.find("60 s before its end"), std::string::npos) << warning;
  EXPECT_NE(warning.find("takes 120.00 s here (step 30.00 s + save 90.00 s)"), std::string::npos) << warning;
  EXPECT_NE(warning.find("at least --signal=B:USR1@180"), std::string::npos) << warning;  // 1.5 x 120
}

TEST(SafeStop, AnEvaluationsStretchBetweenSignalChecksCountsWhenLongerThanAStep) {
  // An evaluation checks for a signal every so often: one during its 50 s between two checks
  // waits for them and the 90 s save (140 s), longer than a 30 s step and the save.
  const SafeStop stop{30.0, 90.0, 50.0};
  EXPECT_EQ(signal_lead_warning(140.0, stop), "");
  const std::string warning = signal_lead_warning(120.0, stop);
  EXPECT_NE(warning.find("takes 140.00 s here (an evaluation's stretch between its checks for a signal 50.00 s + "
                         "save 90.00 s)"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("at least --signal=B:USR1@210"), std::string::npos) << warning;  // 1.5 x 140
  // Shorter than a step: the step is what a signal waits for.
  const SafeStop short_stretch{30.0, 90.0, 5.0};
  EXPECT_EQ(signal_lead_warning(120.0, short_stretch), "");
  EXPECT_NE(signal_lead_warning(100.0, short_stretch).find("(step 30.00 s + save 90.00 s)"), std::string::npos);
}

TEST(SafeStop, ABackgroundSaveInFlightCountsBeforeTheStopsOwnSave) {
  // checkpoint.async: a signal just after a 90 s background save started waits for its write and
  // commit, then saves its own step: 30 + 90 + 90 s.
  const SafeStop stop{30.0, 90.0, 0.0, 90.0};
  EXPECT_EQ(signal_lead_warning(210.0, stop), "");
  const std::string warning = signal_lead_warning(150.0, stop);
  EXPECT_NE(warning.find("takes 210.00 s here (step 30.00 s + the background save it may find in flight 90.00 s + "
                         "save 90.00 s)"),
            std::string::npos)
      << warning;
  EXPECT_NE(warning.find("at least --signal=B:USR1@315"), std::string::npos) << warning;  // 1.5 x 210
}

TEST(SafeStop, LeadFromTheEnvironment) {
  setenv("TRIDENT_SIGNAL_LEAD_S", "120", 1);
  EXPECT_EQ(signal_lead_seconds(), 120.0);
  for (const char* bad : {"", "abc", "-5", "12s", "nan"}) {
    setenv("TRIDENT_SIGNAL_LEAD_S", bad, 1);
    EXPECT_EQ(signal_lead_seconds(), 0.0) << bad;
  }
  unsetenv("TRIDENT_SIGNAL_LEAD_S");
  EXPECT_EQ(signal_lead_seconds(), 0.0);
}

TEST(SafeStop, JobEndFromTheEnvironment) {
  setenv("TRIDENT_JOB_END_TIME", "1796250000", 1);
  EXPECT_EQ(job_end_time(), 1796250000.0);
  for (const char* bad : {"", "Unknown", "2026-12-02T23:40:00", "-1"}) {
    setenv("TRIDENT_JOB_END_TIME", bad, 1);
    EXPECT_EQ(job_end_time(), 0.0) << bad;
  }
  unsetenv("TRIDENT_JOB_END_TIME");
  EXPECT_EQ(job_end_time(), 0.0);
}

TEST(SafeStop, ARunPastItsJobsStopSignalIsToldWhereItStops) {
  // A job ending at 10000 with its signal 120 s before; at 8000 s, step 1000 of 5000 with 4000 s
  // ahead: the signal in 1880 s, 1880/4000 of the 4000 steps ahead, about step 2880.
  const auto stop = stop_before_the_end(10000, 120, 8000, 4000, 1000, 5000);
  ASSERT_TRUE(stop.has_value());
  EXPECT_DOUBLE_EQ(stop->stop_in_s, 1880.0);
  EXPECT_EQ(stop->step, 2880);
  EXPECT_DOUBLE_EQ(stop->rest_s, 2120.0);  // 4000 s ahead less the 1880 s before the signal
  // Finishing before the signal, with no end known, or with the signal's time already passed: none.
  EXPECT_FALSE(stop_before_the_end(10000, 120, 8000, 1800, 1000, 5000).has_value());
  EXPECT_FALSE(stop_before_the_end(0, 120, 8000, 4000, 1000, 5000).has_value());
  EXPECT_FALSE(stop_before_the_end(10000, 120, 9950, 4000, 1000, 5000).has_value());
  // No lead known: the job's end itself.
  EXPECT_DOUBLE_EQ(stop_before_the_end(10000, 0, 8000, 4000, 1000, 5000)->stop_in_s, 2000.0);
}

TEST(SafeStop, ChainLinksAndTimeLimitFromTheEnvironment) {
  setenv("TRIDENT_CHAIN_LINK", "2", 1);
  setenv("TRIDENT_CHAIN_LINKS", "4", 1);
  const ChainLinks chain = chain_links();
  EXPECT_EQ(chain.link, 2);
  EXPECT_EQ(chain.links, 4);
  EXPECT_EQ(chain.after(), 2);
  // A link past the chain's end, a fraction, a link 0, or either missing: not a chain.
  for (const auto& [link, links] : std::vector<std::pair<const char*, const char*>>{
           {"5", "4"}, {"1.5", "4"}, {"0", "4"}, {"2", ""}, {"", "4"}, {"2", "four"}}) {
    setenv("TRIDENT_CHAIN_LINK", link, 1);
    setenv("TRIDENT_CHAIN_LINKS", links, 1);
    EXPECT_EQ(chain_links().links, 0) << link << " of " << links;
  }
  unsetenv("TRIDENT_CHAIN_LINK");
  unsetenv("TRIDENT_CHAIN_LINKS");
  EXPECT_EQ(chain_links().links, 0);
  setenv("TRIDENT_JOB_TIME_LIMIT_S", "14400", 1);
  EXPECT_EQ(job_time_limit_seconds(), 14400.0);
  setenv("TRIDENT_JOB_TIME_LIMIT_S", "UNLIMITED", 1);
  EXPECT_EQ(job_time_limit_seconds(), 0.0);
  unsetenv("TRIDENT_JOB_TIME_LIMIT_S");
}

TEST(SafeStop, TheLaunchBeforeThisProcess) {
  setenv("TRIDENT_JOB_START_TIME", "1796561952", 1);
  EXPECT_EQ(job_start_time(), 1796561952.0);
  setenv("TRIDENT_JOB_START_TIME", "2026-12-06T12:59:12", 1);  // squeue's text, not converted
  EXPECT_EQ(job_start_time(), 0.0);
  unsetenv("TRIDENT_JOB_START_TIME");
  EXPECT_EQ(job_start_time(), 0.0);
  // A job that started at 1000 s and a process at 1042.5 s: 42.5 s of job script and srun.
  EXPECT_DOUBLE_EQ(launch_seconds(1000, 1042.5, 14400), 42.5);
  EXPECT_DOUBLE_EQ(launch_seconds(1000, 1042.5, 0), 42.5);  // no time limit known
  // Unknown start; a start after the process's (clocks apart); a launch as long as the limit.
  EXPECT_EQ(launch_seconds(0, 1042.5, 14400), 0.0);
  EXPECT_EQ(launch_seconds(1050, 1042.5, 14400), 0.0);
  EXPECT_EQ(launch_seconds(1000, 1000 + 14400, 14400), 0.0);
}

TEST(SafeStop, TheLinksARunNeedsAfterThisJob) {
  // 4-hour links, a 120 s lead, 300 s of start-up: each trains 14400 - 120 - 300 = 13980 s. The
  // rest of the run after this job's signal, 30000 s, takes ceil(30000 / 13980) = 3 links; one
  // link's worth exactly takes 1, a second more takes 2.
  ChainOutlook outlook = chain_outlook(30000, 14400, 120, 300);
  EXPECT_DOUBLE_EQ(outlook.per_link_s, 13980.0);
  EXPECT_EQ(outlook.links_needed, 3);
  EXPECT_EQ(chain_outlook(13980, 14400, 120, 300).links_needed, 1);
  EXPECT_EQ(chain_outlook(13981, 14400, 120, 300).links_needed, 2);
  // No lead or start-up known: the whole limit trains.
  EXPECT_DOUBLE_EQ(chain_outlook(30000, 14400, 0, 0).per_link_s, 14400.0);
  // A link whose start-up and lead take its whole time never trains.
  EXPECT_EQ(chain_outlook(30000, 400, 120, 300).links_needed, -1);
}

TEST(SafeStop, ARunFallenFurtherBehindIsToldAgainOnlyAfterTwoLinesAtTwiceItsRest) {
  JobEndTelling telling;
  EXPECT_FALSE(telling.told_before());
  // The first line that finds the run past its stop signal tells it.
  EXPECT_TRUE(telling.tell(20, 300));
  EXPECT_EQ(telling.told_step(), 20);
  EXPECT_DOUBLE_EQ(telling.told_rest_s(), 300.0);
  // A steady rate, a rest a little longer: not again.
  EXPECT_FALSE(telling.tell(30, 310));
  EXPECT_FALSE(telling.tell(40, 590));  // short of twice
  // One window at twice the rest, then one back at the rate told: a hiccup, not again.
  EXPECT_FALSE(telling.tell(50, 700));
  EXPECT_FALSE(telling.tell(60, 320));
  EXPECT_FALSE(telling.tell(70, 700));
  // A line on time between two behind breaks the row.
  telling.on_time();
  EXPECT_FALSE(telling.tell(80, 700));
  // Two lines in a row at twice the rest or more: told again, with the second's rest.
  EXPECT_TRUE(telling.tell(90, 650));
  EXPECT_EQ(telling.told_step(), 90);
  EXPECT_DOUBLE_EQ(telling.told_rest_s(), 650.0);
  // Now measured from 650 s: 1000 s is not twice.
  EXPECT_FALSE(telling.tell(100, 1000));
  EXPECT_FALSE(telling.tell(110, 1000));
}

TEST(SafeStop, ARestTwiceAsLongButUnderAMinuteMoreIsNotFurtherBehind) {
  // 10 s told, 40 s now: twice and more, but sbatch --time counts minutes.
  JobEndTelling telling;
  EXPECT_TRUE(telling.tell(20, 10));
  EXPECT_FALSE(telling.tell(30, 40));
  EXPECT_FALSE(telling.tell(40, 40));
  EXPECT_FALSE(telling.tell(50, 75));
  EXPECT_TRUE(telling.tell(60, 71));  // 50's 75 and 60's 71: both 60 s past 10, twice and more
}
