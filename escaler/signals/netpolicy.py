"""Which network addresses a user-named endpoint may reach (the SSRF guard of outbound calls).

Anyone who can create a scaler names the URLs the manager will GET (ExternalServer, SignalTrigger
pull). Without a guard that turns the manager into a proxy into places only it can reach: its
own ports on 127.0.0.1, the node's cloud metadata service (credentials), link-local services.

Contract of ``AddressPolicy``:

* ``refusal(address)`` is ``None`` when the manager may connect to ``address``, else the reason
  (naming the address, the refused network and how to re-allow it). Refused by default
  (``DENIED_NETWORKS``): unspecified (0.0.0.0/8, ::), loopback (127.0.0.0/8, ::1), link-local
  (169.254.0.0/16, fe80::/10), multicast (224.0.0.0/4, ff00::/8), reserved and broadcast
  (240.0.0.0/4) and the cloud metadata addresses (``METADATA_ADDRESSES``). Private ranges
  (10/8, 172.16/12, 192.168/16, fc00::/7) are *allowed*: in-cluster Prometheus lives there.
  ``ipaddress.is_private`` is deliberately not the rule (it also covers TEST-NET ranges and
  would refuse every ClusterIP).
* An IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
  ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is judged as that IPv4 address, so
  ``::ffff:127.0.0.1`` is loopback.
* ``allow_networks`` (``--allow-endpoint-networks``) re-allows refused addresses inside them,
  e.g. ``127.0.0.0/8`` for a Prometheus on the manager's own host in development. A cloud
  metadata address is re-allowed only when named exactly (``169.254.169.254/32``): allowing
  ``169.254.0.0/16`` for a node-local cache must not open the metadata service by accident.
* ``host_refusal(host)`` refuses the well-known metadata host names (``METADATA_HOSTS``) before
  any DNS lookup; they are never re-allowed.

The policy is applied by ``escaler.signals.fetch`` to every address a host name resolves to,
at connect time, and the connection goes to the checked address itself (no second lookup, so
no DNS-rebinding window). Pure and immutable: thread-safe.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

__all__ = [
    "ALLOW_NETWORKS_FLAG",
    "DENIED_NETWORKS",
    "METADATA_ADDRESSES",
    "METADATA_HOSTS",
    "AddressPolicy",
    "IPAddress",
    "IPNetwork",
    "canonical_address",
    "parse_networks",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_NETWORKS_FLAG = "--allow-endpoint-networks"

# (network, what it is); checked in order, so the more specific names come first
DENIED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(net), what) for net, what in (
        ("255.255.255.255/32", "broadcast"),
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
    )
)

# cloud instance metadata / platform services; refused even when a network holding them is allowed
METADATA_ADDRESSES: dict[IPAddress, str] = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata service (AWS, GCP, Azure, OpenStack, ...)",
    ipaddress.ip_address("169.254.170.2"): "AWS ECS task metadata service",
    ipaddress.ip_address("fd00:ec2::254"): "cloud metadata service (AWS IPv6)",
    ipaddress.ip_address("fd20:ce::254"): "cloud metadata service (GCP IPv6)",
    ipaddress.ip_address("100.100.100.200"): "cloud metadata service (Alibaba Cloud)",
    ipaddress.ip_address("168.63.129.16"): "cloud platform service (Azure WireServer)",
}

# host names of metadata services; refused by name, before any lookup
METADATA_HOSTS = frozenset({
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "metadata.azure.com",
    "metadata.tencentyun.com",
    "instance-data",
    "instance-data.ec2.internal",
})

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_V4_COMPATIBLE = ipaddress.ip_network("::/96")


def canonical_address(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, compatible, NAT64, 6to4), else ``address``."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _V4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def parse_networks(text: str | Sequence[str]) -> tuple[IPNetwork, ...]:
    """``--allow-endpoint-networks`` (a comma list of CIDRs, or a sequence) → networks.

    ``ValueError`` naming the flag, the entry and the rule for anything else (a bare address is
    taken as its /32 or /128; host bits must be zero)."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[IPNetwork] = []
    for item in items:
        entry = item.strip()
        if not entry:
            continue
        try:
            out.append(ipaddress.ip_network(entry, strict=True))
        except ValueError as err:
            raise ValueError(f"{ALLOW_NETWORKS_FLAG}: {entry!r} is not a network in CIDR notation with "
                             f"zero host bits (e.g. 127.0.0.0/8, fd00::/8): {err}") from None
    return tuple(out)


class AddressPolicy:
    """The address rule of outbound calls (see the module docstring)."""

    def __init__(self, allow_networks: Sequence[IPNetwork] = ()) -> None:
        # networks re-allowed by --allow-endpoint-networks; fixed
        self.allow_networks: tuple[IPNetwork, ...] = tuple(allow_networks)

    def _allowed(self, address: IPAddress) -> bool:
        return any(address.version == net.version and address in net for net in self.allow_networks)

    def _named(self, address: IPAddress) -> bool:
        return any(address.version == net.version and net.num_addresses == 1 and address in net
                   for net in self.allow_networks)

    def refusal(self, address: IPAddress) -> str | None:
        """Why the manager must not connect to ``address``; None when it may."""
        ip = canonical_address(address)
        shown = str(address) if ip == address else f"{address} (IPv4 {ip})"
        metadata = METADATA_ADDRESSES.get(ip)
        if metadata is not None:
            if self._named(ip):
                return None
            return (f"{shown} is the {metadata}; endpoints may not reach it "
                    f"(only {ALLOW_NETWORKS_FLAG} naming {ip}/{ip.max_prefixlen} exactly re-allows it)")
        for net, what in DENIED_NETWORKS:
            if ip.version == net.version and ip in net:
                if self._allowed(ip):
                    return None
                return (f"{shown} is {what} ({net}); endpoints may not reach it unless the manager "
                        f"runs with {ALLOW_NETWORKS_FLAG} covering it")
        return None

    def host_refusal(self, host: str) -> str | None:
        """Why ``host`` (a name from a URL) is refused before any lookup; None when it is not."""
        name = host.lower().rstrip(".")
        if name in METADATA_HOSTS:
            return f"host {name!r} is a cloud metadata service; endpoints may not reach it"
        return None
