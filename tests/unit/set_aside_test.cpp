// checkpoint::set_aside_other_runs and the unfinished saves of a checkpoints folder, on files
// named as trident names them (their content does not matter here): what moves where, what is
// removed, and the cases where nothing may move.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "scratch_folder.hpp"

namespace fs = std::filesystem;
using trident::checkpoint::remove_unfinished_saves;
using trident::checkpoint::set_aside_other_runs;
using trident::checkpoint::unfinished_saves;

namespace {

class SetAside : public ScratchFolderTest {
 protected:
  void file(const std::string& name, const std::string& text = "x") {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  std::string text(const std::string& name) const {
    std::ifstream in(dir_ / name);
    std::string t;
    std::getline(in, t);
    return t;
  }
  std::vector<std::string> names(const std::string& sub = "") const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_ / sub)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string d() const { return dir_.string(); }
};

using Names = std::vector<std::string>;

// A file made immutable (chattr +i) for the object's lifetime: no rename moves it, root's neither.
// ok() is false where the file system or the user may not set the flag (the test is skipped).
class Immutable {
 public:
  explicit Immutable(fs::path path) : path_(std::move(path)) { ok_ = set(true); }
  ~Immutable() {
    if (ok_) set(false);
  }
  Immutable(const Immutable&) = delete;
  Immutable& operator=(const Immutable&) = delete;
  bool ok() const { return ok_; }

 private:
  bool set(bool on) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK);
    if (fd < 0) return false;
    int flags = 0;
    bool done = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (done) {
      flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
      done = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    ::close(fd);
    return done;
  }
  fs::path path_;
  bool ok_ = false;
};

}  // namespace

// A fresh start moves every step file and latest into previous/; the next one replaces that set
// (removing it, but a file a user put there) and keeps one start back.
TEST_F(SetAside, FreshStartsMoveEverythingAndKeepOneStartBack) {
  file("step_0000002.h5");
  file("step_0000004.h5");
  file("latest", "step_0000004.h5");
  auto first = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(first.failure, "");
  EXPECT_EQ(first.moved, (Names{"step_0000002.h5", "step_0000004.h5"}));
  EXPECT_TRUE(first.replaced.empty());
  EXPECT_EQ(names(), (Names{"previous"}));
  EXPECT_EQ(names("previous"), (Names{"latest", "step_0000002.h5", "step_0000004.h5"}));
  file("previous/notes.txt", "mine");

  file("step_0000006.h5", "second run");
  auto second = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(second.failure, "");
  EXPECT_EQ(second.moved, (Names{"step_0000006.h5"}));
  EXPECT_EQ(second.replaced, (Names{"step_0000002.h5", "step_0000004.h5"}));
  EXPECT_EQ(names("previous"), (Names{"step_0000006.h5"}));
  // The user's file stays, in the retired folder; the set two starts back is gone.
  EXPECT_EQ(names(), (Names{"previous", "previous.old"}));
  EXPECT_EQ(names("previous.old"), (Names{"notes.txt"}));

  // Next time that folder is in the way: renamed with the time, left as it is, and the set moves.
  file("step_0000008.h5");
  auto third = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(third.failure, "");
  EXPECT_EQ(third.moved, (Names{"step_0000008.h5"}));
  EXPECT_EQ(third.replaced, (Names{"step_0000006.h5"}));
  ASSERT_EQ(third.kept_aside.size(), 1u);
  EXPECT_EQ(third.kept_aside[0].rfind("previous.old.", 0), 0u) << third.kept_aside[0];
  EXPECT_EQ(names(third.kept_aside[0]), (Names{"notes.txt"}));
  EXPECT_EQ(names("previous"), (Names{"step_0000008.h5"}));
}

// A run resuming from the file latest names continues the folder: only later steps move. One
// resuming from a file of previous/ brings it back into the folder.
TEST_F(SetAside, ContinuingMovesOnlyLaterStepsAndAFileOfPreviousComesBack) {
  file("step_0000002.h5");
  file("step_0000004.h5");
  file("step_0000006.h5");
  file("latest", "step_0000004.h5");
  auto later = set_aside_other_runs(d(), 4, d() + "/step_0000004.h5");
  EXPECT_EQ(later.failure, "");
  EXPECT_EQ(later.moved, (Names{"step_0000006.h5"}));
  EXPECT_EQ(names(), (Names{"latest", "previous", "step_0000002.h5", "step_0000004.h5"}));

  auto back = set_aside_other_runs(d(), 6, d() + "/previous/step_0000006.h5");
  EXPECT_EQ(back.failure, "");
  EXPECT_EQ(back.brought_back, "step_0000006.h5");
  EXPECT_EQ(back.moved, (Names{"step_0000002.h5", "step_0000004.h5"}));
  EXPECT_EQ(names(), (Names{"previous", "step_0000006.h5"}));
  EXPECT_EQ(names("previous"), (Names{"latest", "step_0000002.h5", "step_0000004.h5"}));
}

