"""Model spec: the ordered list of pipeline-able layers (boundary model, pydantic).

Data flow: importers (`adaptis_plan.inputs.models`) and native spec files produce a `ModelSpec`;
the cost model, the planner and the executor read it. Imports only `spec.limits` (the
physical-sense bounds every size is checked against).

A layer's `kind` says which sub-specs it carries:

| kind        | attention | mlp | moe | mamba | meaning                                        |
|-------------|-----------|-----|-----|-------|------------------------------------------------|
| embedding   | -         | -   | -   | -     | token embedding (vocab x hidden)               |
| decoder     | yes       | yes | -   | -     | pre-norm attention block + dense MLP block      |
| moe         | yes       | -   | yes | -     | pre-norm attention block + mixture of experts   |
| attention   | yes       | -   | -   | -     | attention-only block (Nemotron-H `*`)           |
| mlp         | -         | yes | -   | -     | MLP-only block (Nemotron-H `-`)                 |
| moe_mlp     | -         | -   | yes | -     | MoE-only block                                  |
| mamba       | -         | -   | -   | yes   | Mamba-2 mixer block (Nemotron-H `M`)            |
| mamba_moe   | -         | -   | yes | yes   | Mamba mixer + MoE (Jamba expert layers)         |
| mamba_mlp   | -         | yes | -   | yes   | Mamba mixer + dense MLP (Jamba)                 |
| head        | -         | -   | -   | -     | final norm + LM head + cross-entropy loss       |
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import Field, model_validator

from adaptis_plan.spec.base import StrictModel
from adaptis_plan.spec.limits import (
    MAX_DIM,
    MAX_EXTRA_PARAMETERS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WINDOW,
    MIN_HEAD_DIM,
)

LayerKind = Literal[
    "embedding",
    "decoder",
    "moe",
    "attention",
    "mlp",
    "moe_mlp",
    "mamba",
    "mamba_moe",
    "mamba_mlp",
    "head",
]

_NEEDS: dict[str, tuple[str, ...]] = {
    "embedding": (),
    "decoder": ("attention", "mlp"),
    "moe": ("attention", "moe"),
    "attention": ("attention",),
    "mlp": ("mlp",),
    "moe_mlp": ("moe",),
    "mamba": ("mamba",),
    "mamba_moe": ("mamba", "moe"),
    "mamba_mlp": ("mamba", "mlp"),
    "head": (),
}


def head_dim_problem(head_dim: int) -> tuple[str, str] | None:
    """(problem, fix) when a q/k head width makes no sense for a trained transformer, else None.

    Rotary embeddings turn pairs of dimensions, so an odd width leaves one unrotated, which no
    model does; a head narrower than MIN_HEAD_DIM can hardly tell positions apart.
    """
    if head_dim < MIN_HEAD_DIM:
        return f"narrower than {MIN_HEAD_DIM}", f"use {MIN_HEAD_DIM} or more (64 and 128 are usual)"
    if head_dim % 2:
        return "odd, but rotary embeddings rotate pairs of dimensions", "use an even width"
    return None


def sense_problem(model: ModelSpec) -> str | None:
    """'field = value: problem; fix' for the first layer whose attention heads make no sense, else None.

    Checked where a user's model enters (native spec files); the type itself accepts any
    positive width so that tests and transformations can build toy layers.
    """
    for i, layer in enumerate(model.layers):
        a = layer.attention
        if a is None:
            continue
        at = f"layers[{i}].attention"
        if a.type == "gqa":
            problem = head_dim_problem(a.head_dim)
            if problem is not None:
                return f"{at}.head_dim = {a.head_dim}: {problem[0]}; {problem[1]}"
            continue
        nope, rope = a.qk_nope_head_dim or 0, a.qk_rope_head_dim or 0
        if rope % 2:
            return f"{at}.qk_rope_head_dim = {rope}: odd, but rotary embeddings rotate pairs; use an even width"
        if nope + rope < MIN_HEAD_DIM:
            return f"{at}.qk_nope_head_dim = {nope}: q/k heads of {nope} + {rope} are narrower than {MIN_HEAD_DIM}; widen them"
    return None


class AttentionSpec(StrictModel):
    """Self-attention. `gqa` covers MHA/GQA/MQA; `mla` is DeepSeek's latent attention."""

    type: Literal["gqa", "mla"] = Field("gqa", description="attention variant")
    num_heads: int = Field(ge=1, le=MAX_DIM, description="query heads")
    num_kv_heads: int = Field(ge=1, le=MAX_DIM, description="key/value heads (gqa); equals num_heads for mla")
    head_dim: int = Field(ge=1, le=MAX_DIM, description="per-head dim of q/k/v (gqa); q/k width nope + rope (mla)")
    q_lora_rank: int | None = Field(
        None, ge=1, le=MAX_DIM, description="mla: query low-rank dim, None = full q projection"
    )
    kv_lora_rank: int | None = Field(None, ge=1, le=MAX_DIM, description="mla: compressed kv dim")
    qk_nope_head_dim: int | None = Field(None, ge=1, le=MAX_DIM, description="mla: non-rotary part of q/k head dim")
    qk_rope_head_dim: int | None = Field(None, ge=1, le=MAX_DIM, description="mla: rotary part of q/k head dim")
    v_head_dim: int | None = Field(None, ge=1, le=MAX_DIM, description="mla: value head dim")
    sliding_window: int | None = Field(
        None, ge=1, le=MAX_WINDOW, description="local attention window in tokens, None = global"
    )
    qk_norm: bool = Field(False, description="per-head RMSNorm on q and k (Qwen3, Gemma3)")
    bias: bool = Field(False, description="bias on q/k/v projections (Qwen2)")

    @model_validator(mode="after")
    def _check_mla(self) -> AttentionSpec:
        if self.type == "mla":
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name) is None:
                    raise ValueError(f"attention.type 'mla' needs {name}")
        return self


