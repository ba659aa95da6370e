#!/usr/bin/env python3
"""Writes a GPT-2-style joint training program as a .pt2 archive, by hand.

usage: make_gpt2_block.py OUT.pt2 [OUT_DIR_FOR_BATCH]

torch >= 2.9 is not available on these machines, so this builds in the
serialised schema (major 8) what torch.export writes for a LayerNorm ->
Linear -> GELU(tanh) -> Linear (no bias, `t`) -> log-softmax cross-entropy
block, with the backward as torch emits it: native_layer_norm_backward,
gelu_backward, _log_softmax_backward_data, `t`/`transpose` and sums. It
exercises the op families the corpus graphs lack. The batch is written as
OUT_DIR/batch.safetensors (`input.0`: x [4, 16] f32, `input.1`: targets [4]
i64).
"""
import json
import math
import random
import struct
import sys
import zipfile

F32, I64, BOOL = 7, 5, 12
nodes, tensor_values = [], {}


def meta(name, dtype, shape):
    strides, stride = [], 1
    for size in reversed(shape):
        strides.insert(0, stride)
        stride *= size
    tensor_values[name] = {
        "dtype": dtype, "sizes": [{"as_int": s} for s in shape], "requires_grad": False,
        "device": {"type": "cpu", "index": None},
        "strides": [{"as_int": s} for s in strides], "storage_offset": {"as_int": 0}, "layout": 7}


def node(target, inputs, outputs):
    """inputs: list of (name, arg); outputs: list of (name, dtype, shape) or None."""
    nodes.append({
        "target": f"torch.ops.aten.{target}",
        "inputs": [{"name": n, "arg": a, "kind": 1} for n, a in inputs],
        "outputs": [{"as_tensor": {"name": o[0]}} if o else {"as_none": True} for o in outputs],
        "metadata": {"stack_trace": "make_gpt2_block.py",
                     "nn_module_stack": "L__self__,block,torch.nn.Module"},
        "is_hop_single_tensor_return": None,
        "name": next(o[0] for o in outputs if o)})
    for output in outputs:
        if output:
            meta(*output)


def t(name):
    return {"as_tensor": {"name": name}}


def ints(*values):
    return {"as_ints": list(values)}


parameters = [("ln.weight", [16]), ("ln.bias", [16]), ("fc.weight", [32, 16]),
              ("fc.bias", [32]), ("proj.weight", [8, 32])]
for fqn, shape in parameters:
    meta("p_" + fqn.replace(".", "_"), F32, shape)
meta("x", F32, [4, 16])
meta("y", I64, [4])

# Forward.
node("native_layer_norm.default",
     [("input", t("x")), ("normalized_shape", ints(16)), ("weight", t("p_ln_weight")),
      ("bias", t("p_ln_bias")), ("eps", {"as_float": 1e-5})],
     [("ln", F32, [4, 16]), ("ln_mean", F32, [4, 1]), ("ln_rstd", F32, [4, 1])])
node("permute.default", [("self", t("p_fc_weight")), ("dims", ints(1, 0))], [("fc_t", F32, [16, 32])])
node("addmm.default", [("self", t("p_fc_bias")), ("mat1", t("ln")), ("mat2", t("fc_t"))],
     [("h", F32, [4, 32])])
node("gelu.default", [("self", t("h")), ("approximate", {"as_string": "tanh"})], [("g", F32, [4, 32])])
node("t.default", [("self", t("p_proj_weight"))], [("proj_t", F32, [32, 8])])
node("mm.default", [("self", t("g")), ("mat2", t("proj_t"))], [("logits", F32, [4, 8])])
node("_log_softmax.default", [("self", t("logits")), ("dim", {"as_int": 1}),
                              ("half_to_float", {"as_bool": False})], [("logp", F32, [4, 8])])
node("unsqueeze.default", [("self", t("y")), ("dim", {"as_int": 1})], [("y1", I64, [4, 1])])
node("gather.default", [("self", t("logp")), ("dim", {"as_int": 1}), ("index", t("y1"))],
     [("picked", F32, [4, 1])])
node("squeeze.dim", [("self", t("picked")), ("dim", {"as_int": 1})], [("picked1", F32, [4])])
node("neg.default", [("self", t("picked1"))], [("nll", F32, [4])])
node("mean.default", [("self", t("nll"))], [("loss", F32, [])])

# Backward.
node("full_like.default", [("self", t("logp")), ("fill_value", {"as_int": 0})], [("zeros", F32, [4, 8])])
node("scatter.value", [("self", t("zeros")), ("dim", {"as_int": 1}), ("index", t("y1")),
                       ("value", {"as_float": -0.25})], [("dlogp", F32, [4, 8])])
