#include "benchmark_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "cli_args.h"
#include "report.h"

namespace fa::cli {
namespace {

std::string line_column(std::size_t line, std::size_t column) {
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// A parsed file: its values, and (for YAML) where each key path sits.
struct Tree {
  std::string file;
  Json root;
  std::map<std::string, std::string> where;
};

// nlohmann's parse errors give the byte offset; people read lines and columns.
std::string json_position(const std::string& text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return line_column(line, column);
}

std::string mark_of(const YAML::Node& node) { return line_column(node.Mark().line + 1, node.Mark().column + 1); }

// The YAML tree as JSON values; `tree.where` gets each key's (and list
// item's) position.
Json from_yaml(const YAML::Node& node, const std::string& path, Tree& tree) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: {
      if (node.Tag() == "!") return node.Scalar();  // quoted: always a string
      bool b;
      if (YAML::convert<bool>::decode(node, b)) return b;
      long long i;
      if (YAML::convert<long long>::decode(node, i)) return i;
      double d;
      if (YAML::convert<double>::decode(node, d)) return d;
      return node.Scalar();
    }
    case YAML::NodeType::Sequence: {
      Json list = Json::array();
      for (std::size_t i = 0; i < node.size(); ++i) {
        const std::string item = path + "[" + std::to_string(i) + "]";
        tree.where[item] = mark_of(node[i]);
        list.push_back(from_yaml(node[i], item, tree));
      }
      return list;
    }
    case YAML::NodeType::Map: {
      Json object = Json::object();
      for (const auto& item : node) {
        const std::string key = item.first.as<std::string>();
        const std::string child = path.empty() ? key : path + "." + key;
        if (object.contains(key)) {
          throw UsageError("--config " + tree.file + ": " + child + " (" + mark_of(item.first) + "): duplicate key");
        }
        tree.where[child] = mark_of(item.first);
        object[key] = from_yaml(item.second, child, tree);
      }
      return object;
    }
    default:
      return nullptr;
  }
}

ConfigFormat format_of(const std::string& path) {
  const auto dot = path.find_last_of('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (ext == "json") return ConfigFormat::kJson;
  if (ext == "yaml" || ext == "yml") return ConfigFormat::kYaml;
  throw UsageError("--config: '" + path + "' is neither .json nor .yaml/.yml (the extension picks the parser)");
}

Tree parse_text(const std::string& text, const std::string& path, ConfigFormat format) {
  Tree tree;
  tree.file = path;
  if (format == ConfigFormat::kJson) {
    try {
      tree.root = Json::parse(text);
    } catch (const Json::parse_error& e) {
      // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: <why>".
      std::string why = e.what();
      if (const auto colon = why.find(": "); colon != std::string::npos) why = why.substr(colon + 2);
      throw UsageError("--config " + path + ": malformed JSON at " + json_position(text, e.byte) + ": " + why);
    } catch (const Json::exception& e) {  // a number too large for any type, and the like: no position
      std::string why = e.what();
      if (const auto bracket = why.find("] "); bracket != std::string::npos) why = why.substr(bracket + 2);
      throw UsageError("--config " + path + ": malformed JSON: " + why);
    }
  } else {
    try {
      tree.root = from_yaml(YAML::Load(text), "", tree);
    } catch (const YAML::Exception& e) {
      throw UsageError("--config " + path + ": malformed YAML at " + line_column(e.mark.line + 1, e.mark.column + 1) +
                       ": " + e.msg);
    }
  }
  if (!tree.root.is_object()) throw UsageError("--config " + path + ": expected an object of sections at the top level");
  return tree;
}

// Walks a parsed file against the keys this tool knows, collecting flags and warnings.
class ConfigReader {
 public:
  ConfigReader(const Tree& tree, fa::Version version) : tree_(tree), version_(version) {}

  using Handler = std::function<void(const Json&, const std::string&)>;
  struct Key {
    const char* name;
    Handler take;
  };

  ConfigFlags read() {
    const std::vector<Key> top = {
        {"task", text()},
        {"model_config", section({{"batch_size", int_flag("batch-size")},
                                  {"seq_len", int_flag("seq-q")},  // --seq-kv follows unless seq_len_kv says otherwise
                                  {"seq_len_kv", int_flag("seq-kv")},
                                  {"num_heads", int_flag("num-heads")},
                                  {"num_kv_heads", int_flag("num-kv-heads")},
                                  {"head_dim", int_flag("head-dim")},
                                  {"dtype", string_flag("dtype")},
                                  {"layout", string_flag("layout")}})},
        {"flash_attention_config", section(attention_keys())},
        {"flash_attention", section(attention_keys())},
        {"memory_optimization",
         section({{"enable_paged_attention", bool_flag("paged")},
                  {"block_size", int_flag("block-size")},
                  {"kv_cache_dtype", [this](const Json& v, const std::string& path) { kv_cache_dtype(v, path); }},
                  {"max_kv_cache_length",
                   meaningless("the cache holds --seq-kv keys; its capacity is not a setting of one call")},
                  {"preallocate_kv_cache", meaningless("the benchmark allocates its cache before the timed runs")}})},
        {"profiling",
         section({{"enable", [this](const Json& v, const std::string& path) {
                     profile_ = boolean(v, path);
                     profile_path_ = path;
                   }},
                  {"output_dir", [this](const Json& v, const std::string& path) { profile_dir_ = string(v, path); }},
                  {"trace_level", [this](const Json& v, const std::string& path) {
                     const std::string level = string(v, path);
                     if (level != "summary" && level != "detail") fail(path, "expected summary or detail, got '" + level + "'");
                     if (level == "detail") {
                       warn(path, "the trace holds each work item and its stages' totals; per-step laps are not "
                                  "recorded (detail reads as summary)");
                     }
                   }},
                  {"include_tc_utilization",
                   meaningless("no tensor cores on a CPU; the run's Utilization against the measured peak is in its "
                               "text lines and --json")},
                  {"include_memory_timeline", [this](const Json& v, const std::string& path) {
                     if (!boolean(v, path)) warn(path, "the trace always has its memory counter (false is ignored)");
                   }}})},
        {"model", section({{"name", text()},
                           {"num_layers", meaningless("one attention call is one layer's")},
                           {"hidden_size", [this](const Json& v, const std::string& path) {
                              hidden_size_ = integer(v, path, 1);
                              hidden_size_path_ = path;
                            }},
                           {"num_heads", int_flag("num-heads")},
                           {"num_kv_heads", int_flag("num-kv-heads")},
                           {"head_dim", int_flag("head-dim")},
                           {"batch_size", int_flag("batch-size")},
                           {"seq_len", int_flag("seq-q")}})},
        {"precision_strategy",
         section({{"attention_compute", section({{"dtype", string_flag("dtype")},
                                                 {"softmax_dtype", [this](const Json& v, const std::string& path) {
                                                    softmax_dtype(v, path);
                                                  }},
                                                 {"description", text()}})},
                  {"gemm_compute", meaningless("the projections' GEMMs are outside the attention operator")},
                  {"accumulation", section({{"dtype", [this](const Json& v, const std::string& path) {
                                               if (string(v, path) != "fp32") {
                                                 fail(path, "accumulation is always fp32 here (got '" + v.get<std::string>() + "')");
                                               }
                                             }},
                                            {"cast_back", [this](const Json& v, const std::string& path) {
                                               cast_back_ = string(v, path);
                                               cast_back_path_ = path;
                                             }},
                                            {"description", text()}})},
                  {"layer_overrides", meaningless("one attention call has no layers to override")}})},
        {"loss_scaling", meaningless("loss scaling belongs to training; a forward pass has no loss")},
        {"performance", section({{"enable_async_kernel", bool_flag("async")},
                                 {"enable_kernel_fusion", meaningless("no graph here to fuse operators in")},
                                 {"fusion_list", meaningless("no graph here to fuse operators in")},
                                 {"memory_efficient_attention", [this](const Json& v, const std::string& path) {
                                    if (!boolean(v, path)) {
                                      warn(path, "FlashAttention is memory-efficient attention; false is ignored");
                                    }
                                  }}})},
    };
    walk(tree_.root, "", top);
    finish();
    return out_;
  }

 private:
  std::vector<Key> attention_keys() {
    return {{"version", [this](const Json& v, const std::string& path) {
               const std::int64_t n = integer(v, path, 1);
               if (n > 3) fail(path, std::to_string(n) + " is not a FlashAttention version (expected 1, 2 or 3)");
               if (n != static_cast<int>(version_)) {
                 fail(path, "the file asks for FlashAttention-" + std::to_string(n) + "; this is fa" +
                                std::to_string(static_cast<int>(version_)) + "_benchmark (run fa" + std::to_string(n) +
                                "_benchmark, or change the version)");
               }
             }},
            {"tile_q", tile_flag("tile-q")},
            {"tile_kv", tile_flag("tile-kv")},
            {"enable_async", bool_flag("async")},
            {"causal", bool_flag("causal")},
            {"num_splits", int_flag("num-splits")},
            {"dropout", [this](const Json& v, const std::string& path) {
               const double p = number(v, path);
               if (!(p >= 0.0 && p < 1.0)) fail(path, "a dropout probability in [0, 1) was expected");
               if (p > 0.0) add(path, "keep-prob", format(1.0 - p));
             }},
            {"description", text()}};
  }

  Handler section(std::vector<Key> keys) {
    return [this, keys](const Json& v, const std::string& path) {
      if (!v.is_object()) fail(path, "expected a section (an object of keys)");
      walk(v, path, keys);
    };
  }
  Handler text() {
    return [this](const Json& v, const std::string& path) { string(v, path); };
  }
  Handler meaningless(const std::string& why) {
    return [this, why](const Json&, const std::string& path) { warn(path, why + " (ignored)"); };
  }
  Handler int_flag(const std::string& flag) {
    return [this, flag](const Json& v, const std::string& path) { add(path, flag, std::to_string(integer(v, path, 0))); };
  }
  Handler tile_flag(const std::string& flag) {
    return [this, flag](const Json& v, const std::string& path) {
      add(path, flag, v.is_string() ? v.get<std::string>() : std::to_string(integer(v, path, 0)));
    };
  }
  Handler bool_flag(const std::string& flag) {
    return [this, flag](const Json& v, const std::string& path) { add(path, flag, boolean(v, path) ? "true" : "false"); };
  }
  Handler string_flag(const std::string& flag) {
    return [this, flag](const Json& v, const std::string& path) { add(path, flag, string(v, path)); };
  }

  void walk(const Json& object, const std::string& prefix, const std::vector<Key>& keys) {
    for (const auto& item : object.items()) {  // (no structured binding: clang 14 cannot capture one)
      const std::string& name = item.key();
      const Json& value = item.value();
      const std::string path = prefix.empty() ? name : prefix + "." + name;
      const auto key = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return name == k.name; });
      if (key == keys.end()) {
        std::string known;
        for (const Key& k : keys) known += (known.empty() ? "" : ", ") + std::string(k.name);
        fail(path, "unknown key (expected one of: " + known + ")");
      }
      key->take(value, path);
    }
  }

