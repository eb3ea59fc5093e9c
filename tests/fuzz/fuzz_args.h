// What the command-line harnesses share: a fuzz input as an argv (the bytes
// split at NUL into arguments after the program name), and the contract's
// check on a UsageError: one line, saying something.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "driver/cli_args.h"

namespace fa::fuzz {

struct Argv {
  std::vector<std::string> storage;
  std::vector<char*> pointers;

  Argv(const char* program, const std::uint8_t* data, std::size_t size) {
    storage.emplace_back(program);
    std::string current;
    for (std::size_t i = 0; i < size; ++i) {
      if (data[i] == 0) {
        storage.push_back(current);
        current.clear();
      } else {
        current.push_back(static_cast<char>(data[i]));
      }
    }
    if (!current.empty()) storage.push_back(current);
    for (std::string& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(pointers.size()) - 1; }
  char** argv() { return pointers.data(); }
};

// The one-line rule of the tools' refusals; a breach is a crash, which the
// fuzzer reports with its input.
inline void check_usage_error(const cli::UsageError& e) {
  const char* what = e.what();
  if (what[0] == '\0' || std::strchr(what, '\n') != nullptr) std::abort();
}

}  // namespace fa::fuzz
