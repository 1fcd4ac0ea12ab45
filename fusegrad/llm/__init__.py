"""LLaMA-style language models: the model (`model.py`), GGUF files (`gguf.py`), a byte-level BPE tokenizer
(`tokenizer.py`) and sampling (`sampling.py`). Module paths and names follow the reference's `tinygrad.llm`.
"""
