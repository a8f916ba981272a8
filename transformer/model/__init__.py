"""Pure Linen modules of the Transformer; each takes a frozen `ModelConfig` (or plain fields)."""
