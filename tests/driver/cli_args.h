// The command-line parser shared by every driver (benchmarks, test runners).
//
// Flags are declared in a table; both `--flag=value` and `--flag value` are
// accepted.  Every problem raises UsageError with one line naming the flag and
// what was expected; drivers print it and exit with status 2.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
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

// "N1,N2,..." as token counts (0 ... 2^30), each accepted by `ok(value,
// the counts before it)`; else one line naming --flag, the whole list and
// `expected`.
template <class Ok>
std::vector<std::int32_t> parse_count_list(const std::string& text, const char* flag, const char* expected, Ok&& ok) {
  std::vector<std::int32_t> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v > (1L << 30) || !ok(v, out)) {
      throw UsageError(std::string("--") + flag + ": '" + text + "' is not " + expected);
    }
    out.push_back(static_cast<std::int32_t>(v));
    pos = comma + 1;
  }
  return out;
}


// main() of a program: run(argc, argv), a usage error or a failed
// allocation printed as one line with exit status 2.
int run_guarded(int (*run)(int, char**), int argc, char** argv);

}  // namespace fa::cli
