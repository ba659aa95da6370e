"""Checks one zoo model end to end against the torch that exports it.

usage: python3 -m mantissa.zoo.check MODULE:FACTORY [--out DIR] [--json]
           [--reuse] [--only CHECK,...] [--steps N] [--name NAME]
           [--bf16-spec SPEC] [--mantissa-bin DIR]
       python3 -m mantissa.zoo.check --list     (every zoo factory)

MODULE may also be a path to a .py file. FACTORY() returns (model, batch),
(model, batch, loss_fn) or (model, batch, loss_fn, outputs_fn), the contract
of `python3 -m mantissa.export`.
One line per check, then the verdict; with --json, the lines go to stderr
and every figure to stdout as one JSON document. The exit status is 1 when
a check fails, naming it. The checks (issue 39, item 3):

  export      mantissa.export.export_training_step with N reference steps
              (torch's loss, gradients, N-step AdamW trajectory), timed
  import      mantissa-compile M.pt2 --emit=train-mlir; the graph's ops,
              and the ones the importer lacks (mantissa-compile --list-ops)
  gradients   the reference interpreter's loss and gradients at the initial
              weights against torch's: per tensor, max|ours - torch| /
              max|torch|, at most 1e-5. A tensor whose torch gradient stays
              below the floor, 1e-4 of the model's largest gradient
              element, is mathematically zero (a bias before a norm): torch's
              values are rounding noise, so ours must be below the floor too
  trajectory  N compiled CPU AdamW steps against eager torch's: the worst
              relative loss difference and, per parameter, max|ours -
              torch| / max|torch| of the final values, both at most 1e-4.
              Elements whose first torch gradient is below 100 eps (unless
              it and the interpreter's are both exactly zero), and tensors
              whose whole gradient is below the floor, are counted, not
              compared: Adam's first step lr*g/(|g|+eps) turns a
              rounding-level difference there into a move of up to lr.
              Finals beyond 1e-4 may be up to 3 times torch's own fp32
              spread: its fp32 finals against its fp64 run's, both run here
  bf16        `compute: bf16` against torch's CPU autocast (bf16): torch's
              spread is the larger of its autocast trajectory's distance
              from fp32 and from itself with one rounding moved (the
              model's last matrix product kept in fp32); Mantissa's
              distance from torch's autocast may be at most 3 spreads
              (distance: worst relative loss difference over the steps)
  gpu         mantissa-compile --precision (compute: bf16) -o ART with
              --cost-report=json; ptxas -arch=sm_90 accepts ART/step.ptx;
              kernels, GEMMs, fused attention kernels, predicted step time
  stall       for models with norm gains (parameters of modules whose class
              is a norm): the stall report with everything bf16 and with
              fp32 masters for the gains, against N steps of each: the gains
              it says stall move in no element, the others and every gain
              with an fp32 master move
"""
from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any, Callable

CHECKS = ("export", "import", "gradients", "trajectory", "bf16", "gpu", "stall")
GRADIENT_TOLERANCE = 1e-5
#: Gradients below this fraction of the model's largest gradient element are
#: mathematically zero: torch's own are rounding noise there (1.7e-7 of the
#: largest for a convolution bias before a batch norm, test/Inputs/aten's
#: convnet), while the smallest real ones of the test models are 5e-3.
ZERO_GRADIENT_FLOOR = 1e-4
TRAJECTORY_TOLERANCE = 1e-4
#: Final parameters are compared where the first gradient is at least this
#: many of Adam's eps, or exactly zero (llama: 32 of 428,672 elements lie below
#: 10 eps, where the finals differ by up to 5e-4 between correct fp32 sums).
ADAM_SENSITIVE_EPS = 100
#: Where the finals differ by more than 1e-4, they may differ by this many of
#: torch's own fp32 spread (its fp32 finals against its fp64 run's).
FINALS_JITTER_MULTIPLE = 3.0
#: Mantissa's compute-bf16 trajectory may be this many of torch's own spreads
#: from torch's autocast trajectory: compute: bf16 lies 0.7 to 1.1 spreads
#: away on test/Zoo's models, pure bf16 78 (test/Zoo/checker-bf16.test).
BF16_SPREAD_MULTIPLE = 3.0
PURE_BF16_SPEC = 'rules:\n  - match: "*"\n    master: bf16\n    moments: bf16\n'
COMPUTE_BF16_SPEC = "compute: bf16\n"


class CheckError(Exception):
    """A check that could not run to its verdict (a tool failed, a file is
    missing); its message says what and where."""


def log(message: str, stream) -> None:
    print(message, file=stream, flush=True)


# --- the model -------------------------------------------------------------


def load_factory(spec: str) -> tuple[str, Callable]:
    """MODULE:FACTORY or FILE.py:FACTORY -> (factory name, factory)."""
    module_name, sep, factory_name = spec.rpartition(":")
    if not sep or not module_name or not factory_name:
        raise CheckError(f"'{spec}' is not MODULE:FACTORY")
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name)
        if not path.is_file():
            raise CheckError(f"'{spec}': no file {path}")
        loaded = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(loaded)
        sys.modules[path.stem] = module
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise CheckError(f"'{spec}': {module_name} has no factory '{factory_name}'")
    return factory_name, factory