class MlpSpec(StrictModel):
    """Dense feed-forward block."""

    activation: Literal["swiglu", "geglu", "gelu", "relu", "relu2"] = Field(
        "swiglu", description="gated (3 matrices) or plain (2)"
    )
    intermediate_size: int = Field(ge=1, le=MAX_DIM, description="inner dimension")


class MoeSpec(StrictModel):
    """Mixture of experts: router + top-k routed experts + always-on shared experts."""

    num_experts: int = Field(ge=1, le=MAX_DIM, description="routed experts")
    top_k: int = Field(ge=1, le=MAX_DIM, description="routed experts active per token")
    expert_intermediate_size: int = Field(ge=1, le=MAX_DIM, description="inner dim of one routed expert")
    num_shared_experts: int = Field(
        0, ge=0, le=MAX_DIM, description="shared experts (each of shared_intermediate_size)"
    )
    shared_intermediate_size: int | None = Field(None, ge=1, le=MAX_DIM, description="inner dim of one shared expert")
    activation: Literal["swiglu", "geglu", "gelu", "relu2"] = Field("swiglu", description="expert MLP activation")

    @model_validator(mode="after")
    def _check(self) -> MoeSpec:
        if self.top_k > self.num_experts:
            raise ValueError(f"moe.top_k {self.top_k} exceeds moe.num_experts {self.num_experts}")
        return self


#: Tokens per chunk of the Mamba-2 SSD scan: inside a chunk the quadratic (attention-like) form,
#: across chunks the carried state. mamba_ssm's default `chunk_size`, which the cost model times
#: (the scan's FLOPs per token grow with it); the executor's plain-torch scan, exact for any chunk
#: length, uses the same one so that the prediction describes the computation it runs.
SSD_CHUNK = 256


