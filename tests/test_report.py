"""The sweep report on hand-written workdirs: statistics, marks, table, CSV and plots."""

import csv
import json
import math
import os

import pytest
from PIL import Image

from transformer.report import write as report
from transformer.report import stats as report_stats
from transformer.report import runs as report_runs
from transformer.report import figures as report_figures
from transformer.report import runs as sweep_runs
from transformer.sweep.points import MANIFEST, point_names


def test_mean_ci_uses_the_t_distribution():
  # Reference: t_{0.975, 2} = 4.302652729911275 (tables); sd of [1, 2, 3] is 1.
  mean, half = report_stats.mean_ci([1.0, 2.0, 3.0])
  assert mean == 2.0 and half == pytest.approx(4.302652729911275 / math.sqrt(3), rel=1e-9)
  # t_{0.975, 1} = 12.706204736174705; sd of [1, 3] is sqrt(2).
  assert report_stats.mean_ci([1.0, 3.0])[1] == pytest.approx(12.706204736174705 * math.sqrt(2) /
                                                         math.sqrt(2), rel=1e-9)
  mean, half = report_stats.mean_ci([5.0])
  assert mean == 5.0 and math.isnan(half)


def test_layer_profiles_reads_layer_indices_from_names():
  row = {"step": 0, "split": "diagnostics", "time": 1.0, "grad_norm/layer_0/ffn": 1.0,
         "grad_norm/layer_1/ffn": 2.0, "residual_rms/layers_1": 3.0, "loss": 4.0}
  assert report_figures.layer_profiles(row) == {"grad_norm/*/ffn": {0: 1.0, 1: 2.0},
                                        "residual_rms/*": {1: 3.0}}


def test_the_generic_diagnostics_figures_draw_the_key_quantities_only():
  from transformer.report.figures import key_diagnostic
  for name in ("decoder/*/grad_norm", "encoder/*/update_ratio", "decoder/*/residual_rms",
               "decoder/*/self_attention/attn_max_logit",
               "decoder/*/cross_attention/attn_entropy", "output/log_z"):
    assert key_diagnostic(name), name
  for name in ("decoder/*/feed_forward/grad_norm", "decoder/*/self_attention/query/grad_norm",
               "decoder/*/param_norm", "decoder/*/feed_forward/out_rms"):
    assert not key_diagnostic(name), name


def test_the_diagnostics_figures_draw_each_placement_at_its_best_lr():
  """With an LR swept, the per-layer figures draw each setting of the other fields at its own
  best LR (lowest mean final loss over seeds; a diverged run counts as its initial loss, 5.0
  here), not all of them; without an LR swept, every run."""
  from transformer.report.diagnostics_figures import at_best_lr
  losses = {("pre", 1e-3): (2.0, 2.2), ("pre", 1e-2): (1.8, 2.3),  # means 2.10, 2.05
            ("post", 1e-3): (2.2, 2.4), ("post", 1e-2): (1.5, None)}  # 2.30; (1.5 + 5) / 2
  runs = []
  for (placement, lr), values in losses.items():
    for seed, loss in enumerate(values):
      run = report_runs.Run(f"{placement},{lr},{seed}", {"model.norm_placement": placement,
                                                    "optim.learning_rate": lr, "seed": seed},
                       10, "/nowhere", {"train": [{"step": 1, "loss": 5.0}],
                                        "eval": [{"step": 10, "loss": loss}]})
      run.status = "finished" if loss is not None else "diverged"
      runs.append(run)
  assert sorted(r.name for r in at_best_lr(runs)) == ["post,0.001,0", "post,0.001,1",
                                                       "pre,0.01,0", "pre,0.01,1"]
  one_lr = [r for r in runs if r.overrides["optim.learning_rate"] == 1e-3]
  assert at_best_lr(one_lr) == one_lr


