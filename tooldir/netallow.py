"""Network allowlists: the ``HOST:PORT`` entries of ``execute.network = {"allow": [...]}`` and of
the policy's ``sandbox.network_allow`` ceiling. Pure functions, no I/O (the proxy that enforces
them is :mod:`tooldir.sandbox.egress`).

An entry is ``HOST:PORT`` with a port from 1 to 65535 and HOST one of:

- an exact host name (``api.example.com``; compared without case, a trailing dot dropped);
- a wildcard ``*.example.com``: any name *below* ``example.com`` (``a.example.com``,
  ``a.b.example.com``), never ``example.com`` itself;
- an IPv4 literal (``127.0.0.1``) or an IPv6 literal in brackets (``[::1]``).

A name is only ever matched as a name: an entry ``localhost:80`` does not allow ``127.0.0.1:80``,
and a name that resolves to a loopback, private, link-local or other non-global address is refused
unless that address is itself listed literally (:func:`address_listed`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Kind = Literal["name", "wildcard", "address"]
MAX_ENTRIES = 64
ENTRY_MAX_LENGTH = 262  # a 253-character name, ':' and a 5-digit port, with room for '*.'

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
#: the syntax the published manifest schemas check (host part then port); :func:`parse_entry`
#: checks the rest (label lengths, a valid address, the port's range) with a specific message
ENTRY_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|(\*\.)?[A-Za-z0-9.-]+):[0-9]{1,5}$"


class AllowEntryError(ValueError):
    """An allowlist entry that is not ``HOST:PORT``; the message says what is wrong."""


@dataclass(frozen=True, slots=True, order=True)
class AllowEntry:
    """One parsed entry. ``host`` is normalised: lower case, no trailing dot, an address in its
    compressed form (IPv6 without brackets); for a wildcard, the domain below which names match."""

    kind: Kind
    host: str
    port: int

    def __str__(self) -> str:
        if self.kind == "wildcard":
            return f"*.{self.host}:{self.port}"
        if self.kind == "address" and ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    def covers_name(self, name: str) -> bool:
        """Does this entry allow the host name ``name`` (normalised) on its port?"""
        if self.kind == "name":
            return name == self.host
        if self.kind == "wildcard":
            return name.endswith("." + self.host)
        return False

    def covers(self, other: AllowEntry) -> bool:
        """Everything ``other`` allows, this entry allows too."""
        if self.port != other.port:
            return False
        if self.kind == "address" or other.kind == "address":
            return self == other
        if other.kind == "name":
            return self.covers_name(other.host)
        return self.kind == "wildcard" and (other.host == self.host or other.host.endswith("." + self.host))


def parse_entry(text: str) -> AllowEntry:
    """``HOST:PORT`` -> an :class:`AllowEntry`; :class:`AllowEntryError` says what is wrong."""
    if not isinstance(text, str):
        raise AllowEntryError(f"{text!r} is not a string")
    if len(text) > ENTRY_MAX_LENGTH:
        raise AllowEntryError(f"{text[:40]!r}... is longer than {ENTRY_MAX_LENGTH} characters")
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise AllowEntryError(f"{text!r} is not HOST:PORT (a port is required, e.g. 'api.example.com:443')")
    if not port_text.isascii() or not port_text.isdigit() or len(port_text) > 5 or not 1 <= int(port_text) <= 65535:
        raise AllowEntryError(f"{text!r}: the port {port_text!r} is not a number from 1 to 65535")
    port = int(port_text)
    if host.startswith("["):
        if not host.endswith("]"):
            raise AllowEntryError(f"{text!r}: an IPv6 address is written in brackets, e.g. '[::1]:443'")
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise AllowEntryError(f"{text!r}: {host[1:-1]!r} is not an IPv6 address") from None
        if address.scope_id:
            raise AllowEntryError(f"{text!r}: an IPv6 address with a zone (%) is not allowed")
        return AllowEntry("address", address.compressed, port)
    if ":" in host:
        raise AllowEntryError(f"{text!r}: an IPv6 address is written in brackets, e.g. '[::1]:443'")
    if _looks_like_ipv4(host):
        try:
            return AllowEntry("address", ipaddress.IPv4Address(host).compressed, port)
        except ValueError:
            raise AllowEntryError(f"{text!r}: {host!r} is not an IPv4 address") from None
    wildcard = host.startswith("*.")
    name = (host[2:] if wildcard else host).lower().removesuffix(".")
    if "*" in name:
        raise AllowEntryError(f"{text!r}: a wildcard is only allowed as the first label ('*.example.com')")
    if not name.isascii() or len(name) > 253 or not _NAME.fullmatch(name):
        raise AllowEntryError(
            f"{text!r}: {host!r} is not a host name (ASCII letters, digits and '-' in dot-separated labels "
            "of 1 to 63 characters; IDNs in their xn-- form)"
        )
    if wildcard and "." not in name:
        raise AllowEntryError(f"{text!r}: a wildcard needs a domain of at least two labels ('*.example.com')")
    return AllowEntry("wildcard" if wildcard else "name", name, port)


def _looks_like_ipv4(host: str) -> bool:
    return all(part.isdigit() for part in host.split("."))


def parse_entries(entries: Iterable[str]) -> tuple[AllowEntry, ...]:
    """Every entry parsed, duplicates dropped, in their order; the first bad one raises
    :class:`AllowEntryError` with its index."""
    out: list[AllowEntry] = []
    for index, text in enumerate(entries):
        try:
            entry = parse_entry(text)
        except AllowEntryError as exc:
            raise AllowEntryError(f"entry {index}: {exc}") from None
        if entry not in out:
            out.append(entry)
    return tuple(out)


def intersect(declared: Sequence[AllowEntry], ceiling: Sequence[AllowEntry] | None) -> tuple[AllowEntry, ...]:
    """What a tool may reach: the part of ``declared`` that ``ceiling`` allows too (None: no
    ceiling). A declared entry the ceiling covers stays whole; a ceiling entry a declared wildcard
    covers is kept (``*.example.com:443`` declared under ``api.example.com:443`` gives the latter)."""
    if ceiling is None:
        return tuple(dict.fromkeys(declared))
    out: list[AllowEntry] = []
    for entry in declared:
        if any(limit.covers(entry) for limit in ceiling):
            out.append(entry)
            continue
        out += [limit for limit in ceiling if entry.covers(limit)]
    return tuple(dict.fromkeys(out))


def normalise_host(host: str) -> tuple[Kind, str] | None:
    """A requested host (from a CONNECT or an absolute URL, brackets already removed) ->
    ``("address", compressed)`` or ``("name", lower case)``; None when it is neither."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return ("address", address.compressed) if not getattr(address, "scope_id", None) else None
    name = host.lower().removesuffix(".")
    if not name.isascii() or len(name) > 253 or not _NAME.fullmatch(name):
        return None
    return "name", name


