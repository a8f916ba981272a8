"""Tasks: what a run trains on and how it is scored, built from the config and its data's facts.

`base` (the Task protocol and what every task shares), `language` (decoder LM, masked LM),
`seq2seq` (encoder-decoder, BLEU), `classification` (sequences, ViT images), `losses` (the
cross-entropy sums), `decode` (KV-cache greedy, sampling, beam search, the EOS cutter) and
`generate` (text in, text out: prompts cut to the context, decoded outputs).
"""