@pytest.mark.parametrize("plot", ["plot_diagnostics", "plot_diagnostics_over_steps"])
def test_the_diagnostics_figures_tell_24_groups_apart_in_a_legend_inside_the_figure(
    plot, tmp_path, monkeypatch):
  """warmup_placement draws 24 groups: each gets a style no other has (tab10 alone repeated
  colours) and one legend entry (plus the dashed/solid key of the per-layer figure), and the
  legend lies inside the figure, below the panels, in fewer columns when its labels are long
  (its 48 entries ran off the edge before)."""
  from transformer.report import diagnostics_figures
  drawn = {}

  def keep(plt, fig, path, dpi):
    fig.canvas.draw()
    drawn["fig"], drawn["legend"] = fig, fig.legends[0]
  monkeypatch.setattr(diagnostics_figures, "save_figure", keep)
  runs = []
  for i in range(24):
    rows = [{"step": step, **{f"decoder/layer_{l}/{m}": 1.0 + i + l + step for l in range(3)
                              for m in ("residual_rms", "update_ratio", "attn_entropy")}}
            for step in (0, 450)]
    runs.append(report_runs.Run(f"g{i}", {"optim.warmup_steps": i // 6 * 60,
                                          "model.norm_placement": f"p{i % 6}" + "_long" * 12,
                                          "seed": 0},
                                450, "/nowhere", {"diagnostics": rows}))
  assert getattr(diagnostics_figures, plot)(runs, str(tmp_path / "d.webp"))
  legend = drawn["legend"]
  lines = [l for l in drawn["fig"].axes[0].get_lines()]
  styles = {(l.get_color(), l.get_marker(), str(l.get_linestyle())) for l in lines
            if l.get_linestyle() == "-" or plot == "plot_diagnostics_over_steps"}
  assert len(styles) == 24
  labels = [t.get_text() for t in legend.get_texts()]
  assert len(labels) == (26 if plot == "plot_diagnostics" else 24)
  assert f"warmup_steps=180, norm_placement=p5{'_long' * 12}" in labels
  box, figure = legend.get_window_extent(), drawn["fig"].bbox
  assert box.x0 >= figure.x0 and box.y0 >= figure.y0
  assert box.x1 <= figure.x1 and box.y1 <= figure.y1
  renderer = drawn["fig"].canvas.get_renderer()  # nor over a panel or its axis labels
  assert box.y1 <= min(ax.get_tightbbox(renderer).y0 for ax in drawn["fig"].axes
                       if ax.get_visible() and ax.axison)


def test_a_field_of_names_gets_no_final_loss_figure_beside_the_lr_figure():
  """With an LR swept, the LR figure draws every (setting, LR) cell; the placement's (or
  qk-norm's) figure would draw them again with x and lines swapped. A numeric field (warm-up)
  keeps its figure, and without an LR figure (none swept, or tied to another field) every
  field does."""
  from transformer.report.write import transposed

  def runs(**values):
    keys = list(values)
    return [report_runs.Run(str(i), dict(zip(keys, combo)), 10, "/nowhere", {})
            for i, combo in enumerate(zip(*values.values()))]
  lr, place, warm, qk = ("optim.learning_rate", "model.norm_placement", "optim.warmup_steps",
                         "model.qk_norm")
  grid = runs(**{place: ["post", "pre"] * 4, warm: [0, 0, 60, 60] * 2,
                 qk: [True, False, False, True] * 2, lr: [1e-3] * 4 + [1e-2] * 4})
  assert transposed(grid, [place, warm, qk, lr], {}) == [place, qk]
  assert transposed(grid, [place, warm, qk], {}) == []
  assert transposed(grid, [place, lr], {lr: place}) == []


def _write_run(workdir, train_losses, eval_rows, diagnostics=()):
  os.makedirs(workdir)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    for step, loss in train_losses:
      f.write(json.dumps({"step": step, "split": "train", "time": float(step), "loss": loss,
                          "grad_norm": 1.0}) + "\n")
    for step, loss, bpb in eval_rows:
      f.write(json.dumps({"step": step, "split": "eval", "time": float(step), "loss": loss,
                          "bits_per_byte": bpb, "accuracy": 0.5}) + "\n")
    for step, values in diagnostics:
      f.write(json.dumps({"step": step, "split": "diagnostics", "time": 0.0,
                          **{f"decoder/layer_{i}/feed_forward/grad_norm": v
                             for i, v in enumerate(values)},
                          **{f"decoder/layer_{i}/grad_norm": 2 * v
                             for i, v in enumerate(values)}}) + "\n")


