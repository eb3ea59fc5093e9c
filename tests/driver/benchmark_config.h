// --config FILE for the <version>_benchmark binaries: a run's settings from a
// JSON (.json) or YAML (.yaml, .yml) file, as in the guide's
// long_sequence_config.json and mixed_precision_config.yaml (configs/).
//
// The file becomes command-line flags ("--seq-q=8192", ...) that are parsed
// before the command line's own, so a flag given on the command line wins.
// Keys that mean nothing for one attention call on a CPU (loss scaling,
// fusion lists, a model's layer count) are named in one warning each and
// ignored; unknown keys and values of the wrong type are refused.  Parsed
// by nlohmann::json and yaml-cpp; a malformed file is refused with its line
// and column.
#pragma once

#include <string>
#include <vector>

#include "flash_attention/flash_attention.h"

namespace fa::cli {

struct ConfigFlags {
  std::string file;
  std::vector<std::string> flags;     // "--name=value", in the file's order
  std::vector<std::string> keys;      // flags[i] came from keys[i] ("model_config.seq_len")
  std::vector<std::string> warnings;  // one line each, without the "warning: " prefix
};

enum class ConfigFormat { kJson, kYaml };

// Throws UsageError (one line, naming the file, and the key or the line and
// column) for an unreadable or malformed file, an unknown key, a value of
// the wrong type, or a version other than `version`.  The extension picks
// the format.
ConfigFlags read_benchmark_config(const std::string& path, fa::Version version);
// The same for a file's text (`file` names it in messages).
ConfigFlags parse_benchmark_config(const std::string& text, const std::string& file, ConfigFormat format,
                                   fa::Version version);

// The flags of `config` the command line does not override (a flag the
// command line gives, or one it conflicts with: --async/--no-async,
// --batch-size with --seqlens-kv or --cu-seqlens-*, ...), then the command
// line's own arguments.
std::vector<std::string> merge_config_flags(const ConfigFlags& config, const std::vector<std::string>& command_line);

// `message` (a UsageError's, "--flag: ...") with the config key the flag
// came from, when it came from the file and not from the command line.
std::string name_config_key(const ConfigFlags& config, const std::vector<std::string>& command_line,
                            const std::string& message);

}  // namespace fa::cli