def allows(allow: Sequence[AllowEntry], kind: Kind, host: str, port: int) -> bool:
    """Is the requested ``host:port`` (from :func:`normalise_host`) on the list?"""
    if kind == "address":
        return AllowEntry("address", host, port) in allow
    return any(e.port == port and e.covers_name(host) for e in allow)


def address_listed(allow: Sequence[AllowEntry], address: str, port: int) -> bool:
    """Is ``address`` (any textual form) listed literally with ``port``?"""
    try:
        compressed = ipaddress.ip_address(address).compressed
    except ValueError:
        return False
    return AllowEntry("address", compressed, port) in allow


def is_public(address: str) -> bool:
    """A global unicast address: not loopback, private, link-local (the cloud metadata address
    169.254.169.254), unique-local (``fd00::/8``), shared (100.64/10), multicast, reserved or
    unspecified; an IPv4-mapped or 6to4/Teredo-embedded IPv6 address is judged by its IPv4 one."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return is_public(str(ip.ipv4_mapped))
        embedded = ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None and not is_public(str(embedded)):
            return False
    return bool(ip.is_global) and not ip.is_multicast


GrantKind = Literal["none", "allow", "unrestricted"]


@dataclass(frozen=True, slots=True)
class NetworkGrant:
    """The network one tool gets: ``none``; ``allow`` -- only ``allow`` (maybe empty: every
    connection is refused, and reported), through the proxy; or ``unrestricted`` (the host's
    network). ``why`` says, for ``none``, what the tool declared that it does not get."""

    kind: GrantKind
    allow: tuple[AllowEntry, ...] = ()
    why: str = ""

    def to_json(self) -> bool | dict[str, list[str]]:
        """As the manifest writes it: ``false``, ``true`` or ``{"allow": [...]}``."""
        if self.kind == "allow":
            return {"allow": [str(e) for e in self.allow]}
        return self.kind == "unrestricted"


def grant(
    declared: bool | Sequence[str], *, master: bool, unrestricted: bool, ceiling: Sequence[AllowEntry] | None
) -> NetworkGrant:
    """What a tool that declares ``declared`` (``execute.network``: a bool or its allow list) gets
    under the policy's ``sandbox.network`` (``master``), ``sandbox.network_unrestricted`` and
    ``sandbox.network_allow`` (``ceiling``; None: no ceiling)."""
    if declared is False:
        return NetworkGrant("none")
    if not master:
        return NetworkGrant("none", why="the policy's sandbox.network is false")
    if declared is True:
        if unrestricted:
            return NetworkGrant("unrestricted")
        return NetworkGrant(
            "none",
            why="the tool declares network: true (any host); that needs sandbox.network_unrestricted = true, or "
            'declare {"allow": ["HOST:PORT", ...]}',
        )
    return NetworkGrant("allow", intersect(parse_entries(declared), ceiling))
