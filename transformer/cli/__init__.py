"""The command line: flag parsing with one-line errors (`args`), the checks a run makes on this
machine before it starts (`preflight`), and the mode dispatch behind `launch.py` (`launch`)."""
