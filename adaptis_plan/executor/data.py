"""Synthetic seeded token data for `adaptis run` and its single-process reference.

Data flow: (vocab, training shape, seed, step) -> token ids; the worker of every rank and the
verifying parent draw the identical batch. Imports torch only.
"""

from __future__ import annotations

import torch


def synthetic_batch(
    vocab_size: int, num_microbatches: int, micro_batch_size: int, seq_len: int, *, seed: int, step: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, labels), each [num_microbatches, micro_batch_size, seq_len] int64; labels = next tokens."""
    g = torch.Generator().manual_seed(((seed % (2**31)) * 7919 + step * 104729 + 12345) % (2**63))
    tokens = torch.randint(0, vocab_size, (num_microbatches, micro_batch_size, seq_len + 1), generator=g)
    return tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()
