"""The executor's optimizers: torch's SGD and AdamW arithmetic, without `torch.optim.Optimizer`.

`torch.optim.Optimizer.__init__` imports `torch._dynamo` (and with it sympy) the first time any
optimizer is built, a start-up cost of the same order as importing torch itself, paid by every rank
of every launch before its first step. The classes
here call the same functional kernels that `torch.optim.SGD.step` and `torch.optim.AdamW.step`
call (`torch.optim.sgd.sgd`, `torch.optim.adam.adam` with decoupled weight decay) on the same
state, initialised as they initialise it (AdamW: a float32 `step` on the CPU, `exp_avg` and
`exp_avg_sq` zeros like the parameter), on the single-tensor path: the parameters after each
step are bitwise those of torch's classes with `foreach=False` (tests/executor/test_optim.py).

ZeRO-1 shards these same classes over the dp group (`dataparallel.ShardedOptimizer`) rather than
wrapping torch's in `torch.distributed.optim.ZeroRedundancyOptimizer`, for the same reason.
"""

from __future__ import annotations

import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

ADAMW_BETAS = (0.9, 0.999)  # torch.optim.AdamW's defaults
ADAMW_EPS = 1e-8
ADAMW_WEIGHT_DECAY = 0.01


def _with_grads(params: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The parameters that have a gradient, and their gradients (torch's classes skip the others)."""
    pairs = [(p, p.grad) for p in params if p.grad is not None]
    return [p for p, _ in pairs], [g for _, g in pairs if g is not None]


class SGD:
    """Plain SGD (no momentum, no weight decay): `p -= lr * grad` for each parameter with a gradient."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.param_groups = [{"params": list(params)}]
        self.lr = lr

    @torch.no_grad()
    def step(self) -> None:
        params, grads = _with_grads(self.param_groups[0]["params"])
        if params:
            sgd(params, grads, [None] * len(params), foreach=False, weight_decay=0.0,
                momentum=0.0, lr=self.lr, dampening=0.0, nesterov=False, maximize=False)  # fmt: skip


class AdamW:
    """AdamW (betas 0.9 / 0.999, eps 1e-8, weight decay 0.01, decoupled), state built at a parameter's
    first gradient; a parameter without a gradient is skipped, as torch's AdamW skips it."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.param_groups = [{"params": list(params)}]
        self.lr = lr
        self.state: dict[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _state(self, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if p not in self.state:
            zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
            step = torch.tensor(0.0, dtype=torch.float32, device="cpu")
            self.state[p] = (zeros, torch.zeros_like(p, memory_format=torch.preserve_format), step)
        return self.state[p]

    @torch.no_grad()
    def step(self) -> None:
        params, grads = _with_grads(self.param_groups[0]["params"])
        if not params:
            return
        exp_avgs, exp_avg_sqs, steps = zip(*map(self._state, params), strict=True)
        adam(
            params, grads, list(exp_avgs), list(exp_avg_sqs), [], list(steps),
            foreach=False, capturable=False, differentiable=False, fused=None, grad_scale=None, found_inf=None,
            has_complex=any(torch.is_complex(p) for p in params), decoupled_weight_decay=True, amsgrad=False,
            beta1=ADAMW_BETAS[0], beta2=ADAMW_BETAS[1], lr=self.lr, weight_decay=ADAMW_WEIGHT_DECAY,
            eps=ADAMW_EPS, maximize=False,
        )  # fmt: skip


Optimizer = SGD | AdamW