class MambaSpec(StrictModel):
    """Mamba mixer. Version 2 (default): in_proj -> conv1d -> selective scan (SSD) -> gated norm -> out_proj.

    Version 1 (Jamba): in_proj -> conv1d -> x_proj (dt_rank + 2N) -> dt_proj -> selective scan
    -> out_proj, with A of shape (inner, N). It is written as heads of one channel each:
    `num_heads` = inner channels (each has its own dt, as a Mamba-2 head does), `head_dim` = 1,
    `num_groups` = 1 (B and C are shared by all channels), and `dt_rank` is required.
    """

    num_heads: int = Field(ge=1, le=MAX_DIM, description="SSM heads (version 1: inner channels)")
    head_dim: int = Field(
        ge=1, le=MAX_DIM, description="per-head channel dim; inner = num_heads * head_dim (version 1: 1)"
    )
    state_size: int = Field(ge=1, le=MAX_DIM, description="SSM state dim N")
    num_groups: int = Field(1, ge=1, le=MAX_DIM, description="B/C groups")
    conv_kernel: int = Field(4, ge=1, le=MAX_DIM, description="depthwise conv width")
    version: Literal[1, 2] = Field(2, description="1 = Mamba-1 selective scan (Jamba), 2 = Mamba-2 SSD")
    dt_rank: int | None = Field(None, ge=1, le=MAX_DIM, description="version 1 only: rank of the dt projection")

    @model_validator(mode="after")
    def _check_version(self) -> MambaSpec:
        if self.version == 1 and self.dt_rank is None:
            raise ValueError("mamba.version 1 needs dt_rank")
        if self.version == 2 and self.dt_rank is not None:
            raise ValueError("mamba.dt_rank is for version 1 only; remove it or set version: 1")
        return self


class LayerSpec(StrictModel):
    """One pipeline-able unit of the model."""

    kind: LayerKind = Field(description="what the layer is; says which of the sections below it carries")
    attention: AttentionSpec | None = Field(None, description="self-attention (kinds decoder, moe, attention)")
    mlp: MlpSpec | None = Field(None, description="dense feed-forward block (kinds decoder, mlp, mamba_mlp)")
    moe: MoeSpec | None = Field(None, description="mixture of experts (kinds moe, moe_mlp, mamba_moe)")
    mamba: MambaSpec | None = Field(None, description="Mamba mixer (kinds mamba, mamba_moe, mamba_mlp)")
    name: str | None = Field(None, description="optional human label, e.g. the HF module name")
    vocab_range: tuple[int, int] | None = Field(
        None,
        description="head only: the [start, stop) slice of the vocabulary this head chunk scores;"
        " None = the whole vocabulary (see `models.transform.split_head`)",
    )

    @model_validator(mode="after")
    def _check_parts(self) -> LayerSpec:
        if self.vocab_range is not None:
            if self.kind != "head":
                raise ValueError(f"layer kind '{self.kind}' takes no vocab_range (only 'head' chunks do)")
            lo, hi = self.vocab_range
            if not 0 <= lo < hi:
                raise ValueError(f"vocab_range [{lo}, {hi}) is empty or negative; use 0 <= start < stop")
        needs = _NEEDS[self.kind]
        for part in ("attention", "mlp", "moe", "mamba"):
            present = getattr(self, part) is not None
            if part in needs and not present:
                raise ValueError(f"layer kind '{self.kind}' needs a '{part}' section")
            if part not in needs and present:
                raise ValueError(f"layer kind '{self.kind}' takes no '{part}' section")
        return self


