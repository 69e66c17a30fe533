"""``escaler.api.typical``: the typical documents the manager packs a fleet's records against.

Their content decides only how small a packed record is, never what it reads back as; still, a
"typical" text must be one a user would write: the spec is the guide's first sample, kept equal to
it here, and both it and the status parse as the kind's models.
"""

from __future__ import annotations

import json
from importlib import resources

import yaml

from escaler.api.elasticscaler import ElasticScaler, ElasticScalerStatus
from escaler.api.typical import ELASTICSCALER_ZDICT, SPEC_TEXT, STATUS_ZDICT
from escaler.packed import MAX_ZDICT_BYTES


def test_the_typical_spec_is_the_first_sample_and_parses() -> None:
    text = resources.files("escaler.data").joinpath("samples/elasticscaler.yaml").read_text()
    first = next(doc for doc in yaml.safe_load_all(text) if doc)
    typical = json.loads(SPEC_TEXT)
    assert typical["spec"] == first["spec"]
    ElasticScaler.parse({**typical, "metadata": {"name": "llama-decode"}})


def test_the_typical_status_parses_and_the_cache_dictionary_ends_with_it() -> None:
    ElasticScalerStatus.model_validate(json.loads(STATUS_ZDICT))
    assert ELASTICSCALER_ZDICT == SPEC_TEXT + STATUS_ZDICT
    assert len(ELASTICSCALER_ZDICT) <= MAX_ZDICT_BYTES