// A run resuming from a file of previous.old (a set two starts back, left by a start interrupted
// while it set checkpoints aside) brings it back too: retiring that set removed the file.
TEST_F(SetAside, AFileOfPreviousOldComesBackAndIsNotRetired) {
  file("step_0000006.h5");
  file("previous/step_0000002.h5");
  file("previous.old/step_0000001.h5");
  file("previous.old/step_0000004.h5", "resumed from");
  auto back = set_aside_other_runs(d(), 4, d() + "/previous.old/step_0000004.h5");
  EXPECT_EQ(back.failure, "");
  EXPECT_EQ(back.brought_back, "step_0000004.h5");
  EXPECT_EQ(text("step_0000004.h5"), "resumed from");
  EXPECT_EQ(back.moved, (Names{"step_0000006.h5"}));
  EXPECT_EQ(back.replaced, (Names{"step_0000001.h5", "step_0000002.h5"}));
  EXPECT_TRUE(back.kept_aside.empty());
  EXPECT_EQ(names(), (Names{"previous", "step_0000004.h5"}));
  EXPECT_EQ(names("previous"), (Names{"step_0000006.h5"}));
}

// What is in the way of the swap (a file named previous, the previous.new of an interrupted
// start) is renamed with the time and left, never removed; the set moves.
TEST_F(SetAside, WhatIsInTheWayIsRenamedAndLeft) {
  file("step_0000002.h5");
  file("latest", "step_0000002.h5");
  file("previous", "a file of the user's");
  file("previous.new/step_0000001.h5", "an interrupted start's");
  auto aside = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(aside.failure, "");
  EXPECT_EQ(aside.moved, (Names{"step_0000002.h5"}));
  ASSERT_EQ(aside.kept_aside.size(), 2u);
  EXPECT_EQ(aside.kept_aside[0].rfind("previous.", 0), 0u);
  EXPECT_EQ(text(aside.kept_aside[0]), "a file of the user's");
  EXPECT_EQ(aside.kept_aside[1].rfind("previous.new.", 0), 0u);
  EXPECT_EQ(names(aside.kept_aside[1]), (Names{"step_0000001.h5"}));
  EXPECT_EQ(names("previous"), (Names{"latest", "step_0000002.h5"}));
  EXPECT_EQ(names().size(), 3u);  // previous and the two set aside
  // A previous.old that is a link to a folder: renamed, and nothing in its target is removed.
  file("elsewhere/step_0000003.h5");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "previous.old");
  file("step_0000004.h5");
  auto linked = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(linked.failure, "");
  EXPECT_EQ(names("elsewhere"), (Names{"step_0000003.h5"}));
  ASSERT_EQ(linked.kept_aside.size(), 1u);
  EXPECT_EQ(linked.kept_aside[0].rfind("previous.old.", 0), 0u);
}

// A previous that is a link to a folder elsewhere (an archive) is renamed and left: nothing in its
// target is removed; a file of it the run resumes from comes back through the renamed link.
TEST_F(SetAside, APreviousLinkIsRenamedAndItsTargetKept) {
  file("archive/step_0000002.h5", "archived");
  file("archive/step_0000004.h5", "archived, resumed from");
  fs::create_directory_symlink(dir_ / "archive", dir_ / "previous");
  file("step_0000006.h5");
  auto aside = set_aside_other_runs(d(), 4, d() + "/previous/step_0000004.h5");
  EXPECT_EQ(aside.failure, "");
  EXPECT_EQ(aside.moved, (Names{"step_0000006.h5"}));
  EXPECT_EQ(aside.brought_back, "step_0000004.h5");
  EXPECT_TRUE(aside.replaced.empty());
  EXPECT_EQ(names("archive"), (Names{"step_0000002.h5"}));
  EXPECT_EQ(text("step_0000004.h5"), "archived, resumed from");
  EXPECT_EQ(names("previous"), (Names{"step_0000006.h5"}));
  ASSERT_EQ(aside.kept_aside.size(), 1u);
  EXPECT_TRUE(fs::is_symlink(dir_ / aside.kept_aside[0]));
}

