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
* **Iteration time** = ``decode_step_s(batch)`` + (prompt tokens prefilled in it) /
  ``prefill_tokens_per_s``, where ``decode_step_s(b) = decode_base_s + decode_per_seq_s x b`` and
  ``b`` is the number of sequences in the iteration (decoding, or prefilling a chunk). At its end
  every decoding sequence has one more token, and a prompt whose prefill completed its *first*
  token (TTFT = end of that iteration - arrival); a request that has all its ``output_tokens``
  leaves and frees its KV reservation.
* **Cold start.** A new replica serves only ``cold_start_s`` after it is created (image pull and
  weight loading; minutes for real LLM servers); it costs from its creation.
* ``validate()`` returns every problem as ``field: rule`` (an empty list when the profile is
  valid); ``load_profile`` raises ``ProfileError`` with all of them and the file name.

The defaults are a 7-8 B model on one modern GPU at fp16, order of magnitude only: a replica
decodes ~2,000 tokens/s at a full batch of 64 and prefills 12,000 tokens/s. Fit them to the
server being planned for (``docs/simulator.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = ["ProfileError", "ReplicaProfile", "load_profile"]


class ProfileError(ValueError):
    """A replica profile that cannot be used; the message names each field and its rule."""


@dataclass(frozen=True)
class ReplicaProfile:
    """See the module docstring."""

    # most sequences one iteration runs
    max_batch: int = 64
    # prompt tokens prefilled per second of iteration time
    prefill_tokens_per_s: float = 12_000.0
    # decode step time: decode_base_s + decode_per_seq_s x sequences in the iteration
    decode_base_s: float = 0.012
    decode_per_seq_s: float = 0.0003
    # KV cache size in tokens (prompt + output of every admitted sequence)
    kv_capacity_tokens: int = 200_000
    # seconds from creation to serving
    cold_start_s: float = 60.0
    # tokens one iteration schedules (decodes + prefill chunks); 0 = no budget. vLLM's API server
    # default on an H100-class GPU (>= 70 GiB): 8192 (EngineArgs.get_batch_defaults)
    max_batched_tokens: int = 8192

    def decode_step_s(self, batch: int) -> float:
        return self.decode_base_s + self.decode_per_seq_s * batch

    def validate(self) -> list[str]:
        problems = []
        if self.max_batch < 1:
            problems.append(f"max_batch: must be at least 1, got {self.max_batch}")
        for name in ("prefill_tokens_per_s",):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                problems.append(f"{name}: must be a positive number, got {v}")
        for name in ("decode_base_s", "decode_per_seq_s", "cold_start_s"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                problems.append(f"{name}: must be a number >= 0, got {v}")
        if self.decode_base_s + self.decode_per_seq_s <= 0:
            problems.append("decode_base_s: decode_base_s + decode_per_seq_s must be > 0 "
                            "(an iteration takes time)")
        if self.max_batched_tokens < 0 or 0 < self.max_batched_tokens < self.max_batch:
            problems.append(f"max_batched_tokens: must be 0 (no budget) or at least max_batch "
                            f"({self.max_batch}: every decode takes one token), "
                            f"got {self.max_batched_tokens}")
        if self.kv_capacity_tokens < 1:
            problems.append(f"kv_capacity_tokens: must be at least 1, got {self.kv_capacity_tokens}")
        return problems


def load_profile(path: str | Path | None, base: ReplicaProfile | None = None) -> ReplicaProfile:
    """``base`` (the defaults) with the fields of the YAML mapping at ``path`` (None: ``base``)."""
    profile = base or ReplicaProfile()
    if path is None:
        return profile
    name = str(path)
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
