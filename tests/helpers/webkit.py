"""A real WebKit engine for the narrow-layout tests: Debian's WebKitGTK driven through WebKitWebDriver
(Selenium's `webdriver.WebKitGTK`) with our toolbar-less browser (webkit_browser.py) under a private Xvfb.

Selenium is synchronous: tests run a WebKit session in a worker thread (`asyncio.to_thread`) so the
in-process stack keeps serving on the event loop.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from selenium.webdriver.webkitgtk.options import Options
from selenium.webdriver.webkitgtk.service import Service

from tests.helpers.grpcweb import ARTIFACTS

BROWSER = Path(__file__).with_name("webkit_browser.py")
DRIVER = "/usr/bin/WebKitWebDriver"
BROWSER_NAME = "agentfeedback-webkit-browser"  # = webkit_browser.py's ApplicationInfo name


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """A private X display (`Xvfb -displayfd`: it picks a free number); yields `:N`."""
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x2400x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    try:
        with os.fdopen(r) as f:
            number = f.readline().strip()
        assert number, "Xvfb did not report a display"
        yield f":{number}"
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def webkit(width: int, height: int) -> Iterator[webdriver.WebKitGTK]:
    """A WebKitGTK session whose viewport is exactly `width` x `height` CSS px (DPR 1)."""
    with xvfb() as display:
        opts = Options()
        opts.binary_location = str(BROWSER)
        # WebKitWebDriver matches browserName against the name the browser's automation session
        # reports (its ApplicationInfo, set in webkit_browser.py), not against the binary.
        opts.set_capability("browserName", BROWSER_NAME)
        opts.add_argument("--automation")
        opts.add_argument(f"--width={width}")
        opts.add_argument(f"--height={height}")
        env = {**os.environ, "DISPLAY": display, "GDK_BACKEND": "x11"}
        service = Service(executable_path=DRIVER, env=env)
        driver = webdriver.WebKitGTK(options=opts, service=service)
        try:
            driver.set_page_load_timeout(30)
            driver.set_script_timeout(30)
            yield driver
        finally:
            driver.quit()


def wait_css(driver, css: str, timeout: float = 15.0, text: str | None = None):
    """The first element matching `css` (and containing `text`) once it is displayed. An element the
    page re-renders between the lookup and the read (a status line replaced on save) is looked up
    again, not an error: the wait is for the condition, whichever node holds it."""
    def found(d):
        for el in d.find_elements(By.CSS_SELECTOR, css):
            if el.is_displayed() and (text is None or text in el.text):
                return el
        return False
    return WebDriverWait(driver, timeout, poll_frequency=0.05,
                         ignored_exceptions=(StaleElementReferenceException,)).until(
        found, f"no visible {css!r} with {text!r}")


def settle(driver) -> None:
    """Two animation frames: a screenshot right after a scroll can show the previous frame."""
    driver.execute_async_script(
        "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done(true)));")


def screenshot(driver, name: str) -> Path:
    """The whole page: WebKitWebDriver has no full-page screenshot, so grow the window to the page."""
    ARTIFACTS.mkdir(exist_ok=True)
    width, height = driver.execute_script("return [innerWidth, document.documentElement.scrollHeight]")
    size = driver.get_window_size()
    driver.set_window_size(width, max(height, size["height"]))
    settle(driver)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(size["width"], size["height"])
    time.sleep(0.05)
    return path
