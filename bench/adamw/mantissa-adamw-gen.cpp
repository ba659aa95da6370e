//===- mantissa-adamw-gen.cpp - Generate AdamW kernels for a layout -------===//
//
// Builds the fused AdamW update of a benchmark layout (N parameters in M
// members of a mode) and prints it as MLIR, CPU LLVM IR or sm_90 PTX. With
// --emit=gpu it writes <out>.ptx and <out>.meta, the launch description the
// GPU check program (bench/adamw/gpu) reads on a machine without LLVM:
//
//   kernel <name>          the PTX entry
//   grid <blocks>          one block per tile
//   block <threads>
//   amsgrad <0|1>  maximize <0|1>
//   buffer <role> <bytes>  one line per kernel buffer argument, in order
//   member <name> <kind> <count> <grad> <param> <master> <moments>
//                          kind: fp32|master|remainder|bf16; byte offsets
//
// The kernel's arguments are the listed buffers (device pointers) followed by
// the seven floats of AdamWScalars.h.
//
//===----------------------------------------------------------------------===//

#include "AdamWModes.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::mantissa;

static llvm::cl::opt<std::string>
    mode("mode", llvm::cl::desc("fp32, master, remainder, bf16 or mixed"),
         llvm::cl::init("master"));
static llvm::cl::opt<int64_t>
    numParams("n", llvm::cl::desc("Parameters in all"), llvm::cl::init(4099));
static llvm::cl::opt<int64_t> numMembers("members",
                                         llvm::cl::desc("Members of the group"),
                                         llvm::cl::init(1));
static llvm::cl::opt<bool> amsgrad("amsgrad", llvm::cl::desc("AMSGrad"));
static llvm::cl::opt<bool> maximize("maximize",
                                    llvm::cl::desc("Maximize the objective"));
static llvm::cl::opt<std::string>
    emit("emit", llvm::cl::desc("mlir, llvm, ptx or gpu (ptx + meta)"),
         llvm::cl::init("mlir"));
static llvm::cl::opt<std::string>
    output("o", llvm::cl::desc("Output file (prefix for --emit=gpu)"),
           llvm::cl::init("-"));
static llvm::cl::opt<unsigned>
    blockSize("block-size", llvm::cl::desc("GPU threads per block"),
              llvm::cl::init(256));

/// Elements per tile of the update (the artifact's default).
static constexpr int64_t kTileSize = 4096;

static const char *kindName(const AdamWMember &member) {
  switch (member.master) {
  case AdamWMasterKind::FP32:
    return "master";
  case AdamWMasterKind::Remainder:
    return "remainder";
  case AdamWMasterKind::None:
    return member.param == train::DType::fp32 ? "fp32" : "bf16";
  }
  return "?";
}

static bool writeFile(StringRef path, StringRef text) {
  if (path == "-") {
    llvm::outs() << text;
    return true;
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec) {
    llvm::errs() << "cannot write " << path << ": " << ec.message() << "\n";
    return false;
  }
  os << text;
  return true;
}

static std::string describeLaunch(const AdamWGroup &group) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "kernel mantissa_adamw_update_kernel\n";
  // The kernel's tile range is its last two parameters: the whole group.
  os << "tiles " << getAdamWNumTiles(group, kTileSize) << "\n";
  os << "block " << blockSize << "\n";
  os << "amsgrad " << group.amsgrad << "\nmaximize " << group.maximize << "\n";
  static const char *const roles[] = {
      "grad", "param", "master", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (unsigned buffer = 0; buffer < kNumAdamWBuffers; ++buffer) {
    if (buffer == unsigned(AdamWBuffer::Master) && !group.hasMaster())
      continue;
    if (buffer == unsigned(AdamWBuffer::MaxExpAvgSq) && !group.amsgrad)
      continue;
    os << "buffer " << roles[buffer] << " "
       << group.getBufferBytes(AdamWBuffer(buffer)) << "\n";
  }
  for (const AdamWMember &member : group.members)
    os << "member " << member.name << " " << kindName(member) << " "
       << member.count << " " << member.gradOffset << " " << member.paramOffset
       << " " << member.masterOffset << " " << member.momentsOffset << "\n";
  return text;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::ParseCommandLineOptions(
      argc, argv, "Generates the fused AdamW kernel of a group layout\n");

  std::optional<AdamWGroup> group =
      bench::makeModeGroup(mode, numParams, numMembers, amsgrad, maximize);
  if (!group) {
    llvm::errs() << "cannot lay out " << numParams << " parameters of mode '"
                 << mode << "' in " << numMembers << " members\n";
    return 1;
  }

  DialectRegistry registry;
  registerAdamWKernelDialects(registry);
  MLIRContext context(registry);
  bool forGpu = emit == "ptx" || emit == "gpu";
  OwningOpRef<ModuleOp> module =
      buildAdamWKernelModule(&context, *group, "mantissa_adamw_update");
  if (failed(module->verify()))
    return 1;

  if (emit == "mlir") {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    return writeFile(output, text) ? 0 : 1;
  }
  if (emit == "llvm") {
    if (failed(lowerAdamWToLLVMDialect(*module)))
      return 1;
    FailureOr<std::string> llvmIR = translateToLLVMIRText(*module);
    if (failed(llvmIR))
      return 1;
    return writeFile(output, *llvmIR) ? 0 : 1;
  }
  if (forGpu) {
    FailureOr<std::string> ptx =
        compileAdamWToPTX(*module, kTileSize, blockSize);
    if (failed(ptx))
      return 1;
    if (emit == "ptx")
      return writeFile(output, *ptx) ? 0 : 1;
    if (output == "-") {
      llvm::errs() << "--emit=gpu needs -o <prefix>\n";
      return 1;
    }
    return writeFile(output + ".ptx", *ptx) &&
                   writeFile(output + ".meta", describeLaunch(*group))
               ? 0
               : 1;
  }
  llvm::errs() << "unknown --emit=" << emit << "\n";
  return 1;
}
