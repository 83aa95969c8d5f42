"""The headless Chromium every browser test drives: Debian's chromium and chromedriver, with the
flags a container needs (no sandbox, no /dev/shm), without the GPU process, extensions and
background requests (none of which a test uses; a share-page walk took 15-16 s instead of
16-17), plus whatever a test adds (a window size,
popups allowed). Imported by the *_flow.py scripts beside it."""
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait


def chromium(*flags):
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--disable-extensions", "--disable-background-networking", *flags):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def waiter(driver, seconds=60, **options):
    """A wait whose condition is asked again when an element it read was drawn anew meanwhile.
    The pages redraw lists and forms as answers arrive: a condition that found a <select> and
    then read its options failed the whole flow with a stale element (CI, 2026-11-29) where
    asking once more finds the new one. Sixty seconds by default: the suite shares two cores
    with this browser."""
    return WebDriverWait(driver, seconds, ignored_exceptions=[StaleElementReferenceException], **options)
