"""Using a finished run: scoring a checkpoint (`evaluate`, `--mode=eval`) and generating text
from a workdir (`sample`, `--mode=sample`). The evals inside training are
`transformer.train.eval_loop`; the decoding itself is `transformer.tasks.decode`."""
