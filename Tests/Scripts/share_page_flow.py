#!/usr/bin/env python3
"""A person following a share's URL, in headless Chromium (selenium).

  share_page_flow.py CONFIG.json

CONFIG: {"url": the share's webpageURL, "username": ..., "password": ...}

Opens the page, signs in, reads what it shows, accepts, and prints a JSON object:
{"title": …, "owner": …, "permission": …, "statusBefore": …, "statusAfter": …,
 "result": …, "titleHTML": the title element's inner HTML (text only, never markup)}.
"""
import json
import sys

from browser import chromium, waiter
from selenium.webdriver.common.by import By


def main():
    config = json.load(open(sys.argv[1]))
    driver = chromium()
    wait = waiter(driver)
    result = {}
    try:
        driver.get(config["url"])
        wait.until(lambda d: d.find_elements(By.NAME, "username"))
        driver.find_element(By.NAME, "username").send_keys(config["username"])
        driver.find_element(By.NAME, "password").send_keys(config["password"])
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: d.find_element(By.ID, "title").text)
        result["title"] = driver.find_element(By.ID, "title").text
        result["titleHTML"] = driver.find_element(By.ID, "title").get_attribute("innerHTML")
        result["owner"] = driver.find_element(By.ID, "owner").text
        result["permission"] = driver.find_element(By.ID, "permission").text
        result["statusBefore"] = driver.find_element(By.ID, "status").text
        driver.find_element(By.ID, "accept").click()
        wait.until(lambda d: d.find_element(By.ID, "result").text)
        result["result"] = driver.find_element(By.ID, "result").text
        result["statusAfter"] = driver.find_element(By.ID, "status").text
        result["alerts"] = driver.execute_script("return window.__alerted || false")
    finally:
        driver.quit()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
