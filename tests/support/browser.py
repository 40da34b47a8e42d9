"""Headless Chromium (Debian's chromium and chromedriver) driven by Selenium from async tests.

Selenium's calls block, and the API under test serves from the test's own event loop: every
call runs in a thread so the loop keeps serving while the browser waits on it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.support.wait import wait_until

__all__ = ["CHROMEDRIVER", "CHROMIUM", "Browser", "browser_session", "missing_browser"]

CHROMIUM: Final = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER: Final = shutil.which("chromedriver")
SCREENSHOTS: Final = os.environ.get("KEEL_CONSOLE_SCREENSHOTS")
"""A directory: the console tests save a screenshot of each page there (docs/console/)."""

T = TypeVar("T")


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        return (
            "no Chromium: install Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver; .ci/run does)"
        )
    return None


class Browser:
    def __init__(self, driver: webdriver.Chrome, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    async def run(self, action: Callable[[], T]) -> T:
        return await asyncio.to_thread(action)

    async def open(self, path: str) -> None:
        await self.run(lambda: self.driver.get(self.base_url + path))

    async def find(self, css: str) -> WebElement:
        return await self.run(lambda: self.driver.find_element(By.CSS_SELECTOR, css))

    async def texts(self, css: str) -> list[str]:
        def read() -> list[str]:
            try:
                return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]
            except StaleElementReferenceException:
                return []

        return await self.run(read)

    async def text(self, css: str) -> str:
        found = await self.texts(css)
        return found[0] if found else ""

    async def type(self, css: str, text: str) -> None:
        element = await self.find(css)
        await self.run(lambda: element.send_keys(text))

    async def click(self, css: str) -> None:
        element = await self.find(css)
        await self.run(element.click)

    async def until(self, what: str, test: Callable[[], bool], timeout_s: float = 30) -> None:
        async def holds() -> bool:
            try:
                return await self.run(test)
            except (StaleElementReferenceException, WebDriverException):
                return False

        await wait_until(holds, timeout_s, what, interval_s=0.1)

    async def until_text(self, css: str, predicate: Callable[[str], bool], what: str) -> str:
        seen: list[str] = []

        async def holds() -> bool:
            seen[:] = [await self.text(css)]
            return predicate(seen[0])

        await wait_until(holds, 30, what, interval_s=0.1)
        return seen[0]

    @property
    def path(self) -> str:
        return str(self.driver.current_url).removeprefix(self.base_url)

    async def screenshot(self, name: str) -> None:
        if SCREENSHOTS:
            target = Path(SCREENSHOTS) / f"{name}.png"
            await self.run(lambda: self.driver.save_screenshot(str(target)))

    async def sign_in(self, key: str) -> None:
        await self.open("/console/login")
        await self.type("#key", key)
        await self.click("form.card button[type=submit]")
        await self.until("the sessions page", lambda: self.path.startswith("/console/sessions"))


def _driver() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))


@asynccontextmanager
async def browser_session(base_url: str) -> AsyncIterator[Browser]:
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download a driver
    driver = await asyncio.to_thread(_driver)
    try:
        yield Browser(driver, base_url)
    finally:
        await asyncio.to_thread(driver.quit)