@pytest.fixture
def sweep_dir(tmp_path, monkeypatch):
  """lr x placement x 3 seeds; post at lr 0.01 diverges once and collapses once."""
  points, d = [], tmp_path / "sweep"
  for placement in ("pre", "post"):
    for lr in (0.001, 0.01):
      for seed in range(3):
        points.append({"model.norm_placement": placement, "optim.learning_rate": lr,
                       "seed": seed})
  names = point_names(points)
  for p, name in zip(points, names):
    w = str(d / name)
    final = 2.0 + p["seed"] * 0.1 + (0.5 if p["model.norm_placement"] == "post" else 0)
    train = [(10, 4.0), (20, 3.0), (30, final), (40, final)]
    diag = [(0, [1.0, 2.0, 3.0]), (40, [1.0, 1.0, 1.0])]
    if p["model.norm_placement"] == "post" and p["optim.learning_rate"] == 0.01:
      if p["seed"] == 0:
        train = [(10, 4.0), (20, float("nan")), (30, float("nan")), (40, float("nan"))]
        final = float("nan")
      elif p["seed"] == 1:  # flat at the unigram entropy (3.5 here) for the second half
        train, final = [(10, 4.0), (20, 3.51), (30, 3.5), (40, 3.5)], 3.5
    if name == names[-1]:  # the last point has not finished
      _write_run(w, train[:2], [(20, 3.0, 4.0)])
      continue
    _write_run(w, train, [(20, 3.0, 4.0), (40, final, final * 1.4427)], diag)
  with open(d / MANIFEST, "w") as f:
    json.dump({"sweep_file": "s.py", "config": "configs/default.py:smoke", "overrides": [],
               "claim": "post-norm needs warm-up", "report_diagnostics": ["feed_forward/grad_norm"],
               "points": [{"name": n, "overrides": p, "num_steps": 40}
                          for n, p in zip(names, points)]}, f)
  monkeypatch.setattr(sweep_runs, "unigram_entropy", lambda workdir, cache: 3.5)
  return str(d)


def test_report_marks_runs_and_averages_only_healthy_ones(sweep_dir):
  diverged = "norm_placement=post,learning_rate=0.01,seed=0"
  with open(os.path.join(sweep_dir, diverged, "log.txt"), "w") as f:
    f.write("step 20 | loss nan\n")  # the others' logs are gone, as in a committed (packed) run
  path = report.write_report(sweep_dir)
  text = open(path).read()
  status = {r.name: r.status for r in report_runs.load_runs(sweep_dir)}
  assert sorted(status.values()).count("finished") == 9
  assert status["norm_placement=post,learning_rate=0.01,seed=0"] == "diverged"
  assert status["norm_placement=post,learning_rate=0.01,seed=1"] == "collapsed"
  assert status["norm_placement=post,learning_rate=0.01,seed=2"] == "incomplete"
  # pre at 0.001: final losses 2.0, 2.1, 2.2 -> 2.1 ± t(0.975, 2) * 0.1 / sqrt(3).
  half = 4.302652729911275 * 0.1 / math.sqrt(3)
  assert f"| pre | 0.001 | 3 / 3 | 2.1000 ± {half:.4f} |" in text
  # post at 0.01: no healthy run, no number.
  assert "| post | 0.01 | 0 / 3 | - | - | - |" in text
  assert "**Claim under test:** post-norm needs warm-up" in text
  for line in ("| norm_placement=post,learning_rate=0.01,seed=0 | diverged | non-finite train "
               f"metrics at step 20 | `{diverged}/log.txt` |",
               "| norm_placement=post,learning_rate=0.01,seed=2 | incomplete | at step 20 of 40 | "
               "not kept (packed run) |"):
    assert line in text
  assert "collapsed | final eval loss 3.5000 >= 0.98 x the unigram entropy 3.5000" in text
  # LR table (no config.json here, so the initial loss is the first train loss, 4.0). post,
  # over the seeds that ended at both LRs (seed 2 has not at 0.01): 0.001 -> mean(2.5, 2.6) =
  # 2.55; 0.01 -> mean(4.0 diverged, 3.5 collapsed) = 3.75; sensitivity = mean(0, 1.2) = 0.6.
  assert "| pre | 0.001 | 2.1000 | 0.01 | 0.0000 | 2 |" in text
  assert "| post | 0.001 | 2.5500 | 0.001 | 0.6000 | 2 |" in text
  assert "not LRs): post (seed 2 left out)." in text
  # the placement against the final loss would redraw the LR figure's cells, transposed
  assert not os.path.exists(os.path.join(sweep_dir, "final_vs_model_norm_placement.webp"))
  for figure in ("curves.webp", "final_vs_optim_learning_rate.webp", "diagnostics.webp",
                 "diagnostics_steps.webp", "feed_forward_grad_norm_vs_optim_learning_rate.webp"):
    assert f"({figure})" in text
    with Image.open(os.path.join(sweep_dir, figure)) as image:  # coloured lines, not bare axes
      colours = [c for _, c in image.convert("RGB").getcolors(4096) if len(set(c)) > 1]
      assert len(colours) >= 3, figure
  with open(os.path.join(sweep_dir, "results.csv")) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 12 and set(rows[0]) >= {"point", "model.norm_placement", "seed", "status",
                                               "loss", "bits_per_byte", "accuracy", "wall_s"}
  assert rows[0]["loss"] == "2.0" and rows[0]["status"] == "finished"
  assert "workdir" not in rows[0]  # it was always <sweep_dir>/<point>: 0.24 MB over the studies


