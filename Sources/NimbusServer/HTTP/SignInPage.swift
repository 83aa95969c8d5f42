/// The page `AUTHENTICATION_REQUIRED`'s `redirectURL` opens: a plain form that posts the
/// username and password to the sign-in endpoint it was served from (same URL, JSON body) and
/// shows the outcome. Handing the session back to a CloudKit JS opener is the identity work's.
enum SignInPage {
    static func html(container: String, environment: String) -> String {
        let title = escaped("Sign in to \(container) (\(environment))")
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
                result.textContent = answer.ok ? 'Signed in as ' + json.userRecordName + '.' : (json.reason || 'Sign-in failed.');
              } catch (error) {
                result.textContent = 'Could not reach the server: ' + error;
              }
            });
            </script>
            </body>
            </html>
            """
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
