"""The SLO API (docs/sloapi.md): read and change SLO requirements over HTTP.

Modules, one concept each: ``kinds`` (the two SLO kinds and what a route of each may hold),
``index`` (one informer per kind, routes across kinds, missing CRDs), ``translate`` (route
bodies ↔ specs, merge patches, validation), ``errors`` (the envelope and the API server's
failures), ``service`` (what each route does, auth included), ``upstream`` (calls to the API
server), ``schema`` (the OpenAPI shapes), ``observed`` (what the decision engine's status says of
a route, read-only), ``form`` (the HTML page), ``app`` (the FastAPI app). The command is
``escaler.cli.sloapi`` (``python -m escaler slo-api``), which needs the ``sloapi`` extra
(``pip install 'escaler[sloapi]'``: FastAPI, uvicorn).
"""

from escaler.sloapi.app import create_app
from escaler.sloapi.index import SLOIndex
from escaler.sloapi.service import SLOService
from escaler.sloapi.upstream import KubeSLOClient

__all__ = ["KubeSLOClient", "SLOIndex", "SLOService", "create_app"]
