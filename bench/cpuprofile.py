"""Run a Python module under a CPU-clock profiler that the caller switches on and off by signal.

``python bench/cpuprofile.py OUTDIR -m MODULE [ARGS...]`` runs ``MODULE`` as ``python -m`` would
(``sys.argv`` = ``[MODULE, *ARGS]``). Nothing is recorded until the process receives ``SIGUSR1``:
then yappi (CPU clock, every thread, builtins included) records until ``SIGUSR2``, which writes
``OUTDIR/cpu-<label>.txt`` and stops. ``<label>`` is the content of ``OUTDIR/cpuprofile.label``
when ``SIGUSR1`` arrived (``window`` when absent), so one process can be profiled over several
windows (bench/bench_capacity.py: ``idle``, then ``surge``). ``OUTDIR/cpuprofile.ready`` appears
once the handlers are installed (a ``SIGUSR1`` before that would end the process).

Why not only py-spy: ``py-spy record --gil`` keeps a sample only when it sees a thread holding the
GIL; on the capacity bench's manager it kept ~170 samples of a 70 s idle window in which the
manager used ~40 CPU-s, too few and too biased to split a 3-5 ms poll between its parts. A
deterministic profile counts every call on every thread's CPU clock. Its cost: the profiled
process runs several times slower, so a profiled run's latencies and CPU totals are not the
benchmark's (its *shares* are what it is for), exactly like ``BENCH_PROFILE=1``.

The report: the profiled threads' CPU seconds in all, then the top functions by inclusive CPU
(``ttot``) and by self CPU (``tsub``), each with its call count and its share of the total.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from pathlib import Path
from typing import Any

TOP = int(os.environ.get("BENCH_CPUPROFILE_TOP", "40"))


def _report(label: str, out: Path) -> None:
    import yappi  # type: ignore[import-not-found, unused-ignore]

    funcs = yappi.get_func_stats()
    total = sum(t.ttot for t in yappi.get_thread_stats())
    rows = list(funcs)
    lines = [f"cpu profile {label}: {total:.2f} CPU-s over the profiled threads, {len(rows)} functions"]

    def name(f: Any) -> str:
        module = str(f.module)
        for cut in ("/site-packages/", "/lib/python3.11/", "/work/main/"):
            if cut in module:
                module = module.split(cut, 1)[1]
        return f"{f.name} ({module}:{f.lineno})" if f.lineno else f"{f.name} ({module})"

    for key, title in (("ttot", "inclusive"), ("tsub", "self")):
        lines.append(f"{title} (share of {total:.2f} CPU-s, calls):")
        for f in sorted(rows, key=lambda f: getattr(f, key), reverse=True)[:TOP]:
            share = 100 * getattr(f, key) / total if total else 0.0
            lines.append(f"  {share:5.1f}%  {f.ncall:>9}  {name(f)}")
    partial = out.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(out)  # a reader waiting for ``out`` never sees half a report


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        print("usage: cpuprofile.py OUTDIR -m MODULE [ARGS...]", file=sys.stderr)
        return 2
    outdir, module, args = Path(sys.argv[1]), sys.argv[3], sys.argv[4:]
    import yappi  # type: ignore[import-not-found, unused-ignore]

    yappi.set_clock_type("cpu")
    state = {"label": "window"}
    # both handlers run on the main thread, one may interrupt the other: reentrant
    lock = threading.RLock()

    def start(*_: object) -> None:
        with lock:
            label_file = outdir / "cpuprofile.label"
            state["label"] = label_file.read_text().strip() if label_file.exists() else "window"
            yappi.stop()
            yappi.clear_stats()
            yappi.start(builtins=True, profile_threads=True)

    def stop(*_: object) -> None:
        with lock:
            yappi.stop()
            label = state["label"]
            _report(label, outdir / f"cpu-{label}.txt")
            yappi.clear_stats()

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    (outdir / "cpuprofile.ready").write_text(str(os.getpid()))  # signals are safe to send from now
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
