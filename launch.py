"""The one entry point: `python launch.py [--mode=MODE] [--config=configs/x.py[:variant]]
[--config.section.field=value ...] [--workdir=DIR]`.

Modes (--mode):
{modes}

Every config field can be overridden with --config.<section>.<field>=<value>; the fields, their
defaults and their meaning are in transformer/config.py's dataclasses (the optim section:
transformer/optim_config.py); configs/default.py, the main job, is those defaults. All logic
lives in `transformer.cli.launch`.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow only feeds data here
# TensorFlow 2.21 logs "oneDNN custom operations are on" through absl whatever the level
# above, on CPUs where oneDNN is used; tf.data here does no float math it would speed up.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from absl import flags

from transformer.cli import modes  # light: the one list of modes

__doc__ = __doc__.replace("{modes}", modes.header_lines())  # --help prints it as its header
from transformer.cli.args import check_config_args

check_config_args(sys.argv)  # before the config flag is defined, which applies the overrides
from transformer.cli import launch  # noqa: E402
from transformer.cli import sweep_and_report as sweep_cli  # noqa: E402

for _module in (launch, sweep_cli):
  flags.adopt_module_key_flags(_module)  # --help lists the flags defined there

if __name__ == "__main__":
  launch.run()