def call_factory(name: str, factory: Callable):
    """(model, batch, loss_fn, outputs_fn) from a factory returning 2 to 4 of
    them, as `python3 -m mantissa.export` takes them (absent ones None)."""
    made = factory()
    if not isinstance(made, tuple) or len(made) not in (2, 3, 4):
        raise CheckError(f"factory '{name}' returned {type(made).__name__}, "
                         "not (model, batch[, loss_fn[, outputs_fn]])")
    model, batch, loss_fn, outputs_fn = (*made, None, None)[:4]
    return model, batch, loss_fn, outputs_fn


def training_loss(model, batch, loss_fn):
    """The exporter's rule: loss_fn(output, batch), else a scalar output,
    else output.loss, else output["loss"]."""
    import torch

    output = model(**batch) if isinstance(batch, dict) else model(*batch)
    if loss_fn is not None:
        return loss_fn(output, batch)
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    if getattr(output, "loss", None) is not None:
        return output.loss
    return output["loss"]


def norm_gains(model) -> list[str]:
    """FQNs of the parameters held by norm modules themselves (LayerNorm,
    RMSNorm, GroupNorm, ...), not by projections nested inside them (an
    adaptive norm's Linear)."""
    gains = []
    for path, module in model.named_modules():
        if "norm" not in type(module).__name__.lower():
            continue
        for name, _ in module.named_parameters(recurse=False):
            gains.append(f"{path}.{name}" if path else name)
    return gains


def defining_class(model) -> tuple[str, str, str]:
    """(class, library, version) of the model a factory wraps: the first
    module from transformers or diffusers (a wrapper computing the loss is
    plain torch), else the model's own class."""
    import torch

    for module in model.modules():
        root = type(module).__module__.split(".")[0]
        if root in ("transformers", "diffusers"):
            return type(module).__name__, root, importlib.metadata.version(root)
    return type(model).__name__, "torch", torch.__version__


# --- tools -------------------------------------------------------------------


class Tools:
    """mantissa-compile, mantissa-run and ptxas: MANTISSA_COMPILE (as lit and
    the exporter name it) and its directory, PATH, then the build tree."""

    def __init__(self, bin_dir: str | None):
        candidates = []
        if bin_dir:
            candidates.append(Path(bin_dir))
        if os.environ.get("MANTISSA_COMPILE"):
            candidates.append(Path(os.environ["MANTISSA_COMPILE"]).parent)
        candidates.append(Path(__file__).resolve().parents[3] / "build" / "bin")
        self.compile = self._find("mantissa-compile", candidates)
        self.run = self._find("mantissa-run", candidates)
        self.ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
        if not os.path.exists(self.ptxas):
            self.ptxas = None

    @staticmethod
    def _find(tool: str, directories: list[Path]) -> str:
        for directory in directories:
            if (directory / tool).is_file():
                return str(directory / tool)
        found = shutil.which(tool)
        if not found:
            raise CheckError(f"{tool} not found (--mantissa-bin DIR, MANTISSA_COMPILE, PATH or build/bin)")
        return found


def run_tool(command: list[str], what: str, stdout_path: Path | None = None) -> subprocess.CompletedProcess:
    """Runs a tool; a failure is a CheckError carrying its last lines."""
    with open(stdout_path, "w") if stdout_path else open(os.devnull, "w") as out:
        done = subprocess.run(command, stdout=out if stdout_path else subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise CheckError(f"{what} failed (exit {done.returncode}): {' '.join(command)}\n{tail}")
    return done


# --- safetensors and measures --------------------------------------------------


def load_tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    if not path.is_file():
        raise CheckError(f"{path} is missing")
    return load_file(str(path))


def worst_relative(ours: list[float], theirs: list[float]) -> float:
    """The worst relative difference of two loss curves, step by step."""
    if len(ours) != len(theirs):
        raise CheckError(f"{len(ours)} losses against torch's {len(theirs)}")
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(ours, theirs))


def graph_ops(pt2: Path) -> dict[str, int]:
    """The joint graph's operators and how often each occurs (model.json)."""
    with zipfile.ZipFile(pt2) as archive:
        names = [n for n in archive.namelist() if n.endswith("models/model.json")]
        if not names:
            raise CheckError(f"{pt2} holds no models/model.json")
        program = json.loads(archive.read(names[0]))
    ops: dict[str, int] = {}
    for node in program["graph_module"]["graph"]["nodes"]:
        ops[node["target"]] = ops.get(node["target"], 0) + 1
    return dict(sorted(ops.items()))


def export_metadata(pt2: Path) -> dict:
    """The exporter's extra/mantissa.json inside the archive (batch dims,
    tied and non-trainable parameters), or {} for an archive without it."""
    with zipfile.ZipFile(pt2) as archive:
        names = [n for n in archive.namelist() if n.endswith("extra/mantissa.json")]
        return json.loads(archive.read(names[0])) if names else {}


