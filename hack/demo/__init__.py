"""The pieces of ``make demo`` (``hack/demo.py``): the trace-driven load (``load``), the demo's
Kubernetes objects built from the shipped samples (``objects``), and the live view and summary read
from the API server (``view``). ``hack/demo.py`` runs them; nothing here starts a process.
"""
