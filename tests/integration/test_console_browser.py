"""The web console in headless Chromium against the real API, worker, relay, PostgreSQL and
Kafka: what a person signed in with an API key sees and does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from keel_stream.kafka.broker import free_port
from keel_stream.relay import RelayConfig
from keel_stream.tenancy.document import TenantConfig
from tests.support.api import Api, serve_api
from tests.support.browser import Browser, browser_session, missing_browser
from tests.support.kafka import KafkaServer
from tests.support.relays import relay_task
from tests.support.wait import wait_until
from tests.support.workers import worker_task

if (why := missing_browser()) is not None:
    pytest.skip(why, allow_module_level=True)

ENTRIES = "#transcript > li"


@asynccontextmanager
async def console_with_worker(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str, config: TenantConfig | None = None
) -> AsyncIterator[tuple[Api, Browser]]:
    """The API, an agent worker (with a boot document, if given) and a browser on the
    API's console."""
    options = {"kafka": kafka.settings, "topic_prefix": topic_prefix, "boot_config": config}
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        worker_task(database_dsn, **options),
        browser_session(api.url) as browser,
    ):
        yield api, browser


async def transcript(browser: Browser) -> list[str]:
    return await browser.texts(ENTRIES)


async def new_session(browser: Browser) -> str:
    await browser.open("/console/sessions")
    await browser.click("#new-session")
    await browser.until("the new session's page", lambda: "/console/sessions/" in browser.path)
    await browser.until_text("#connection", lambda t: t == "live", "the live stream")
    return browser.path.rsplit("/", 1)[-1]


async def say(browser: Browser, text: str) -> None:
    await browser.type("#message", text)
    await browser.click("#send")
    await browser.until_text("#composer-status", lambda t: t.startswith("Sent"), "the input sent")


async def entries_reach(browser: Browser, count: int, what: str) -> list[str]:
    async def enough() -> bool:
        return len(await transcript(browser)) >= count

    await wait_until(enough, 30, what, interval_s=0.1)
    return await transcript(browser)


