"""Headless Debian Chromium driven by Selenium: open a page, wait for text, take screenshots.

Chromium and its driver come from Debian (`apt-get install -y chromium chromium-driver`, as
root), so the driver always matches the browser and nothing is downloaded at run time.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without the background-networking flags Chromium keeps dialling Google's hosts, which a closed
# network refuses; --no-sandbox because CI runs as root.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
WINDOW = (1280, 800)
POLL_SECONDS = 0.25


class PageCheckFailed(AssertionError):
    """A page never showed what a check waited for; the message names the page and the text."""


@dataclass
class Browser:
    """One headless Chromium; screenshots go to `shots_dir` (printed, so a failed run shows it)."""

    driver: webdriver.Chrome
    shots_dir: Path

    def open(
        self,
        url: str,
        expect: Iterable[str] = (),
        timeout: float = 60,
        reload_every: float | None = None,
    ) -> str:
        """Go to `url` and wait until every text in `expect` is in the rendered page's text.

        `reload_every` reloads the page while waiting, for pages that do not poll by themselves
        (the event feed shows only what the server had when the page loaded).
        """
        self.go(url)
        return self.wait_for_text(expect, timeout=timeout, reload_every=reload_every)

    def go(self, url: str) -> None:
        """Load `url` as a fresh page.

        A change of the #fragment alone is not a page load, and single-page apps with hash routes
        (MLflow) may ignore it, so such a move passes through a blank page.
        """
        if self.driver.current_url.split("#")[0] == url.split("#")[0] and "#" in url:
            self.driver.get("about:blank")
        self.driver.get(url)

    def text(self) -> str:
        """The rendered text of the page, non-breaking spaces as plain spaces."""
        text = self.driver.execute_script("return document.body ? document.body.innerText : ''")
        return text.replace("\xa0", " ")

    def wait_for_text(
        self, expect: Iterable[str], timeout: float = 60, reload_every: float | None = None
    ) -> str:
        return self.wait_until(
            lambda text: [wanted for wanted in expect if wanted not in text],
            timeout=timeout,
            reload_every=reload_every,
        )

    def wait_until(self, missing, timeout: float = 60, reload_every: float | None = None) -> str:
        """Poll the page text until `missing(text)` returns an empty list; return that text.

        `missing` names what is not there yet, so that a timeout says exactly what never came.
        """
        deadline = time.monotonic() + timeout
        last_reload = time.monotonic()
        while True:
            text = self.text()
            absent = missing(text)
            if not absent:
                return text
            now = time.monotonic()
            if now > deadline:
                shot = self.screenshot("failed-" + _slug(self.driver.current_url))
                raise PageCheckFailed(
                    f"{self.driver.current_url}: after {timeout:.0f} s the page does not show "
                    f"{absent!r} (screenshot {shot}); page text starts: {text[:1500]!r}"
                )
            if reload_every is not None and now - last_reload > reload_every:
                self.driver.refresh()
                last_reload = now
            time.sleep(POLL_SECONDS)

    def received_json(self, url_part: str) -> list[Any]:
        """The JSON bodies of the responses the page received from URLs containing `url_part`
        since the last call (what the page drew from, e.g. a canvas), read through the
        browser's own network log."""
        bodies = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] != "Network.responseReceived":
                continue
            if url_part not in message["params"]["response"]["url"]:
                continue
            request = {"requestId": message["params"]["requestId"]}
            body = self.driver.execute_cdp_cmd("Network.getResponseBody", request)
            bodies.append(json.loads(body["body"]))
        return bodies

    def links(self, href_part: str) -> list[str]:
        """Absolute hrefs of the page's links whose href contains `href_part`, in page order."""
        return self.driver.execute_script(
            "return [...document.querySelectorAll('a[href]')]"
            ".filter(a => a.getAttribute('href').includes(arguments[0])).map(a => a.href)",
            href_part,
        )

    def loaded_images(self) -> dict[str, int]:
        """alt text → natural width of every <img> that finished loading with real pixels."""
        pairs = self.driver.execute_script(
            "return [...document.images].filter(i => i.complete && i.naturalWidth > 0)"
            ".map(i => [i.alt, i.naturalWidth])"
        )
        return {alt: width for alt, width in pairs if alt}

    def click_text(self, text: str) -> bool:
        """Click the first button or link whose visible text is `text`; False when none."""
        xpath = f"//*[self::button or self::a][normalize-space()={_xpath_literal(text)}]"
        elements = self.driver.find_elements(By.XPATH, xpath)
        if not elements:
            return False
        elements[0].click()
        return True

    def set_viewport(self, width: int, height: int) -> None:
        # A CSS viewport of exactly this size (the window size also counts browser chrome).
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def screenshot(self, name: str, publish_to: Path | None = None) -> Path:
        """Save the viewport as `<shots_dir>/<name>.png` (and a small copy in `publish_to`)."""
        png = self.driver.get_screenshot_as_png()
        self.shots_dir.mkdir(parents=True, exist_ok=True)
        path = self.shots_dir / f"{name}.png"
        path.write_bytes(png)
        print(f"screenshot: {path}")
        if publish_to is not None:
            publish_to.mkdir(parents=True, exist_ok=True)
            published = publish_to / f"{name}.png"
            write_small_png(png, published)
            print(f"screenshot: {published} ({published.stat().st_size // 1024} KB)")
        return path


def write_small_png(png: bytes, path: Path) -> None:
    """A 256-colour optimised PNG: UI pages have few colours, so it stays sharp and small."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


@contextmanager
def launch_browser(shots_dir: Path, window: tuple[int, int] = WINDOW) -> Iterator[Browser]:
    """A fresh headless Chromium with its own profile, quit (and its driver stopped) on exit."""
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not binary.exists():
            raise FileNotFoundError(
                f"{binary} is missing: install Debian's browser with "
                "`apt-get install -y chromium chromium-driver` (as root)"
            )
    profile = Path(tempfile.mkdtemp(prefix="deepsummit-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--window-size={},{}".format(*window),
    ):
        options.add_argument(flag)
    # The network log, so a check can read what the page received (`received_json`).
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    # Given a driver path Selenium never runs selenium-manager, which would try to download one.
    service = Service(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        browser = Browser(driver=driver, shots_dir=shots_dir)
        browser.set_viewport(*window)
        yield browser
    finally:
        # quit() closes Chromium and stops this chromedriver (by its PID, via the Service).
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _slug(url: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in url.split("://", 1)[-1])[:80]


def _xpath_literal(text: str) -> str:
    if "'" not in text:
        return f"'{text}'"
    parts = text.split("'")
    return "concat(" + ', "\'", '.join(f"'{part}'" for part in parts) + ")"
