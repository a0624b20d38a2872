"""The HOST:PORT allowlist entries of issue 24 (tooldir.netallow): parsing, matching, intersection
with the policy's ceiling, and which resolved addresses count as public."""

from __future__ import annotations

import pytest

from tooldir.netallow import (
    AllowEntry,
    AllowEntryError,
    address_listed,
    allows,
    intersect,
    is_public,
    normalise_host,
    parse_entries,
    parse_entry,
)


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("api.example.com:443", AllowEntry("name", "api.example.com", 443)),
        ("API.Example.COM.:443", AllowEntry("name", "api.example.com", 443)),
        ("*.example.com:443", AllowEntry("wildcard", "example.com", 443)),
        ("127.0.0.1:8080", AllowEntry("address", "127.0.0.1", 8080)),
        ("[::1]:443", AllowEntry("address", "::1", 443)),
        ("[0:0::1]:443", AllowEntry("address", "::1", 443)),
        ("localhost:1", AllowEntry("name", "localhost", 1)),
    ],
)
def test_an_entry_is_parsed_and_normalised(text: str, entry: AllowEntry) -> None:
    assert parse_entry(text) == entry


@pytest.mark.parametrize("text", ["api.example.com:443", "*.example.com:443", "127.0.0.1:80", "[::1]:443"])
def test_an_entry_prints_back_as_written_in_normal_form(text: str) -> None:
    assert str(parse_entry(text)) == text


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("api.example.com", "a port is required"),
        (":443", "a port is required"),
        ("api.example.com:0", "from 1 to 65535"),
        ("api.example.com:65536", "from 1 to 65535"),
        ("api.example.com:http", "from 1 to 65535"),
        ("::1:443", "brackets"),
        ("[::1:443", "brackets"),
        ("[zz::1]:443", "not an IPv6 address"),
        ("[fe80::1%eth0]:443", "IPv6 address"),
        ("256.1.1.1:80", "not an IPv4 address"),
        ("a.*.example.com:443", "first label"),
        ("*.com:443", "at least two labels"),
        ("exa_mple.com:443", "not a host name"),
        ("-bad.example.com:443", "not a host name"),
        ("bücher.example:443", "xn--"),
    ],
)
def test_a_bad_entry_is_refused_with_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(AllowEntryError, match=says):
        parse_entry(text)


def test_a_bad_entry_in_a_list_names_its_index() -> None:
    with pytest.raises(AllowEntryError, match="entry 1: 'nope'"):
        parse_entries(["a.example:443", "nope"])


def test_a_list_drops_duplicates_and_keeps_order() -> None:
    assert [str(e) for e in parse_entries(["b.example:1", "a.example:1", "B.example:1"])] == [
        "b.example:1",
        "a.example:1",
    ]


def test_a_wildcard_allows_names_below_its_domain_never_the_domain_itself() -> None:
    allow = parse_entries(["*.example.com:443"])
    assert allows(allow, "name", "a.example.com", 443)
    assert allows(allow, "name", "a.b.example.com", 443)
    assert not allows(allow, "name", "example.com", 443)
    assert not allows(allow, "name", "badexample.com", 443)
    assert not allows(allow, "name", "a.example.com", 80)


def test_a_name_entry_never_allows_the_address_it_resolves_to() -> None:
    allow = parse_entries(["localhost:80"])
    assert allows(allow, "name", "localhost", 80)
    assert not allows(allow, "address", "127.0.0.1", 80)
    assert not address_listed(allow, "127.0.0.1", 80)


def test_an_address_is_listed_only_literally_and_with_its_port() -> None:
    allow = parse_entries(["127.0.0.1:80", "[::1]:443"])
    assert address_listed(allow, "127.0.0.1", 80)
    assert address_listed(allow, "0:0:0:0:0:0:0:1", 443)
    assert not address_listed(allow, "127.0.0.1", 81)
    assert not address_listed(allow, "127.0.0.2", 80)


@pytest.mark.parametrize(
    ("host", "normal"),
    [("127.0.0.1", ("address", "127.0.0.1")), ("0::1", ("address", "::1")), ("Api.Example.", ("name", "api.example"))],
)
def test_a_requested_host_is_normalised_like_an_entry(host: str, normal: tuple[str, str]) -> None:
    assert normalise_host(host) == normal


@pytest.mark.parametrize("host", ["", "a b", "fe80::1%eth0", "x" * 300])
def test_a_requested_host_that_is_neither_name_nor_address_is_none(host: str) -> None:
    assert normalise_host(host) is None


def test_without_a_ceiling_the_tool_gets_what_it_declares() -> None:
    declared = parse_entries(["api.example.com:443", "127.0.0.1:8080"])
    assert intersect(declared, None) == declared


def test_the_tool_gets_the_intersection_of_its_list_and_the_ceiling() -> None:
    declared = parse_entries(["api.example.com:443", "*.cdn.example:443", "127.0.0.1:8080", "other.example:443"])
    ceiling = parse_entries(["*.example.com:443", "img.cdn.example:443", "127.0.0.1:8081"])
    assert [str(e) for e in intersect(declared, ceiling)] == ["api.example.com:443", "img.cdn.example:443"]


def test_a_ceiling_wildcard_covers_a_narrower_declared_wildcard() -> None:
    declared = parse_entries(["*.a.example.com:443"])
    assert intersect(declared, parse_entries(["*.example.com:443"])) == declared
    assert intersect(declared, parse_entries(["*.example.com:80"])) == ()


def test_an_empty_ceiling_allows_nothing() -> None:
    assert intersect(parse_entries(["api.example.com:443"]), ()) == ()


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.1.1",
        "172.16.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",  # noqa: S104 - an address under test, nothing binds it
        "224.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fd00::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "2002:7f00:1::1",
        "not an address",
    ],
)
def test_loopback_private_link_local_and_metadata_addresses_are_not_public(address: str) -> None:
    assert not is_public(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:1.1.1.1"])
def test_global_unicast_addresses_are_public(address: str) -> None:
    assert is_public(address)
