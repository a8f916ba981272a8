"""Training: state, optimizer, pure step functions, the parallel layouts, checkpoints, the loop
and its evals (`eval_loop`), benchmarks, diagnostics, and `--mode=compile`
(`compile_for_topology`, with the TPU slices of `topologies`)."""
