"""Model and data sizes shared by the norm-placement studies (`--sweep=FILE.py:cpu|gpu`).

`cpu`: small width on the byte-level Python-stdlib corpus (the default data), sized so a
study finishes on 2 CPU cores in about an hour; `gpu`: the same data, a model sized for one
accelerator. A study adds its own fields (placement, depth, learning rate, steps) on top.
"""

SIZES = {
    "cpu": {"model.d_model": 64, "model.num_heads": 4, "model.d_ff": 256,
            "data.seq_len": 128, "train.batch_size": 16, "data.eval_batches": 4},
    "gpu": {"model.d_model": 512, "model.num_heads": 8, "model.d_ff": 2048,
            "data.seq_len": 512, "train.batch_size": 64, "data.eval_batches": 16},
}

# Every placement of the block (the norms branch adds peri, deepnorm, mix and admin).
PLACEMENTS = ["pre", "post", "peri", "deepnorm", "mix", "admin"]

# One optimizer step at initialization, with per-layer diagnostics: the gradient studies.
AT_INIT = {"train.num_steps": 1, "optim.warmup_steps": 0, "train.log_every": 1,
           "train.eval_every": 1, "checkpoint.every_steps": 1, "train.diagnostics_every": 1}
