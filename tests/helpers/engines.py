"""One small synchronous driver interface over both engines the console tests use, so one flow runs in
either: Debian's Chromium through Playwright (sync API) and Debian's WebKitGTK through WebKitWebDriver
(webkit.py). Both are synchronous: tests run a flow in a worker thread (`asyncio.to_thread`) so
the in-process stack keeps serving on the event loop.

Methods: goto, wait (visible, optionally containing a text), gone, click, fill, press (a key to the
focused page), hover (the pointer over a point of an element), js (an expression's value), measure
(layout.MEASURE_JS), shot (test-artifacts/).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from playwright.sync_api import sync_playwright

from tests.helpers.grpcweb import ARTIFACTS
from tests.helpers.layout import MEASURE_JS
from tests.helpers.console import CHROMIUM, CHROMIUM_ARGS


class Chromium:
    def __init__(self, page):
        self.page = page

    def goto(self, url: str) -> None:
        self.page.goto(url)

    def wait(self, css: str, text: str | None = None) -> None:
        loc = self.page.locator(css) if text is None else self.page.locator(css, has_text=text)
        loc.first.wait_for(state="visible")

    def gone(self, css: str) -> None:
        self.page.locator(css).first.wait_for(state="detached")

    def click(self, css: str) -> None:
        self.page.locator(css).first.click()

    def fill(self, css: str, text: str) -> None:
        self.page.fill(css, text)

    def press(self, key: str) -> None:
        self.page.keyboard.press(key)

    def hover(self, css: str, x: float, y: float) -> None:
        """The pointer to (x, y) of the element's box, as fractions of its size (1.0 = its last pixel)."""
        loc = self.page.locator(css).first
        loc.scroll_into_view_if_needed()
        box = loc.bounding_box()
        self.page.mouse.move(box["x"] + min(x * box["width"], box["width"] - 1), box["y"] + min(y * box["height"], box["height"] - 1))

    def js(self, expression: str):
        return self.page.evaluate(f"() => ({expression})")

    def measure(self) -> dict:
        return self.page.evaluate("() => {" + MEASURE_JS + "}")

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


class WebKit:
    def __init__(self, driver):
        from tests.helpers import webkit as webkit_support
        self.d, self.wk = driver, webkit_support

    def goto(self, url: str) -> None:
        self.d.get(url)

    def wait(self, css: str, text: str | None = None) -> None:
        self.wk.wait_css(self.d, css, text=text)

    def gone(self, css: str) -> None:
        from selenium.webdriver.support.ui import WebDriverWait
        WebDriverWait(self.d, 15, 0.05).until(lambda d: not d.find_elements("css selector", css))

    def click(self, css: str) -> None:
        el = self.wk.wait_css(self.d, css)
        # WebKitWebDriver clicks where the element is, even when that is below the fold at 320 px.
        self.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        el.click()

    def fill(self, css: str, text: str) -> None:
        el = self.wk.wait_css(self.d, css)
        el.clear()
        # send_keys of a long JWT is slow: set the value as typing would, then fire `input`.
        self.d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'));", el, text)

    def press(self, key: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains
        ActionChains(self.d).send_keys(key).perform()

    def hover(self, css: str, x: float, y: float) -> None:
        """The pointer to (x, y) of the element's box, as fractions of its size (1.0 = its last pixel):
        a WebDriver pointer move, whose offsets count from the element's centre."""
        from selenium.webdriver.common.action_chains import ActionChains
        el = self.wk.wait_css(self.d, css)
        self.d.execute_script("arguments[0].scrollIntoView({block: 'center'})", el)
        w, h = el.size["width"], el.size["height"]
        dx = int(min(x * w, w - 1) - w / 2)
        dy = int(min(y * h, h - 1) - h / 2)
        ActionChains(self.d).move_to_element_with_offset(el, dx, dy).perform()

    def js(self, expression: str):
        return self.d.execute_script(f"return ({expression});")

    def measure(self) -> dict:
        self.wk.settle(self.d)
        return self.d.execute_script(MEASURE_JS)

    def shot(self, name: str) -> None:
        self.wk.screenshot(self.d, name)


@contextlib.contextmanager
def chromium(width: int, height: int, contexts: int = 1) -> Iterator[list[Chromium]]:
    """`contexts` Chromium pages of `width` x `height`, each in its own browser context (its own
    sessionStorage: a second browser session); AssertionError at exit if a page threw uncaught."""
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            errors: list[str] = []
            pages = []
            for _ in range(contexts):
                page = browser.new_context(viewport={"width": width, "height": height}).new_page()
                page.set_default_timeout(15_000)
                page.on("pageerror", lambda e: errors.append(str(e)))
                pages.append(Chromium(page))
            yield pages
            assert not errors, errors
        finally:
            browser.close()


@contextlib.contextmanager
def webkit(width: int, height: int) -> Iterator[WebKit]:
    """A WebKitGTK session of exactly `width` x `height` CSS px."""
    from tests.helpers.webkit import webkit as session
    with session(width, height) as driver:
        yield WebKit(driver)