def test_report_metric_can_be_any_eval_metric(sweep_dir):
  text = open(report.write_report(sweep_dir, metric="accuracy")).read()
  assert "accuracy * |" in text


def _run_with(train_losses, final_loss, num_steps=200):
  rows = {"train": [{"step": s, "split": "train", "loss": l} for s, l in train_losses],
          "eval": [{"step": num_steps, "split": "eval", "loss": final_loss}]}
  return report_runs.Run("p", {}, num_steps, "/nowhere", rows)


def test_collapse_is_judged_on_the_final_eval_loss_alone():
  """Issue 46: one rule, final eval loss >= 0.98 x the unigram entropy, whatever the train
  loss does. A committed post-norm run at LR 1e-2 (seed 0) ended at the unigram level while its
  train loss drifted down with its data order; the trend rule called it finished, its seeds 1-2
  (flat train loss) collapsed. Both orders must get the same label."""
  noisy = [3.136, 3.111, 3.038, 3.298, 3.202, 3.265, 3.351, 3.190, 3.301, 3.247, 3.182, 3.210]
  falling = [l - 0.004 * (s - 104) for s, l in zip(range(104, 200, 8), noisy)]
  for train in (noisy, falling):
    run = _run_with(list(zip(range(104, 200, 8), train)), 3.3426)
    report_runs.classify(run, 3.3194)
    assert run.status == "collapsed", run.detail
    assert run.detail == ("final eval loss 3.3426 >= 0.98 x the unigram entropy 3.3194 "
                          "nats/token")
  # At the boundary: 0.98 x 3.3194 = 3.253012; just below it is finished, at it collapsed.
  assert report_runs.collapsed(3.253013, 3.3194) and not report_runs.collapsed(3.25301, 3.3194)
  run = _run_with(list(zip(range(104, 200, 8), noisy)), 3.0)
  report_runs.classify(run, 3.3194)
  assert run.status == "finished"
  # One step (an at-init measurement, ln V above the unigram level): not trained, not collapsed.
  run = _run_with([(1, 5.5)], 5.5, num_steps=1)
  report_runs.classify(run, 3.3194)
  assert run.status == "finished"


def test_unigram_entropy_is_read_from_the_runs_baselines_json(tmp_path):
  """A run that recorded its baselines at its start: the report reads them, builds no data
  (there is no config.json here from which it could)."""
  (tmp_path / "baselines.json").write_text(json.dumps({"unigram_nats": 3.25, "bigram_nats": 2.5}))
  assert sweep_runs.unigram_entropy(str(tmp_path), str(tmp_path)) == 3.25
  (tmp_path / "baselines.json").write_text("{torn")
  assert sweep_runs.recorded_baselines(str(tmp_path)) == {}
  assert sweep_runs.unigram_entropy(str(tmp_path), str(tmp_path)) is None


