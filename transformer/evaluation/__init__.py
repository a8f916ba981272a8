"""Using a trained model: scoring a checkpoint (`evaluate`), KV-cache decoding (`decode`) and
generating text from a workdir (`sample`)."""
