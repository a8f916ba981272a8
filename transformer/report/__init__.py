"""The report of a sweep or of runs compared (`--mode=report`): `runs` (reading runs and their
metrics), `stats` (intervals, clipped losses), `budget` (the budget line), `robustness` (the
neighbouring-threshold table), `figures` (the curves and final-metric plots),
`diagnostics_figures` (the per-layer diagnostics plots), `provenance_report`, `compare`
(`--runs`), `summary` (the studies' summary), `verdict_table` (the README's table) and `write`
(the report itself, `write_report`). Each name is imported from the module that defines it."""
