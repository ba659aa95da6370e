# Why llama_medium finals differ by ~3e-4 between correct fp32 implementations: Adam's FIRST step.
# At step 1, AdamW moves each element by lr * g/(|g| + eps) (bias corrections cancel). For an element whose
# step-0 gradient is near zero by cancellation (|g| ~ eps = 1e-8), a rounding-level absolute error dg in g
# changes that move by up to lr*dg/eps, and nothing later undoes it (later gradients are ~1e4x larger, so
# the element's later updates are insensitive). This script computes the step-0 gradient in this torch/BLAS/
# dtype, compares it with torch 2.11's (corpus M.grads.safetensors) and predicts, per tensor, the step-1
# parameter difference with the corpus metric max|du| / max|final_ref|.
# Usage: /usr/bin/python3 bench/fidelity/step1_sensitivity.py MODEL [--threads N] [--dtype float64] [--top 6]
import argparse, json
import numpy as np, torch
from corpus_models import DEFAULT_CORPUS, load, model_namespace

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--corpus", default=DEFAULT_CORPUS)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
ap.add_argument("--top", type=int, default=6)
a = ap.parse_args()
corpus, name = a.corpus, a.model
ns = model_namespace(corpus)
torch.set_num_threads(a.threads)


traj = json.load(open(f"{corpus}/{name}.traj.json"))
lr, eps = traj["lr"], traj["eps"]
model, _ = ns["make"](name)
model.load_state_dict({k: torch.from_numpy(v) for k, v in load(f"{corpus}/{name}.init.safetensors").items()})
inp = load(f"{corpus}/{name}.inputs.safetensors")
args = tuple(torch.from_numpy(inp[f"input.{i}"]) for i in range(2))
if a.dtype == "float64":
    model = model.double()
    args = tuple(x.double() if x.is_floating_point() else x for x in args)
loss = model(*args)
loss.backward()
ref = load(f"{corpus}/{name}.grads.safetensors")
finals = load(f"{corpus}/{name}.finals.safetensors")
print(f"== {name} torch{torch.__version__} threads={torch.get_num_threads()} dtype={a.dtype}: loss0 {float(loss):.9f} vs torch 2.11 {float(ref['loss'][0]):.9f}")
rows = []
for k, p in model.named_parameters():
    g = p.grad.double().numpy()
    gr = ref[f"grad.{k}"].astype(np.float64)
    dg = np.abs(g - gr)
    # step-1 AdamW move per element, in double, from each gradient
    du = lr * np.abs(g / (np.abs(g) + eps) - gr / (np.abs(gr) + eps))
    scale = np.abs(finals[f"fp32.{k}"]).max()
    j = int(du.argmax())
    rows.append((du.max() / scale, k, dg.max() / (np.abs(gr).max() + 1e-30), gr.ravel()[j], g.ravel()[j], du.ravel()[j],
                 int((np.abs(gr) < 10 * eps).sum()), gr.size))
rows.sort(reverse=True)
print(f"predicted step-1 metric (max|du|/max|final|): worst {rows[0][0]:.3e}; {sum(r[0] > 1e-4 for r in rows)}/{len(rows)} tensors > 1e-4")
print(f"   {'tensor':36s} {'pred':>9s} {'grad metric':>11s} {'g_2.11 at worst':>15s} {'g_here':>11s} {'du':>9s}  #|g|<1e-7")
for r in rows[:a.top]:
    print(f"   {r[1]:36s} {r[0]:9.3e} {r[2]:11.3e} {r[3]:15.3e} {r[4]:11.3e} {r[5]:9.2e}  {r[6]}/{r[7]}")
