"""Plain internal structures shared by the builders, the simulator, the search and the plan IO.

No pydantic, no IO, no solver, no torch: frozen dataclasses and numpy arrays only.

- `Action`: one unit of work, written `{stage}{op}{mb}` exactly as torch.distributed.pipelining
  prints it (`2F0`, `7I3`).
- `Programs`: per-device action lists in execution order (`programs[device] = [Action, ...]`).
- `Layout`: partition (layer cut points) + placement (stage -> device).
- `CostTable`: per-device, per-layer costs (seconds, bytes) from the cost model or a measured profile,
  plus the link matrix. Times may differ per device (heterogeneous clusters), hence the
  `[device, layer]` shape.
- `LazyMapping`: a read-only mapping computed on first read (the classic baselines of a search).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np

OPS = ("F", "B", "I", "W")
#: what the adaptive search varies (`adaptis plan --search`); with all three, classic plans are its candidates
ALL_COMPONENTS = ("partition", "placement", "schedule")
_ACTION_RE = re.compile(r"^\s*(\d+)([FBIW])(\d+)\s*$")


K = TypeVar("K")
V = TypeVar("V")


class LazyMapping(Mapping[K, V]):
    """A read-only mapping whose items a subclass computes once, on first read (`_compute`); it holds
    plain data until then, so it pickles to and from the search's worker processes."""

    _got: dict[K, V] | None = None

    def _compute(self) -> dict[K, V]:
        raise NotImplementedError

    def _all(self) -> dict[K, V]:
        if self._got is None:
            self._got = self._compute()
        return self._got

    def __getitem__(self, key: K) -> V:
        return self._all()[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class Action(NamedTuple):
    """`stage` global stage id, `op` one of F/B/I/W, `mb` micro-batch index."""

    stage: int
    op: str
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.op}{self.mb}"

    @classmethod
    def parse(cls, text: str) -> Action:
        m = _ACTION_RE.match(text)
        if not m:
            raise ValueError(f"'{text}' is not an action like '2F0' or '7I3'")
        return cls(int(m.group(1)), m.group(2), int(m.group(3)))


Programs = list[list[Action]]

# Progress of a long computation: (what it is doing, fraction done in [0, 1]). The CLI hands one in.
ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True)
class Layout:
    """Partition and placement.

    `bounds` has num_stages + 1 increasing cut points: stage s holds layers
    [bounds[s], bounds[s+1]). `stage_device[s]` is the device that runs stage s.
    """

    bounds: tuple[int, ...]
    stage_device: tuple[int, ...]
    num_devices: int

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.stage_device) + 1:
            raise ValueError("bounds must have num_stages + 1 entries")
        if any(b >= c for b, c in zip(self.bounds, self.bounds[1:], strict=False)):
            raise ValueError(f"stage bounds {self.bounds} leave a stage empty")
        if any(not 0 <= d < self.num_devices for d in self.stage_device):
            raise ValueError(f"stage_device {self.stage_device} names a device outside 0..{self.num_devices - 1}")

    @property
    def num_stages(self) -> int:
        return len(self.stage_device)

    @property
    def num_layers(self) -> int:
        return self.bounds[-1]

    def stages_of(self, device: int) -> list[int]:
        return [s for s, d in enumerate(self.stage_device) if d == device]

    def layers(self, stage: int) -> range:
        return range(self.bounds[stage], self.bounds[stage + 1])


