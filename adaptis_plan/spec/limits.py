"""The physical-sense limits every boundary number is checked against.

Data flow: stage 1 (spec). The pydantic boundary models put these into their field
constraints (so the JSON Schemas carry them), the HF importer and the CLI check their own
inputs against the same numbers, and `spec.read` reports a violation with the allowed range.
Imports nothing.

Each limit is far beyond any model or cluster built so far, and small enough that the planner
stays finite and fast (numbers here end up in float64 costs, in CP-SAT integer models and in
arrays sized by them): a value past one is a typo or a hostile file, not a use case.
"""

from __future__ import annotations

#: hidden size (the model width): the widest published models are ~2e4.
MAX_HIDDEN = 1_000_000
#: pipeline layers of one model, embedding and head (and head chunks) included.
MAX_LAYERS = 100_000
#: vocabulary entries (the largest published tokenizers have ~2.6e5).
MAX_VOCAB = 10_000_000
#: any other model dimension or count: heads, head_dim, inner sizes, experts, ranks, state sizes.
MAX_DIM = 10_000_000
#: the narrowest attention head (per-head q/k/v width): the narrowest published models use 32-64.
MIN_HEAD_DIM = 8
#: a sliding-attention window in tokens (longer than any sequence means global).
MAX_WINDOW = 2**31 - 1
#: parameters outside the pipelined language model (a vision tower).
MAX_EXTRA_PARAMETERS = 10**15

#: tokens per sequence.
MAX_SEQ_LEN = 2**24
#: sequences per micro-batch.
MAX_MICRO_BATCH_SIZE = 2**16
#: pipeline ranks.
MAX_PP = 1024
#: tensor-parallel degree.
MAX_TP = 1024
#: data-parallel degree.
MAX_DP = 2**20
#: context-parallel degree.
MAX_CP = 1024
#: expert-parallel degree.
MAX_EP = 1024
#: micro-batches per step.
MAX_MICROBATCHES = 8192
#: pipeline ranks x micro-batches per step. A step has ~3 actions per pair and stage, and every
#: classic baseline is built and simulated for it: the bound admits the largest pipelines the
#: planner is held to (pp 64 x 512 micro-batches) and refuses what would only make the plan,
#: its baselines and its file grow without bound.
MAX_DEVICE_MICROBATCHES = 32768

#: bytes of one device's memory (1 PiB).
MAX_BYTES = 2**50
#: peak throughput of one device, TFLOP/s (1 EFLOP/s).
MAX_TFLOPS = 1_000_000.0
#: any bandwidth, GB/s.
MAX_GBPS = 1_000_000.0
#: the slowest device and link a profile may describe (1 GFLOP/s, 1 MB/s) and the smallest efficiency
#: (0.1%): a rate below them is a typo or a hostile file, and would overflow the step's arithmetic.
MIN_TFLOPS = 1e-3
MIN_GBPS = 1e-3
MIN_EFFICIENCY = 1e-3
#: any per-message latency or per-kernel / per-action overhead, seconds.
MAX_LATENCY_S = 10.0
#: nodes in one device group.
MAX_NODES = 100_000
#: accelerators in one node.
MAX_DEVICES_PER_NODE = 1024
#: one measured or simulated duration, seconds (a day).
MAX_SECONDS = 86_400.0
#: the largest random seed (OR-Tools and torch take 32-bit signed seeds).
MAX_SEED = 2**31 - 1
#: vocabulary chunks of a split LM head.
MAX_HEAD_CHUNKS = 64
#: stages per device in a classic loop placement.
MAX_STAGES_PER_DEVICE = 64
#: the adaptive search's wall-time limit, seconds.
MAX_TIME_LIMIT_S = 86_400.0
#: `adaptis plan`'s default `--time-limit`: the work every default plan is searched with
DEFAULT_TIME_LIMIT_S = 5.0
#: Without an explicit `--time-limit`, the wall clock aborts only after this long: a safety net for a
#: machine far slower than the one the default work was sized on, never the end of a default search.
#: The default work ends within the default 5 s on an idle core for mid-size pipelines, but the memory-bound
#: and whole-configuration cases do up to several times that work, and a loaded machine runs it slower;
#: measured on a 2-core machine, idle and with both cores taken by busy loops: docs/reproducibility.md.
DEFAULT_HARD_STOP_S = 600.0
