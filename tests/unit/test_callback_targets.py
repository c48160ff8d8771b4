"""Callback URLs against server-side request forgery: every check runs on the validator
itself with a stub resolver, so no request and no DNS lookup leaves the machine."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from service.deployments.callbacks import (
    AllowList,
    CallbackRefused,
    check_callback_url,
    parse_ipv4,
    redact_url,
    resolve_target,
)
from service.errors import InvalidInput

NONE = AllowList()

LOOPBACK = [
    "http://127.0.0.1/hook",
    "http://127.1.2.3:8080/hook",
    "http://localhost/hook",
    "http://LOCALHOST./hook",
    "http://api.localhost/hook",
    "http://2130706433/hook",
    "http://0x7f000001/hook",
    "http://0x7F.1/hook",
    "http://0177.0.0.1/hook",
    "http://017700000001/hook",
    "http://127.1/hook",
    "http://127.0.0.1./hook",
    "http://[::1]/hook",
    "http://[0:0:0:0:0:0:0:1]:9000/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://[::ffff:7f00:1]/hook",
    "http://[2002:7f00:1::1]/hook",  # 6to4 wrapping 127.0.0.1
    "https://user:pw@127.0.0.1/hook?token=t",
]
INTERNAL = [
    "http://0/hook",
    "http://0.0.0.0/hook",
    "http://[::]/hook",
    "http://10.0.0.1/hook",
    "http://172.16.5.4/hook",
    "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "http://0xa9fea9fe/latest/meta-data/",  # the same, as one hex number
    "http://2852039166/latest/meta-data/",  # and as one decimal number
    "http://[::ffff:169.254.169.254]/",
    "http://[fe80::1]/hook",
    "http://[fe80::1%25eth0]/hook",
    "http://[fd00::1]/hook",
    "http://224.0.0.1/hook",
    "http://[ff02::1]/hook",
    "http://240.0.0.1/hook",
    "http://100.64.0.1/hook",
    "http://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of the metadata address
]
MALFORMED = [
    "ftp://example.invalid/hook",
    "http:///hook",
    "http://1.2.3.4.5/hook",
    "http://256.1.1.1/hook",
    "http://08.1.1.1/hook",
    "http://example.123/hook",
    "http://exa mple.invalid/hook",
    "http://evil.invalid\\@127.0.0.1/hook",
    "http://bücher.invalid/hook",
    "http://[::1/hook",
    "http://example.invalid:99999/hook",
]


@pytest.mark.parametrize("url", LOOPBACK)
def test_loopback_in_any_notation_is_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        check_callback_url(url, NONE)


@pytest.mark.parametrize("url", INTERNAL)
def test_private_link_local_metadata_and_reserved_addresses_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        check_callback_url(url, NONE)


@pytest.mark.parametrize("url", MALFORMED)
def test_malformed_callback_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        check_callback_url(url, NONE)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.invalid/retarget?token=abc",
        "http://93.184.216.34/hook",
        "http://[2606:4700:4700::1111]/hook",
        "http://1572395042/hook",  # 93.184.216.34 as one number: public, so allowed
    ],
)
def test_public_hosts_pass_creation(url: str) -> None:
    check_callback_url(url, NONE)


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "10.1", "0x7f.1", "1"],
)
def test_ipv4_numbers_read_as_the_system_resolver_reads_them(text: str) -> None:
    # oracle: the C library's inet_aton, which getaddrinfo uses for numeric hosts
    assert parse_ipv4(text) == ipaddress.IPv4Address(socket.inet_aton(text))


def test_the_allow_list_readmits_named_internal_targets_only() -> None:
    allow = AllowList.parse("127.0.0.0/8, localhost, ::1/128")
    for url in ("http://127.0.0.1:9/x", "http://2130706433/x", "http://localhost/x"):
        check_callback_url(url, allow)
    check_callback_url("http://[::1]/x", allow)
    for url in ("http://10.0.0.1/x", "http://169.254.169.254/x", "http://api.localhost/x"):
        with pytest.raises(InvalidInput):
            check_callback_url(url, allow)


def stub(*addresses: str):
    calls: list[tuple[str, int]] = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append((host, port))
        return list(addresses)

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    "answer",
    [
        ("127.0.0.1",),
        ("10.0.0.7",),
        ("169.254.169.254",),
        ("fe80::1",),
        ("::ffff:192.168.0.1",),
        ("93.184.216.34", "10.0.0.7"),  # one internal answer among public ones is enough
    ],
)
def test_a_name_resolving_to_an_internal_address_is_refused_at_delivery(answer) -> None:
    with pytest.raises(CallbackRefused):
        resolve_target("https://rebind.example.invalid/hook", NONE, stub(*answer))


def test_a_public_name_is_pinned_to_the_address_checked() -> None:
    resolve = stub("93.184.216.34", "93.184.216.35")
    target = resolve_target("https://user:pw@hooks.example.invalid:8443/a/b?t=1", NONE, resolve)
    assert resolve.calls == [("hooks.example.invalid", 8443)]  # one lookup, nothing after
    assert target.address == "93.184.216.34"
    assert target.host_header == "hooks.example.invalid:8443"
    assert target.request_target == "/a/b?t=1" and target.userinfo == "user:pw"


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def fails(host: str, port: int) -> list[str]:
        raise socket.gaierror("no such name")

    with pytest.raises(CallbackRefused):
        resolve_target("https://nothing.example.invalid/hook", NONE, fails)


def test_an_allowed_name_may_resolve_internally() -> None:
    allow = AllowList.parse("hooks.internal.invalid")
    target = resolve_target("http://hooks.internal.invalid/x", allow, stub("10.0.0.9"))
    assert target.address == "10.0.0.9"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "https://user:secret@hooks.example.invalid/p/tok?token=abc#f",
            "https://hooks.example.invalid/…",
        ),
        ("http://hooks.example.invalid:8080/", "http://hooks.example.invalid:8080/"),
        ("http://[2606:4700::1]:81/x?k=v", "http://[2606:4700::1]:81/…"),
        (None, None),
    ],
)
def test_redaction_keeps_scheme_host_and_port_only(url, shown) -> None:
    assert redact_url(url) == shown
    for secret in ("secret", "tok", "abc", "user", "k=v"):
        assert secret not in (shown or "")