@dataclass(frozen=True)
class CostTable:
    """Costs per device and layer, for one training config.

    Times (seconds) have shape [num_devices, num_layers]; bytes per layer have shape
    [num_layers] (memory does not depend on which device runs the layer).

    Memory semantics per micro-batch and stage (sums over the stage's layers):
    F allocates `act_bytes`; I frees `act_bytes - act_w_bytes` (keeps what W needs);
    W frees `act_w_bytes`; B frees `act_bytes`. `act_w_bytes` may exceed `act_bytes` (a block
    with full recomputation keeps only its input from F to I, then its weight-GEMM inputs until
    W, `cost.recompute`): I's end then allocates the difference. `static_bytes` (weights + gradients +
    optimizer state) is resident for the whole step. A stage boundary after layer l sends
    `out_bytes[l]` forward (activation) and the same amount backward (gradient).

    W has two costs: `w_s` when it runs after other work (its stash of inputs and output
    gradients, and the weight gradients it accumulates into, have left the caches), and
    `w_hot_s` when it runs right after its own I on the device, with all of that still in cache
    (None: the same as `w_s`, as in the analytic model). A fused B does its weight-gradient GEMMs
    inside the backward, hot: B = I + `w_hot`, unless a profile timed the fused backward itself
    (`b_fused_s`): one autograd pass over a layer can run under its I and hot W timed apart
    (experiments/findings-readme.md), so a measured B is charged as measured.
    """

    f_s: np.ndarray
    i_s: np.ndarray
    w_s: np.ndarray
    act_bytes: np.ndarray
    act_w_bytes: np.ndarray
    static_bytes: np.ndarray
    out_bytes: np.ndarray
    mem_limit_bytes: np.ndarray  # [num_devices]
    link_bw_bytes_per_s: np.ndarray  # [num_devices, num_devices]
    link_latency_s: np.ndarray  # [num_devices, num_devices]
    layer_kinds: tuple[str, ...] = field(default=())
    device_names: tuple[str, ...] = field(default=())
    action_overhead_s: float = 0.0  # host time of the runtime per action (dispatch, P2P posting), any op
    # time each end of a cross-device message costs a computing rank (fixed + per byte), charged to
    # the action that sends or receives it: CPU ranks' gloo I/O threads compete with their compute
    transfer_host_s: float = 0.0
    transfer_host_s_per_byte: float = 0.0
    w_hot_s: np.ndarray | None = None  # W right after its own I (class docstring); None: w_s
    b_fused_s: np.ndarray | None = None  # a fused B as measured (class docstring); None: I + w_hot
    # how much one action's time varies about its cost, as the sd of log seconds (a measured profile's
    # `time_spread`); the judge's expected step time charges it (`judge.simulate.expected_step`); 0: none
    time_spread: float = 0.0

    def stage_op_seconds(self, device: int, lo: int, hi: int) -> dict[str, float]:
        """F / I / W / B seconds of the layers [lo, hi) as one stage on `device`, each op
        paying the runtime's per-action overhead once; "W hot": a W right after its own I."""
        f = float(self.f_s[device, lo:hi].sum())
        i = float(self.i_s[device, lo:hi].sum())
        w = float(self.w_s[device, lo:hi].sum())
        w_hot = float(self.w_hot[device, lo:hi].sum())
        b = float(self.b_s[device, lo:hi].sum())
        o = self.action_overhead_s
        return {"F": f + o, "I": i + o, "W": w + o, "B": b + o, "W hot": w_hot + o}

    @property
    def num_devices(self) -> int:
        return int(self.f_s.shape[0])

    @property
    def num_layers(self) -> int:
        return int(self.f_s.shape[1])

    @property
    def w_hot(self) -> np.ndarray:
        """W's seconds right after its own I (`w_hot_s`, or `w_s` when the table has none)."""
        return self.w_s if self.w_hot_s is None else self.w_hot_s

    @property
    def b_s(self) -> np.ndarray:
        """A fused B's seconds: `b_fused_s` where measured, else I + the hot W."""
        return self.i_s + self.w_hot if self.b_fused_s is None else self.b_fused_s

    def transfer_host_seconds(self, nbytes: float) -> float:
        """Host time one end of a cross-device message of `nbytes` takes on its device."""
        return self.transfer_host_s + nbytes * self.transfer_host_s_per_byte

    def p2p_s(self, src: int, dst: int, nbytes: float) -> float:
        """Time to move `nbytes` from device src to dst; zero on the same device."""
        if src == dst:
            return 0.0
        return float(self.link_latency_s[src, dst] + nbytes / self.link_bw_bytes_per_s[src, dst])


def uniform_costs(
    num_layers: int,
    num_devices: int,
    f: float = 1.0,
    i: float = 1.0,
    w: float = 1.0,
    act: float = 1.0,
    act_w: float = 0.5,
    static: float = 0.0,
    out: float = 0.0,
    mem_limit: float = float("inf"),
    bw: float = float("inf"),
    latency: float = 0.0,
) -> CostTable:
    """A synthetic table (every layer alike) for tests and examples."""
    full = np.full((num_devices, num_layers), 1.0)
    return CostTable(
        f_s=full * f,
        i_s=full * i,
        w_s=full * w,
        act_bytes=np.full(num_layers, act),
        act_w_bytes=np.full(num_layers, act_w),
        static_bytes=np.full(num_layers, static),
        out_bytes=np.full(num_layers, out),
        mem_limit_bytes=np.full(num_devices, mem_limit),
        link_bw_bytes_per_s=np.full((num_devices, num_devices), bw),
        link_latency_s=np.full((num_devices, num_devices), latency),
        layer_kinds=("decoder",) * num_layers,
        device_names=("dev",) * num_devices,
    )
