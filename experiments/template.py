"""A study to copy (README, "Write your own study"): does pre-norm end below post-norm?

  python launch.py --mode=sweep --sweep=experiments/template.py:tiny \
      --sweep_dir=runs/studies/template --parallel=2
  python launch.py --mode=report --sweep_dir=runs/studies/template

`tiny` is 2 points of 100 steps (two minutes on 2 CPU cores): it checks that the file works, and
its verdict is "inconclusive" (one seed has no interval). `cpu` (`gpu`) is the protocol's
model, budget and seeds (`presets.py`, experiments/README.md "Protocol"): the 6 runs a
verdict rests on.

A study file is a sweep file with a question. `--mode=sweep` reads `get_sweep`; the report
reads the other hooks (all optional). They are declared, with their types, in
`transformer/study.py`, which refuses a hook of the wrong type or a misspelled one (name a
helper `_like_this`):

- `get_sweep(preset)`: the points, each a dict 'section.field' -> value;
- `CLAIM`: the claim under test, quoted at the top of the report;
- `analyze(runs)`: the `## Verdict` lines, one of them `analysis.verdict(...)`;
- `figures(runs, sweep_dir)`: figures written into sweep_dir, as (caption, file) pairs;
- `summarize(runs)`: the study's entry in experiments/results/README.md;
- `THRESHOLDS`, `THRESHOLDS_NOT_READ`: the `## Robustness` section (the call at the
  neighbours of each threshold it reads; the ones it does not read, named);
- `REGISTRATION`: per call, "pre-registered at <commit>" (the commit that fixed it before its
  first run) or "post hoc: <what it replaced; where it was confirmed>" (the `## Calls` section).
- `REPORT_DIAGNOSTICS`: per-layer diagnostics to plot against the swept fields (unused here).
- `CONFIRMATORY_SEEDS`: the seeds a call chosen on the others is checked on, fixed before their
  runs; the verdict reads them alone (`analysis.confirmatory_reading`) and the generic tables
  show them in rows apart (unused here: this call was fixed before any run).

The call, fixed before the runs (`experiments/paired.py`): post-norm's clipped final eval loss
minus pre-norm's, at the protocol's matched LR, paired by seed. It *agrees* when the 95%
interval lies above `LOSS_MARGIN` (0.02 nats/token), *disagrees* when below, and is
*inconclusive* when it contains it or there are fewer than 2 seeds.
"""

from experiments import analysis as a
from experiments import atlas, paired
from experiments.presets import PROTOCOL_MATCHED_LR, PROTOCOL_SEEDS, PROTOCOL_SIZES, protocol
from transformer.sweep import preset, product

CLAIM = ("Xiong et al. 2020: pre-norm trains better than post-norm (here: ends lower at one "
         "matched LR, with warm-up).")
PLACEMENTS = ["pre", "post"]
LOSS_MARGIN = 0.02  # nats/token: post's loss above pre's by more than this agrees
FIGURE = "loss_heatmap.webp"

# The tiny preset: configs/default.py:smoke's model, 100 steps, one seed.
TINY = {"model.d_model": 64, "model.num_heads": 4, "model.num_layers": 2, "model.d_ff": 128,
        "data.seq_len": 64, "train.batch_size": 8, "data.eval_batches": 4,
        "train.num_steps": 100, "optim.warmup_steps": 10, "train.eval_every": 50,
        "train.log_every": 10, "checkpoint.every_steps": 50, "train.samples_at_eval": False,
        "optim.learning_rate": 1e-2}
SIZES = {"tiny": TINY,
         **{s: {**PROTOCOL_SIZES[s], **protocol(s), a.LR: PROTOCOL_MATCHED_LR[s]}
            for s in ("cpu", "gpu")}}
SEEDS = {"tiny": [0], "cpu": PROTOCOL_SEEDS, "gpu": PROTOCOL_SEEDS}


def get_sweep(size: str = "cpu"):
  """Pre- and post-norm at the size's fixed fields, one point per seed."""
  return product(preset(SIZES, size), {a.PLACEMENT: PLACEMENTS}, {"seed": SEEDS[size]})


def measure(runs) -> dict:
  """`{placement: {seed: clipped final loss}}` and the call's paired difference."""
  losses = {p: paired.seed_losses(a.select(runs, model__norm_placement=p)) for p in PLACEMENTS}
  return {"losses": losses,
          "call": paired.difference("post-norm minus pre-norm", losses["post"], losses["pre"])}


def analyze(runs):
  """The table, the paired difference and the verdict."""
  m = measure(runs)
  rows = [[p, a.ci(m["losses"][p].values()), a.status_counts(a.select(
      runs, model__norm_placement=p))] for p in PLACEMENTS]
  call = m["call"]
  why = (paired.call_text(call, LOSS_MARGIN) if len(call.per_seed) > 1 else
         f"{call.text()}: fewer than 2 seeds have no interval (the cpu preset runs 3)")
  return [a.protocol(runs), "",
          *a.table(["placement", "clipped final eval loss (mean ± 95% CI)", "runs"], rows), "",
          f"- {call.text()}", "",
          a.verdict(paired.judge(call, LOSS_MARGIN), why + ".")]


def figures(runs, sweep_dir):
  """`loss_heatmap.webp`: placement x LR, the mean clipped final loss."""
  return atlas.loss_heatmap_figure(runs, sweep_dir, FIGURE, lambda r: r.overrides[a.PLACEMENT],
                                   PLACEMENTS)


def summarize(runs):
  """The study's entry in experiments/results/README.md (when its results are committed)."""
  word, _ = a.verdict_of(analyze(runs))
  return {"verdict": word, "numbers": [measure(runs)["call"].text()], "figure": FIGURE}


# The call reads the loss margin and the confidence level (its seeds are described under the
# robustness table, not moved); one LR, so "each setting at the matched LR" cannot move it.
THRESHOLDS = paired.margin_thresholds((0.01, 0.05), matched_lr=False)
THRESHOLDS_NOT_READ = {**paired.NOT_READ,
                       paired.MATCHED_LR.label: "every setting runs at the matched LR only"}
# Write the commit that fixes the call here before the first run (`git log -1 --format=%h`).
REGISTRATION = {"post minus pre": "pre-registered at fddc016, the commit of this template "
                                  "(its statistic and margin, before its runs)"}
