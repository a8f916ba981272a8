"""Parameters in and out of a run: `init_from` (start from another run's checkpoint, matching
parameters only), `hf_gpt2` (Hugging Face GPT-2 weights: the name mapping, import and export)
and `hf_tokenizer` (the tokenizer files an export writes, and the id offset between a
tokenizer's ids and the run's)."""