def test_the_budget_section_places_the_best_run_against_the_bigram_level(tmp_path):
  from transformer.report import budget
  from transformer.report.runs import Run
  runs = []
  (tmp_path / "elsewhere").mkdir()
  for name, loss, tokens, times in (("a", 2.0, 1000, (100, 160)), ("b", 2.5, 1000, (200, 290)),
                                    ("c", 2.2, 2000, (0, 1000))):
    workdir = tmp_path / name
    if name == "c":  # reused from another study (--reuse_runs_from links it): not this one's cost
      os.symlink(tmp_path / "elsewhere", workdir)
    else:
      workdir.mkdir()
    (workdir / "baselines.json").write_text(json.dumps(
        {"unigram_nats": 3.3, "bigram_nats": 2.4, "train_tokens": tokens, "params": 500}))
    train = [{"step": s, "split": "train", "loss": 3.0, "time": t}
             for s, t in zip((1, 10), times)]
    runs.append(Run(name, {"seed": 0}, 10, str(workdir),
                    {"train": train, "eval": [{"step": 10, "split": "eval", "loss": loss}]},
                    "finished"))
  runs.append(Run("d", {"seed": 1}, 10, str(tmp_path / "d"), {}, "missing"))
  lines = budget.section(runs)
  text = "\n".join(lines)
  assert "unigram 3.3000, bigram 2.4000" in text and "tokens per parameter: 2-4." in text
  assert "(1 of 4 runs have no record.)" in text
  # a: 60 s, b: 90 s (c is linked, d has no rows): median 75 s, 150 s = 0.0417 h in all.
  assert lines[-2] == ("**Cost:** 2 runs trained for this study, 1 linked from other studies; "
                       "wall time per run (first to last metrics row of each start, pauses "
                       "left out) median 75 s, 0.04 h in "
                       "all (0.02 h elapsed if run two at a time).")
  assert lines[-4] == ("**Budget:** 2-4 tokens per parameter (1,000-2,000 tokens per run); best "
                       "run `a` ends at 2.0000 nats/token, 0.400 below the bigram level; 2 of 3 "
                       "finished runs end below it.")
  runs[0].final["loss"], runs[2].final["loss"] = 2.3, 2.35  # the best 0.1 below
  assert ("best run `a` ends at 2.3000 nats/token, 0.100 below the bigram level (short of the "
          "0.3 the protocol asks)") in budget.section(runs)[-4]
  # No record: no budget, only what the runs cost.
  assert budget.section([runs[-1]]) == ["**Cost:** 0 runs trained for this study.", ""]
  assert budget.section([]) == []


def test_figures_plot_nats_wrap_long_titles_and_split_many_panels():
  """The plots are in the verdicts' unit (loss, nats/token) unless --report_metric says
  otherwise; a long panel title wraps after a comma; more than MAX_PANELS curve panels become
  one figure per value of the first field (the depth study's 48 panels: one per placement)."""
  from transformer.report import figures
  from transformer.report.runs import Run
  assert report.report_metric("", ["bits_per_byte", "loss"], "d") == "loss"
  assert report.report_metric("bits_per_byte", ["bits_per_byte", "loss"], "d") == "bits_per_byte"
  title = figures._title("num_steps=2000, warmup_steps=200, norm_placement=post")
  assert title == "num_steps=2000, warmup_steps=200,\nnorm_placement=post"
  assert all(len(line) <= figures.TITLE_CHARS for line in title.splitlines())

  def runs_of(placements, depths):
    return [Run(f"{p},{d},{lr}", {"model.norm_placement": p, "model.num_layers": d,
                                  "optim.learning_rate": lr, "seed": 0}, 1, "", {})
            for p in placements for d in depths for lr in (1e-3, 1e-2)]
  few = runs_of(["pre", "post"], [3, 6])  # 4 panels: one figure
  assert [s for s, _ in figures.curve_figures(few)] == [""]
  many = runs_of(["pre", "post", "peri"], [3, 6, 12, 24, 48])  # 15 panels: one per placement
  split = figures.curve_figures(many)
  assert [s for s, _ in split] == ["_norm_placement_pre", "_norm_placement_post",
                                   "_norm_placement_peri"]
  assert all(len(members) == 10 for _, members in split)


