"""The corpus' model classes and `make` (test/Inputs/corpus/export_corpus.py),
without that script's export half (which needs torch >= 2.9 and safetensors):
for autocast_reference.py and for factories of larger models of the same
architecture (bench/step/llama120m.py)."""
import os

CORPUS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "test", "Inputs", "corpus")


def corpus_definitions():
    """The namespace of export_corpus.py's model half: TinyLlama, make, ..."""
    source = open(os.path.join(CORPUS, "export_corpus.py")).read()
    source = source.split("def arg_json")[0]
    source = source.replace("from safetensors.torch import save_file", "")
    source = source.replace("OUT = sys.argv[1]\nos.makedirs(OUT, exist_ok=True)", "")
    namespace = {}
    exec(compile(source, "export_corpus_models", "exec"), namespace)
    return namespace
