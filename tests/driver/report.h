// The benchmark binaries' results for scripts: one JSON object per run,
// built with nlohmann::json (keys in the order they are set), printed on one
// line with --json and written, indented, to --json-file=PATH (atomically:
// a failed run leaves no file).  The text lines for people stay in each
// benchmark; both come from the same values.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace fa::cli {

using Json = nlohmann::ordered_json;

// `j` on one line on stdout when `to_stdout`, and into `json_file` when it
// is not empty.
void emit_json(const Json& j, bool to_stdout, const std::string& json_file);

}  // namespace fa::cli
