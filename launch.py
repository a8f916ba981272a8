"""The one entry point: `python launch.py [--mode=MODE] [--config=configs/x.py[:variant]]
[--config.section.field=value ...] [--workdir=DIR]`.

Modes (--mode):
  train   train and evaluate, resuming from the workdir's latest checkpoint (the default)
  sample  continue --prompt with the language model in --workdir
  bench   compile and time train steps on random inputs; print tokens/s and MFU

Every config field can be overridden with --config.<section>.<field>=<value>; the fields and
their meaning are in configs/default.py. All logic lives in `transformer.launch`.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow only feeds data here

from absl import flags  # noqa: E402

from transformer.cli import check_config_args  # noqa: E402

check_config_args(sys.argv)  # before the config flag is defined, which applies the overrides
from transformer import launch  # noqa: E402

flags.adopt_module_key_flags(launch)  # --help lists the flags defined there

if __name__ == "__main__":
  launch.run()
