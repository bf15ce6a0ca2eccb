"""`tenure serve`'s page in a real browser: headless Chromium from Debian's packages, driven by
Selenium through Debian's chromedriver (scripts/setup installs both). The page shows its first
state, then a lock taken by the test — and its token — without a reload, then no lock again;
with ``--allow-revoke``, its revoke button revokes it.

``TENURE_SERVE_SCREENSHOT=docs/serve.png`` (scripts/serve_screenshot) also fills the store with
one of each primitive and saves the page as docs/serve.png.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from served import TENURE, Served, serving

import tenure

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.timeout(120)
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT = 20.0  # seconds an explicit wait on the page's content may take (a guard, not a measure)
SCREENSHOT = os.environ.get("TENURE_SERVE_SCREENSHOT")


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium and chromium-driver (Debian) are not installed: see scripts/setup")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root, in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",  # nothing fetched from elsewhere
        "--window-size=1500,1000",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def text_of(driver: webdriver.Chrome, css: str) -> str | None:
    """The text of the first element matching ``css``, None if there is none."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else None
    except StaleElementReferenceException:  # re-rendered meanwhile: look again
        return None


def wait_for(driver: webdriver.Chrome, what: str, condition: object) -> object:
    return WebDriverWait(driver, WAIT, poll_frequency=0.05).until(condition, message=what)


def test_the_page_follows_a_lock_live(
    browser: webdriver.Chrome, sqlite_store_url: str, tmp_path: Path
) -> None:
    with (
        serving(sqlite_store_url) as served,
        tenure.connect(sqlite_store_url, label="deployer") as c,
    ):
        browser.get(served.url)
        wait_for(browser, "the first state", lambda d: text_of(d, "#status").startswith("live"))
        assert text_of(browser, "#locks .empty") == "no locks held"
        assert sqlite_store_url in text_of(browser, "#store")  # type: ignore[operator]
        browser.execute_script("window.notReloaded = true")

        lease = c.lock("deploy/eu-west", ttl=30).acquire()
        row = '#locks tr[data-name="deploy/eu-west"]'
        wait_for(browser, "the lock on the page", lambda d: text_of(d, f"{row} .token"))
        assert text_of(browser, f"{row} .token") == str(lease.token)
        assert "(deployer)" in text_of(browser, f"{row} .holder")  # type: ignore[operator]
        assert browser.execute_script("return window.notReloaded") is True

        waiter = None
        if SCREENSHOT:
            with ExitStack() as held:
                waiter = fill(held, served, sqlite_store_url)
                wait_for(browser, "every primitive on the page", shows_everything)
                browser.save_screenshot(str(Path(SCREENSHOT).resolve()))

        lease.release()
        if waiter is not None:  # it takes the lock now, and gives it back at once
            waiter.join(60)
        wait_for(browser, "the lock gone", lambda d: text_of(d, row) is None)
        assert text_of(browser, "#locks .empty") == "no locks held"
        assert browser.execute_script("return window.notReloaded") is True
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []  # no script error, nothing the page's own policy refused


def shows_everything(driver: webdriver.Chrome) -> bool:
    items = driver.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    waiters = text_of(driver, '#locks tr[data-name="deploy/eu-west"] .waiters')
    held_back = text_of(driver, "#held_back .token")
    return waiters == "1" and len(items) == 2 + 4 and held_back is not None


def fill(held: ExitStack, served: Served, url: str) -> threading.Thread:
    """One of each primitive, for the screenshot; back once the page shows them all. The
    thread returned waits behind the test's lock (it ends once the test releases it)."""
    web = held.enter_context(tenure.connect(url, label="web-1"))
    worker = held.enter_context(tenure.connect(url, label="worker-2"))
    for slot, code in (("2026-12-01", 0), ("2026-12-02", 0), ("2026-12-03", 3)):
        web.once("nightly-report", slot, ttl=30).acquire().complete(code)
    held.enter_context(web.semaphore("api-quota", 3, ttl=30))
    held.enter_context(worker.semaphore("api-quota", 3, ttl=30))
    held.enter_context(web.rwlock("config", ttl=30).read)
    held.enter_context(web.election("scheduler", ttl=30, value="web-1:8000"))
    held.enter_context(web.partitions("shards", ["s0", "s1", "s2", "s3"], ttl=30, member="m1"))
    held.enter_context(worker.partitions("shards", ["s0", "s1", "s2", "s3"], ttl=30, member="m2"))
    held.enter_context(worker.once("nightly-report", "2026-12-04", ttl=30))
    # A holder killed without a release: its name is held back (lock-delay) for a minute.
    killed = subprocess.Popen(
        [TENURE, "run", "--store", url, "--ttl", "1", "--lock-delay", "60", "backup", "--",
         "sleep", "60"],
    )  # fmt: skip
    served.until(lambda s: any(lock["name"] == "backup" for lock in s["locks"]), "backup held")
    killed.kill()
    killed.wait()

    def wait() -> None:  # its own client: it outlives the others
        with tenure.connect(url, label="worker-2") as own, own.lock("deploy/eu-west", timeout=60):
            pass

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    served.until(
        lambda s: (
            len(s["partitions"]) == 1
            and len(s["partitions"][0]["items"]) == 4
            and s["locks"][0]["waiters"] == 1
        ),
        what="every primitive in the store",
    )
    return waiter


def test_the_revoke_button(browser: webdriver.Chrome, sqlite_store_url: str) -> None:
    """`--allow-revoke`: a click, the confirm accepted, and the lock shows as held back,
    revoked by the server (test_serve_revoke.py checks the holder's loss)."""
    with (
        serving(sqlite_store_url, "--allow-revoke") as served,
        tenure.connect(sqlite_store_url, label="stuck") as c,
    ):
        lease = c.lock("deploy", ttl=1.5).acquire()
        browser.get(served.url)
        button = '#locks tr[data-name="deploy"] button.revoke'
        wait_for(browser, "the revoke button", lambda d: text_of(d, button) == "revoke")
        browser.find_element(By.CSS_SELECTOR, button).click()
        confirm = wait_for(browser, "the confirm", lambda d: d.switch_to.alert)
        assert f"deploy (token {lease.token})" in confirm.text  # type: ignore[attr-defined]
        confirm.accept()  # type: ignore[attr-defined]
        wait_for(browser, "the outcome", lambda d: text_of(d, "#notice").startswith("revoked"))
        why = '#held_back tr[data-name="deploy"] .why'
        wait_for(browser, "held back", lambda d: (text_of(d, why) or "").startswith("revoked by"))
        assert "(tenure serve)" in text_of(browser, why)  # type: ignore[operator]
        assert text_of(browser, '#locks tr[data-name="deploy"]') is None
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
