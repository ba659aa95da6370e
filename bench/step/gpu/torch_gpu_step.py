# GPU baseline: torch eager training steps on a corpus model, with the corpus
# weights and batch, timed as Mantissa's runtime times its steps (the whole
# step: forward, backward and AdamW, synchronised), in two arms:
#   fp32    everything fp32, torch.optim.AdamW (foreach, torch's default);
#   master  bf16 parameters and gradients, fp32 master weights and moments,
#           the usual torch way: grad.float() into the masters, fused AdamW on
#           the masters, copy back to bf16;
#   autocast fp32 parameters and AdamW (fused), the forward under
#           torch.autocast(bfloat16): what Mantissa's `compute: bf16` runs.
# Usage: python3 torch_gpu_step.py CORPUS_DIR MODEL ARM STEPS OUT.json
# Writes {"losses": [...], "median_step_ms": ..., "mean_step_ms": ...}.
import json, os, sys, time
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fidelity"))
from corpus_models import load, model_namespace  # noqa: E402

corpus, name, arm, steps, out = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
ns = model_namespace(corpus)


def tensors(path):
    return {key: torch.from_numpy(value) for key, value in load(path).items()}


# TORCH_DEVICE=cpu checks the script itself where there is no GPU.
device = os.environ.get("TORCH_DEVICE", "cuda")
on_gpu = device == "cuda"


def synchronize():
    if on_gpu:
        torch.cuda.synchronize()


model, _ = ns["make"](name)
model.load_state_dict(tensors(f"{corpus}/{name}.init.safetensors"))
batch = tensors(f"{corpus}/{name}.inputs.safetensors")
args = (batch["input.0"].to(device), batch["input.1"].to(device))
model = model.to(device)
if arm == "fp32":
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = model(*args)
        loss.backward()
        optimizer.step()
        return loss
elif arm == "master":
    model = model.to(torch.bfloat16)
    params = list(model.parameters())
    masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    optimizer = torch.optim.AdamW(masters, lr=1e-3, weight_decay=0.01,
                                  **({"fused": True} if on_gpu else {}))

    def step():
        for p in params:
            p.grad = None
        loss = model(*args)
        loss.backward()
        for p, m in zip(params, masters):
            m.grad = p.grad.float()
        optimizer.step()
        with torch.no_grad():
            for p, m in zip(params, masters):
                p.copy_(m)
        return loss
elif arm == "autocast":
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01,
                                  **({"fused": True} if on_gpu else {}))

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(*args)
        loss.backward()
        optimizer.step()
        return loss
else:
    raise SystemExit(f"unknown arm {arm}")

losses, times = [], []
for _ in range(steps):
    synchronize()
    begin = time.perf_counter()
    loss = step()
    # The loss is read every step, as the runtime reports it every step.
    losses.append(float(loss))
    times.append(time.perf_counter() - begin)
steady = sorted(times[2:]) if len(times) > 4 else sorted(times)
result = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if on_gpu else "cpu",
          "model": name, "arm": arm,
          "steps": steps, "losses": losses, "median_step_ms": 1000 * steady[len(steady) // 2],
          "mean_step_ms": 1000 * sum(times[2:]) / max(1, len(times) - 2)}
json.dump(result, open(out, "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k != "losses"}))
