"""Compile-only planning: the train step and beam search compiled for accelerators this
machine lacks (``accelerators.py`` names them, ``compiled.py`` compiles and measures the step,
``hlo.py`` reads its modules' FLOPs and collectives), and the largest batch that fits
(``planner.py``, behind ``python -m transformer_jax.plan``). Nothing here runs a step; the
training loop's own check before its first step is ``training/memory.py``."""
