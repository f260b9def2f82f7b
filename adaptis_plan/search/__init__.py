"""The search: partition heuristics, the adaptive list scheduler, the CP-SAT partition and order
models, and the generator that ties them together; the pipeline search around them (`driver`); and the
whole-configuration search (`configuration`, in steps: `space`, `estimate`, `screen`, `plan_point`). The
only package that imports ortools (lazily, inside `cpsat_*`)."""
