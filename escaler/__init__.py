"""escaler: elastic scaling for LLM inference on Kubernetes, and the controller-runtime-style
toolkit (workqueue, informers, kube access, controllers, leader-elected manager) it runs on.

The toolkit is public API for other operators: see ``escaler.workqueue``, ``escaler.informers``,
``escaler.kube`` and ``escaler.runtime``.
"""

__version__ = "0.1.0"
