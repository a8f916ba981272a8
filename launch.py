"""The one entry point: `python launch.py [--mode=MODE] [--config=configs/x.py[:variant]]
[--config.section.field=value ...] [--workdir=DIR]`.

Modes (--mode):
  train   train and evaluate, resuming from the workdir's latest checkpoint (the default)
  sample  continue --prompt with the language model in --workdir
  bench   compile and time train steps on random inputs; print tokens/s and MFU
  sweep   run every point of --sweep=FILE as its own training run (locally or on SLURM)
  report  the report (markdown, CSV, plots) of the runs in --sweep_dir
  data_bench  the input pipeline's tokens/s against the train step's

Every config field can be overridden with --config.<section>.<field>=<value>; the fields and
their meaning are in configs/default.py. All logic lives in `transformer.cli.launch`.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow only feeds data here
# TensorFlow 2.21 logs "oneDNN custom operations are on" through absl whatever the level
# above, on CPUs where oneDNN is used; tf.data here does no float math it would speed up.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from absl import flags  # noqa: E402

from transformer.cli.args import check_config_args  # noqa: E402

check_config_args(sys.argv)  # before the config flag is defined, which applies the overrides
from transformer.cli import launch  # noqa: E402
from transformer.sweep import cli as sweep_cli  # noqa: E402

for _module in (launch, sweep_cli):
  flags.adopt_module_key_flags(_module)  # --help lists the flags defined there

if __name__ == "__main__":
  launch.run()