# --- the checker -----------------------------------------------------------------


class Checker:
    def __init__(self, args, stream):
        self.args = args
        self.stream = stream
        self.factory_name, self.factory = load_factory(args.factory)
        self.name = args.name or self.factory_name
        self.out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix=f"zoo-{self.name}-"))
        self.out.mkdir(parents=True, exist_ok=True)
        self.tools = Tools(args.mantissa_bin)
        self.steps = args.steps
        self.record: dict[str, Any] = {"model": self.name, "factory": args.factory, "out": str(self.out),
                                       "steps": self.steps, "checks": {}}
        # The exporter checks the graph's operators against this build's.
        os.environ["MANTISSA_COMPILE"] = self.tools.compile

    def path(self, suffix: str) -> Path:
        return self.out / f"{self.name}{suffix}"

    @property
    def pt2(self) -> Path:
        return self.path(".pt2")

    def common_run_flags(self) -> list[str]:
        return [str(self.pt2), "--weights", str(self.path(".init.safetensors")),
                "--inputs", str(self.path(".inputs.safetensors"))]

    def write_spec(self, name: str, text: str) -> Path:
        spec = self.out / name
        spec.write_text(text)
        return spec

    def describe_model(self) -> None:
        import torch

        model, _, _, _ = call_factory(self.factory_name, self.factory)
        defining, library, version = defining_class(model)
        self.record.update({"class": defining, "library": library, "library_version": version,
                            "torch": torch.__version__,
                            "parameters": sum(p.numel() for p in model.parameters()),
                            "norm_gains": norm_gains(model)})

    # -- the checks, each returning its figures and raising CheckError when it
    #    cannot reach a verdict; "passed" is the verdict

    def check_export(self) -> dict:
        if self.args.reuse:
            missing = [str(p) for p in (self.pt2, self.path(".grads.safetensors"), self.path(".traj.json"))
                       if not p.is_file()]
            if missing:
                raise CheckError(f"--reuse: {', '.join(missing)} missing")
            return {"passed": True, "reused": True}
        try:
            import mantissa.export as exporter
        except ImportError as error:
            raise CheckError(f"the exporter package mantissa.export is not importable: {error}")
        model, batch, loss_fn, outputs_fn = call_factory(self.factory_name, self.factory)
        start = time.perf_counter()
        try:
            exporter.export_training_step(model, batch, str(self.out), self.name, loss_fn=loss_fn,
                                          outputs_fn=outputs_fn, reference_steps=self.steps)
        except Exception as error:  # the exporter's own message names the op, node, module
            message = f"{type(error).__name__}: {error}"
            return {"passed": False, "reason": message, "seconds": round(time.perf_counter() - start, 2),
                    "missing_ops": sorted(set(re.findall(r"(?:torch\.ops\.)?aten\.[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?",
                                                         message)))}
        return {"passed": True, "seconds": round(time.perf_counter() - start, 2)}

    def check_import(self) -> dict:
        ops = graph_ops(self.pt2)
        supported = set(run_tool([self.tools.compile, "--list-ops"], "mantissa-compile --list-ops").stdout.split())
        missing = sorted(op for op in ops if op not in supported)
        start = time.perf_counter()
        done = subprocess.run([self.tools.compile, str(self.pt2), "--emit=train-mlir", "-o",
                               str(self.path(".mlir"))], capture_output=True, text=True)
        figures = {"seconds": round(time.perf_counter() - start, 2), "nodes": sum(ops.values()),
                   "distinct_ops": len(ops), "ops": ops, "missing_ops": missing}
        if done.returncode != 0:
            figures.update(passed=False, reason=done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                           else f"exit {done.returncode}")
        else:
            figures["passed"] = True
        return figures

    def zero_floor(self) -> tuple[float, dict]:
        """The floor below which a gradient is mathematically zero, from
        torch's gradients at the initial weights."""
        reference = load_tensors(self.path(".grads.safetensors"))
        largest = max(float(t.abs().max()) for k, t in reference.items() if k.startswith("grad.") and t.numel())
        return ZERO_GRADIENT_FLOOR * largest, reference

    def check_gradients(self) -> dict:
        import torch

        dump = self.out / "mantissa.grads.safetensors"
        start = time.perf_counter()
        run_tool([self.tools.run, *self.common_run_flags(), "--reference", "--dump-grads", str(dump)],
                 "mantissa-run --reference --dump-grads")
        seconds = round(time.perf_counter() - start, 2)
        ours = load_tensors(dump)
        floor, reference = self.zero_floor()
        loss_error = abs(float(ours["loss"].reshape(-1)[0]) - float(reference["loss"].reshape(-1)[0])) / abs(
            float(reference["loss"].reshape(-1)[0]))
        errors, zero, failures, missing = {}, {}, [], []
        for key, theirs in sorted(reference.items()):
            if not key.startswith("grad."):
                continue
            fqn = key[len("grad."):]
            if key not in ours:
                missing.append(fqn)
                continue
            mine = ours[key].float()
            if mine.shape != theirs.shape:
                failures.append(f"{fqn}: shape {list(mine.shape)}, torch {list(theirs.shape)}")
                continue
            scale = float(theirs.abs().max()) if theirs.numel() else 0.0
            if scale < floor:
                largest = float(mine.abs().max()) if mine.numel() else 0.0
                zero[fqn] = largest / floor
                if largest >= floor:
                    failures.append(f"{fqn}: torch's gradient is zero (below {floor:.3g}), ours reaches {largest:.3g}")
                continue
            errors[fqn] = float((mine - theirs.float()).abs().max()) / scale
        worst = max(errors.items(), key=lambda item: item[1]) if errors else ("", 0.0)
        failures += [f"{fqn}: no gradient in mantissa-run's output" for fqn in missing]
        if worst[1] > GRADIENT_TOLERANCE:
            failures.append(f"{worst[0]}: error {worst[1]:.3g} > {GRADIENT_TOLERANCE:g}")
        if loss_error > GRADIENT_TOLERANCE:
            failures.append(f"loss: error {loss_error:.3g} > {GRADIENT_TOLERANCE:g}")
        return {"passed": not failures, "seconds": seconds, "loss_error": loss_error,
                "max_error": worst[1], "worst_tensor": worst[0], "floor": floor,
                "zero_tensors": sorted(zero), "tensors": len(errors) + len(zero),
                "failures": failures, "reason": "; ".join(failures[:4]) or None,
                "errors": {k: errors[k] for k in sorted(errors, key=errors.get, reverse=True)[:5]}}

    def torch_trajectory(self) -> dict:
        return json.loads(self.path(".traj.json").read_text())

    def check_trajectory(self) -> dict:
        import torch

        losses_path, finals_path = self.out / "mantissa.fp32.losses.json", self.out / "mantissa.fp32.finals.safetensors"
        start = time.perf_counter()
        run_tool([self.tools.run, *self.common_run_flags(), "--steps", str(self.steps), "--losses", str(losses_path),
                  "--final-params", str(finals_path), "--no-memory-report"], "mantissa-run (compiled, fp32)")
        seconds = round(time.perf_counter() - start, 2)
        ours = json.loads(losses_path.read_text())["losses"]
        theirs = self.torch_trajectory()["arms"]["fp32"]["losses"]
        loss_error = worst_relative(ours, theirs)
        finals = load_tensors(finals_path)
        reference = load_tensors(self.path(".finals.safetensors"))
        floor, gradients = self.zero_floor()
        # Adam's first step lr*g/(|g|+eps) depends on g's rounding as
        # lr*eps/(|g|+eps)^2: below 100 eps, a rounding-level difference in
        # the first gradient moves the element by up to lr, for good.
        sensitive = ADAM_SENSITIVE_EPS * self.torch_trajectory().get("eps", 1e-8)
        # A tied parameter (GPT-2's wte and lm_head) is one tensor in the
        # graph, trained under the name it is tied to.
        tied = export_metadata(self.pt2).get("tied", {})
        dump = self.out / "mantissa.grads.safetensors"
        interpreter = load_tensors(dump) if dump.is_file() else {}
        errors, all_elements, failures, zero_tensors, masks = {}, {}, [], [], {}
        excluded = compared = 0
        for key, theirs_final in sorted(reference.items()):
            fqn = key[len("fp32."):] if key.startswith("fp32.") else key
            trained = tied.get(fqn, fqn)
            if trained not in finals:
                failures.append(f"{fqn}: no final value in mantissa-run's output")
                continue
            mine = finals[trained].float()
            theirs_final = theirs_final.float()
            scale = float(theirs_final.abs().max()) + 1e-12
            difference = (mine - theirs_final).abs()
            all_elements[fqn] = float(difference.max()) / scale
            gradient = gradients.get(f"grad.{fqn}")
            # Elements whose gradient both torch and the interpreter give as
            # exactly zero (embedding rows of tokens not in the batch) only
            # decay, which is deterministic; one zero by cancellation on one
            # side only (GPT-2's key bias) is noise. A tensor whose whole
            # gradient is below the floor is mathematically zero: its every
            # step is noise.
            ours_gradient = interpreter.get(f"grad.{fqn}")
            if gradient is None:
                determined = torch.ones_like(difference, dtype=torch.bool)
            elif float(gradient.abs().max()) < floor:
                determined = torch.zeros_like(difference, dtype=torch.bool)
                zero_tensors.append(fqn)
            else:
                both_zero = (gradient == 0) & (ours_gradient == 0) if ours_gradient is not None else False
                determined = (gradient.abs() >= sensitive) | both_zero
            masks[fqn] = determined
            excluded += int((~determined).sum())
            compared += int(determined.sum())
            if determined.any():
                errors[fqn] = float(difference[determined].max()) / scale
        worst = max(errors.items(), key=lambda item: item[1]) if errors else ("", 0.0)
        # Above 1e-4, the finals are held to torch's own rounding: how far
        # its fp32 run lands from its fp64 run (exact arithmetic, rounded
        # once), elementwise the same comparison; where the model does not
        # run in fp64, from its fp32 run with one rounding moved (the last
        # product in fp64). Both runs are the checker's own, so a wrong
        # reference cannot widen the bound.
        final_bound, torch_jitter, jitter_kind = TRAJECTORY_TOLERANCE, None, None
        if worst[1] > TRAJECTORY_TOLERANCE and (moved := self.last_product()):
            _, plain = self.torch_run(autocast=False, moved=None)
            try:
                jittered, jitter_kind = self.torch_run_fp64(), "fp64"
            except Exception:  # a model that only runs in fp32
                jittered, jitter_kind = self.torch_run(autocast=False, moved=moved)[1], f"{moved} in fp64"
            torch_jitter = 0.0
            for fqn, determined in masks.items():
                if fqn in plain and fqn in jittered and determined.any():
                    difference = (jittered[fqn] - plain[fqn]).abs()[determined]
                    torch_jitter = max(torch_jitter, float(difference.max()) / (float(plain[fqn].abs().max()) + 1e-12))
            final_bound = max(TRAJECTORY_TOLERANCE, FINALS_JITTER_MULTIPLE * torch_jitter)
        if loss_error > TRAJECTORY_TOLERANCE:
            failures.append(f"losses: worst relative difference {loss_error:.3g} > {TRAJECTORY_TOLERANCE:g}")
        if worst[1] > final_bound:
            failures.append(f"final {worst[0]}: error {worst[1]:.3g} > {final_bound:.3g}" +
                            (f" ({FINALS_JITTER_MULTIPLE:g} x torch's own spread {torch_jitter:.3g})"
                             if torch_jitter is not None else ""))
        return {"passed": not failures, "seconds": seconds, "loss_error": loss_error, "final_error": worst[1],
                "worst_tensor": worst[0], "final_error_all_elements": max(all_elements.values(), default=0.0),
                "final_bound": final_bound, "torch_final_jitter": torch_jitter, "torch_final_jitter_kind": jitter_kind,
                "elements_compared": compared, "elements_near_eps": excluded, "zero_tensors": zero_tensors,
                "first_loss": ours[0], "last_loss": ours[-1], "torch_last_loss": theirs[-1],
                "failures": failures, "reason": "; ".join(failures) or None}

    def fresh_torch_model(self):
        """The factory's model at the exported initial weights, with its batch."""
        import torch

        init = load_tensors(self.path(".init.safetensors"))
        model, batch, loss_fn, _ = call_factory(self.factory_name, self.factory)
        missing = [k for k, _ in model.named_parameters() if k not in init]
        if missing:
            raise CheckError(f"{self.path('.init.safetensors')} lacks parameters {missing[:3]}")
        model.load_state_dict(init, strict=False)
        torch.manual_seed(0)
        torch.set_num_threads(1)
        return model, batch, loss_fn

    def last_product(self) -> str | None:
        """The module of the model's last matrix product (the LM head, the
        output projection), after checking that the factory reproduces the
        export: torch's spreads are only a measure if its runs start where
        the export's did."""
        import torch

        if hasattr(self, "_last_product"):
            return self._last_product
        model, batch, loss_fn = self.fresh_torch_model()
        with torch.no_grad():
            first = float(training_loss(model, batch, loss_fn))
        exported = self.torch_trajectory()["arms"]["fp32"]["losses"][0]
        if abs(first - exported) > 1e-5 * abs(exported):
            raise CheckError(f"factory '{self.factory_name}' is not deterministic: its loss at the exported "
                             f"weights is {first:.7g}, the export's {exported:.7g} (a batch drawn without a seed?)")
        order: list[str] = []
        hooks = []
        for path, module in model.named_modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.modules.conv._ConvNd)) or type(module).__name__ == "Conv1D":
                hooks.append(module.register_forward_hook(lambda m, i, o, path=path: order.append(path)))
        with torch.no_grad():
            training_loss(model, batch, loss_fn)
        for hook in hooks:
            hook.remove()
        self._last_product = order[-1] if order else None
        return self._last_product

    def torch_run_fp64(self) -> dict:
        """The final parameters of torch's run in fp64 (model, batch and
        AdamW), rounded to fp32: the exact arithmetic fp32 runs round away
        from."""
        import torch

        trajectory = self.torch_trajectory()
        model, batch, loss_fn = self.fresh_torch_model()
        model = model.double()
        if isinstance(batch, dict):
            batch = {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in batch.items()}
        else:
            batch = tuple(v.double() if torch.is_tensor(v) and v.is_floating_point() else v for v in batch)
        optimizer = torch.optim.AdamW(model.parameters(), lr=trajectory["lr"],
                                      betas=tuple(trajectory.get("betas", (0.9, 0.999))),
                                      eps=trajectory.get("eps", 1e-8),
                                      weight_decay=trajectory["weight_decay"], foreach=False)
        for _ in range(self.steps):
            optimizer.zero_grad(set_to_none=True)
            training_loss(model, batch, loss_fn).backward()
            optimizer.step()
        return {name: p.detach().float().clone() for name, p in model.named_parameters()}

    def torch_run(self, autocast: bool, moved: str | None) -> tuple[list[float], dict]:
        """torch's trajectory from the exported weights with the export's
        AdamW, fp32 or under CPU autocast (bf16) over fp32 parameters; the
        module `moved` moves one rounding: its product kept in fp32 under
        autocast, computed in fp64 (and rounded to fp32) in fp32. Returns the
        losses and the final parameters."""
        import torch

        trajectory = self.torch_trajectory()
        model, batch, loss_fn = self.fresh_torch_model()
        if moved is not None:
            module = model.get_submodule(moved)
            forward = module.forward
            inside = [False]

            def moved_forward(*args, **kwargs):
                if autocast:
                    with torch.autocast("cpu", enabled=False):
                        return forward(*[a.float() if torch.is_tensor(a) and a.is_floating_point() else a
                                         for a in args], **kwargs)
                if inside[0]:
                    return forward(*args, **kwargs)
                # fp64 copies of the parameters, differentiable, so that the
                # fp32 parameters still get their gradients.
                params = {name: p.double() for name, p in module.named_parameters()}
                inside[0] = True
                try:
                    out = torch.func.functional_call(
                        module, params, tuple(a.double() if torch.is_tensor(a) and a.is_floating_point() else a
                                              for a in args), kwargs)
                finally:
                    inside[0] = False
                return out.float()

            module.forward = moved_forward
        optimizer = torch.optim.AdamW(model.parameters(), lr=trajectory["lr"],
                                      betas=tuple(trajectory.get("betas", (0.9, 0.999))),
                                      eps=trajectory.get("eps", 1e-8),
                                      weight_decay=trajectory["weight_decay"], foreach=False)
        losses = []
        for _ in range(self.steps):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = training_loss(model, batch, loss_fn)
            loss.backward()
            losses.append(float(loss.detach()))
            optimizer.step()
        return losses, {name: p.detach().float().clone() for name, p in model.named_parameters()}

    def check_bf16(self) -> dict:
        spec = Path(self.args.bf16_spec) if self.args.bf16_spec else self.write_spec("compute-bf16.yaml",
                                                                                      COMPUTE_BF16_SPEC)
        losses_path = self.out / "mantissa.bf16.losses.json"
        start = time.perf_counter()
        run_tool([self.tools.run, *self.common_run_flags(), "--steps", str(self.steps), "--precision", str(spec),
                  "--losses", str(losses_path), "--no-memory-report"], "mantissa-run (compute: bf16)")
        seconds = round(time.perf_counter() - start, 2)
        ours = json.loads(losses_path.read_text())["losses"]
        fp32 = self.torch_trajectory()["arms"]["fp32"]["losses"]
        moved = self.last_product()
        autocast, _ = self.torch_run(autocast=True, moved=None)
        gap = worst_relative(autocast, fp32)
        jitter = worst_relative(self.torch_run(autocast=True, moved=moved)[0], autocast) if moved else 0.0
        spread = max(gap, jitter)
        distance = worst_relative(ours, autocast)
        ratio = distance / spread if spread > 0 else float("inf")
        passed = ratio <= BF16_SPREAD_MULTIPLE
        return {"passed": passed, "seconds": seconds, "distance": distance, "distance_from_fp32": worst_relative(ours, fp32),
                "torch_gap": gap, "torch_jitter": jitter, "jitter_module": moved,
                "spread": spread, "spreads": ratio, "max_spreads": BF16_SPREAD_MULTIPLE,
                "last_loss": ours[-1], "torch_autocast_last_loss": autocast[-1],
                "reason": None if passed else f"more than {BF16_SPREAD_MULTIPLE:g} spreads"}

    def check_gpu(self) -> dict:
        spec = self.write_spec("compute-bf16.yaml", COMPUTE_BF16_SPEC)
        artifact = self.out / "gpu-artifact"
        shutil.rmtree(artifact, ignore_errors=True)
        cost_path = self.out / "cost.json"
        start = time.perf_counter()
        run_tool([self.tools.compile, str(self.pt2), "--precision", str(spec), "-o", str(artifact),
                  "--cost-report=json"], "mantissa-compile -o (GPU program)", stdout_path=cost_path)
        seconds = round(time.perf_counter() - start, 2)
        cost = json.loads(cost_path.read_text())
        figures = {"seconds": seconds, "kernels": cost["kernel_count"], "gemms": cost["gemm_count"],
                   "attention_kernels": cost["classes"].get("attention", {}).get("ops", 0),
                   "predicted_step_ms": cost["predicted_step_ms"], "cost_device": cost["device"]["name"]}
        if self.tools.ptxas is None:
            return {**figures, "passed": True, "ptxas": "not installed: PTX generated, not assembled"}
        run_tool([self.tools.ptxas, "-arch=sm_90", str(artifact / "step.ptx"), "-o", str(self.out / "step.cubin")],
                 "ptxas -arch=sm_90")
        return {**figures, "passed": True, "ptxas": "accepted (sm_90)"}

    def stall_predictions(self, spec: Path, rules: list[str]) -> set[str]:
        report = run_tool([self.tools.compile, str(self.pt2), "--precision", str(spec), *rules,
                           "--precision-report=json"], "mantissa-compile --precision-report").stdout
        warnings = json.loads(report)["warnings"]
        return {m.group(1) for w in warnings for m in [re.match(r"parameter '([^']+)' would stall", w)] if m}

    def moved_elements(self, spec: Path, rules: list[str], tag: str) -> dict[str, int]:
        import torch

        finals_path = self.out / f"mantissa.{tag}.finals.safetensors"
        run_tool([self.tools.run, *self.common_run_flags(), "--steps", str(self.steps), "--precision", str(spec),
                  *rules, "--final-params", str(finals_path), "--no-memory-report"], f"mantissa-run ({tag})")
        finals = load_tensors(finals_path)
        init = load_tensors(self.path(".init.safetensors"))
        moved = {}
        for fqn in self.record["norm_gains"]:
            final = finals[fqn]
            # A bf16 master starts as the initial value rounded to bf16.
            start = init[fqn].to(final.dtype)
            moved[fqn] = int((final != start).sum())
        return moved

    def check_stall(self) -> dict:
        gains = self.record["norm_gains"]
        if not gains:
            return {"passed": True, "applies": False, "reason": "no norm gains"}
        spec = self.write_spec("pure-bf16.yaml", PURE_BF16_SPEC)
        fixed = [f"--precision-rule={{{','.join(gains)}}}:master=fp32,moments=fp32"]
        start = time.perf_counter()
        stalls = self.stall_predictions(spec, []) & set(gains)
        stalls_fixed = self.stall_predictions(spec, fixed) & set(gains)
        moved = self.moved_elements(spec, [], "pure-bf16")
        moved_fixed = self.moved_elements(spec, fixed, "fp32-gains")
        failures = [f"{g}: reported to stall in pure bf16, moved {moved[g]} elements" for g in gains
                    if g in stalls and moved[g]]
        failures += [f"{g}: not reported to stall in pure bf16, never moved" for g in gains
                     if g not in stalls and not moved[g]]
        failures += [f"{g}: reported to stall with an fp32 master" for g in sorted(stalls_fixed)]
        failures += [f"{g}: fp32 master, never moved" for g in gains if not moved_fixed[g]]
        elements = {g: int(self._numel(g)) for g in gains}
        return {"passed": not failures, "applies": True, "seconds": round(time.perf_counter() - start, 2),
                "gains": len(gains), "elements": sum(elements.values()),
                "reported_stalling": len(stalls), "reported_stalling_fp32_masters": len(stalls_fixed),
                "moved_pure_bf16": sum(moved.values()), "moved_fp32_masters": sum(moved_fixed.values()),
                "failures": failures, "reason": "; ".join(failures[:4]) or None}

    def _numel(self, fqn: str) -> int:
        return load_tensors(self.path(".init.safetensors"))[fqn].numel()

    # -- driving

    def summary(self, check: str, figures: dict) -> str:
        if check == "export":
            return "reused" if figures.get("reused") else f"{figures.get('seconds', 0):.1f} s"
        if check == "import":
            text = f"{figures['nodes']} nodes, {figures['distinct_ops']} distinct ops"
            return text + (f"; lacks {', '.join(figures['missing_ops'])}" if figures["missing_ops"] else "")
        if check == "gradients":
            return (f"max error {figures['max_error']:.2e} ({figures['worst_tensor']}), loss {figures['loss_error']:.2e}, "
                    f"{len(figures['zero_tensors'])} zero of {figures['tensors']} (floor {figures['floor']:.2e})")
        if check == "trajectory":
            return (f"{self.steps} steps: losses {figures['loss_error']:.2e}, finals {figures['final_error']:.2e} "
                    f"({figures['worst_tensor']}; all elements {figures['final_error_all_elements']:.2e}, "
                    f"{figures['elements_near_eps']} near eps not compared)" +
                    (f"; above 1e-4, against {FINALS_JITTER_MULTIPLE:g} x torch's own fp32 spread "
                     f"{figures['torch_final_jitter']:.2e} (fp32 against {figures['torch_final_jitter_kind']})"
                     if figures.get("torch_final_jitter") is not None else ""))
        if check == "bf16":
            return (f"{figures['spreads']:.2f} spreads from torch autocast (distance {figures['distance']:.2e}; "
                    f"torch: from fp32 {figures['torch_gap']:.2e}, one rounding moved {figures['torch_jitter']:.2e})")
        if check == "gpu":
            return (f"{figures['kernels']} kernels, {figures['gemms']} GEMMs, {figures['attention_kernels']} attention, "
                    f"predicted {figures['predicted_step_ms']:.3f} ms ({figures['cost_device']}); ptxas {figures['ptxas']}")
        if check == "stall":
            if not figures["applies"]:
                return "no norm gains"
            return (f"pure bf16: {figures['reported_stalling']}/{figures['gains']} gains reported to stall, "
                    f"{figures['moved_pure_bf16']}/{figures['elements']} elements moved; fp32 masters: "
                    f"{figures['reported_stalling_fp32_masters']} reported, {figures['moved_fp32_masters']}/"
                    f"{figures['elements']} moved")
        return ""

    def run(self, checks: list[str]) -> int:
        try:
            self.describe_model()
        except Exception as error:
            self.record["error"] = f"factory '{self.factory_name}' failed: {type(error).__name__}: {error}"
            log(f"FAIL  factory    {self.record['error']}", self.stream)
            self.record["failed"] = ["factory"]
            return 1
        log(f"model {self.name}: {self.record['class']} ({self.record['library']} {self.record['library_version']}), "
            f"{self.record['parameters']:,} parameters; files in {self.out}", self.stream)
        blocked: str | None = None
        for check in CHECKS:
            if check not in checks:
                continue
            if blocked:
                figures = {"passed": False, "skipped": True, "reason": f"{blocked} failed"}
            else:
                try:
                    figures = getattr(self, f"check_{check}")()
                except CheckError as error:
                    figures = {"passed": False, "reason": str(error)}
                except Exception as error:  # a crash in a check is its failure, named
                    figures = {"passed": False, "reason": f"{type(error).__name__}: {error}"}
            self.record["checks"][check] = figures
            if figures.get("skipped"):
                status, text = "SKIP", figures["reason"]
            elif figures["passed"]:
                status, text = "PASS", self.summary(check, figures)
            else:
                status = "FAIL"
                text = figures.get("reason") or ""
                try:
                    text = f"{self.summary(check, figures)}: {text}"
                except (KeyError, TypeError):
                    pass
            log(f"{status:5} {check:10} {text}", self.stream)
            if not figures["passed"] and check in ("export", "import"):
                blocked = check
        failed = [c for c, f in self.record["checks"].items() if not f["passed"] and not f.get("skipped")]
        skipped = [c for c, f in self.record["checks"].items() if f.get("skipped")]
        self.record["failed"], self.record["skipped"] = failed, skipped
        verdict = f"FAIL ({', '.join(failed)}" + (f"; {len(skipped)} skipped)" if skipped else ")")
        log(f"{self.name}: " + (verdict if failed else "PASS"), self.stream)
        return 1 if failed else 0


