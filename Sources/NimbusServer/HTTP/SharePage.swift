import NimbusWire

/// The share page: a sign-in form, then what is shared and by whom (from `records/resolve`,
/// so only a participant, or anyone when the share is public, sees anything), and an Accept
/// button (`records/accept`). Plain HTML and one script; everything the server sent is put in
/// the page as text, never as markup.
enum SharePage {
    static let missing = """
        <!doctype html><html lang="en"><head><meta charset="utf-8"><title>Share not found</title></head>
        <body><h1>Share not found</h1><p>This link does not lead to a share. It may have been deleted.</p></body></html>
        """

    static func html(shortGUID: String, container: String, environment: String, apiToken: String, baseURL: String) -> String {
        let config = SignInPage.scriptLiteral([
            "guid": .string(shortGUID), "container": .string(container), "environment": .string(environment),
            "apiToken": .string(apiToken), "base": .string(baseURL),
        ])
        return """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>A shared item</title>
            <style>
            body { font: 16px system-ui, sans-serif; max-width: 28rem; margin: 4rem auto; padding: 0 1rem; }
            label { display: block; margin-top: 1rem; }
            input { width: 100%; padding: .5rem; box-sizing: border-box; }
            button { margin-top: 1.5rem; padding: .5rem 1.5rem; }
            [hidden] { display: none; }
            </style>
            </head>
            <body>
            <h1>Nimbus</h1>
            <p>Someone shared something with you in \(SignInPage.escaped(container)). Sign in to see it.</p>
            <form id="signin">
            <label>Username <input name="username" autocomplete="username" required></label>
            <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
            <button type="submit">Sign in</button>
            </form>
            <section id="share" hidden>
            <h2 id="title"></h2>
            <p>Shared by <strong id="owner"></strong>; you may <span id="permission"></span>.</p>
            <p>Status: <span id="status"></span></p>
            <button id="accept" type="button">Accept</button>
            </section>
            <p id="result" role="status"></p>
            <script>
            const config = \(config);
            const result = document.getElementById('result');
            let session = null;
            function api(path, body) {
              const query = new URLSearchParams({ ckAPIToken: config.apiToken });
              if (session) query.set('ckWebAuthToken', session);
              return fetch(`${config.base}/${path}?${query}`, {
                method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body)
              }).then(async (answer) => ({ ok: answer.ok, json: await answer.json() }));
            }
            const database = () => `database/1/${encodeURIComponent(config.container)}/${config.environment}/public`;
            function describe(identity) {
              const names = (identity && identity.nameComponents) || {};
              const name = [names.givenName, names.familyName].filter(Boolean).join(' ');
              return name || (identity && identity.userRecordName) || 'someone';
            }
            function show(info) {
              const fields = (info.share && info.share.fields) || {};
              const title = fields['cloudkit.title'] && fields['cloudkit.title'].value;
              document.getElementById('title').textContent = title || info.rootRecordName || 'A shared zone';
              document.getElementById('owner').textContent = describe(info.ownerIdentity);
              document.getElementById('permission').textContent =
                info.participantPermission === 'READ_WRITE' ? 'read and change it' : 'read it';
              document.getElementById('status').textContent = info.participantStatus === 'ACCEPTED' ? 'accepted' : 'not accepted yet';
              document.getElementById('accept').hidden = info.participantStatus === 'ACCEPTED';
              document.getElementById('share').hidden = false;
            }
            async function shortGUIDs(endpoint) {
              const answer = await api(`${database()}/${endpoint}`, { shortGUIDs: [{ value: config.guid, shouldFetchRootRecord: true }] });
              const entry = answer.ok ? answer.json.results[0] : answer.json;
              if (entry.serverErrorCode) throw new Error(entry.reason || entry.serverErrorCode);
              return entry;
            }
            document.getElementById('signin').addEventListener('submit', async (event) => {
              event.preventDefault();
              const form = new FormData(event.target);
              try {
                const answer = await api(`auth/1/${encodeURIComponent(config.container)}/${config.environment}/signin`,
                  { username: form.get('username'), password: form.get('password') });
                if (!answer.ok) { result.textContent = answer.json.reason || 'Sign-in failed.'; return; }
                session = answer.json.ckWebAuthToken;
                event.target.hidden = true;
                show(await shortGUIDs('records/resolve'));
                result.textContent = '';
              } catch (error) {
                result.textContent = error.message;
              }
            });
            document.getElementById('accept').addEventListener('click', async () => {
              try {
                show(await shortGUIDs('records/accept'));
                result.textContent = 'Accepted. It is in your shared items now.';
              } catch (error) {
                result.textContent = error.message;
              }
            });
            </script>
            </body>
            </html>
            """
    }
}
