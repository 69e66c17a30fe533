"""Run a Python module and, on a signal, write where its resident memory is (RSS decomposition).

``python bench/memprobe.py OUTDIR -m MODULE [ARGS...]`` runs ``MODULE`` as ``python -m`` would
(``sys.argv`` = ``[MODULE, *ARGS]``). On ``SIGUSR1`` it writes ``OUTDIR/memprobe-<label>.txt``
(``<label>``: the content of ``OUTDIR/memprobe.label``, ``window`` when absent) with, in order:

1. ``VmRSS`` as found, the garbage collector's generation counts, and the live object count;
2. pymalloc's own view (``sys._debugmallocstats``): the bytes of its arenas, of the blocks in use,
   of free blocks in partly used pools (fragmentation inside pymalloc);
3. glibc's view (``mallinfo2``): bytes in use, free bytes kept in the heaps (fragmentation outside
   pymalloc: every object > 512 bytes, every thread's arena), mmapped bytes, the arena count
   (``malloc_info``);
4. ``VmRSS`` after ``gc.collect()`` (what uncollected garbage held), then after
   ``malloc_trim(0)`` (what glibc kept free but resident);
5. last (its own bookkeeping allocates), the Python objects reachable from the collector's, by
   type (``sys.getsizeof``, each counted once), and before all that the resident KB by kind of
   mapping (``/proc/self/smaps``) and the threads by name. The walk never reads an object's
   ``__dict__``: on CPython 3.11 that creates a dict for an instance that kept its attributes
   inline (before 2026-12-07 it did, and counted ~33 dicts per scaler it had made itself); such
   instances' values arrays are the ``(inline attribute values)`` row (8 bytes an attribute, an
   estimate). Then the plain dicts by the type of the object first found holding each
   (``dicts held by <type>``: a pydantic model's instance dict, a dict inside a dict, ...), and the
   tuples and strings likewise (``tuples held by <type>``; a dict's row names the dict's own holder).

With ``MEMPROBE_TRACE=N`` in its environment, the module runs under ``tracemalloc`` (``N`` frames a
trace; it slows the process 2-3x and adds its own memory) and each probe also writes the heap's
growth since the previous probe by allocation site: the 40 tracebacks that grew most (``N`` frames
each, innermost last), each with its bytes and blocks -- who allocated what the fleet holds,
grouped by where, which the by-type walk cannot say (``MEMPROBE_TRACE_GROUP=lineno`` groups by
the innermost line instead).

With ``MEMPROBE_OWNERS=1``, each probe ends with ``bench/memowners.py``'s walk of the live
manager by attribute path, and a probe after the first prints the rows that grew most, per scaler
(the label's leading number is the scaler count: ``3000-after-surge``).

A label ending in `` observe`` (``memprobe.label``: ``<label> observe``) skips step 4.

Steps 4 change the process (a full collection, a trim): the caller reads its own RSS figure
*before* sending the signal. ``OUTDIR/memprobe.ready`` appears once the handler is installed.
This is a measuring tool for bench/bench_capacity.py (``BENCH_CAPACITY_MEMPROBE=1``), not part
of the product.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import re
import runpy
import signal
import sys
import tempfile
import threading
import tracemalloc
from pathlib import Path
from typing import Any


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")
    ]


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _pymalloc_stats() -> str:
    """``sys._debugmallocstats()`` writes to the C stderr: capture fd 2 into a temporary file."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode(errors="replace")


def _summarize_pymalloc(text: str) -> list[str]:
    keep = (
        "# arenas allocated current",
        "# arenas highwater mark",
        "# bytes in allocated blocks",
        "# bytes in available blocks",
        "unused pools * ",
        "# bytes lost to pool headers",
        "# bytes lost to quantization",
    )
    out = []
    for line in text.splitlines():
        if any(k in line for k in keep):
            out.append("  pymalloc " + re.sub(r"\s*=\s*", " = ", line.strip()))
    return out