// Unfinished saves are listed (without the lock) or removed (with it), but the file a run resumes from.
TEST_F(SetAside, UnfinishedSavesAreListedOrRemovedButTheOneResumedFrom) {
  file("step_0000002.h5.tmp");
  file("step_0000004.h5.tmp");
  file("latest.tmp");
  file("step_0000002.h5");
  EXPECT_EQ(unfinished_saves(d(), d() + "/step_0000004.h5.tmp"),
            (Names{"latest.tmp (0.0 MiB)", "step_0000002.h5.tmp (0.0 MiB)"}));
  EXPECT_EQ(names(), (Names{"latest.tmp", "step_0000002.h5", "step_0000002.h5.tmp", "step_0000004.h5.tmp"}));
  EXPECT_EQ(remove_unfinished_saves(d(), d() + "/step_0000004.h5.tmp"),
            (Names{"latest.tmp (0.0 MiB)", "step_0000002.h5.tmp (0.0 MiB)"}));
  EXPECT_EQ(names(), (Names{"step_0000002.h5", "step_0000004.h5.tmp"}));
}

// A move that fails (a file that cannot be renamed) puts back what had moved and what was renamed
// out of the way, and removes nothing: the start is refused, and the folder is as it was.
TEST_F(SetAside, AFailedMovePutsEverythingBack) {
  file("step_0000002.h5", "two");
  file("step_0000004.h5", "four");
  file("step_0000006.h5", "six");
  file("latest", "step_0000006.h5");
  file("step_0000008.h5.tmp");
  file("previous/step_0000001.h5", "one start back");
  file("previous.new/step_0000003.h5", "an interrupted start's");
  file("previous.old/step_0000005.h5", "two starts back");
  const Names before = names();
  Immutable stuck(dir_ / "step_0000004.h5");
  if (!stuck.ok()) GTEST_SKIP() << "this user or file system cannot make a file immutable";
  auto aside = set_aside_other_runs(d(), 0, "");
  EXPECT_EQ(aside.failure.rfind("moving step_0000004.h5 into " + d() + "/previous.new failed (", 0), 0u)
      << aside.failure;
  EXPECT_NE(aside.failure.find("; nothing was moved"), std::string::npos) << aside.failure;
  EXPECT_TRUE(aside.moved.empty());
  EXPECT_TRUE(aside.replaced.empty());
  EXPECT_TRUE(aside.kept_aside.empty());
  EXPECT_EQ(names(), before);
  EXPECT_EQ(text("step_0000002.h5"), "two");
  EXPECT_EQ(text("latest"), "step_0000006.h5");
  EXPECT_EQ(names("previous"), (Names{"step_0000001.h5"}));
  EXPECT_EQ(text("previous.new/step_0000003.h5"), "an interrupted start's");
  EXPECT_EQ(text("previous.old/step_0000005.h5"), "two starts back");
}

// The file a run resumes from, in previous/, that cannot come back: the same.
TEST_F(SetAside, AFailedBringBackPutsEverythingBack) {
  file("step_0000002.h5");
  file("step_0000006.h5");
  file("latest", "step_0000006.h5");
  file("previous/step_0000004.h5", "resumed from");
  file("previous.old/step_0000001.h5");
  const Names before = names();
  Immutable stuck(dir_ / "previous" / "step_0000004.h5");
  if (!stuck.ok()) GTEST_SKIP() << "this user or file system cannot make a file immutable";
  auto aside = set_aside_other_runs(d(), 4, d() + "/previous/step_0000004.h5");
  EXPECT_EQ(aside.failure.rfind("moving " + d() + "/previous/step_0000004.h5 back into " + d() + " failed (", 0), 0u)
      << aside.failure;
  EXPECT_TRUE(aside.brought_back.empty());
  EXPECT_TRUE(aside.moved.empty());
  EXPECT_EQ(names(), before);
  EXPECT_EQ(names("previous"), (Names{"step_0000004.h5"}));
  EXPECT_EQ(names("previous.old"), (Names{"step_0000001.h5"}));
  EXPECT_EQ(text("latest"), "step_0000006.h5");
}