def test_a_cadence_field_is_not_a_swept_field():
  """long_training's longer runs record diagnostics every 600 steps, the short ones at the
  protocol's cadence: that changes what a run writes down, not what it trains, so no figure is
  drawn against it and no label names it; the run length is the swept field."""
  runs = [report_runs.Run(f"p{i}", {"train.num_steps": n, "train.diagnostics_every": d, "seed": s},
                     n, "/nowhere", {})
          for i, (n, d, s) in enumerate([(600, 100, 0), (600, 100, 1), (2400, 600, 0)])]
  assert sweep_runs.swept_fields(runs) == ["train.num_steps"]


def test_a_field_another_determines_gets_no_figure_of_its_own():
  """long_training's warm-up is a tenth of its steps: a figure against it would repeat the one
  against the steps (of two fields that determine each other, the earlier keeps its figure).
  depth's scan_layers is on for 12 and 24 layers and unset for 6: the layers determine it, so
  its figure would show the same runs at fewer x positions. A field crossed with the others is
  not tied."""
  def runs_of(rows):
    return [report_runs.Run(f"p{i}", {"train.num_steps": n, "optim.warmup_steps": w,
                                 "optim.learning_rate": lr, "seed": 0}, n, "/nowhere", {})
            for i, (n, w, lr) in enumerate(rows)]
  tied = runs_of([(600, 60, 1e-3), (600, 60, 3e-3), (2400, 240, 1e-3), (2400, 240, 3e-3)])
  fields = sweep_runs.swept_fields(tied)
  assert fields == ["train.num_steps", "optim.warmup_steps", "optim.learning_rate"]
  assert sweep_runs.tied_fields(tied, fields) == {"optim.warmup_steps": "train.num_steps"}
  crossed = runs_of([(600, 0, 1e-3), (600, 60, 1e-3), (2400, 0, 1e-3), (2400, 240, 1e-3),
                     (600, 0, 3e-3), (600, 60, 3e-3), (2400, 0, 3e-3), (2400, 240, 3e-3)])
  assert sweep_runs.tied_fields(crossed, sweep_runs.swept_fields(crossed)) == {}
  depth = [report_runs.Run(f"p{layers}_{lr}",
                           {**({"model.scan_layers": True} if layers > 6 else {}),
                            "model.num_layers": layers, "optim.learning_rate": lr, "seed": 0},
                           600, "/nowhere", {}) for layers in (6, 12, 24) for lr in (1e-3, 3e-3)]
  for order in (depth, depth[::-1]):  # whichever of the two is listed first
    fields = sweep_runs.swept_fields(order)
    assert sweep_runs.tied_fields(order, fields) == {"model.scan_layers": "model.num_layers"}
  assert sweep_runs.swept_fields(depth[::-1])[0] == "model.scan_layers"


def test_a_categorical_field_left_unset_is_plotted_at_config():
  """grad_profile's activation: ReLU where set, the config's GELU where not. The figure
  against it has both (it showed ReLU alone, the unset runs dropped)."""
  runs = []
  for p in ("pre", "post"):
    for relu in (0, 1):
      for s in range(2):
        r = _run_with([(1, 5.0)], 2.0 + relu + 0.01 * s)
        r.overrides = {"model.norm_placement": p, "seed": s,
                       **({"model.activation": "relu"} if relu else {})}
        r.status = "finished"
        runs.append(r)
  fig = report_figures.final_vs_figure(runs, "model.activation",
                                ["model.norm_placement", "model.activation"], "loss")
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_xticklabels()] == ["config", "relu"]
  means = [line for line in ax.lines if len(line.get_xdata()) == 2]  # the mean over seeds
  assert means and all(list(line.get_xdata()) == [0, 1] for line in means)


def _use_study_file(sweep_dir, study) -> None:
  """Points the fixture sweep's manifest at the study file `study`."""
  with open(os.path.join(sweep_dir, MANIFEST)) as f:
    manifest = json.load(f)
  manifest["sweep_file"] = str(study)
  with open(os.path.join(sweep_dir, MANIFEST), "w") as f:
    json.dump(manifest, f)


