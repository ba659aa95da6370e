"""The corpus' models (test/Inputs/corpus) as zoo factories, for bench/zoo/run.sh.

`bench/zoo/run.sh corpus:llama_medium` times torch on llama_medium through
bench/zoo/torch_step.py with this module's factory, and Mantissa on the
corpus' own export (NAME.pt2, NAME.inputs.safetensors, NAME.init.safetensors),
so both run the same model, weights and batch. The model definitions are the
corpus exporter's (export_corpus.py, up to its export half, which needs
torch >= 2.9 and writes files); the batch is the exported one, keyed by the
names of the forward's arguments, input_ids first so that rates count tokens.

MANTISSA_CORPUS_DIR overrides the corpus directory (default: the repository's
test/Inputs/corpus).
"""
import os
from pathlib import Path

CORPUS = Path(os.environ.get("MANTISSA_CORPUS_DIR", Path(__file__).resolve().parents[2] / "test/Inputs/corpus"))


def _definitions() -> dict:
    source = (CORPUS / "export_corpus.py").read_text()
    source = source.split("def arg_json")[0]
    source = source.replace("from safetensors.torch import save_file", "")
    source = source.replace("OUT = sys.argv[1]\nos.makedirs(OUT, exist_ok=True)", "")
    namespace: dict = {}
    exec(compile(source, str(CORPUS / "export_corpus.py"), "exec"), namespace)
    return namespace


def _corpus_model(name: str):
    from safetensors.torch import load_file

    definitions = _definitions()
    model, _ = definitions["make"](name)
    inputs = load_file(str(CORPUS / f"{name}.inputs.safetensors"))
    if type(model).__name__ != "TinyLlama":
        raise ValueError(f"corpus model '{name}' ({type(model).__name__}) is not a token model")

    class TokenModel(type(model)):
        """The same module (same state dict keys), its token argument named input_ids."""

        def forward(self, input_ids, targets):
            return super().forward(input_ids, targets)

    model.__class__ = TokenModel
    model.load_state_dict(load_file(str(CORPUS / f"{name}.init.safetensors")))
    return model, {"input_ids": inputs["input.0"], "targets": inputs["input.1"]}


def llama_medium():
    return _corpus_model("llama_medium")


def llama():
    return _corpus_model("llama")
