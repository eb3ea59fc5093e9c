#include "report.h"

#include <iostream>

#include "host_tensor.h"

namespace fa::cli {

void emit_json(const Json& j, bool to_stdout, const std::string& json_file) {
  if (to_stdout) std::cout << j.dump() << "\n" << std::flush;
  if (!json_file.empty()) {
    const std::string text = j.dump(2) + "\n";
    write_atomic(json_file, text.data(), text.size(), "json-file");
  }
}

}  // namespace fa::cli