  void kv_cache_dtype(const Json& v, const std::string& path) {
    const std::string name = string(v, path);
    if (name == "int8" || name == "fp8_e4m3" || name == "fp8_e5m2") {
      add(path, "kv-dtype", name);
    } else if (name != "fp16" && name != "bf16" && name != "fp32") {
      fail(path, "'" + name + "' is not a K/V cache dtype (expected the inputs' dtype, int8, fp8_e4m3 or fp8_e5m2)");
    } else {
      kv_same_as_ = name;
      kv_same_path_ = path;
    }
  }

  void softmax_dtype(const Json& v, const std::string& path) {
    const std::string name = string(v, path);
    if (name == "fp32") return;
    if (name != "fp16" && name != "bf16") fail(path, "'" + name + "' is not fp32, fp16 or bf16");
    warn(path, "the softmax runs in fp32 on every path (an FA_MIXED_PRECISION_SOFTMAX=OFF build takes fp16 inputs' "
               "exponentials in fp16, after subtracting the max in fp32); " + name + " is ignored");
  }

  // Checks that need more than one key.
  void finish() {
    if (profile_) add(profile_path_, "profile", profile_dir_);
    const std::string dtype = value_of("dtype").value_or("fp16");
    if (!kv_same_as_.empty() && kv_same_as_ != dtype) {
      fail(kv_same_path_, "'" + kv_same_as_ + "' differs from the inputs' dtype '" + dtype +
                              "' (a 16-bit cache is read in the inputs' dtype; quantized: int8, fp8_e4m3, fp8_e5m2)");
    }
    if (!cast_back_.empty() && cast_back_ != dtype) {
      warn(cast_back_path_, "the output is written in the inputs' dtype (" + dtype + "), not " + cast_back_ + " (ignored)");
    }
    if (hidden_size_ > 0) {
      const auto heads = value_of("num-heads"), dim = value_of("head-dim");
      if (heads && dim && std::stoll(*heads) * std::stoll(*dim) != hidden_size_) {
        fail(hidden_size_path_, std::to_string(hidden_size_) + " is not num_heads x head_dim = " + *heads + " x " + *dim);
      }
    }
  }

