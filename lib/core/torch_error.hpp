#pragma once
// An exception's message for a user. LibTorch appends a C++ stack trace to what() (LibTorch 1.13
// always), which helps no user; c10::Error keeps the message without it.
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#include "core/error.hpp"

namespace trident {

inline const char* message_of(const std::exception& e) {
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&e)) return torch_error->what_without_backtrace();
  return e.what();
}

}  // namespace trident
