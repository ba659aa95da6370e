"""Real model definitions from small configs, for ``mantissa.export``.

Each factory returns ``(model, batch)``: a randomly initialised model with a
fixed seed (nothing is downloaded) and a batch of keyword tensors whose
``labels`` make the model's output carry its training loss.

- ``mantissa.zoo.transformers_models``: Hugging Face transformers
  ``llama``, ``gpt2``, ``bert``, ``qwen3``, ``mistral``, ``phi3``,
  ``gemma2``, ``vit``.

Export one: ``python3 -m mantissa.export
mantissa.zoo.transformers_models:llama OUT llama --reference-steps 20``.
"""
