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

// What a fault that reaches the top says: a Fault's message names rank and host already.
inline std::string fault_text(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Fault& e) {
    return e.what();
  } catch (const std::exception& e) {  // c10::Error, std::filesystem_error, std::bad_alloc, ...
    return who() + ": " + message_of(e);
  } catch (...) {
    return who() + ": an exception that is not a std::exception";
  }
}

}  // namespace trident
