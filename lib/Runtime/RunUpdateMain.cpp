//===- RunUpdateMain.cpp - Choosing ranks for the update path -------------===//
//
// Part of the Mantissa project. In mantissa_rt_run, which links MPI when CMake
// found it (MANTISSA_HAVE_MPI); libmantissa_rt never does.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/OpenMPEnvironment.h"
#include "mantissa/Runtime/StopSignals.h"
#include "mantissa/Runtime/UpdateRunner.h"

#ifdef MANTISSA_HAVE_MPI
#include "mantissa/Runtime/CommunicatorMPI.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

/// The communicator of the launch, before the thread split.
std::unique_ptr<Communicator> launchCommunicator(std::string &error) {
#ifdef MANTISSA_HAVE_MPI
  if (launchedByMPI())
    return createMPICommunicator(error);
#endif
  // torchrun's environment; without MPI there is no collective transport
  // between its processes yet, so only a world of one can run.
  const char *worldSize = std::getenv("WORLD_SIZE");
  if (worldSize && std::atoi(worldSize) > 1) {
    error = std::string("WORLD_SIZE=") + worldSize +
            " (torchrun) but this runtime has no collective transport "
            "without MPI; launch with mpirun -np " +
            worldSize + " instead";
    return nullptr;
  }
  return createSingleRankCommunicator();
}

} // namespace

std::unique_ptr<Communicator>
mlir::mantissa::rt::createLaunchCommunicator(std::string &threads,
                                             std::string &error) {
  std::unique_ptr<Communicator> communicator = launchCommunicator(error);
  if (!communicator)
    return nullptr;
  ThreadSplit split;
  if (!applyThreadSplit(*communicator, split, error))
    return nullptr;
  std::string warning = threadSplitWarning(split);
  if (communicator->rank() == 0 && !warning.empty())
    std::fprintf(stderr, "mantissa-run: warning: %s\n", warning.c_str());
  threads = describeThreadSplit(split);
  return communicator;
}

int mlir::mantissa::rt::runUpdateMain(int argc, char **argv) {
  ignoreFileSizeSignal();
  TrainerOptions options;
  std::string error;
  // First: nothing may start an OpenMP thread team before it is checked.
  if (!checkOpenMPEnvironment(error)) {
    std::fprintf(stderr, "mantissa-run: error: %s\n", error.c_str());
    return 1;
  }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf(
          "usage: mantissa-run DIR (--data TOKENS.bin | --inputs "
          "INPUTS.safetensors | --grads GRADS.safetensors) [--weights "
          "W.safetensors] [flags]\n"
          "       mantissa-run DIR --verify-checkpoint CHECKPOINT\n\n"
          "Trains with the artifact DIR that mantissa-compile -o DIR wrote, "
          "in the runtime alone.\n\n%s",
          trainerFlagsHelp());
      return 0;
    }
  if (!parseUpdateOptions(argc, argv, options, error)) {
    std::fprintf(stderr, "mantissa-run: error: %s\n", error.c_str());
    return 1;
  }
  // Said here rather than by parseUpdateOptions, whose library callers may
  // hand the runner a gradient source of their own.
  if (options.model.gradsPath.empty() && options.model.inputsPath.empty() &&
      options.data.paths.empty() && options.checkpoints.verifyDir.empty()) {
    std::fprintf(stderr,
                 "mantissa-run: error: --grads is required: give --grads "
                 "GRADS.safetensors (apply given gradients), --data "
                 "TOKENS.bin or --inputs INPUTS.safetensors (train with the "
                 "artifact's step)\n");
    return 1;
  }
  if (!checkOutputLocations(options, {}, error)) {
    std::fprintf(stderr, "mantissa-run: error: %s\n", error.c_str());
    return 1;
  }
  std::unique_ptr<Communicator> communicator =
      createLaunchCommunicator(options.device.threads, error);
  if (!communicator) {
    std::fprintf(stderr, "mantissa-run: error: %s\n", error.c_str());
    return 1;
  }
  if (!options.model.inputsPath.empty() || !options.data.paths.empty())
    return runArtifactTraining(options, *communicator);
  return runUpdate(options, *communicator);
}