async def test_hello_keel_streams_in_and_survives_a_reload(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with console_with_worker(database_dsn, kafka, topic_prefix) as (api, browser):
        await browser.open("/console/sessions")
        assert browser.path == "/console/login", "signed out: the console asks for a key"
        await browser.screenshot("login")
        await browser.sign_in(api.key)
        await new_session(browser)
        await say(browser, "hello keel")
        seen = await entries_reach(browser, 3, "question, answer and run summary")
        assert "You (queue)" in seen[0]
        assert "hello keel" in seen[0]
        assert "Answer" in seen[1]
        assert "echo: hello keel" in seen[1]
        assert "Run done" in seen[2]
        await browser.until_text("#run-status", lambda t: t == "done", "the run's status")
        await browser.until_text("#run-outcome", lambda t: t.startswith("done"), "the outcome")
        assert await browser.text("#run-unanswered") == "none"
        assert await browser.text("#run-attempts") == "1"
        await browser.screenshot("session")
        await browser.run(browser.driver.refresh)
        assert await entries_reach(browser, 3, "the transcript after a reload") == seen
        await browser.open("/console/sessions")
        await browser.screenshot("sessions")
        assert await browser.texts("table.grid tbody th a"), "the session is listed"


async def test_a_cancelled_slow_run_shows_the_text_it_kept(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with console_with_worker(database_dsn, kafka, topic_prefix) as (api, browser):
        await partials_live(api)
        await browser.sign_in(api.key)
        await new_session(browser)
        await say(browser, "[[slow:400]] one two three four five six seven eight nine ten")
        streamed = await browser.until_text(
            "#streaming-text", lambda t: t.startswith("echo: one"), "partial text streaming in"
        )
        await browser.click("#cancel")
        seen = await entries_reach(browser, 3, "the cut answer and its summary")
        assert "Answer (aborted)" in seen[1]
        kept = await browser.text("#transcript > li:nth-child(2) > p.text")
        assert kept.startswith(streamed), (kept, streamed)
        assert kept.startswith("echo: one")
        assert "ten" not in kept
        assert "Run cancelled" in seen[2]
        assert await browser.text("#streaming-text") == "", "the partial gave way to the answer"
        await browser.until_text("#run-unanswered", lambda t: t == "#1", "the input still owed")


async def partials_live(api: Api) -> None:
    async with api.client() as client:

        async def live() -> bool:
            return bool((await client.get("/v1/capabilities")).json()["features"]["partials"])

        await wait_until(live, 30, "the api's partials consumer")


async def test_fork_at_message_two_opens_a_session_with_two_events(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with console_with_worker(database_dsn, kafka, topic_prefix) as (api, browser):
        await browser.sign_in(api.key)
        source = await new_session(browser)
        await say(browser, "hello keel")
        await entries_reach(browser, 3, "the answered source")
        await browser.click("#event-2 button.fork")
        await browser.until("the fork's page", lambda: not browser.path.endswith(source))
        seen = await entries_reach(browser, 2, "the fork's copied events")
        assert len(seen) == 2
        assert "hello keel" in seen[0]
        assert "echo: hello keel" in seen[1]
        assert f"copied from {source} #2" in seen[1]
        assert f"forked from {source} at event 2" in await browser.text("p.meta")
        async with api.client() as client:
            fork = browser.path.rsplit("/", 1)[-1]
            events = (await client.get(f"/v1/sessions/{fork}/events")).json()["events"]
        assert [e["kind"] for e in events] == ["user.message", "assistant.message"]


async def backlog(browser: Browser) -> int:
    text = await browser.text("#backlog-events")
    return int(text) if text.isdigit() else -1


async def test_operations_show_the_backlog_while_the_relay_is_stopped(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        browser_session(api.url) as browser,
    ):
        async with api.client() as client:
            sid = (await client.post("/v1/sessions")).json()["id"]
            answer = await client.post(f"/v1/sessions/{sid}/input", json={"text": "queued"})
            assert answer.status_code == 201
        await browser.sign_in(api.key)
        await browser.open("/console/ops")
        assert await backlog(browser) >= 1, "the relay is stopped: the input waits in the outbox"
        await browser.screenshot("ops")
        relay = RelayConfig(database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.2)
        async with relay_task(relay):

            async def drained() -> bool:
                return await backlog(browser) == 0

            await wait_until(drained, 30, "the page to show the drained outbox", interval_s=0.2)
        topics = await browser.texts("#topics-title ~ table tbody tr")
        assert any(row.startswith(f"{topic_prefix}keel.events.v1") for row in topics), topics


async def test_the_live_transcript_resumes_after_the_api_restarts(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    port = free_port()
    async with browser_session(f"http://127.0.0.1:{port}") as browser:
        async with serve_api(database_dsn, kafka.bootstrap, topic_prefix, port=port) as first:
            await browser.sign_in(first.key)
            sid = await new_session(browser)
            await say(browser, "before the restart")
            await entries_reach(browser, 1, "the first input")
        await browser.until_text("#connection", lambda t: t != "live", "the stream to drop")
        async with (
            serve_api(database_dsn, kafka.bootstrap, topic_prefix, port=port) as second,
            second.client() as client,
        ):
            sent = await client.post(f"/v1/sessions/{sid}/input", json={"text": "while away"})
            assert sent.status_code == 201
            seen = await entries_reach(browser, 2, "the input committed while it reconnected")
            await browser.until_text("#connection", lambda t: t == "live", "the stream back")
            assert "while away" in seen[1]
            ids = await browser.run(
                lambda: [
                    e.get_attribute("id")
                    for e in browser.driver.find_elements(By.CSS_SELECTOR, ENTRIES)
                ]
            )
            assert ids == ["event-1", "event-2"], "each event once, in seq order"


async def test_a_gated_call_is_approved_from_the_session_page(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("KEEL_TOOL_NOTES_FILE", str(tmp_path / "notes.txt"))
    gated = TenantConfig.model_validate({"policy": {"tools": {"note": {"approval": "always"}}}})
    async with console_with_worker(database_dsn, kafka, topic_prefix, gated) as (api, browser):
        await browser.sign_in(api.key)
        await new_session(browser)
        await say(browser, '[[tool:note {"text": "ship it"}]]')
        await browser.until(
            "the decision's buttons",
            lambda: bool(browser.driver.find_elements(By.CSS_SELECTOR, "button.decide")),
        )
        await browser.click("button.decide")  # Approve comes first
        seen = await entries_reach(browser, 6, "the answer, result, final answer and summary")
        assert "Decision: approve" in seen[3]
        assert "noted: ship it" in seen[4]
        assert "done: noted: ship it" in seen[5]
    assert (tmp_path / "notes.txt").read_text() == "ship it\n"


async def test_a_parent_page_links_its_subagent_and_the_child_links_back(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with console_with_worker(database_dsn, kafka, topic_prefix) as (api, browser):
        await browser.sign_in(api.key)
        parent = await new_session(browser)
        await say(browser, '[[tool:delegate {"task": "count the stars"}]]')
        seen = await entries_reach(browser, 6, "the delegation, its result and the answer")
        assert "done: echo: count the stars" in seen[5]
        assert "Subagent done" in seen[3]
        await browser.until_text("#subagents a", lambda t: t.startswith("sub-"), "the child link")
        await browser.click("#subagents a")
        await browser.until("the child's page", lambda: "/sub-" in browser.path)
        await browser.until_text(
            "#subagent-of", lambda t: parent in t and "depth 1" in t, "the link to the parent"
        )
        assert "count the stars" in (await entries_reach(browser, 1, "the task"))[0]
