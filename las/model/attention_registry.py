"""Every attention by its config name, and how a `ModelConfig` builds one."""

from __future__ import annotations

from las.model.attention import (
    AdditiveAttention,
    Attention,
    DotAttention,
    GeneralAttention,
    LocationAwareAttention,
    MultiHeadAttention,
    ScaledDotAttention,
)
from las.model.monotonic import GMMAttention, MonotonicAttention, MonotonicChunkAttention

ATTENTIONS: dict[str, type[Attention]] = {  # las.core.config.AttentionName lists the same names
    "dot": DotAttention,
    "scaled_dot": ScaledDotAttention,
    "general": GeneralAttention,
    "additive": AdditiveAttention,
    "location": LocationAwareAttention,
    "gmm": GMMAttention,
    "monotonic": MonotonicAttention,
    "monotonic_chunk": MonotonicChunkAttention,
}


def build_attention(
    name: str,
    key_dim: int,
    value_dim: int,
    heads: int = 1,
    temperature: float = 1.0,
    location_channels: int = 10,
    location_kernel: int = 15,
    **options: float,
) -> Attention:
    """The attention named `name` (with `heads` > 1, that many heads of it); the arguments are
    those of a `ModelConfig`, which has checked them; `options` are those of one kind (GMM
    mixtures, chunk size)."""
    options = dict(
        temperature=temperature, location_channels=location_channels, location_kernel=location_kernel, **options
    )
    if heads == 1:
        return ATTENTIONS[name](key_dim, **options)
    return MultiHeadAttention(ATTENTIONS[name], heads, key_dim, **options)
