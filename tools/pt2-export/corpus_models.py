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


def with_attention(model, attend):
    """`model` (the corpus' TinyLlama) with each layer's attention (the
    products, the causal mask and the softmax of LlamaAttn's forward)
    computed by `attend(q, k, v)` instead, as a model that calls
    F.scaled_dot_product_attention computes it; the mask buffer, then
    unread, dropped so that the graph has no input the model does not read.
    For tools/pt2-export/export_sdpa_models.py and
    test/Inputs/aten/make_attention_models.py."""
    def forward(self, x):
        b, t, d = x.shape
        q = self.q_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.h, self.hd).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        o = attend(q, k, v)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, d))

    for layer in model.layers:
        attn = layer.self_attn
        attn.forward = forward.__get__(attn)
        del attn._buffers["mask"]
    return model
