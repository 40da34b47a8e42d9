"""The envelope against a Standard Webhooks implementation that is not ours, the SSRF policy
and the retry policy."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from keel_stream.errors import HookUrlRefused, InvalidConfig
from keel_stream.hooks.egress import EgressPolicy, address_refusal
from keel_stream.hooks.envelope import (
    body_of,
    iso_timestamp,
    new_secret,
    signature_header,
    webhook_id,
)
from keel_stream.hooks.retry import RetryPolicy, Verdict, parse_retry_after, verdict_of
from keel_stream.tenancy.document import parse_config


def test_webhook_ids_are_stable_distinct_and_dot_free() -> None:
    first = webhook_id("acme", "s1", 3, "turn.started")
    assert first == webhook_id("acme", "s1", 3, "turn.started")
    assert first.startswith("evt_")
    assert "." not in first
    assert len(first) == 36
    others = {
        webhook_id("acme", "s1", 3, "turn.finished"),
        webhook_id("acme", "s1", 4, "turn.started"),
        webhook_id("acme", "s2", 3, "turn.started"),
        webhook_id("acme", "s1", 3, "decision.opened", "call_1"),
        webhook_id("acme", "s1", 3, "decision.opened", "call_2"),
    }
    assert first not in others
    assert len(others) == 5


def test_signatures_verify_with_the_standard_webhooks_library() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    body = body_of("turn.finished", "2026-12-04T10:00:00.5Z", {"seq": 2}, {"stopReason": "x"})
    assert orjson.loads(body) == {
        "type": "turn.finished",
        "timestamp": "2026-12-04T10:00:00.5Z",
        "data": {"seq": 2, "stopReason": "x"},
    }
    message = webhook_id("acme", "s1", 2, "turn.finished")
    now = int(time.time())
    headers = {
        "webhook-id": message,
        "webhook-timestamp": str(now),
        "webhook-signature": signature_header([secret], message, now, body),
    }
    assert Webhook(secret).verify(body, headers)["type"] == "turn.finished"
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(body, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace("x", "y"), headers)


def test_during_a_rotation_both_secrets_verify() -> None:
    old, new = new_secret(), new_secret()
    body, message, now = '{"type":"t"}', "evt_x", int(time.time())
    header = signature_header([new, old], message, now, body)
    assert len(header.split(" ")) == 2
    headers = {"webhook-id": message, "webhook-timestamp": str(now), "webhook-signature": header}
    Webhook(old).verify(body, headers)
    Webhook(new).verify(body, headers)


def test_timestamps_match_the_topic_encoding() -> None:
    moment = datetime(2026, 12, 4, 10, 0, 0, 321827, tzinfo=UTC)
    assert iso_timestamp(moment) == "2026-12-04T10:00:00.321827Z"
    assert iso_timestamp("2026-12-04T10:00:00Z") == "2026-12-04T10:00:00Z"


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "0.0.0.0",
        "100.64.0.1", "224.0.0.1", "::1", "fd00::1", "fe80::1", "::", "::ffff:127.0.0.1",
        "192.0.0.192", "192.0.0.8", "198.18.0.1", "240.0.0.1", "255.255.255.255", "2001:db8::1",
        "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "::ffff:192.0.0.192", "2002::1",
    ],
)  # fmt: skip
def test_non_public_addresses_are_refused(address: str) -> None:
    import ipaddress

    assert address_refusal(ipaddress.ip_address(address)) is not None


def test_public_addresses_pass() -> None:
    import ipaddress

    assert address_refusal(ipaddress.ip_address("93.184.215.14")) is None
    assert address_refusal(ipaddress.ip_address("2606:4700::1111")) is None


async def _resolves_to(*addresses: str) -> list[str]:
    return list(addresses)


async def test_targets_connect_to_the_checked_address() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        assert (host, port) == ("hooks.example.com", 443)
        return ["93.184.215.14"]

    target = await EgressPolicy().target("https://hooks.example.com/in?x=1", resolver)
    assert target.connect_url == "https://93.184.215.14:443/in?x=1"
    assert target.host_header == "hooks.example.com"
    assert target.server_name == "hooks.example.com"


async def test_refused_urls() -> None:
    policy = EgressPolicy()

    async def private(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.0.0.5"]  # one bad answer is enough to refuse

    for url in ("ftp://example.com/", "http://127.0.0.1:8080/", "http://[::1]/", "http:///x"):
        with pytest.raises(HookUrlRefused):
            await policy.target(url)
    with pytest.raises(HookUrlRefused, match=r"169\.254\.169\.254"):
        await policy.target("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(HookUrlRefused, match="private"):
        await policy.target("https://rebind.example.com/", private)
    with pytest.raises(HookUrlRefused, match="credentials"):
        await policy.target("https://user:pw@example.com/")


async def test_the_allowlist_lets_named_hosts_and_networks_through() -> None:
    listed = " 127.0.0.1, hooks.internal ,10.8.0.0/16"
    policy = EgressPolicy.parse(listed).narrowed(listed.split(","))

    async def ten(host: str, port: int) -> list[str]:
        return ["10.9.0.1"]

    target = await policy.target("http://127.0.0.1:9000/in")
    assert target.connect_url == "http://127.0.0.1:9000/in"
    assert target.host_header == "127.0.0.1:9000"
    assert (await policy.target("http://10.8.3.4/")).address == "10.8.3.4"
    assert (await policy.target("http://hooks.internal/", ten)).address == "10.9.0.1"
    with pytest.raises(HookUrlRefused):
        await policy.target("http://10.9.0.1/")


async def test_a_tenant_reaches_only_non_public_hosts_both_it_and_the_operator_allow() -> None:
    operator = EgressPolicy.parse("127.0.0.1, hooks.internal, 10.8.0.0/16")

    async def ten(host: str, port: int) -> list[str]:
        return ["10.9.0.1"]

    async def public(host: str, port: int) -> list[str]:
        return ["93.184.215.14"]

    for url in ("http://127.0.0.1:9000/in", "http://10.8.3.4/"):
        with pytest.raises(HookUrlRefused, match=r"hooks\.allowedHosts"):
            await operator.narrowed([]).target(url)
    tenant = operator.narrowed(["127.0.0.1", "10.0.0.0/8", "hooks.internal", "192.168.0.0/16"])
    assert (await tenant.target("http://127.0.0.1:9000/in")).address == "127.0.0.1"
    assert (await tenant.target("http://10.8.3.4/")).address == "10.8.3.4"
    for url in ("http://10.9.0.1/", "http://192.168.1.1/"):  # the tenant's list never widens
        with pytest.raises(HookUrlRefused):
            await tenant.target(url)
    with pytest.raises(HookUrlRefused):  # the operator names the host, 10.9/16 is not the tenant's
        await operator.narrowed(["127.0.0.1"]).target("http://hooks.internal/", ten)
    assert (await tenant.target("http://hooks.internal/", ten)).address == "10.9.0.1"
    for policy in (operator.narrowed([]), tenant):
        target = await policy.target("https://hooks.example.com/", public)
        assert target.public
    assert not (await tenant.target("http://127.0.0.1:9000/in")).public


def test_verdicts() -> None:
    assert verdict_of(200) is Verdict.DELIVERED
    assert verdict_of(204) is Verdict.DELIVERED
    assert verdict_of(410) is Verdict.GONE
    for status in (400, 401, 403, 404, 413, 422):
        assert verdict_of(status) is Verdict.DEAD
    assert verdict_of(None) is Verdict.RETRY  # no answer: a timeout, a connection failure
    for retried in (301, 408, 429, 500, 502, 503, 504):
        assert verdict_of(retried) is Verdict.RETRY


def test_the_schedule_scales_jitters_caps_and_honours_retry_after() -> None:
    rng = random.Random(7)
    policy = RetryPolicy()
    first = [policy.delay_after(n, rng=rng) for n in (1, 2, 3, 4)]
    for delay, step in zip(first, (5, 300, 1800, 7200), strict=True):
        assert step * 0.8 <= delay <= step * 1.2
    fast = RetryPolicy(base_s=0.5, max_delay_s=2.0)
    assert 0.4 <= fast.delay_after(1, rng=rng) <= 0.6
    assert fast.delay_after(5, rng=rng) == 2.0
    assert policy.delay_after(1, retry_after_s=120, rng=rng) == 120
    assert RetryPolicy(max_delay_s=60).delay_after(1, retry_after_s=10**6, rng=rng) == 60
    assert RetryPolicy(max_attempts=3).exhausted(3)
    assert not RetryPolicy(max_attempts=3).exhausted(2)


def test_retry_after_in_seconds_or_as_a_date() -> None:
    now = datetime(2026, 12, 4, 10, 0, 0, tzinfo=UTC)
    assert parse_retry_after("30") == 30
    later = (now + timedelta(seconds=90)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(later, now) == 90
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_a_tenant_document_lists_its_hook_hosts_in_hooks_allowed_hosts() -> None:
    document = {"hooks": {"allowedHosts": ["127.0.0.1", "10.20.0.0/16", "hooks.internal"]}}
    assert parse_config(document).hooks.allowed_hosts == document["hooks"]["allowedHosts"]
    assert parse_config({}).hooks.allowed_hosts == []
    for bad in (["a host"], ["x" * 300], ["h"] * 65, "127.0.0.1"):
        with pytest.raises(InvalidConfig, match=r"hooks\.allowedHosts"):
            parse_config({"hooks": {"allowedHosts": bad}})