def _glibc() -> list[str]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mi = _Mallinfo2()
    libc.mallinfo2.restype = _Mallinfo2
    mi = libc.mallinfo2()
    lines = [
        f"  glibc arena (sbrk+heaps) bytes = {mi.arena:,}",
        f"  glibc in use (uordblks) = {mi.uordblks:,}",
        f"  glibc free kept (fordblks) = {mi.fordblks:,}",
        f"  glibc mmapped (hblkhd) = {mi.hblkhd:,} in {mi.hblks} blocks",
    ]
    # malloc_info(0, FILE*): one <heap nr=...> per arena
    size = ctypes.c_size_t()
    buf = ctypes.c_char_p()
    libc.open_memstream.restype = ctypes.c_void_p
    fp = libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if fp:
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        xml = ctypes.string_at(buf, size.value).decode(errors="replace")
        libc.free(buf)
        lines.append(f"  glibc arenas (malloc_info heaps) = {xml.count('<heap nr=')}")
    return lines


_HEAP_ALIGN = 64 << 20  # glibc's per-thread heaps (HEAP_MAX_SIZE on 64-bit) start 64 MiB-aligned


def _smaps() -> list[str]:
    """Resident KB by kind of mapping: files (code, libraries), the brk heap (glibc's main arena),
    glibc's per-thread heaps, thread stacks (8 MiB anonymous mappings), the rest of the anonymous
    memory (pymalloc's 1 MiB arenas, glibc's mmapped large blocks). A heuristic by shape."""
    kinds: dict[str, int] = {}
    kind = "other"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
            start, end = (int(x, 16) for x in head[0].split("-"))
            path = head[5] if len(head) > 5 else ""
            if path == "[heap]":
                kind = "brk heap (glibc main arena)"
            elif path.startswith("[stack"):
                kind = "main thread stack"
            elif path.startswith("/"):
                kind = "files (code, libraries)"
            elif path:
                kind = path
            elif start % _HEAP_ALIGN == 0 and end - start <= _HEAP_ALIGN:
                kind = "glibc thread heaps"
            elif end - start == 8 << 20:
                kind = "thread stacks (8 MiB mappings)"
            else:
                kind = "other anonymous (pymalloc arenas, mmapped blocks)"
        elif head[0] == "Rss:":
            kinds[kind] = kinds.get(kind, 0) + int(head[1])
    return [f"  smaps Rss KB {k} = {v:,}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])]


def _thread_names() -> str:
    names: dict[str, int] = {}
    for t in threading.enumerate():
        n = re.sub(r"\d+", "#", t.name)
        names[n] = names.get(n, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(names.items(), key=lambda kv: -kv[1]))


# Py_TPFLAGS_MANAGED_DICT (3.11: an instance keeps its attributes inline until its dict is read)
_MANAGED_DICT = 1 << 4


def _by_type(top: int = 30) -> list[str]:
    """Bytes (``sys.getsizeof``) of every object reachable from the objects the collector tracks
    (strings, numbers and untracked containers included), each counted once, by type: the live
    heap as Python sees it. The walk's own bookkeeping is left out."""
    sizes: dict[str, list[int]] = {}
    objs = gc.get_objects()
    seen: set[int] = set()
    stack: list[object] = []
    # id of each dict → the type of the object first found holding it
    dict_holder: dict[int, str] = {}
    # (tuple or str, the holder's type) → how many (each counted when first reached)
    held: dict[tuple[str, str], int] = {}
    # id of each string → the type of the object first found holding it
    holder_of: dict[int, str] = {}
    # each string's value → [copies, bytes of one, the holder's type of the first two copies]
    copies: dict[str, list[Any]] = {}
    skip = {id(objs), id(seen), id(stack), id(sizes), id(dict_holder), id(held), id(copies), id(holder_of)}
    stack.extend(objs)
    while stack:
        o = stack.pop()
        i = id(o)
        if i in seen or i in skip:
            continue
        seen.add(i)
        t = type(o)
        try:
            b = sys.getsizeof(o)
        except TypeError:
            continue
        name = f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__
        row = sizes.get(name)
        if row is None:
            row = sizes[name] = [0, 0]
        row[0] += b
        row[1] += 1
        refs = gc.get_referents(o)
        stack.extend(refs)
        # An instance's dict, once it exists, is a referent. Until something reads ``o.__dict__``,
        # 3.11 keeps a plain class's attributes inline (a values array, one pointer each; the
        # values are the referents): reading ``__dict__`` here, as this walk did before 2026-12-07,
        # created a ~300-byte dict per such object and counted it (the "47 dicts per scaler").
        if t.__flags__ & _MANAGED_DICT and not isinstance(o, type) and not any(type(r) is dict for r in refs):
            inline = sizes.get("(inline attribute values)")
            if inline is None:
                inline = sizes["(inline attribute values)"] = [0, 0]
            inline[0] += 8 * max(len(refs) - 1, 0) + 16
            inline[1] += 1
        holder = name if t is not dict else f"a dict held by {dict_holder.get(i, '?')}"
        for r in refs:  # each dict, tuple and str under the type of the first object found holding it
            rt = type(r)
            if rt is dict and id(r) not in dict_holder:
                dict_holder[id(r)] = name if t is not dict else "a dict (in a dict)"
            if (rt is tuple or rt is str) and id(r) not in seen:
                held[(rt.__name__, holder)] = held.get((rt.__name__, holder), 0) + 1
        if t is str:
            _count_copy(copies, o, b, holder_of.get(i, "?"))
        for r in refs:
            if type(r) is str and id(r) not in seen:
                holder_of[id(r)] = holder
    del objs, stack
    total = sum(b for b, _ in sizes.values())
    out = [f"  python heap (getsizeof) total = {total:,} in {sum(c for _, c in sizes.values()):,} objects"]
    for name, (b, c) in sorted(sizes.items(), key=lambda kv: -kv[1][0])[:top]:
        out.append(f"  type {name} = {b:,} in {c:,}")
    holders: dict[str, int] = {}
    for holder in dict_holder.values():
        holders[holder] = holders.get(holder, 0) + 1
    for holder, count in sorted(holders.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  dicts held by {holder} = {count:,}")
    for (kind, holder), count in sorted(held.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"  {kind}s held by {holder} = {count:,}")
    return out + _duplicate_strings(copies, top)


def _count_copy(copies: dict[str, list[Any]], s: str, size: int, holder: str) -> None:
    row = copies.get(s)
    if row is None:
        copies[s] = [1, size, [holder]]
        return
    row[0] += 1
    row[2].append(holder)


def _duplicate_strings(copies: dict[str, list[Any]], top: int) -> list[str]:
    """Strings held as more than one object with the same value, by shape (digit runs as ``#``, so
    one row stands for a per-scaler string such as ``s#``): the bytes the extra copies take, how
    many values and copies, and the types of the objects holding the copies (the most frequent six)."""
    shapes: dict[str, list[Any]] = {}
    for value, (n, size, holders) in copies.items():
        if n < 2:
            continue
        shape = re.sub(r"[0-9]+", "#", value[:60])
        row = shapes.get(shape)
        if row is None:
            row = shapes[shape] = [0, 0, 0, {}]
        row[0] += (n - 1) * size
        row[1] += 1
        row[2] += n
        for holder in holders:
            row[3][holder] = row[3].get(holder, 0) + 1
    wasted = sum(r[0] for r in shapes.values())
    out = [f"  duplicate strings: {wasted:,} bytes in copies beyond the first, by shape:"]
    for shape, (b, values, n, holders) in sorted(shapes.items(), key=lambda kv: -kv[1][0])[:top]:
        by = sorted(holders.items(), key=lambda kv: -kv[1])[:6]
        out.append(f"    {b:,} B  {values:,} values in {n:,} copies  {shape!r}  held by "
                   + ", ".join(f"{h} ({c:,})" for h, c in by))
    return out


# the owner rows of the first probe (MEMPROBE_OWNERS), the base of the later ones' growth
_first_owners: list[dict[str, int]] = []


def _owner_growth(label: str) -> list[str]:
    if os.environ.get("MEMPROBE_OWNERS", "0") in ("", "0"):
        return []
    import memowners

    now = memowners.rows()
    if not _first_owners:
        _first_owners.append(now)
        return [f"owners: {sum(now.values()):,} bytes over {len(now)} rows (the base of the later probes)"]
    n = int(m.group(0)) if (m := re.match(r"\d+", label)) else 1
    return memowners.growth(_first_owners[0], now, n)


# the tracemalloc snapshot of the previous probe (MEMPROBE_TRACE), the base of the next one's growth
_last_snapshot: list[tracemalloc.Snapshot] = []


def _traced_growth(top: int = 40) -> list[str]:
    """The heap's growth since the previous probe by allocation site (see the module docstring)."""
    if not tracemalloc.is_tracing():
        return []
    snap = tracemalloc.take_snapshot().filter_traces((
        tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, __file__)))
    group = os.environ.get("MEMPROBE_TRACE_GROUP", "traceback")
    if not _last_snapshot:
        _last_snapshot.append(snap)
        total = sum(s.size for s in snap.statistics("filename"))
        return [f"tracemalloc: {total:,} bytes traced (the base of the next probe's growth)"]
    stats = snap.compare_to(_last_snapshot[0], group)
    _last_snapshot[0] = snap
    grew = sum(s.size_diff for s in stats)
    out = [f"tracemalloc: growth since the previous probe {grew:,} bytes; the top {top} sites:"]
    for s in stats[:top]:
        out.append(f"  +{s.size_diff:,} B in {s.count_diff:+,} blocks")
        out += [f"      {f.filename.split('/escaler/')[-1]}:{f.lineno}" for f in s.traceback]
    return out


def probe(outdir: Path) -> None:
    label_file = outdir / "memprobe.label"
    text = label_file.read_text().split() if label_file.exists() else []
    label = text[0] if text else "window"
    observe_only = "observe" in text[1:]  # no collection, no trim: the caller measures from here
    lines = [f"memprobe {label}", f"VmRSS KB as found = {_rss_kb()}"]
    lines.append(f"threads = {threading.active_count()}: {_thread_names()}")
    lines += _smaps()
    lines.append(f"gc counts (gen0, gen1, gen2 pending) = {gc.get_count()}")
    lines.append(f"gc objects tracked = {len(gc.get_objects()):,}")
    lines += _summarize_pymalloc(_pymalloc_stats())
    lines += _glibc()
    lines += _traced_growth()
    if observe_only:
        _write(outdir, label, [*lines, *_by_type(), *_owner_growth(label)])
        return
    found = gc.collect()
    lines.append(f"gc.collect() found {found:,} unreachable; VmRSS KB after = {_rss_kb()}")
    lines += _summarize_pymalloc(_pymalloc_stats())
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc_trim(0)
    lines.append(f"VmRSS KB after malloc_trim(0) = {_rss_kb()}")
    lines += _glibc()
    lines += _by_type()  # last: the walk's own bookkeeping allocates (tens of MB at 10,000 scalers)
    lines += _owner_growth(label)
    _write(outdir, label, lines)


def _write(outdir: Path, label: str, lines: list[str]) -> None:
    out = outdir / f"memprobe-{label}.txt"
    partial = out.with_suffix(".partial")
    partial.write_text("\n".join(lines) + "\n")
    partial.replace(out)


def main() -> int:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        print("usage: memprobe.py OUTDIR -m MODULE [ARGS...]", file=sys.stderr)
        return 2
    outdir, module, args = Path(sys.argv[1]), sys.argv[3], sys.argv[4:]
    def handler(*_: object) -> None:
        try:
            probe(outdir)
        except Exception as exc:
            label = (outdir / "memprobe.label").read_text().split()[0]
            _write(outdir, label, [f"memprobe failed: {exc!r}"])

    frames = int(os.environ.get("MEMPROBE_TRACE", "0") or 0)
    if frames > 0:
        tracemalloc.start(frames)
    signal.signal(signal.SIGUSR1, handler)
    (outdir / "memprobe.ready").write_text("")
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
