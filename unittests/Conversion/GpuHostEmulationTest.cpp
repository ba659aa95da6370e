//===- GpuHostEmulationTest.cpp - Barriers in the host emulation ----------===//
//
// The host emulation of a lockstep kernel with workgroup memory runs the
// block's warps one after the other between barriers (GpuHostEmulation.cpp),
// so that a kernel that lacks a barrier computes something else there: these
// kernels exchange values between the warps of a block through workgroup
// memory, with and without the barriers they need, in a loop whose steps
// reuse the memory.
//
//===----------------------------------------------------------------------===//

#include "../../lib/Conversion/TrainToGPU/Codegen/GpuAttentionKernels.h"
#include "../../lib/Conversion/TrainToGPU/Codegen/GpuKernels.h"
#include "GpuEmulationTestSupport.h"
#include "mantissa/Conversion/TrainToGPU.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "gtest/gtest.h"

#include <dlfcn.h>
#include <vector>

using namespace mlir;
using namespace mlir::mantissa;

namespace {

/// Threads of the block: two warps.
constexpr int64_t kThreads = 64;
/// Steps of the kernels' loop.
constexpr int64_t kSteps = 3;

class GpuHostEmulationTest : public GpuEmulationTest {
protected:
  /// Each step s of the loop: thread t writes 1000 s + t to word t of the
  /// block's workgroup memory, then reads word (t + 32) % 64 (the other
  /// warp's) into out[s][t]; with a barrier between the write and the read
  /// where `afterWrite`, and at the end of the step where `afterRead`.
  /// Returns out as the host emulation computes it.
  std::vector<int32_t> run(bool afterWrite, bool afterRead) {
    Location loc = UnknownLoc::get(&context);
    OwningOpRef<ModuleOp> container = ModuleOp::create(loc);
    (*container)
        ->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                  UnitAttr::get(&context));
    OpBuilder b = OpBuilder::atBlockEnd(container->getBody());
    auto gpuModule = b.create<gpu::GPUModuleOp>(loc, "exchange");
    b = getModuleEndBuilder(gpuModule);
    Type i32 = b.getI32Type();
    auto kernel = b.create<gpu::GPUFuncOp>(
        loc, "exchange",
        b.getFunctionType({MemRefType::get({kSteps * kThreads}, i32)}, {}));
    kernel->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    kernel->setAttr(kWarpLockstepAttr, b.getUnitAttr());
    Value shared = kernel.addWorkgroupAttribution(
        MemRefType::get(
            {kThreads}, i32, AffineMap(),
            gpu::AddressSpaceAttr::get(&context, gpu::AddressSpace::Workgroup)),
        loc);
    Block &entry = kernel.getBody().front();
    b.setInsertionPointToStart(&entry);
    auto index = [&](int64_t value) {
      return b.create<arith::ConstantIndexOp>(loc, value).getResult();
    };
    Value thread = b.create<gpu::ThreadIdOp>(loc, gpu::Dimension::x);
    Value other = b.create<arith::RemUIOp>(
        loc, b.create<arith::AddIOp>(loc, thread, index(32)), index(kThreads));
    auto steps = b.create<scf::ForOp>(loc, index(0), index(kSteps), index(1));
    b.create<gpu::ReturnOp>(loc);
    b.setInsertionPoint(steps.getBody()->getTerminator());
    Value step = steps.getInductionVar();
    Value written = b.create<arith::AddIOp>(
        loc, b.create<arith::MulIOp>(loc, step, index(1000)), thread);
    b.create<memref::StoreOp>(
        loc, b.create<arith::IndexCastOp>(loc, i32, written), shared, thread);
    if (afterWrite)
      b.create<gpu::BarrierOp>(loc);
    Value read = b.create<memref::LoadOp>(loc, shared, other);
    b.create<memref::StoreOp>(
        loc, read, entry.getArgument(0),
        ValueRange{b.create<arith::AddIOp>(
            loc, b.create<arith::MulIOp>(loc, step, index(kThreads)), thread)});
    if (afterRead)
      b.create<gpu::BarrierOp>(loc);
    EXPECT_TRUE(succeeded(verify(*container))) << diagnostics;

    std::vector<int32_t> out(kSteps * kThreads, 0);
    void *handle = loadEmulatedKernels(gpuModule);
    if (!handle)
      return out;
    using Host = void (*)(void **, int64_t, int64_t);
    auto entryPoint = reinterpret_cast<Host>(dlsym(handle, "exchange_host"));
    EXPECT_NE(entryPoint, nullptr);
    if (entryPoint) {
      void *buffer = out.data();
      void *params[] = {&buffer};
      entryPoint(params, /*grid=*/1, kThreads);
    }
    dlclose(handle);
    return out;
  }

  /// What the GPU computes with both barriers.
  static std::vector<int32_t> exchanged() {
    std::vector<int32_t> out;
    for (int64_t step = 0; step < kSteps; ++step)
      for (int64_t thread = 0; thread < kThreads; ++thread)
        out.push_back(int32_t(1000 * step + (thread + 32) % kThreads));
    return out;
  }
};

/// With both barriers every thread reads what the other warp wrote in the
/// same step.
TEST_F(GpuHostEmulationTest, BarriersOrderTheWarps) {
  EXPECT_EQ(run(/*afterWrite=*/true, /*afterRead=*/true), exchanged());
}

/// Without the barrier between the write and the read, the first warp
/// reads the second's words before the second has written them: every bit
/// set, as workgroup memory starts (or the last step's values).
TEST_F(GpuHostEmulationTest, AMissingBarrierBeforeAReadShows) {
  std::vector<int32_t> out = run(/*afterWrite=*/false, /*afterRead=*/true);
  ASSERT_EQ(out.size(), size_t(kSteps * kThreads));
  EXPECT_EQ(out[0], -1);
  EXPECT_NE(out, exchanged());
}

/// Without the barrier at the end of a step, the first warp goes on to
/// the next step's write before the second has read this step's words:
/// the second reads the next step's values.
TEST_F(GpuHostEmulationTest, AMissingBarrierAtTheEndOfAStepShows) {
  std::vector<int32_t> out = run(/*afterWrite=*/true, /*afterRead=*/false);
  std::vector<int32_t> want = exchanged();
  ASSERT_EQ(out.size(), want.size());
  // The second warp's reads in the first step: the first warp's words of
  // the second.
  EXPECT_EQ(out[32], 1000 + 0);
  EXPECT_EQ(want[32], 0);
  // The last step has no next one.
  EXPECT_TRUE(
      std::equal(out.end() - kThreads, out.end(), want.end() - kThreads));
}

} // namespace
