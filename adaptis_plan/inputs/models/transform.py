"""Model transformations that change how a model is pipelined, not what it computes.

`split_head(model, k)`: the final norm + LM head + cross-entropy becomes k consecutive
layers, each scoring one contiguous slice of the vocabulary. Chunk c receives the normed
hidden state and the running log-sum-exp and target logit of the chunks before it, adds its
own slice's, and passes them on; the last chunk turns them into the loss. The loss and every
gradient are the same as the unsplit head's (the executor's verification checks it), but a
huge-vocabulary head can now be spread over several stages and devices instead of
bottlenecking one. Needs untied embeddings (the chunks own their slices of the head matrix).

Data flow: a `ModelSpec` in, a `ModelSpec` out; the fingerprint is unchanged (see
`ModelSpec.fingerprint`). Imports only the spec.
"""

from __future__ import annotations

from adaptis_plan.errors import InputError
from adaptis_plan.spec.model import LayerSpec, ModelSpec

#: Chunk boundaries are rounded to this many vocabulary entries (GEMM-friendly slices).
VOCAB_ALIGN = 128


def split_head(model: ModelSpec, num_chunks: int) -> ModelSpec:
    """`model` with its head split into `num_chunks` vocabulary chunks (1 = unchanged)."""
    if model.num_head_chunks != 1:
        raise InputError(f"model '{model.name}': the head is already split into {model.num_head_chunks} chunks")
    if num_chunks == 1:
        return model
    if num_chunks < 1:
        raise InputError(f"head chunks = {num_chunks}: must be >= 1")
    if model.tie_word_embeddings:
        raise InputError(f"model '{model.name}' ties its embeddings: its head cannot be split into vocabulary chunks")
    v = model.vocab_size
    align = VOCAB_ALIGN if v >= VOCAB_ALIGN * num_chunks * 4 else 1
    cuts = [0]
    for c in range(1, num_chunks):
        cut = round(v * c / num_chunks / align) * align
        cuts.append(max(cut, cuts[-1] + 1))
    cuts.append(v)
    if any(b <= a for a, b in zip(cuts, cuts[1:], strict=False)):
        raise InputError(f"head chunks = {num_chunks}: more chunks than vocabulary entries ({v})")
    heads = [
        LayerSpec(kind="head", vocab_range=(a, b), name=f"head[{a}:{b}]") for a, b in zip(cuts, cuts[1:], strict=False)
    ]
    return model.model_copy(update={"layers": [*model.layers[:-1], *heads]})
