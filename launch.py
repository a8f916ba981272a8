"""Train, evaluate and more: `python launch.py [--config=configs/x.py[:variant]] [--workdir=DIR]`.

All logic lives in `transformer.launch`.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow only feeds data here

from transformer.launch import run  # noqa: E402

if __name__ == "__main__":
  run()
