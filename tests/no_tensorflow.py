"""Runs `launch.py` with TensorFlow and TFDS unimportable: `python tests/no_tensorflow.py ARGS`
(or `python tests/no_tensorflow.py -c CODE` to run CODE instead).

`sys.modules["tensorflow"] = None` (and the same for TFDS) makes `import tensorflow`,
`import tensorflow_datasets` and their submodules raise ImportError, and
`importlib.util.find_spec` answer None, as on a machine without them (a `sys.meta_path`
finder that raised would break libraries that probe with `find_spec`, such as etils); at exit
the script checks that neither got imported after all.
"""

import atexit
import os
import runpy
import sys

BLOCKED = ("tensorflow", "tensorflow_datasets")


def _check_unimported():
  loaded = [m for m in sys.modules if m.split(".")[0] in BLOCKED and sys.modules[m] is not None]
  if loaded:
    print(f"NO-TF CHECK FAILED: imported {loaded}", flush=True)
    os._exit(3)


def main() -> None:
  for name in BLOCKED:
    sys.modules[name] = None
  atexit.register(_check_unimported)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(0, root)
  if sys.argv[1:2] == ["-c"]:
    exec(compile(sys.argv[2], "<-c>", "exec"), {"__name__": "__main__"})
  else:
    sys.argv = [os.path.join(root, "launch.py")] + sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
  main()
