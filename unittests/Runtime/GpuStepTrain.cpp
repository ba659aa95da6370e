//===- GpuStepTrain.cpp - Test driver: a GPU step in front of runUpdate ---===//
//
// Part of the Mantissa project. Test-only.
//
//===----------------------------------------------------------------------===//
//
//   mantissa-gpustep-train [--host-source] PROGRAM.gpu.json INPUTS.safetensors
//       -- ARTIFACT [mantissa-run update flags]
//
// Trains with runUpdate (the update path of mantissa-run) and a
// GpuStepGradients over PROGRAM, whose non-parameter arguments come from
// INPUTS by name (parameters are the runner's). Prints "step K loss L" per
// step. test/Runtime/gpu-step-fake.test runs it on the stand-in driver.
//
// --host-source replaces the program by a host GradientSource of the same
// step as test/Runtime/Inputs/gpustep.py writes it (loss = w . x + count,
// grad = x, count += 1, with w the only parameter), to check that a host
// source on a GPU run sees the current parameters.
//
//===----------------------------------------------------------------------===//

#include "mantissa/Runtime/GpuStep.h"
#include "mantissa/Runtime/SafeTensors.h"

#include <cstdio>
#include <cstring>

using namespace mlir::mantissa::rt;

namespace {

/// loss = w . x + count, grad = x, count += 1, on the host.
class HostDotGradients : public GradientSource {
public:
  HostDotGradients(std::vector<float> x, float count)
      : x(std::move(x)), count(count) {}
  bool computeGradients(int64_t stepNumber, const std::vector<Member> &members,
                        std::string &error) override {
    if (members.size() != 1 || *members[0].fqn != "w" ||
        int64_t(x.size()) != int64_t((*members[0].shape)[0])) {
      error = "the host source expects one parameter 'w' of x's size";
      return false;
    }
    const Member &w = members[0];
    float dot = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      float product =
          loadFloatElement(w.param, int64_t(i), w.paramDtype) * x[i];
      dot = dot + product;
    }
    for (size_t i = 0; i < x.size(); ++i)
      storeFloatElement(w.grad, int64_t(i), w.gradDtype, x[i]);
    float loss = dot + count;
    count = count + 1.0f;
    std::printf("step %lld loss %.9g\n", (long long)stepNumber, double(loss));
    last = loss;
    return true;
  }
  double lastLoss() const override { return last; }

private:
  std::vector<float> x;
  float count;
  double last = 0;
};

int fail(const std::string &message) {
  std::fprintf(stderr, "mantissa-gpustep-train: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  int at = 1;
  bool hostSource = false;
  if (at < argc && std::strcmp(argv[at], "--host-source") == 0) {
    hostSource = true;
    ++at;
  }
  if (argc - at < 4 || std::strcmp(argv[at + 2], "--") != 0)
    return fail("usage: mantissa-gpustep-train [--host-source] PROGRAM "
                "INPUTS -- ARTIFACT [update flags]");
  std::string programPath = argv[at], inputsPath = argv[at + 1];
  // The update flags, with a program name in front as parseUpdateOptions
  // expects.
  std::vector<char *> updateArgs = {argv[0]};
  for (int i = at + 3; i < argc; ++i)
    updateArgs.push_back(argv[i]);

  TrainerOptions options;
  std::string error;
  if (!parseUpdateOptions(int(updateArgs.size()), updateArgs.data(), options,
                          error))
    return fail(error);
  SafeTensorsFile inputs;
  if (!SafeTensorsFile::read(inputsPath, inputs, error))
    return fail(error);
  std::unique_ptr<GpuStep> program = GpuStep::load(programPath, error);
  if (!program)
    return fail(error);

  std::unique_ptr<GradientSource> source;
  GpuStepGradients *device = nullptr;
  if (hostSource) {
    const HostTensor *x = inputs.find("x");
    const HostTensor *count = inputs.find("count");
    if (!x || !count || x->dtype != DType::F32 || count->dtype != DType::F32)
      return fail(inputsPath + ": the host source needs fp32 'x' and 'count'");
    std::vector<float> values(size_t(x->numElements()));
    std::memcpy(values.data(), x->bytes.data(), 4 * values.size());
    source = std::make_unique<HostDotGradients>(
        std::move(values),
        loadFloatElement(count->bytes.data(), 0, DType::F32));
  } else {
    std::vector<std::vector<uint8_t>> arguments;
    for (const StepTensor &argument : program->arguments()) {
      const HostTensor *tensor = inputs.find(argument.name);
      if (!tensor) {
        if (argument.role != StepTensor::Role::Parameter)
          return fail(inputsPath + ": no tensor '" + argument.name + "'");
        arguments.emplace_back();
        continue;
      }
      if (tensor->dtype != argument.dtype)
        return fail(inputsPath + ": '" + argument.name + "' is " +
                    std::string(safeTensorsDTypeName(tensor->dtype)) +
                    ", the step takes " +
                    std::string(safeTensorsDTypeName(argument.dtype)));
      arguments.push_back(tensor->bytes);
    }
    std::unique_ptr<GpuStepGradients> gradients =
        GpuStepGradients::load(programPath, std::move(arguments), error);
    if (!gradients)
      return fail(error);
    gradients->setStepCallback([](int64_t step, double loss) {
      std::printf("step %lld loss %.9g\n", (long long)step, loss);
    });
    device = gradients.get();
    source = std::move(gradients);
  }
  options.gradientSource = source.get();
  std::unique_ptr<Communicator> communicator = createSingleRankCommunicator();
  int status = runUpdate(options, *communicator);
  if (status == 0 && device)
    std::printf("gpu step: %zu losses, %.3f ms in the step\n",
                device->losses().size(), device->seconds() * 1e3);
  return status;
}