  std::optional<std::string> value_of(const std::string& flag) const {
    std::optional<std::string> found;
    const std::string prefix = "--" + flag + "=";
    for (const std::string& f : out_.flags) {
      if (f.rfind(prefix, 0) == 0) found = f.substr(prefix.size());
    }
    return found;
  }

  void add(const std::string& path, const std::string& flag, const std::string& value) {
    out_.flags.push_back("--" + flag + "=" + value);
    out_.keys.push_back(path);
  }
  void warn(const std::string& path, const std::string& why) { out_.warnings.push_back(tree_.file + ": " + path + where(path) + ": " + why); }
  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw UsageError("--config " + tree_.file + ": " + path + where(path) + ": " + why);
  }
  std::string where(const std::string& path) const {
    const auto it = tree_.where.find(path);
    return it == tree_.where.end() ? "" : " (" + it->second + ")";
  }

  std::int64_t integer(const Json& v, const std::string& path, std::int64_t min) const {
    if (!v.is_number_integer()) fail(path, "expected an integer, got " + shown(v));
    const std::int64_t n = v.get<std::int64_t>();
    if (n < min) fail(path, "expected an integer >= " + std::to_string(min) + ", got " + std::to_string(n));
    return n;
  }
  double number(const Json& v, const std::string& path) const {
    if (!v.is_number()) fail(path, "expected a number, got " + shown(v));
    return v.get<double>();
  }
  bool boolean(const Json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(path, "expected true or false, got " + shown(v));
    return v.get<bool>();
  }
  std::string string(const Json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, "expected a string, got " + shown(v));
    return v.get<std::string>();
  }
  // A value in a message: JSON text, cut short, never throwing on bytes
  // that are not UTF-8.
  static std::string shown(const Json& v) {
    std::string text = json_text(v);
    return text.size() > 60 ? text.substr(0, 57) + "..." : text;
  }
  static std::string format(double x) {
    std::ostringstream s;
    s.precision(17);
    s << x;
    return s.str();
  }

  const Tree& tree_;
  fa::Version version_;
  ConfigFlags out_;
  std::string kv_same_as_, kv_same_path_, cast_back_, cast_back_path_, hidden_size_path_;
  std::int64_t hidden_size_ = 0;
  bool profile_ = false;
  std::string profile_path_, profile_dir_ = "./profiling_results";
};