def test_a_study_cut_off_midway_says_so_above_its_verdict(sweep_dir, tmp_path):
  """One point of the fixture has not finished: the verdict section says how many have not,
  above the study's own lines, so a call on part of the runs is never read as the call."""
  study = tmp_path / "study.py"
  study.write_text("def get_sweep():\n  return []\n"
                   "def analyze(runs):\n  return ['**Agrees.** on what ran']\n")
  _use_study_file(sweep_dir, study)
  text = open(report.write_report(sweep_dir)).read()
  verdict = text.split("## Verdict", 1)[1]
  assert verdict.index("**The sweep is not complete:** 1 of 12 points have not finished") < \
      verdict.index("**Agrees.** on what ran")


def test_a_report_runs_its_study_file_once(sweep_dir, tmp_path):
  """The claim, the figures, the verdict and its robustness section read one loaded study
  (transformer.study.load), not a fresh run of the file each."""
  ran = tmp_path / "ran.txt"
  study = tmp_path / "once.py"
  study.write_text(f"open({str(ran)!r}, 'a').write('x')\n"
                   "from transformer.study import Threshold\n"
                   "CLAIM = 'read once'\nMARGIN = 0.1\n"
                   "THRESHOLDS = (Threshold('margin', None, 'MARGIN', (0.05, 0.2)),)\n"
                   "def get_sweep():\n  return []\n"
                   "def figures(runs, sweep_dir):\n  return []\n"
                   "def analyze(runs):\n  return [f'**Agrees.** margin {MARGIN}']\n")
  _use_study_file(sweep_dir, study)
  text = open(report.write_report(sweep_dir)).read()
  assert "**Claim under test:** read once" in text and "| margin | 0.2 | agrees |" in text
  assert ran.read_text() == "x"


def test_confirmatory_seeds_get_rows_apart_in_the_generic_tables(sweep_dir, tmp_path):
  """A study whose verdict reads seed 2 alone (CONFIRMATORY_SEEDS): the final-eval and LR
  tables give each setting a row for seed 2 and one for the exploratory seeds 0 and 1, and
  pool nothing across them; the figures say they pool every seed."""
  study = tmp_path / "confirm.py"
  study.write_text("CONFIRMATORY_SEEDS = [2]\ndef get_sweep():\n  return []\n")
  _use_study_file(sweep_dir, study)
  text = open(report.write_report(sweep_dir)).read()
  # pre at 0.001: seed 2 ends at 2.2 alone; seeds 0, 1 at 2.0 and 2.1 -> 2.05 ± t(0.975, 1) *
  # std(ddof=1) / sqrt(2) = 12.706204736 * 0.0707107 / 1.4142136.
  half = 12.706204736174694 * (0.1 / math.sqrt(2)) / math.sqrt(2)
  assert "| seeds | model.norm_placement | optim.learning_rate | healthy / runs |" in text
  assert "| 2 (the verdict's) | pre | 0.001 | 1 / 1 | 2.2000 |" in text
  assert f"| 0, 1 (exploratory) | pre | 0.001 | 2 / 2 | 2.0500 ± {half:.4f} |" in text
  assert "| pre | 0.001 | 3 / 3 |" not in text  # no pooled row
  # LR table, post: seeds 0, 1 at 0.001 -> 2.55; at 0.01 -> mean(4.0 diverged, 3.5 collapsed)
  # = 3.75; sensitivity mean(0, 1.2) = 0.6. Seed 2 at 0.01 is incomplete: one LR, 2.7.
  assert "| 0, 1 (exploratory) | post | 0.001 | 2.5500 | 0.001 | 0.6000 | 2 |" in text
  assert "| 2 (the verdict's) | post | 0.001 | 2.7000 | 0.001 | 0.0000 | 1 |" in text
  assert ("The figures pool every seed: the exploratory (0, 1) and the confirmatory (2) the "
          "verdict reads alone.") in text


def test_confirmatory_seeds_not_run_yet_leave_the_tables_as_one_set(sweep_dir, tmp_path):
  study = tmp_path / "later.py"
  study.write_text("CONFIRMATORY_SEEDS = [3, 4, 5]\ndef get_sweep():\n  return []\n")
  _use_study_file(sweep_dir, study)
  text = open(report.write_report(sweep_dir)).read()
  assert "| pre | 0.001 | 3 / 3 |" in text and "| seeds |" not in text
  assert "The figures pool" not in text
