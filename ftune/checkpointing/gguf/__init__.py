"""GGUF in and out: llama.cpp's single-file format.

- reading (``ftune convert gguf``): ``reader`` (file -> HF folder), ``tensors`` (dequantizing and
  un-permuting), ``tokenizer`` (the embedded vocabulary -> tokenizer.json), ``gemma3`` (that
  family's differences);
- writing (``ftune export gguf``): ``export`` (folder -> file), ``export_meta`` (hyper-parameters),
  ``export_tensors`` (names, permutations), ``export_types`` (the file types and each tensor's
  type), ``kquants`` (the Q4_K/Q5_K/Q6_K encoders), ``export_vocab`` (tokenizer metadata),
  ``ollama`` (the Modelfile written beside the file).

Nothing is imported here: ``ftune convert`` and ``ftune export`` import the module they need, after
their arguments are checked (torch and gguf take seconds to import).
"""
