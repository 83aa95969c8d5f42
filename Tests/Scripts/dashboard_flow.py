#!/usr/bin/env python3
"""The dashboard in headless Chromium (selenium): sign-in, operators, the audit log, sign-out.

  dashboard_flow.py CONFIG.json

CONFIG: {"url": the server's base URL, "name": an administrator, "password": its password,
         "screenshots": a folder for screenshots, or null}

Prints a JSON object of what the page showed, for the Swift test to check.
"""
import json
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

HOSTILE = '<img src=x onerror="window.pwned=1">'


def main():
    config = json.load(open(sys.argv[1]))
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,800"):
        options.add_argument(flag)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    wait = WebDriverWait(driver, 60)  # the suite shares two cores with this browser
    shots = config.get("screenshots")
    result = {}

    def visible(element_id):
        return driver.find_element(By.ID, element_id).is_displayed()

    def sign_in(name, password):
        form = driver.find_element(By.ID, "sign-in-form")
        form.find_element(By.NAME, "name").clear()
        form.find_element(By.NAME, "name").send_keys(name)
        form.find_element(By.NAME, "password").clear()
        form.find_element(By.NAME, "password").send_keys(password)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()

    def rows(tbody):
        # Read in one script: the page may redraw a table between two element lookups.
        return driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(r => [...r.cells].map(c => c.textContent))",
            f"#{tbody} tr")

    try:
        driver.get(config["url"] + "/dashboard")
        wait.until(lambda d: visible("sign-in"))
        if shots:
            driver.save_screenshot(f"{shots}/sign-in.png")
        sign_in(config["name"], "not-the-password")
        wait.until(lambda d: d.find_element(By.ID, "message").text)
        result["wrongPassword"] = driver.find_element(By.ID, "message").text

        sign_in(config["name"], config["password"])
        wait.until(lambda d: visible("app") and rows("operator-rows"))
        result["signedInAs"] = driver.find_element(By.ID, "operator-name").text
        result["operators"] = rows("operator-rows")

        # A hostile name: refused, and shown as text wherever it appears.
        create = driver.find_element(By.ID, "create-operator")
        create.find_element(By.NAME, "name").send_keys(HOSTILE)
        create.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: d.find_element(By.ID, "message").text)
        result["hostileMessage"] = driver.find_element(By.ID, "message").text

        create.find_element(By.NAME, "name").clear()
        create.find_element(By.NAME, "name").send_keys("rita")
        Select(create.find_element(By.NAME, "role")).select_by_value("read-only")
        create.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: d.find_element(By.ID, "new-password").text)
        result["ritaPassword"] = driver.find_element(By.ID, "new-password").text
        wait.until(lambda d: any(row[0] == "rita" for row in rows("operator-rows")))
        result["operatorsAfter"] = rows("operator-rows")
        if shots:
            driver.save_screenshot(f"{shots}/operators.png")

        # Containers: make one, pick it, make an API token (shown once).
        driver.find_element(By.CSS_SELECTOR, "nav button[data-view=containers]").click()
        wait.until(lambda d: visible("containers") and rows("container-rows"))
        form = driver.find_element(By.ID, "create-container")
        form.find_element(By.NAME, "id").send_keys("iCloud.com.example.notes")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: any(row[0] == "iCloud.com.example.notes" for row in rows("container-rows")))
        result["containers"] = [row[0] for row in rows("container-rows")]
        Select(driver.find_element(By.ID, "container-pick")).select_by_visible_text("iCloud.com.example.notes")
        token = driver.find_element(By.ID, "create-token")
        token.find_element(By.NAME, "origins").send_keys("https://notes.example.com")
        token.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: d.find_element(By.ID, "new-token").text)
        result["apiToken"] = driver.find_element(By.ID, "new-token").text
        if shots:
            driver.save_screenshot(f"{shots}/containers.png")

        driver.find_element(By.CSS_SELECTOR, "nav button[data-view=audit]").click()
        wait.until(lambda d: visible("audit") and rows("audit-rows"))
        result["audit"] = rows("audit-rows")
        if shots:
            driver.save_screenshot(f"{shots}/audit-log.png")
        result["pwned"] = driver.execute_script("return window.pwned || null")

        driver.find_element(By.ID, "sign-out").click()
        wait.until(lambda d: visible("sign-in"))
        result["afterSignOut"] = driver.find_element(By.ID, "message").text

        # The read-only operator sees no create form.
        sign_in("rita", result["ritaPassword"])
        wait.until(lambda d: visible("app") and rows("operator-rows"))
        result["readOnlyCreateVisible"] = driver.find_element(By.ID, "create-operator").is_displayed()

        # At a phone's width nothing scrolls sideways but the tables.
        driver.set_window_size(390, 844)
        result["phoneOverflow"] = driver.execute_script(
            "return document.documentElement.scrollWidth > document.documentElement.clientWidth")
        if shots:
            driver.save_screenshot(f"{shots}/phone.png")
    finally:
        driver.quit()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
