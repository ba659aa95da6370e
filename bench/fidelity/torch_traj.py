# Fidelity spread: rerun the corpus fp32 AdamW trajectory with a *different* torch (Debian's 1.13, CPU)
# and measure how far torch itself lands from torch 2.11's own numbers (corpus M.traj.json / M.finals).
#
# Usage: /usr/bin/python3 bench/fidelity/torch_traj.py MODEL [options]
#   --corpus DIR        corpus folder (default test/Inputs/corpus of the repository)
#   --threads N         intra-op threads (default 1)
#   --dtype float32|float64   float64 = model.double() (inputs as is): "exact math" estimate
#   --adam torch|t211   torch: torch 1.13's torch.optim.AdamW(foreach=False) (exp_avg.mul_.add_);
#                       t211: hand-written copy of torch 2.11's _single_tensor_adam order (exp_avg.lerp_)
#   --grad-noise R      multiply every gradient element by (1 + R*u), u ~ U(-1,1) (seeded), each step:
#                       a controlled stand-in for ulp-level accumulation-order differences
#   --steps N           (default: traj.json's steps, 40)
#   --save PATH.npz     save final params (+ Adam moments) for later --compare
#   --compare PATH.npz  also compare this run's finals against a saved run (same metric)
#   --analyze K         element-level look at the K worst elements of the worst tensors vs torch 2.11 finals
# Metric per tensor: max|a-b| / (max|b| + 1e-12), b = the reference.
import argparse, json, math, os, time
import numpy as np, torch
from corpus_models import DEFAULT_CORPUS, load, model_namespace

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--corpus", default=DEFAULT_CORPUS)
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
ap.add_argument("--adam", default="torch", choices=["torch", "t211"])
ap.add_argument("--grad-noise", type=float, default=0.0)
ap.add_argument("--steps", type=int, default=None)
ap.add_argument("--save", default=None)
ap.add_argument("--compare", default=None)
ap.add_argument("--analyze", type=int, default=0)
ap.add_argument("--top", type=int, default=6, help="worst tensors to print")
ap.add_argument("--trace", action="append", default=[], help="TENSOR:i,j  record this element's grad/m/v/param every step (saved with --save as trace.*)")
ap.add_argument("--json", default=None, help="write the summary figures to this JSON file")
a = ap.parse_args()

corpus, name = a.corpus, a.model
torch.set_num_threads(a.threads)
ns = model_namespace(corpus)
torch.set_num_threads(a.threads)


def metric(x, ref):
    x = np.asarray(x, np.float64); ref = np.asarray(ref, np.float64)
    return float(np.abs(x - ref).max() / (np.abs(ref).max() + 1e-12))


traj = json.load(open(f"{corpus}/{name}.traj.json"))
ref_losses = traj["arms"]["fp32"]["losses"]
steps = a.steps or traj["steps"]
lr, wd, (b1, b2), eps = traj["lr"], traj["weight_decay"], traj["betas"], traj["eps"]

model, _ = ns["make"](name)
init = load(f"{corpus}/{name}.init.safetensors")
model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
if a.dtype == "float64":
    model = model.double()
inp = load(f"{corpus}/{name}.inputs.safetensors")
args = tuple(torch.from_numpy(inp[f"input.{i}"]) for i in range(2))
if a.dtype == "float64":
    args = tuple(x.double() if x.is_floating_point() else x for x in args)
named = list(model.named_parameters())
params = [p for _, p in named]

