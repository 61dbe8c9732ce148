// A stand-in translator for the runtime tests: the "source" is already C++
// written against mlxn_emu_kernel_abi.h, and its kernels are declared by lines
//   // kernel: <host_name> <symbol> [buffers=0,1] [threadgroups=0] [max=256]
// Function constants become `#define MLXN_FC_<index> <bits>` lines.
#include <sstream>

#include "../../../translate.h"

namespace mlxn::emu {

const char* const kCompileFlags[] = {"-w", nullptr};

static std::vector<uint32_t> parse_list(const std::string& s) {
  std::vector<uint32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(uint32_t(std::stoul(item)));
  return out;
}

bool translate(const std::string& source, const std::string& name, const std::vector<FunctionConstant>& constants,
               Translation* out, std::string* error) {
  out->cpp.clear();
  out->kernels.clear();
  for (const FunctionConstant& c : constants)
    out->cpp += "#define MLXN_FC_" + std::to_string(c.index) + " " + std::to_string(c.bits) + "u\n";
  out->cpp += "#line 1 \"" + name + "\"\n" + source;
  std::stringstream lines(source);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string tag = "// kernel:";
    if (line.rfind(tag, 0) != 0) continue;
    std::stringstream ws(line.substr(tag.size()));
    KernelInfo k;
    ws >> k.host_name >> k.symbol;
    std::string opt;
    while (ws >> opt) {
      if (opt.rfind("buffers=", 0) == 0) k.buffer_indices = parse_list(opt.substr(8));
      else if (opt.rfind("threadgroups=", 0) == 0) k.threadgroup_indices = parse_list(opt.substr(13));
      else if (opt.rfind("max=", 0) == 0) k.max_total_threads_per_threadgroup = uint32_t(std::stoul(opt.substr(4)));
    }
    if (k.symbol.empty()) {
      *error = name + ": malformed kernel line: " + line;
      return false;
    }
    out->kernels.push_back(k);
  }
  return true;
}

}  // namespace mlxn::emu
