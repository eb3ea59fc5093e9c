#include "cli_args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <new>
#include <sstream>

namespace fa::cli {

std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

Args::Args(std::string program, std::vector<FlagSpec> specs)
    : program_(std::move(program)), specs_(std::move(specs)) {}

const FlagSpec* Args::find(const std::string& name) const {
  for (const FlagSpec& s : specs_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) {
      throw UsageError("unexpected argument '" + arg + "': expected --flag or --flag=value (see --help)");
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const FlagSpec* spec = find(name);
    if (!spec) throw UsageError("unknown flag --" + name + " (see --help for the accepted flags)");
    if (spec->kind == FlagKind::kBool) {
      if (has_value) {
        if (value == "1" || value == "true" || value == "on" || value == "yes") {
          values_[name] = "1";
        } else if (value == "0" || value == "false" || value == "off" || value == "no") {
          values_.erase(name);
        } else {
          throw UsageError("--" + name + ": expected no value or true/false, got '" + value + "'");
        }
        continue;
      }
      values_[name] = "1";
      continue;
    }
    if (!has_value) {
      // A following "--flag" is never taken as a value (numbers never start with "--").
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) throw UsageError("--" + name + ": missing value (expected " + spec->value_hint + ")");
      value = argv[++i];
    }
    if (value.empty()) throw UsageError("--" + name + ": empty value (expected " + spec->value_hint + ")");
    values_[name] = value;
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

std::int64_t Args::integer(const std::string& name, std::int64_t fallback, std::int64_t min_value,
                           std::int64_t max_value) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  auto range = [&] {
    return "an integer from " + std::to_string(min_value) + " to " + std::to_string(max_value);
  };
  if (end == text.c_str() || *end != '\0' || errno == ERANGE) {
    throw UsageError("--" + name + ": '" + text + "' is not a number (expected " + range() + ")");
  }
  if (v < min_value || v > max_value) {
    throw UsageError("--" + name + ": " + text + " is out of range (expected " + range() + ")");
  }
  return v;
}

double Args::real(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v)) {
    throw UsageError("--" + name + ": '" + text + "' is not a finite number");
  }
  return v;
}

std::string Args::help_text() const {
  std::ostringstream out;
  out << "usage: " << program_ << " [--flag=value | --flag value] ...\n";
  std::size_t width = 0;
  for (const FlagSpec& s : specs_) {
    width = std::max(width, s.name.size() + (s.value_hint.empty() ? 0 : s.value_hint.size() + 1));
  }
  for (const FlagSpec& s : specs_) {
    std::string left = "--" + s.name + (s.value_hint.empty() ? "" : "=" + s.value_hint);
    out << "  " << left << std::string(width + 4 - left.size() + 2, ' ') << s.help << "\n";
  }
  return out.str();
}

int run_guarded(int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory; use a smaller shape\n";
    return 2;
  }
}

}  // namespace fa::cli