std::string flag_name(const std::string& arg) {
  const std::string body = arg.rfind("--", 0) == 0 ? arg.substr(2) : arg;
  return body.substr(0, body.find('='));
}

}  // namespace

ConfigFlags parse_benchmark_config(const std::string& text, const std::string& file, ConfigFormat format,
                                   fa::Version version) {
  const Tree tree = parse_text(text, file, format);
  ConfigFlags flags = ConfigReader(tree, version).read();
  flags.file = file;
  return flags;
}

ConfigFlags read_benchmark_config(const std::string& path, fa::Version version) {
  const ConfigFormat format = format_of(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--config: cannot open '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw UsageError("--config: cannot read '" + path + "'");
  return parse_benchmark_config(buffer.str(), path, format, version);
}

std::vector<std::string> merge_config_flags(const ConfigFlags& config, const std::vector<std::string>& command_line) {
  // A config flag is dropped when the command line gives it, or a flag that
  // cannot be combined with it.
  static const std::map<std::string, std::vector<std::string>> kConflicts = {
      {"async", {"no-async"}},
      {"batch-size", {"seqlens-kv", "cu-seqlens-q", "cu-seqlens-kv"}},
      {"seq-q", {"cu-seqlens-q", "cu-seqlens-kv"}},
      {"seq-kv", {"cu-seqlens-q", "cu-seqlens-kv"}},
      {"causal", {"sparse-mode"}},
  };
  std::set<std::string> given;
  for (const std::string& arg : command_line) {
    if (arg.rfind("--", 0) == 0) given.insert(flag_name(arg));
  }
  std::vector<std::string> merged;
  for (const std::string& f : config.flags) {
    const std::string name = flag_name(f);
    bool overridden = given.count(name) != 0;
    if (const auto it = kConflicts.find(name); it != kConflicts.end()) {
      for (const std::string& other : it->second) overridden = overridden || given.count(other) != 0;
    }
    if (!overridden) merged.push_back(f);
  }
  merged.insert(merged.end(), command_line.begin(), command_line.end());
  return merged;
}

std::string name_config_key(const ConfigFlags& config, const std::vector<std::string>& command_line,
                            const std::string& message) {
  if (message.rfind("--", 0) != 0) return message;
  const std::string name = flag_name(message.substr(0, message.find_first_of(": ")));
  for (const std::string& arg : command_line) {
    if (arg.rfind("--", 0) == 0 && flag_name(arg) == name) return message;
  }
  for (std::size_t i = config.flags.size(); i-- > 0;) {
    if (flag_name(config.flags[i]) == name) return message + " (from --config " + config.file + ": " + config.keys[i] + ")";
  }
  return message;
}

}  // namespace fa::cli
