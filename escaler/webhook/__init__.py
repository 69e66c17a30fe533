"""escaler.webhook: the validating admission webhook for every escaler kind
(docs/install.md#the-admission-webhook).

* ``validation.validate_object(kind, obj)`` — spec-level checks (schema, the CRDs' CEL rules in
  Python, and what only code can check: registered algorithms, endpoint URLs, Tidal schedules,
  annotations), never reading the cluster; ``validators()`` gives one per webhook route;
* ``admission.review(route, body, validate)`` — the ``admission.k8s.io/v1`` AdmissionReview
  protocol;
* ``server.WebhookServer`` — the HTTPS server, a manager ``Runnable``
  (``Manager.add_webhook(server)``);
* ``manifests`` — the ValidatingWebhookConfiguration shipped in ``manifests/webhook/``.
"""

from escaler.webhook.admission import Outcome, Route, review
from escaler.webhook.checks import CheckContext
from escaler.webhook.server import WebhookServer
from escaler.webhook.validation import ROUTES, validate_object, validators

__all__ = [
    "ROUTES",
    "CheckContext",
    "Outcome",
    "Route",
    "WebhookServer",
    "review",
    "validate_object",
    "validators",
]