if a.adam == "torch":
    try:
        opt = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, foreach=False)
    except TypeError:
        opt = torch.optim.AdamW(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    state = lambda p: (opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"])
else:
    m_ = [torch.zeros_like(p) for p in params]
    v_ = [torch.zeros_like(p) for p in params]
    st = {"step": 0}
    idx = {id(p): i for i, p in enumerate(params)}
    state = lambda p: (m_[idx[id(p)]], v_[idx[id(p)]])

    class _Opt:
        @torch.no_grad()
        def step(self):
            st["step"] += 1
            s = st["step"]
            bc1 = 1 - b1 ** s
            bc2 = 1 - b2 ** s
            step_size = lr / bc1
            bc2_sqrt = math.sqrt(bc2)
            for p, m, v in zip(params, m_, v_):
                g = p.grad
                p.mul_(1 - lr * wd)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                denom = (v.sqrt() / bc2_sqrt).add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
    opt = _Opt()

gen = torch.Generator().manual_seed(12345)
names = [n for n, _ in named]
traces = {t: [] for t in a.trace}
# per-element bookkeeping for --analyze: gradient sign flips over the trajectory, min |g|
flips = [torch.zeros(p.shape, dtype=torch.int32) for p in params] if a.analyze else None
prev = [None] * len(params)
losses = []
t0 = time.time()
for step in range(steps):
    for p in params:
        p.grad = None
    l = model(*args)
    l.backward()
    losses.append(float(l))
    if a.grad_noise:
        with torch.no_grad():
            for p in params:
                u = torch.rand(p.shape, generator=gen, dtype=torch.float64) * 2 - 1
                p.grad.mul_((1 + a.grad_noise * u).to(p.dtype))
    if a.analyze:
        for i, p in enumerate(params):
            sg = torch.sign(p.grad).to(torch.int8)
            if prev[i] is not None:
                flips[i] += ((sg != prev[i]) & (sg != 0) & (prev[i] != 0)).to(torch.int32)
            prev[i] = sg
    opt.step()
    for t in a.trace:
        tn, ij = t.split(":"); ij = tuple(int(x) for x in ij.split(","))
        p = params[names.index(tn)]; m, v = state(p)
        traces[t].append([float(p.grad[ij]), float(m[ij]), float(v[ij]), float(p.detach()[ij])])
wall = time.time() - t0

cfg = f"{name} torch{torch.__version__} threads={torch.get_num_threads()} dtype={a.dtype} adam={a.adam}" + (f" grad_noise={a.grad_noise:g}" if a.grad_noise else "")
print(f"== {cfg}  ({steps} steps, {wall:.1f}s)")
rl = np.array(ref_losses[:steps], np.float64); ml = np.array(losses, np.float64)
rel = np.abs(ml - rl) / np.abs(rl)
print(f"losses: max rel err vs torch 2.11 fp32 = {rel.max():.3e} (at step {int(rel.argmax())}); step0 {ml[0]:.7f} vs {rl[0]:.7f}; last {ml[-1]:.7f} vs {rl[-1]:.7f}")

finals = load(f"{corpus}/{name}.finals.safetensors")
mine = {k: p.detach().to(torch.float64).numpy() for k, p in named}
summary = {"config": cfg, "loss_max_rel": float(rel.max())}


def report(label, ref):
    rows = sorted(((metric(mine[k], ref[k]), k) for k in mine), reverse=True)
    n_over = sum(1 for m, _ in rows if m > 1e-4)
    nel = sum(int((np.abs(mine[k] - ref[k]) > 1e-4 * np.abs(ref[k]).max()).sum()) for k in mine)
    second = max(float(np.sort(np.abs(mine[k] - ref[k]).ravel())[-2] / (np.abs(ref[k]).max() + 1e-12)) if mine[k].size > 1 else 0.0 for k in mine)
    print(f"finals vs {label}: worst {rows[0][0]:.3e} ({rows[0][1]}); {n_over}/{len(rows)} tensors > 1e-4; median {rows[len(rows)//2][0]:.2e}")
    print(f"   elements off by > 1e-4*max|ref| of their tensor: {nel} of {sum(v.size for v in mine.values())}; worst metric with each tensor's single worst element dropped: {second:.3e}")
    for m, k in rows[:a.top]:
        print(f"    {m:.3e}  {k}")
    return rows, n_over


rows, n_over = report("torch 2.11 fp32", {k: finals[f"fp32.{k}"] for k in mine})
summary.update(finals_worst=rows[0][0], finals_worst_tensor=rows[0][1], finals_over_1e4=n_over, n_tensors=len(rows))

if a.compare:
    other = dict(np.load(a.compare))
    crow, cn = report(f"saved run {os.path.basename(a.compare)}", {k: other[f"p.{k}"] for k in mine})
    summary.update(compare_worst=crow[0][0], compare_worst_tensor=crow[0][1], compare_over_1e4=cn)

if a.save:
    out = {}
    for k, p in named:
        m, v = state(p)
        out[f"p.{k}"] = p.detach().numpy(); out[f"m.{k}"] = m.numpy(); out[f"v.{k}"] = v.numpy()
    out["losses"] = ml
    for t, rows_ in traces.items():
        out["trace." + t] = np.array(rows_)
    np.savez(a.save, **out)

if a.analyze:
    bc1 = 1 - b1 ** steps; bc2 = 1 - b2 ** steps
    print(f"\n-- element analysis (K={a.analyze}) vs torch 2.11 fp32 finals; r = |m_hat|/(sqrt(v_hat)+eps) after the last step;"
          f" flips = gradient sign changes over {steps} steps; disp = |final - init|")
    allr, allf = [], []
    for i, (k, p) in enumerate(named):
        m, v = state(p)
        r = (m.double().abs() / bc1) / ((v.double() / bc2).sqrt() + eps)
        allr.append(r.numpy().ravel()); allf.append(flips[i].numpy().ravel())
    allr = np.concatenate(allr); allf = np.concatenate(allf)
    print(f"   all elements: median r {np.median(allr):.3f}, frac r<0.3 {np.mean(allr < 0.3):.3f}, median flips {np.median(allf):.0f}, frac flips>=10 {np.mean(allf >= 10):.3f}")
    topk_r, topk_f = [], []
    for _, k in rows[:a.top]:
        i = [n for n, _ in named].index(k)
        m, v = state(named[i][1])
        ref = finals[f"fp32.{k}"].astype(np.float64).ravel()
        d = np.abs(mine[k].ravel() - ref)
        order = np.argsort(-d)[:a.analyze]
        r = ((m.double().abs() / bc1) / ((v.double() / bc2).sqrt() + eps)).numpy().ravel()
        fl = flips[i].numpy().ravel()
        disp = np.abs(ref - init[k].astype(np.float64).ravel())
        g_rms = np.sqrt(v.double().numpy().ravel() / bc2)
        print(f"   {k} shape {list(mine[k].shape)}: tensor median r {np.median(r):.3f}, median flips {np.median(fl):.0f}, max|ref| {np.abs(ref).max():.3g}")
        for j in order:
            idx = np.unravel_index(j, mine[k].shape)
            print(f"      {str(tuple(int(x) for x in idx)):>12}  |diff| {d[j]:.3e}  ref {ref[j]: .5f}  disp {disp[j]:.4f}  r {r[j]:.3f}  flips {int(fl[j])}  rms(g) {g_rms[j]:.2e}")
        topk_r.append(r[order]); topk_f.append(fl[order])
    tr = np.concatenate(topk_r); tf = np.concatenate(topk_f)
    print(f"   worst elements: median r {np.median(tr):.3f} (all: {np.median(allr):.3f}), median flips {np.median(tf):.0f} (all: {np.median(allf):.0f})")
    summary.update(worst_elems_median_r=float(np.median(tr)), all_median_r=float(np.median(allr)),
                   worst_elems_median_flips=float(np.median(tf)), all_median_flips=float(np.median(allf)))

if a.json:
    with open(a.json, "w") as f:
        json.dump(summary, f, indent=1)