node("_log_softmax_backward_data.default",
     [("grad_output", t("dlogp")), ("output", t("logp")), ("dim", {"as_int": 1}),
      ("input_dtype", {"as_scalar_type": F32})], [("dlogits", F32, [4, 8])])
node("transpose.int", [("self", t("dlogits")), ("dim0", {"as_int": 0}), ("dim1", {"as_int": 1})],
     [("dlogits_t", F32, [8, 4])])
node("mm.default", [("self", t("dlogits_t")), ("mat2", t("g"))], [("dproj", F32, [8, 32])])
node("mm.default", [("self", t("dlogits")), ("mat2", t("p_proj_weight"))], [("dg", F32, [4, 32])])
node("gelu_backward.default", [("grad_output", t("dg")), ("self", t("h")),
                               ("approximate", {"as_string": "tanh"})], [("dh", F32, [4, 32])])
node("t.default", [("self", t("dh"))], [("dh_t", F32, [32, 4])])
node("mm.default", [("self", t("dh_t")), ("mat2", t("ln"))], [("dfc", F32, [32, 16])])
node("sum.dim_IntList", [("self", t("dh")), ("dim", ints(0)), ("keepdim", {"as_bool": False})],
     [("dfc_b", F32, [32])])
node("mm.default", [("self", t("dh")), ("mat2", t("p_fc_weight"))], [("dln", F32, [4, 16])])
node("native_layer_norm_backward.default",
     [("grad_out", t("dln")), ("input", t("x")), ("normalized_shape", ints(16)),
      ("mean", t("ln_mean")), ("rstd", t("ln_rstd")), ("weight", t("p_ln_weight")),
      ("bias", t("p_ln_bias")), ("output_mask", {"as_bools": [False, True, True]})],
     [None, ("dln_w", F32, [16]), ("dln_b", F32, [16])])

grads = {"ln.weight": "dln_w", "ln.bias": "dln_b", "fc.weight": "dfc", "fc.bias": "dfc_b",
         "proj.weight": "dproj"}
input_specs = [{"parameter": {"arg": {"name": "p_" + f.replace(".", "_")}, "parameter_name": f}}
               for f, _ in parameters]
input_specs += [{"user_input": {"arg": {"as_tensor": {"name": n}}}} for n in ("x", "y")]
output_specs = [{"loss_output": {"arg": {"name": "loss"}}}]
output_specs += [{"gradient_to_parameter": {"arg": {"name": grads[f]}, "parameter_name": f}}
                 for f, _ in parameters]
model = {
    "graph_module": {
        "graph": {"inputs": [t("p_" + f.replace(".", "_")) for f, _ in parameters] + [t("x"), t("y")],
                  "outputs": [t("loss")] + [t(grads[f]) for f, _ in parameters],
                  "nodes": nodes, "tensor_values": tensor_values, "sym_int_values": {},
                  "sym_bool_values": {}, "sym_float_values": {}, "custom_obj_values": {},
                  "is_single_tensor_return": False},
        "signature": {"input_specs": input_specs, "output_specs": output_specs},
        "module_call_graph": [], "metadata": {}},
    "opset_version": {"aten": 10}, "range_constraints": {},
    "schema_version": {"major": 8, "minor": 17}, "verifiers": [], "torch_version": "2.11.0"}

rng = random.Random(7)
weights, blobs = {}, {}
for index, (fqn, shape) in enumerate(parameters):
    count = math.prod(shape)
    if fqn == "ln.weight":
        values = [1.0 + 0.1 * rng.uniform(-1, 1) for _ in range(count)]
    else:
        values = [rng.uniform(-0.3, 0.3) for _ in range(count)]
    blobs[f"weight_{index}"] = struct.pack(f"<{count}f", *values)
    weights[fqn] = {"path_name": f"weight_{index}", "is_param": True, "use_pickle": False,
                    "tensor_meta": tensor_values["p_" + fqn.replace(".", "_")]}

root = "gpt2_block"
with zipfile.ZipFile(sys.argv[1], "w") as archive:
    archive.writestr(f"{root}/archive_format", "pt2")
    archive.writestr(f"{root}/models/model.json", json.dumps(model))
    archive.writestr(f"{root}/data/weights/model_weights_config.json", json.dumps({"config": weights}))
    archive.writestr(f"{root}/data/constants/model_constants_config.json", json.dumps({"config": {}}))
    for name, blob in blobs.items():
        archive.writestr(f"{root}/data/weights/{name}", blob)

if len(sys.argv) > 2:
    x = [rng.uniform(-1, 1) for _ in range(64)]
    y = [1, 5, 0, 7]
    header = {"input.0": {"dtype": "F32", "shape": [4, 16], "data_offsets": [0, 256]},
              "input.1": {"dtype": "I64", "shape": [4], "data_offsets": [256, 288]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{sys.argv[2]}/batch.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + struct.pack("<64f", *x) + struct.pack("<4q", *y))
