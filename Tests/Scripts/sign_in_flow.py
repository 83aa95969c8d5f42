#!/usr/bin/env python3
"""CloudKit JS's sign-in flow against a Nimbus server, in headless Chromium (selenium).

  sign_in_flow.py CONFIG.json

CONFIG: {"signInURL": the redirectURL of a 421 (API token without a callback),
         "callbackSignInURL": the same for an API token with a sign-in callback,
         "callback": that callback URL (without the token),
         "username": ..., "password": ..., "wrongPassword": ...}

Serves on a loopback port of its own an app page that opens the sign-in page as CloudKit JS
does (a popup) and listens for the session message. Prints a JSON object:
{"openerSession": …, "openerWebAuthToken": …, "callbackToken": …, "wrongPasswordText": …}.
"""
import http.server
import json
import sys
import threading
import urllib.parse

from browser import chromium, waiter
from selenium.webdriver.common.by import By

APP_PAGE = """<!doctype html><html><body>
<div id="session"></div><div id="token"></div>
<script>
window.addEventListener('message', (event) => {
  document.getElementById('session').textContent = event.data.ckSession || '';
  document.getElementById('token').textContent = event.data.ckWebAuthToken || '';
});
window.open(%s, 'ckSignIn', 'width=640,height=525');
</script></body></html>"""


def serve(sign_in_url):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = (APP_PAGE % json.dumps(sign_in_url)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def sign_in(driver, username, password):
    driver.find_element(By.NAME, "username").send_keys(username)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def main():
    config = json.load(open(sys.argv[1]))
    server = serve(config["signInURL"])
    port = server.server_address[1]
    driver = chromium("--disable-popup-blocking")
    wait = waiter(driver)
    result = {}
    try:
        # 1. The popup: the app opens the sign-in page; a wrong password shows the reason and
        #    hands nothing back; the right one posts the session to the app and closes.
        driver.get(f"http://127.0.0.1:{port}/app")
        app = driver.current_window_handle
        wait.until(lambda d: len(d.window_handles) == 2)
        popup = [handle for handle in driver.window_handles if handle != app][0]
        driver.switch_to.window(popup)
        wait.until(lambda d: d.find_elements(By.NAME, "username"))
        sign_in(driver, config["username"], config["wrongPassword"])
        wait.until(lambda d: d.find_element(By.ID, "result").text)
        result["wrongPasswordText"] = driver.find_element(By.ID, "result").text
        driver.find_element(By.NAME, "username").clear()
        driver.find_element(By.NAME, "password").clear()
        sign_in(driver, config["username"], config["password"])
        driver.switch_to.window(app)
        wait.until(lambda d: d.find_element(By.ID, "session").text)
        result["openerSession"] = driver.find_element(By.ID, "session").text
        result["openerWebAuthToken"] = driver.find_element(By.ID, "token").text
        wait.until(lambda d: len(d.window_handles) == 1)  # the popup closed itself
        # 2. The callback: the browser lands on the callback URL with ckWebAuthToken.
        driver.get(config["callbackSignInURL"])
        wait.until(lambda d: d.find_elements(By.NAME, "username"))
        sign_in(driver, config["username"], config["password"])
        wait.until(lambda d: d.current_url.startswith(config["callback"]))
        query = urllib.parse.parse_qs(urllib.parse.urlparse(driver.current_url).query)
        result["callbackToken"] = query.get("ckWebAuthToken", [""])[0]
    finally:
        driver.quit()
        server.shutdown()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
