# Shared by the fidelity scripts: the corpus' model definitions (from its
# export_corpus.py, without the export half, which needs torch >= 2.9) and a
# numpy safetensors reader.
import json, os, struct
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CORPUS = os.path.normpath(os.path.join(HERE, "..", "..", "test", "Inputs", "corpus"))


def model_namespace(corpus):
    """Executes export_corpus.py's model half; its `make(name)` builds a model."""
    src = open(f"{corpus}/export_corpus.py").read().split("def arg_json")[0]
    src = src.replace("from safetensors.torch import save_file", "")
    src = src.replace("OUT = sys.argv[1]\nos.makedirs(OUT, exist_ok=True)", "")
    src = src.replace("torch.set_num_threads(1)", "")  # callers choose threads
    ns = {}
    exec(compile(src, "export_corpus_models", "exec"), ns)
    return ns


def load(path):
    """Every tensor of a safetensors file as a numpy array (BF16 as uint16 bits)."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    dt = {"F32": np.float32, "I64": np.int64, "BF16": np.uint16, "F64": np.float64}
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt[v["dtype"]]).reshape(v["shape"]).copy()
    return out