class ModelSpec(StrictModel):
    """A whole model as the pipeline sees it: embedding, blocks, head, in order."""

    name: str = Field(description="model name")
    hidden_size: int = Field(ge=1, le=MAX_HIDDEN, description="model width: the hidden state's size per token")
    vocab_size: int = Field(
        ge=2, le=MAX_VOCAB, description="vocabulary entries (embedding rows, LM head outputs); 2 or more"
    )
    tie_word_embeddings: bool = Field(False, description="head shares the embedding matrix (counted once)")
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="normalization of every block and the head")
    position_encoding: Literal["alibi", "learned"] | None = Field(
        None,
        description="None = rotary (RoPE) on q and k; 'alibi' = linear biases on the attention scores"
        " (BLOOM, MPT), no parameters; 'learned' = a table of max_position_embeddings x hidden_size"
        " added to the token embedding (GPT-2, OPT), held by the embedding layer",
    )
    max_position_embeddings: int | None = Field(
        None, ge=1, le=MAX_DIM, description="rows of the learned position table; only with position_encoding 'learned'"
    )
    layers: list[LayerSpec] = Field(min_length=2, max_length=MAX_LAYERS, description="embedding first, head last")
    extra_parameters: int = Field(
        0,
        ge=0,
        le=MAX_EXTRA_PARAMETERS,
        description="parameters outside the pipelined language model (e.g. a vision tower), reported only",
    )
    source: str | None = Field(None, description="where the spec came from (HF model_type, zoo, file)")

    @model_validator(mode="after")
    def _check_positions(self) -> ModelSpec:
        learned = self.position_encoding == "learned"
        if learned and self.max_position_embeddings is None:
            raise ValueError("position_encoding 'learned' needs max_position_embeddings (the table's rows)")
        if not learned and self.max_position_embeddings is not None:
            raise ValueError("max_position_embeddings is for position_encoding 'learned' only; remove it")
        if self.position_encoding is not None:
            for i, layer in enumerate(self.layers):
                if layer.attention is not None and layer.attention.type == "mla":
                    raise ValueError(
                        f"layers[{i}] is MLA attention, which is rotary; remove position_encoding"
                        f" '{self.position_encoding}'"
                    )
        return self

    @model_validator(mode="after")
    def _check_order(self) -> ModelSpec:
        kinds = [layer.kind for layer in self.layers]
        if kinds[0] != "embedding":
            raise ValueError("layers[0] must be the 'embedding' layer")
        if kinds[-1] != "head":
            raise ValueError(f"the last layer (layers[{len(kinds) - 1}]) must be the 'head' layer")
        num_heads = self.num_head_chunks
        for i, k in enumerate(kinds[1 : len(kinds) - num_heads], start=1):
            if k in ("embedding", "head"):
                raise ValueError(f"layers[{i}] is '{k}': only the first layer may be the embedding, the last the head")
        if num_heads > 1:
            if self.tie_word_embeddings:
                raise ValueError("a head split into vocabulary chunks needs untied embeddings")
            start = 0
            for i, layer in enumerate(self.layers[-num_heads:], start=len(kinds) - num_heads):
                if layer.vocab_range is None or layer.vocab_range[0] != start:
                    raise ValueError(
                        f"layers[{i}].vocab_range must start at {start}: head chunks cover the vocabulary in order"
                    )
                start = layer.vocab_range[1]
            if start != self.vocab_size:
                raise ValueError(f"head chunks end at {start}, not at vocab_size {self.vocab_size}")
        elif self.layers[-1].vocab_range not in (None, (0, self.vocab_size)):
            raise ValueError(f"the only head's vocab_range must be [0, {self.vocab_size}) or absent")
        return self

    @property
    def num_head_chunks(self) -> int:
        """How many trailing head layers there are (1 unless the head is split into vocabulary chunks)."""
        n = 0
        for layer in reversed(self.layers):
            if layer.kind != "head":
                break
            n += 1
        return n

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def fingerprint(self) -> str:
        """sha256 of the normalized spec (model and layer names and the source excluded: same layers = same model).

        A head split into vocabulary chunks is an execution choice, not another model: the
        chunks are merged back into one head before hashing, so the fingerprint is the same.
        """
        data = self.model_dump(mode="json", exclude={"name", "source"})
        if self.num_head_chunks > 1:
            data["layers"] = data["layers"][: self.num_layers - self.num_head_chunks] + [
                LayerSpec(kind="head").model_dump(mode="json")
            ]
        for key in ("position_encoding", "max_position_embeddings"):  # absent = rotary, as before they existed
            if data[key] is None:
                del data[key]
        for layer in data["layers"]:  # labels, not structure
            layer.pop("name", None)
            layer.pop("vocab_range", None)
        blob = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()
