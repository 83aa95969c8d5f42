"""The headless Chromium every browser test drives: Debian's chromium and chromedriver, with the
flags a container needs (no sandbox, no /dev/shm), plus whatever a test adds (a window size,
popups allowed). Imported by the *_flow.py scripts beside it."""
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def chromium(*flags):
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", *flags):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
