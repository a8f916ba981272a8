"""Sweeps and studies; each study writes a report (markdown, CSV, WebP figures)."""
