"""Which client a request is charged to: the peer, or the client behind a trusted proxy.

The failed-authentication budget is kept per client address (``escaler.runtime.authfilter``).
Behind an ingress every request comes from the ingress' address, so one client failing its
logins would spend everyone's budget. ``--trusted-proxies`` names the proxies' networks.

Contract of ``client_address(peer, forwarded_for, trusted)``:

* ``peer`` not an IP address in one of ``trusted`` (or ``trusted`` empty): ``peer``. A header a
  client sends directly is never believed.
* ``peer`` trusted: the right-most address of ``X-Forwarded-For`` (``forwarded_for``, the
  comma-joined values of every such header) that is not itself in ``trusted`` — the address the
  last trusted proxy received the request from; entries to its left were written by the client
  and are ignored. A missing header, or one holding nothing but trusted addresses or garbage in
  that place, is ``peer`` (the proxy's own request).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from escaler.signals.netpolicy import IPNetwork

__all__ = ["client_address"]


def _trusted(text: str, trusted: Sequence[IPNetwork]) -> bool | None:
    """Whether ``text`` is an address in ``trusted``; None when it is not an IP address."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None
    return any(address.version == net.version and address in net for net in trusted)


def client_address(peer: str, forwarded_for: str | None, trusted: Sequence[IPNetwork]) -> str:
    """See the module docstring."""
    if not trusted or not _trusted(peer, trusted):
        return peer
    for hop in reversed([h.strip() for h in (forwarded_for or "").split(",")]):
        verdict = _trusted(hop, trusted)
        if verdict is None:
            return peer  # garbage where the proxy writes: do not guess
        if not verdict:
            return str(ipaddress.ip_address(hop.strip("[]")))
    return peer
