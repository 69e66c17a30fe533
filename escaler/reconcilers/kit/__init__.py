"""The scaler kit: kind-neutral pieces every scaler kind's reconciler uses.

The kit imports only the layers below the reconcilers (runtime, targets, kube, informers,
scaling, api, and the bottom utilities) and its own modules, never a kind's package
(``escaler.reconcilers.{elasticscaler,llmscaler,tidal,rsg,slo}``); and no kind imports another
kind: what two kinds share lives here. Both rules are import-linter contracts in pyproject.toml
(``make lint``). One concept per module:

* ``ports`` — the narrow interfaces a reconciler talks to (``KubeClient``, ``Mapper``, ``ObjectStore``,
  ``HandlerLookup``, ``EventSink``) and ``ObjectRef``;
* ``sync`` — what one sync carries (``Sync``) and what stops it early (``Hold``, ``Claim``);
* ``status`` — status writes only when changed (``StatusWriter`` and its memo of our own writes);
  ``drift`` — which status changes are worth a write;
* ``report`` — ``Reporter``: the one place a sync of a workload-writing kind becomes status and events
  (``ReportedKind`` says which kind);
* ``bindings`` — the binding index of targets to the scalers that claim them (every kind's claims);
  ``claims`` — the index function with its validity memo;
* ``targetread`` — the read and write steps on a target (``TargetReader``, ``write_replicas``);
* ``poller`` — the ``MetricsPoller`` spread over the interval, and the poll cadence rules;
* ``fallback`` — ``spec.fallback``'s count in a sync;
* ``watchindex`` — the dynamic informers scalers read through, with an index from object to scalers;
  ``watchkey`` — the informer key of a kind a scaler names, and the shared retry intervals;
* ``floor`` — ``spec.floorFrom``: a Tidal's floor for the scalers that name it;
* ``flowsizing`` / ``flowpresets`` — Flow sizing memory and the PromQL presets (LLMScaler, SLO engine);
* ``scalermetrics`` — the ``escaler_*`` per-scaler collectors;
* ``names`` — the binding labels and the HPA API;
* ``setup`` — setup helpers (outbound executor, poller wiring, cache reader, claimant predicate);
  ``managerclient`` — a setup's API client from the manager.
"""
