"""prose_corpus's two headline calls on a third corpus, prose of many authors and topics
(issue 69).

  apt-get install python3-doc debian-handbook debian-reference-en debian-faq maint-guide \\
      developers-reference
  python launch.py --mode=sweep --sweep=experiments/prose_varied.py:cpu \\
      --sweep_dir=runs/studies/prose_varied --parallel=2

prose_corpus reads the King James and World English Bibles: real prose, but one book in two
translations, and its warm-up call did not resolve there. Here the same 75 points (post, pre
and peri with the protocol's warm-up over the LR grid, lr_sensitivity's runs; post and pre
without warm-up, warmup_stability's; the protocol's seeds) train on `configs/prose_varied.py`'s
data instead: the English HTML manuals six Debian packages ship (the Python documentation, the
Debian Administrator's Handbook, the Debian Reference, FAQ, New Maintainers' Guide and
Developer's Reference), one document per page, markup stripped (`transformer/data/manuals.py`).

The calls, statistics, margins and verdict rule are prose_corpus's, fixed before these runs
(`experiments/prose_corpus.py`): post-norm's trimmed LR sensitivity minus pre-norm's above 0.1
nats/token, and the warm-up claim's two halves (issue 68), post-norm's cost of dropping warm-up
above 0.05 nats/token and pre-norm's below it (each at its own best LR), each its own call;
agrees when all three find what the claim says, partly agrees when some do.
"""

from experiments import paired, prose_corpus
from experiments import analysis as a
from transformer.data.manuals import VARIED_DIR
from transformer.report.robustness import Threshold

CLAIM = ("Wortsman et al. 2023; Xiong et al. 2020, on a third corpus (issue 69): post-norm is "
         "more LR-sensitive than pre-norm and pays more for dropping warm-up on prose of many "
         "authors and topics (Debian's and Python's manuals) too, not only on the Bible.")
VARIED = {"data.source_dir": VARIED_DIR, "data.suffixes": ".html"}
CORPUS = "varied English prose (Debian's and Python's manuals)"


def get_sweep(size: str = "cpu"):
  """prose_corpus's 75 headline points (not its confirmatory seeds), each on the varied-prose
  corpus instead of the Bibles."""
  return [{**point, **VARIED} for point in prose_corpus.headline_points(size)]


def analyze(runs):
  """prose_corpus's calls, all pre-registered here: every seed reads each of them."""
  return prose_corpus.analyze(runs, corpus=CORPUS, confirmatory=())


def summarize(runs):
  # the verdict word does not depend on the corpus's name
  return prose_corpus.summarize(runs, confirmatory=())


THRESHOLDS = (a.CONFIDENCE,  # prose_corpus's margins, moved where its calls read them
              Threshold("LR sensitivity margin (nats/token)", "experiments.prose_corpus",
                        "SENSITIVITY_MARGIN", (0.05, 0.2)),
              Threshold("warm-up cost margin (nats/token)", "experiments.prose_corpus",
                        "WARMUP_MARGIN", (0.03, 0.1)),
              paired.MATCHED_LR)
THRESHOLDS_NOT_READ = paired.NOT_READ

REGISTRATION = {
    "post-norm's trimmed LR sensitivity minus pre-norm's above the margin":
        "pre-registered at 1266c2b, the commit that added this file, before any of its runs",
    "post-norm's cost of dropping warm-up above the margin":
        "pre-registered at d1c0b9d (issue 68's two halves in prose_corpus), before any of "
        "this study's runs",
    "pre-norm's cost of dropping warm-up below the margin":
        "pre-registered at d1c0b9d (issue 68's two halves in prose_corpus), before any of "
        "this study's runs"}
