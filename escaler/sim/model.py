"""The replica model: how fast one LLM server replica serves, as a small documented profile.

Contract of ``ReplicaProfile`` (every field overridable from a YAML profile, ``load_profile``):

* **Continuous batching.** A replica runs *iterations*. At the start of one it admits waiting
  requests (first come, first served) while it runs fewer than ``max_batch`` sequences and the KV
  cache has room for the request's prompt *and* its whole output (``prompt_tokens +
  output_tokens <= kv_capacity_tokens`` free; reserved up front, so nothing is ever preempted).
* **Chunked prefill** (vLLM V1 always runs it): an iteration schedules every running sequence's
  next token first, then prefill — prompts part-way through first, then newly admitted ones — in
  what is left of ``max_batched_tokens`` (vLLM's ``max_num_batched_tokens``; each decode counts one
  token), splitting a prompt that does not fit; a prompt's prefill may so span iterations. ``0``
  turns the budget off (a whole prompt in one iteration, as vLLM V0 without chunking).
* **Prefix cache.** A request whose trace carries ``hash_ids`` (one hash per ``prefix_block_tokens``
  block of its prompt, Mooncake's convention: 512) is looked up, when admitted, in its replica's
  LRU of block hashes: the leading blocks found are not prefilled (at most ``prompt_tokens - 1``
  tokens: the last one is always computed, it gives the first token). Its blocks enter the LRU when
  its prefill completes. The LRU holds ``kv_capacity_tokens // prefix_block_tokens`` blocks (vLLM
  keeps a freed block's hash until the block is reused, so the whole cache can hit); a hit saves
  prefill time, not KV room (the reservation is unchanged). ``prefix_block_tokens`` 0 turns it off;
  a trace without ``hash_ids`` never hits.
* **Iteration time** = ``decode_step_s(b, kv)`` + the prefill time of its chunks, where
  ``decode_step_s(b, kv) = decode_base_s + decode_per_seq_s x b + decode_per_kv_token_s x kv``,
  ``b`` the sequences in the iteration (decoding, or prefilling a chunk) and ``kv`` the context
  (prompt + tokens generated) of its decoding sequences, which each decode step reads; and a chunk
  of ``c`` tokens following ``h`` tokens already in the cache (prefilled before, or hit) takes
  ``prefill_s(c, h) = c / prefill_tokens_per_s x (1 + (h + c / 2) / prefill_context_scale)``: the
  linear layers cost the same per token, attention grows with the context each token attends to
  (``h + c / 2`` on average, causal). ``prefill_context_scale`` is the context at which attention
  costs as much as the linear layers (0: no context term); the sum over a prompt's chunks does not
  depend on how it is chunked. At its end every decoding sequence has one more token, and a prompt
  whose prefill completed its *first* token (TTFT = end of that iteration - arrival); a request
  that has all its ``output_tokens`` leaves and frees its KV reservation.
* **Start-up.** A new replica serves only ``startup_s(rng)`` after it is created, and costs from
  its creation: a cold start (image pull, weight loading, CUDA graphs; minutes for real LLM
  servers) drawn from a shifted lognormal with median ``cold_start_s``, 90th percentile
  ``cold_start_p90_s`` and floor ``COLD_START_FLOOR x cold_start_s`` (never drawn below it;
  ``cold_start_p90_s == cold_start_s`` is the constant ``cold_start_s``), plus ``node_delay_s``
  (provisioning a node first) with probability ``node_delay_share``. ``min_startup_s`` is the least
  it can be: what a lower bound may assume.
* ``decode_step_s(b)`` without ``kv`` is the step with every sequence at ``decode_context_tokens``
  of context, at most the KV cache (``min(kv_capacity_tokens, b x decode_context_tokens)``): what a
  consumer without a trace (the flow policy's full-batch decode rate) assumes.
* ``validate()`` returns every problem as ``field: rule`` (an empty list when the profile is
  valid); ``load_profile`` raises ``ProfileError`` with all of them and the file name.

The defaults are ``llama-3.1-8b-h100`` (``PROFILES``, shipped in ``escaler/sim/data/profiles``, each
file citing its sources; ``docs/simulator.md`` tabulates them): Llama-3.1-8B in bf16 on one H100
SXM, order of magnitude. ``load_profile`` reads a profile by name or a YAML file of overrides.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from statistics import NormalDist
from typing import Any

import yaml

__all__ = ["COLD_START_FLOOR", "DEFAULT_PROFILE", "PROFILES", "ProfileError", "ReplicaProfile",
           "load_profile", "profile_path"]

# the shortest cold start a replica can draw, as a share of the median: the weights read from a
# local cache and nothing pulled; a lower bound assumes it
COLD_START_FLOOR = 0.5
# the standard normal's 90th percentile: cold_start_p90_s sets the lognormal's sigma through it
_Z90 = NormalDist().inv_cdf(0.9)
# the profiles shipped in the package (escaler/sim/data/profiles/<name>.yaml); the first is the default
PROFILES = ("llama-3.1-8b-h100", "llama-3.1-8b-a100", "llama-3.1-70b-h100x4")
DEFAULT_PROFILE = PROFILES[0]


class ProfileError(ValueError):
    """A replica profile that cannot be used; the message names each field and its rule."""


@dataclass(frozen=True)
class ReplicaProfile:
    """See the module docstring; the defaults are ``llama-3.1-8b-h100.yaml``'s values."""

    # most sequences one iteration runs (vLLM's max_num_seqs)
    max_batch: int = 256
    # prompt tokens prefilled per second of iteration time, at no context
    prefill_tokens_per_s: float = 25_000.0
    # the context (tokens) at which a prefilled token's attention costs as much as its linear
    # layers; 0 = prefill cost does not grow with context
    prefill_context_scale: float = 27_000.0
    # decode step time: decode_base_s + decode_per_seq_s x sequences in the iteration
    #   + decode_per_kv_token_s x context tokens of its decoding sequences
    decode_base_s: float = 0.007
    decode_per_seq_s: float = 0.00004
    decode_per_kv_token_s: float = 5e-8
    # the context per decoding sequence decode_step_s assumes when not given one
    decode_context_tokens: int = 2048
    # KV cache size in tokens (prompt + output of every admitted sequence)
    kv_capacity_tokens: int = 430_000
    # seconds from creation to serving: the median and the 90th percentile of the cold start
    cold_start_s: float = 60.0
    cold_start_p90_s: float = 120.0
    # seconds to provision a node before the cold start, and the share of new replicas that need one
    node_delay_s: float = 0.0
    node_delay_share: float = 1.0
    # tokens one iteration schedules (decodes + prefill chunks); 0 = no budget. vLLM's API server
    # default on an H100-class GPU (>= 70 GiB): 8192 (EngineArgs.get_batch_defaults)
    max_batched_tokens: int = 8192
    # prompt tokens per hash_ids block of a trace (Mooncake: 512); 0 = no prefix cache
    prefix_block_tokens: int = 512

    def decode_step_s(self, batch: int, kv_tokens: float | None = None) -> float:
        if kv_tokens is None:
            kv_tokens = min(self.kv_capacity_tokens, batch * self.decode_context_tokens)
        return self.decode_base_s + self.decode_per_seq_s * batch + self.decode_per_kv_token_s * kv_tokens

    def prefill_s(self, tokens: float, context: float = 0.0) -> float:
        """Seconds to prefill ``tokens`` prompt tokens after ``context`` tokens already cached."""
        t = tokens / self.prefill_tokens_per_s
        if self.prefill_context_scale:
            t *= 1 + (context + tokens / 2) / self.prefill_context_scale
        return t

    @property
    def prefix_cache_blocks(self) -> int:
        """The blocks one replica's prefix LRU holds (0: no prefix cache)."""
        return self.kv_capacity_tokens // self.prefix_block_tokens if self.prefix_block_tokens else 0

    def _cold_sigma(self) -> float:
        if self.cold_start_p90_s <= self.cold_start_s or self.cold_start_s <= 0:
            return 0.0
        floor = COLD_START_FLOOR * self.cold_start_s
        return math.log((self.cold_start_p90_s - floor) / (self.cold_start_s - floor)) / _Z90

    def cold_start_quantile_s(self, q: float) -> float:
        """The cold start's ``q``-quantile (0 < q < 1)."""
        sigma = self._cold_sigma()
        if sigma == 0.0:
            return self.cold_start_s
        floor = COLD_START_FLOOR * self.cold_start_s
        return floor + (self.cold_start_s - floor) * math.exp(sigma * NormalDist().inv_cdf(q))

    def startup_s(self, rng: random.Random) -> float:
        """One new replica's seconds from creation to serving, drawn from ``rng`` (module docstring).
        A constant cold start and a node delay of share 0 or 1 draw nothing."""
        sigma = self._cold_sigma()
        if sigma == 0.0:
            t = self.cold_start_s
        else:
            floor = COLD_START_FLOOR * self.cold_start_s
            t = floor + (self.cold_start_s - floor) * math.exp(sigma * rng.gauss(0.0, 1.0))
        share = self.node_delay_share
        if self.node_delay_s and share > 0 and (share >= 1 or rng.random() < share):
            t += self.node_delay_s
        return t

    @property
    def min_startup_s(self) -> float:
        """The least ``startup_s`` can draw."""
        floor = COLD_START_FLOOR * self.cold_start_s if self._cold_sigma() else self.cold_start_s
        return floor + (self.node_delay_s if self.node_delay_share >= 1 else 0.0)

    def validate(self) -> list[str]:
        problems = []
        if self.max_batch < 1:
            problems.append(f"max_batch: must be at least 1, got {self.max_batch}")
        for name in ("prefill_tokens_per_s",):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                problems.append(f"{name}: must be a positive number, got {v}")
        for name in ("prefill_context_scale", "decode_base_s", "decode_per_seq_s", "decode_per_kv_token_s",
                     "cold_start_s", "cold_start_p90_s", "node_delay_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                problems.append(f"{name}: must be a number >= 0, got {v}")
        if self.decode_base_s + self.decode_per_seq_s <= 0:
            problems.append("decode_base_s: decode_base_s + decode_per_seq_s must be > 0 "
                            "(an iteration takes time)")
        if self.decode_context_tokens < 0:
            problems.append(f"decode_context_tokens: must be at least 0, got {self.decode_context_tokens}")
        if self.cold_start_p90_s < self.cold_start_s:
            problems.append(f"cold_start_p90_s: must be at least cold_start_s ({self.cold_start_s:g}, the "
                            f"median), got {self.cold_start_p90_s:g}")
        elif self.cold_start_s == 0 and self.cold_start_p90_s > 0:
            problems.append(f"cold_start_p90_s: must be 0 when cold_start_s is 0 (no spread without a "
                            f"median), got {self.cold_start_p90_s:g}")
        if not 0 <= self.node_delay_share <= 1:
            problems.append(f"node_delay_share: must be in [0, 1] (the share of new replicas that need a "
                            f"new node), got {self.node_delay_share}")
        if self.max_batched_tokens < 0 or 0 < self.max_batched_tokens < self.max_batch:
            problems.append(f"max_batched_tokens: must be 0 (no budget) or at least max_batch "
                            f"({self.max_batch}: every decode takes one token), "
                            f"got {self.max_batched_tokens}")
        if self.kv_capacity_tokens < 1:
            problems.append(f"kv_capacity_tokens: must be at least 1, got {self.kv_capacity_tokens}")
        if self.prefix_block_tokens < 0:
            problems.append(f"prefix_block_tokens: must be 0 (no prefix cache) or more, "
                            f"got {self.prefix_block_tokens}")
        return problems


def profile_path(name: str) -> Path:
    """The YAML file of the shipped profile ``name`` (one of ``PROFILES``)."""
    return Path(str(resources.files("escaler.sim") / "data" / "profiles" / f"{name}.yaml"))


def load_profile(path: str | Path | None, base: ReplicaProfile | None = None) -> ReplicaProfile:
    """``base`` (the defaults) with the fields of the YAML mapping at ``path`` (None: ``base``).

    ``path`` may name a shipped profile (``PROFILES``) instead of a file; a name that is neither a
    shipped profile nor a file is refused, listing the shipped ones."""
    profile = base or ReplicaProfile()
    if path is None:
        return profile
    name = str(path)
    if name in PROFILES and not Path(name).exists():
        path = profile_path(name)
    elif not Path(name).exists() and Path(name).suffix.lower() not in (".yaml", ".yml") and "/" not in name:
        raise ProfileError(f"{name}: no such profile or file (shipped profiles: {', '.join(PROFILES)}; "
                           "or a YAML file of fields)")
    try:
        raw: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(f"{name}: cannot be read: {err}") from None
    except yaml.YAMLError as err:
        raise ProfileError(f"{name}: not YAML: {err}") from None
    if raw is None:
        return profile
    if not isinstance(raw, dict):
        raise ProfileError(f"{name}: want a mapping of profile fields, got {type(raw).__name__}")
    known = {f.name: f for f in fields(ReplicaProfile)}
    problems: list[str] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        f = known.get(str(key))
        if f is None:
            problems.append(f"{key}: unknown field (known: {', '.join(known)})")
            continue
        want_int = f.type in ("int", int)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (want_int and value != int(value)):
            problems.append(f"{key}: must be {'a whole number' if want_int else 'a number'}, got {value!r}")
            continue
        values[f.name] = int(value) if want_int else float(value)
    if not problems:
        profile = replace(profile, **values)
        problems = profile.validate()
    if problems:
        raise ProfileError(f"{name}: " + "; ".join(problems))
    return profile
