"""Using a finished run: scoring a checkpoint (`evaluate`, `--mode=eval`) and generating text
from a workdir (`sample`, `--mode=sample`). The evals inside training are
`transformer.train.eval_loop`; the decoding itself is `transformer.tasks.decode`; an eval
metric is the task's (`eval_sums` / `summarize` in `transformer/tasks/`)."""