def zoo_factories() -> list[str]:
    """MODULE:FACTORY of every zoo model: the public functions without
    parameters of the modules beside this one (a module's MODELS, when it
    has one, names them)."""
    import inspect

    factories = []
    for path in sorted(Path(__file__).parent.glob("*.py")):
        if path.stem.startswith("_") or path.stem == "check":
            continue
        module_name = f"{__package__ or 'mantissa.zoo'}.{path.stem}"
        module = importlib.import_module(module_name)
        listed = getattr(module, "MODELS", None)
        if isinstance(listed, dict):
            names = [name for name, factory in listed.items() if callable(factory) and
                     getattr(module, name, None) is factory]
        else:
            names = [name for name, value in vars(module).items()
                     if inspect.isfunction(value) and value.__module__ == module.__name__
                     and not name.startswith("_")
                     and not any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                 for p in inspect.signature(value).parameters.values())]
        factories += [f"{module_name}:{name}" for name in names]
    return factories


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv == ["--list"]:
        print("\n".join(zoo_factories()))
        return 0
    parser = argparse.ArgumentParser(prog="python3 -m mantissa.zoo.check",
                                     description="Checks a zoo model against the torch that exports it (issue 39).")
    parser.add_argument("factory", help="MODULE:FACTORY (or FILE.py:FACTORY)")
    parser.add_argument("--out", help="directory for the export and every run's files (default: a new temporary one)")
    parser.add_argument("--name", help="the export's name (default: the factory's)")
    parser.add_argument("--json", action="store_true", help="every figure as JSON on stdout, the lines on stderr")
    parser.add_argument("--reuse", action="store_true", help="check the export already in --out instead of exporting")
    parser.add_argument("--only", help=f"comma-separated checks to run, of {','.join(CHECKS)}")
    parser.add_argument("--steps", type=int, default=20, help="training steps of the trajectories (default 20)")
    parser.add_argument("--bf16-spec", help="the precision spec of the bf16 check's run (default: compute: bf16)")
    parser.add_argument("--mantissa-bin", help="directory of mantissa-compile and mantissa-run")
    args = parser.parse_args(argv)
    checks = list(CHECKS)
    if args.only:
        checks = [c.strip() for c in args.only.split(",")]
        unknown = [c for c in checks if c not in CHECKS]
        if unknown:
            parser.error(f"unknown check(s) {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    stream = sys.stderr if args.json else sys.stdout
    try:
        checker = Checker(args, stream)
    except CheckError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    status = checker.run(checks)
    if args.json:
        json.dump(checker.record, sys.stdout, indent=1)
        print()
    return status


if __name__ == "__main__":
    sys.exit(main())
