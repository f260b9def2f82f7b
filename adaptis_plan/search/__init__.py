"""The search: partition heuristics, the adaptive list scheduler, the CP-SAT partition and order
models, and the generator that ties them together. The only package that imports ortools
(lazily, inside `cpsat_*`)."""
