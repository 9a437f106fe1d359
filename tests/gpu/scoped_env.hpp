#pragma once
// Environment variables set for a scope in the gpu tests (trident reads its TRIDENT_* switches at
// each call, so a test can compare both ways in one process). Restored on the way out, also when
// the test fails or throws in between.
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

// Variable `name` set to `value`, or unset, for this object's life; then as before.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const std::optional<std::string>& value) : name_(std::move(name)) {
    if (const char* set = std::getenv(name_.c_str())) previous_ = set;
    if (value)
      setenv(name_.c_str(), value->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (previous_)
      setenv(name_.c_str(), previous_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> previous_;
};

