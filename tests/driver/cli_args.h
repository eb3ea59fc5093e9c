// The command-line parser shared by every driver (benchmarks, test runners).
//
// Flags are declared in a table; both `--flag=value` and `--flag value` are
// accepted.  Every problem raises UsageError with one line naming the flag and
// what was expected; drivers print it and exit with status 2.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa::cli {

// `text` with its control characters written as escapes (\n, \t, \xNN), so
// a message quoting what the user typed stays one line.
std::string printable(const std::string& text);

struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& message) : std::runtime_error(printable(message)) {}
};

enum class FlagKind { kBool, kString, kInt, kFloat };

struct FlagSpec {
  std::string name;  // without the leading "--"
  FlagKind kind;
  std::string value_hint;  // e.g. "N", "PATH", "fp16|bf16|fp32"
  std::string help;
};

class Args {
 public:
  Args(std::string program, std::vector<FlagSpec> specs);

  // Parses argv; throws UsageError.
  void parse(int argc, char** argv);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  bool flag(const std::string& name) const { return has(name); }
  std::string str(const std::string& name, const std::string& fallback = "") const;
  // Integers: non-negative unless allow_negative; range-checked.
  std::int64_t integer(const std::string& name, std::int64_t fallback, std::int64_t min_value,
                       std::int64_t max_value) const;
  double real(const std::string& name, double fallback) const;

  std::string help_text() const;

 private:
  const FlagSpec* find(const std::string& name) const;

  std::string program_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
};

// main() of a program: run(argc, argv), a usage error or a failed
// allocation printed as one line with exit status 2.
int run_guarded(int (*run)(int, char**), int argc, char** argv);

}  // namespace fa::cli
