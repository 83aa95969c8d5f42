import NimbusWire

/// The page `AUTHENTICATION_REQUIRED`'s `redirectURL` opens: a plain form that posts the
/// username and password to the sign-in endpoint it was served from (same URL, JSON body), then
/// hands the session back the way CloudKit JS expects (reference §12.2): with a sign-in
/// callback on the API token, the browser goes there with `?ckWebAuthToken=…`; opened as a
/// popup, the page posts `{ckSession, ckWebAuthToken}` to its opener (only to the token's
/// allowed origins) and closes.
enum SignInPage {
    static func html(container: String, environment: String, callback: String?, openerOrigins: [String]) -> String {
        let title = escaped("Sign in to \(container) (\(environment))")
        let callbackLiteral = scriptLiteral(callback.map(JSON.string) ?? .null)
        let originsLiteral = scriptLiteral(.array(openerOrigins.map(JSON.string)))
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>\(title)</title>
            <style>
            body { font: 16px system-ui, sans-serif; max-width: 22rem; margin: 4rem auto; padding: 0 1rem; }
            label { display: block; margin-top: 1rem; }
            input { width: 100%; padding: .5rem; box-sizing: border-box; }
            button { margin-top: 1.5rem; padding: .5rem 1.5rem; }
            #result { margin-top: 1rem; }
            </style>
            </head>
            <body>
            <h1>Nimbus</h1>
            <p>\(title)</p>
            <form id="signin">
            <label>Username <input name="username" autocomplete="username" required></label>
            <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
            <button type="submit">Sign in</button>
            </form>
            <p id="result" role="status"></p>
            <script>
            const callback = \(callbackLiteral);
            const openerOrigins = \(originsLiteral);
            // The session, handed back as CloudKit JS reads it: the callback's query, or a
            // message to the opener (v1 reads ckSession, Apple's example ckWebAuthToken).
            function handBack(token, result) {
              if (callback) {
                const url = new URL(callback);
                url.searchParams.set('ckWebAuthToken', token);
                location.assign(url.toString());
                return;
              }
              if (window.opener) {
                for (const origin of openerOrigins) {
                  window.opener.postMessage({ ckSession: token, ckWebAuthToken: token }, origin);
                }
                result.textContent = 'Signed in. You can close this window.';
                window.close();
              }
            }
            document.getElementById('signin').addEventListener('submit', async (event) => {
              event.preventDefault();
              const form = new FormData(event.target);
              const result = document.getElementById('result');
              try {
                const answer = await fetch(location.href, {
                  method: 'POST', headers: { 'Content-Type': 'application/json' },
                  body: JSON.stringify({ username: form.get('username'), password: form.get('password') })
                });
                const json = await answer.json();
                if (!answer.ok) {
                  result.textContent = json.reason || 'Sign-in failed.';
                  return;
                }
                result.textContent = 'Signed in as ' + json.userRecordName + '.';
                handBack(json.ckWebAuthToken, result);
              } catch (error) {
                result.textContent = 'Could not reach the server: ' + error;
              }
            });
            </script>
            </body>
            </html>
            """
    }

    /// A JSON value written into a script: `<` escaped, so no text closes the script element.
    static func scriptLiteral(_ value: JSON) -> String {
        String(decoding: value.serialized(), as: UTF8.self).replacingOccurrences(of: "<", with: "\\u003c")
    }

    static func escaped(_ text: String) -> String {
        var output = ""
        for character in text {
            switch character {
            case "<": output += "&lt;"
            case ">": output += "&gt;"
            case "&": output += "&amp;"
            case "\"": output += "&quot;"
            case "'": output += "&#39;"
            default: output.append(character)
            }
        }
        return output
    }
}
