"""``kubectl-escaler``: the escaler command line as a kubectl plugin.

kubectl runs any executable named ``kubectl-<name>`` on ``PATH`` for ``kubectl <name> ARGS``, passing
ARGS through unchanged (kubectl's own global flags are not allowed before a plugin's name). The
wheel installs this console script next to ``escaler``, so after ``pip install escaler``
``kubectl escaler ARGS`` is ``escaler ARGS`` — ``kubectl escaler explain -n NS NAME``,
``kubectl escaler version``, ``kubectl escaler crds | kubectl apply -f -`` — with every help text
naming the command as the user typed it (``kubectl escaler``). The kubeconfig is found as for
``escaler`` (``--kubeconfig``, ``KUBECONFIG``, ``~/.kube/config``), which is what kubectl uses too.
Exit codes are those of ``escaler.cli.main``.
"""

from __future__ import annotations

from collections.abc import Sequence

from escaler.cli.main import main as escaler_main

__all__ = ["PROG", "main"]

PROG = "kubectl escaler"


def main(argv: Sequence[str] | None = None) -> int:
    return escaler_main(argv, prog=PROG)
