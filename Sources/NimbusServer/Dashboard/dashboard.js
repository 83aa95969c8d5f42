// The dashboard (docs/dashboard.md): a page over the admin API at /admin/1/. Everything it
// shows is set as text (textContent), never as markup, so a hostile name or value stays text.
const state = { csrf: null, operator: null };
const $ = (id) => document.getElementById(id);

async function api(path, { method = 'GET', body } = {}) {
  const headers = {};
  if (method !== 'GET' && state.csrf) headers['X-Nimbus-CSRF'] = state.csrf;
  if (body) headers['Content-Type'] = 'application/json';
  const response = await fetch(`/admin/1/${path}`, { method, headers, body: body && JSON.stringify(body), credentials: 'same-origin' });
  const json = await response.json().catch(() => ({}));
  if (response.status === 421 && path !== 'session') { showSignIn(json.reason); throw new Error(json.reason); }
  if (!response.ok) throw new Error(json.reason || `the server answered ${response.status}`);
  return json;
}

function say(text) { $('message').textContent = text || ''; }

// An element with properties and children; strings become text nodes, never markup.
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key in node && key !== 'list') node[key] = value;
    else node.setAttribute(key, value);
  }
  node.append(...children.filter((child) => child !== null && child !== undefined));
  return node;
}

function cell(row, text) { const td = document.createElement('td'); td.textContent = text ?? ''; row.append(td); }

function fill(tbody, items, columns) {
  tbody.replaceChildren(...items.map((item) => {
    const row = document.createElement('tr');
    for (const column of columns) cell(row, column(item));
    return row;
  }));
}

function showSignIn(reason) {
  // Someone was signed in: start again from a clean page (the reason carried over), so nothing
  // of theirs (records, shares, form inputs) stays on screen for whoever signs in next.
  if (state.operator) {
    sessionStorage.setItem(SIGNED_OUT, reason || '');
    location.reload();
    return;
  }
  state.csrf = null; state.operator = null;
  $('app').hidden = true; $('who').hidden = true; $('setup').hidden = true; $('sign-in').hidden = false;
  say(reason);
  $('sign-in-form').elements.name.focus();
  // A new server: say where the first operator comes from.
  api('setup').then(({ open }) => { $('no-operator-hint').hidden = !open; }, () => {});
}

// The first run: the banner's link carries a one-time token in the fragment (never sent in a
// request line, so never in a log); the form makes the first operator with it.
function setupToken() {
  const match = /^#setup=([A-Za-z0-9_-]+)$/.exec(location.hash);
  return match ? match[1] : null;
}

function showSetup() {
  $('app').hidden = true; $('who').hidden = true; $('sign-in').hidden = true; $('setup').hidden = false;
  $('setup-form').elements.name.focus();
}

$('setup-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  if (form.elements.password.value !== form.elements.again.value) { say('the two passwords differ'); return; }
  try {
    const answer = await api('setup', { method: 'POST', body: { token: setupToken(), name: form.elements.name.value, password: form.elements.password.value } });
    history.replaceState(null, '', location.pathname);
    form.reset();
    signedIn(answer);
  } catch (error) { say(error.message); }
});

function signedIn(answer) {
  state.csrf = answer.csrfToken; state.operator = answer.operator;
  $('operator-name').textContent = answer.operator.name;
  $('operator-role').textContent = answer.operator.role;
  const readOnly = answer.operator.role !== 'administrator';
  for (const form of document.querySelectorAll('.admin-only')) form.hidden = readOnly;
  for (const form of document.querySelectorAll('.every-container')) form.hidden = readOnly || Boolean(answer.operator.containers);
  for (const area of document.querySelectorAll('.every-container-view')) area.hidden = Boolean(answer.operator.containers);
  document.body.classList.toggle('read-only', readOnly);
  $('sign-in').hidden = true; $('setup').hidden = true; $('who').hidden = false; $('app').hidden = false;
  say('');
  document.body.classList.remove('one-time');
  if (answer.operator.oneTimePasswordExpiresAt) { mustChoosePassword(answer.operator); return; }
  followLink();  // where the address points (a reload, a colleague's link), or Operators
}

// Signed in with a one-time password: the server allows nothing but choosing one's own, so
// the page shows only that form until it is done.
function mustChoosePassword(operator) {
  current = 'operators';
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== 'operators';
  document.body.classList.add('one-time');  // dashboard.css shows only "Your account"
  $('scope').hidden = true;
  say(`Choose a password of your own: the one-time password works only for this, until ${new Date(operator.oneTimePasswordExpiresAt).toLocaleString()}.`);
  $('change-password').elements.current.focus();
}

// Each area's loader; `show` runs the one of the chosen area and reports its error.
const views = {
  async operators() {
    const { operators } = await api('operators');
    $('operator-rows').replaceChildren(...operators.map(operatorRow));
    $('change-operator').elements.name.replaceChildren(...operators.map((o) => el('option', {}, o.name)));
    const { operator } = await api('session');
    $('second-factor-state').textContent = operator.secondFactor ? 'on' : 'off';
    $('second-factor-remove').hidden = !operator.secondFactor;
    $('second-factor-begin').hidden = operator.secondFactor;
  },
  async containers() {
    const { containers } = await api('containers');
    fill($('container-rows'), containers, [(c) => c.id, (c) => new Date(c.createdAt).toLocaleString()]);
    await showTokens();
    await showSettings();
    await showKeys();
  },
  async backups() {
    showStorage(await api('storage'));
    showBackups(await api('backups'));
  },
  async audit() { await moreAudit(true); },
};
let current = 'operators';

async function moreAudit(first) {
  const { entries } = await api(`audit?limit=${PAGE}${first ? '' : `&before=${state.oldestAuditID}`}`);
  const rows = entries.map((e) => el('tr', {}, ...[new Date(e.at).toLocaleString(), e.operator, e.action, e.container, e.detail].map((text) => el('td', {}, text ?? ''))));
  if (first) $('audit-rows').replaceChildren(...rows); else $('audit-rows').append(...rows);
  if (entries.length) state.oldestAuditID = entries[entries.length - 1].id;
  $('more-audit').hidden = entries.length < PAGE;
}
$('more-audit').addEventListener('click', () => act(() => moreAudit(false)));

async function show(view) {
  current = view;
  say('');  // a message belongs to the area it came from
  for (const button of document.querySelectorAll('nav button')) button.setAttribute('aria-pressed', String(button.dataset.view === view));
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== view;
  $('scope').hidden = view === 'operators' || view === 'audit' || view === 'backups';
  try {
    await loadContainers();
    writeLink();
    await views[view]();
  } catch (error) { say(error.message); }
}

// The container picker every area shares, refilled from the server (new containers appear).
async function loadContainers() {
  const { containers } = await api('containers');
  const pick = $('container-pick');
  const chosen = state.linkedContainer || pick.value;
  state.linkedContainer = null;
  pick.replaceChildren(...containers.map((c) => el('option', {}, c.id)));
  if (containers.some((c) => c.id === chosen)) pick.value = chosen;
}

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    const code = form.elements.code.value.trim();
    signedIn(await api('session', { method: 'POST', body: { name: form.elements.name.value, password: form.elements.password.value, ...(code ? { code } : {}) } }));
    form.reset();
  } catch (error) { say(error.message); }
});

$('sign-out').addEventListener('click', async () => {
  try { await api('session/end', { method: 'POST' }); } catch (error) { /* signed out either way */ }
  // Whoever signs in next starts at the beginning; an expired session (421) keeps the address.
  history.replaceState(null, '', location.pathname);
  showSignIn('Signed out.');
});

$('create-operator').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  const containers = form.elements.containers.value.split(',').map((c) => c.trim()).filter(Boolean);
  try {
    const created = await api('operators', { method: 'POST', body: { name: form.elements.name.value, role: form.elements.role.value, ...(containers.length ? { containers } : {}) } });
    $('new-password').textContent = created.password;
    say('');
    form.reset();  // the next operator starts from nothing, not scoped to this one's containers
    show('operators');
  } catch (error) { say(error.message); }
});

$('change-password').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    await api('me/password', { method: 'POST', body: { currentPassword: form.elements.current.value, newPassword: form.elements.next.value } });
    form.reset();
    if (state.operator.oneTimePasswordExpiresAt) signedIn(await api('session'));  // the whole dashboard opens
    say('Password changed.');
  } catch (error) { say(error.message); }
});

// An operator's row: what it is, and for an administrator of every container the changes
// that need no form (each asks first; deleting wants the name typed).
function operatorRow(operator) {
  const condition = operator.disabled ? 'disabled'
    : operator.oneTimePasswordExpiresAt ? `one-time password until ${new Date(operator.oneTimePasswordExpiresAt).toLocaleString()}` : 'active';
  const row = el('tr', {}, ...[operator.name, operator.role, operator.containers ? operator.containers.join(', ') : 'every container', condition]
    .map((text) => el('td', {}, text)));
  const actions = el('td', {});
  if (isAdministrator() && !state.operator.containers) {
    const button = (text, danger, handler) => el('button', { type: 'button', className: danger ? 'danger' : '', 'aria-label': `${text} ${operator.name}`, onclick: handler }, text);
    actions.append(
      button('Reset password', true, () => {
        if (!confirmed(`Give ${operator.name} a new one-time password? Their sessions end and their password stops working.`)) return;
        act(async () => {
          const { password } = await api(`operators/${encodeURIComponent(operator.name)}/password`, { method: 'POST' });
          await views.operators();
          $('new-password').textContent = password;
          say(`${operator.name}'s one-time password is below; it works for 24 hours.`);
        });
      }),
      operator.disabled
        ? button('Enable', false, () => act(() => api(`operators/${encodeURIComponent(operator.name)}`, { method: 'POST', body: { disabled: false } }),
          async () => { await views.operators(); say(`${operator.name} enabled.`); }))
        : button('Disable', true, () => {
          if (!confirmed(`Disable ${operator.name}? Their sessions end and they cannot sign in until enabled again.`)) return;
          act(() => api(`operators/${encodeURIComponent(operator.name)}`, { method: 'POST', body: { disabled: true } }),
            async () => { await views.operators(); say(`${operator.name} disabled.`); });
        }),
      button('Delete', true, () => {
        if (!typedConfirmation(`Delete operator ${operator.name}? The audit log keeps what they did.`, operator.name)) return;
        act(() => api(`operators/${encodeURIComponent(operator.name)}/delete`, { method: 'POST' }),
          async () => { await views.operators(); say(`${operator.name} deleted.`); });
      }));
  }
  row.append(actions);
  return row;
}

$('change-operator').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const containers = form.elements.containers.value.split(',').map((c) => c.trim()).filter(Boolean);
  const name = form.elements.name.value;
  act(() => api(`operators/${encodeURIComponent(name)}`, { method: 'POST', body: {
    role: form.elements.role.value, ...(containers.length ? { containers } : { everyContainer: true }) } }),
  async () => { form.elements.containers.value = ''; await views.operators(); say(`${name} changed.`); });
});

$('second-factor-begin').addEventListener('click', async () => {
  try {
    const { secret, uri } = await api('me/second-factor', { method: 'POST' });
    $('second-factor-secret').textContent = secret;
    $('second-factor-uri').href = uri;
    $('second-factor-qr').replaceChildren(qrDrawing(uri));
    $('second-factor-confirm').hidden = false;
    $('second-factor-confirm').elements.code.focus();
  } catch (error) { say(error.message); }
});

for (const [form, path, done] of [['second-factor-confirm', 'me/second-factor/confirm', 'on'], ['second-factor-remove', 'me/second-factor/remove', 'off']]) {
  $(form).addEventListener('submit', async (event) => {
    event.preventDefault();
    try {
      await api(path, { method: 'POST', body: { code: event.target.elements.code.value.trim() } });
      event.target.reset();
      $('second-factor-confirm').hidden = true;
      await show('operators');
      say(`Second factor ${done}.`);
    } catch (error) { say(error.message); }
  });
}

const picked = () => encodeURIComponent($('container-pick').value);

// A table row of texts ending in a destructive button (Revoke, or `verb`; for administrators, while there is something
// to revoke) that asks `question` first, then runs `revoke` and `done`.
function revocableRow(texts, { live, label, question, revoke, done, verb = 'Revoke' }) {
  const row = document.createElement('tr');
  for (const text of texts) cell(row, text);
  const action = document.createElement('td');
  if (live && isAdministrator()) {
    action.append(el('button', { type: 'button', className: 'danger', 'aria-label': label,
      onclick: () => { if (confirmed(question)) act(revoke, done); } }, verb));
  }
  row.append(action);
  return row;
}

const when = (milliseconds) => (milliseconds ? new Date(milliseconds).toLocaleString() : 'never');

async function showTokens() {
  if (!$('container-pick').value) { $('token-rows').replaceChildren(); return; }
  const { tokens } = await api(`containers/${picked()}/tokens`);
  $('token-rows').replaceChildren(...tokens.map((token) => {
    const name = token.name || '(no name)';
    return revocableRow([name, token.id, token.environment, when(token.createdAt), when(token.lastUsedAt), token.revoked ? 'revoked' : 'active'], {
      live: !token.revoked, label: `Revoke token ${name} (${token.id})`,
      question: `Revoke the ${token.environment} API token ${name} (${token.id})? Apps and pages using it stop working until they are given a new token; a revoked token cannot be restored.`,
      revoke: () => api(`containers/${picked()}/tokens/${encodeURIComponent(token.id)}/revoke`, { method: 'POST' }),
      done: async () => { await showTokens(); say(`Token ${name} (${token.id}) revoked.`); },
    });
  }));
}

// The container's settings, with the checks the command line makes (on the server).
async function showSettings() {
  if (!$('container-pick').value) { $('limit-rows').replaceChildren(); return; }
  const settings = await api(`containers/${picked()}/settings`);
  const form = $('container-settings');
  form.elements.signUp.checked = settings.signUp;
  form.elements.userDiscovery.checked = settings.userDiscovery;
  for (const box of [form.elements.signUp, form.elements.userDiscovery]) box.disabled = !isAdministrator();
  state.settings = settings;
  $('limit-rows').replaceChildren(...settings.limits.map((limit) => el('tr', {},
    el('td', {}, limit.name),
    el('td', {}, el('input', { type: 'number', name: `limit-${limit.name}`, min: String(limit.minimum), step: '1', 'aria-label': limit.name,
      value: limit.set ? String(limit.value) : '', placeholder: String(limit.value), readOnly: !isAdministrator() })),
    el('td', {}, `${limit.set ? 'set for this container' : 'default'}${limit.quota ? `, ${bytes(limit.value)}` : ''}`))));
  showPushAndSignIn(settings);
}

// APNs credentials (the key never comes back: team, key ID and topic identify it) and the
// issuers whose id tokens the container accepts; the same checks as `nimbus apns|providers`.
function showPushAndSignIn(settings) {
  const apns = settings.apns;
  $('apns-state').textContent = apns
    ? `Pushes go to APNs as team ${apns.teamID}, key ${apns.keyID}, topic ${apns.topic} (stored ${when(apns.updatedAt)}).`
    : 'No APNs credentials: devices get no pushes from APNs (web clients are notified as before).';
  $('remove-apns').hidden = !apns;
  $('provider-rows').replaceChildren(...settings.identityProviders.map((provider) =>
    revocableRow([provider.issuer, provider.audience, provider.jwks, when(provider.createdAt)], {
      live: true, verb: 'Remove', label: `Remove issuer ${provider.issuer}`,
      question: `Stop trusting ${provider.issuer}? Its id tokens no longer sign anyone in; sessions already made stay until they end.`,
      revoke: () => api(`containers/${picked()}/providers/remove`, { method: 'POST', body: { issuer: provider.issuer } }),
      done: async (settings) => { showPushAndSignIn(settings); say(`${provider.issuer} is no longer trusted.`); },
    })));
}

$('set-apns').elements.file.addEventListener('change', async (event) => {
  const file = event.target.files[0];
  if (file) $('set-apns').elements.pem.value = await file.text();
});

$('set-apns').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const body = { teamID: form.elements.teamID.value.trim(), keyID: form.elements.keyID.value.trim(), topic: form.elements.topic.value.trim(),
    privateKeyPEM: form.elements.pem.value };
  act(() => api(`containers/${picked()}/apns`, { method: 'POST', body }),
    (settings) => { form.reset(); showPushAndSignIn(settings); say('APNs credentials stored; pushes use them within 30 seconds.'); });
});

$('remove-apns').addEventListener('click', () => {
  if (!confirmed(`Remove ${$('container-pick').value}'s APNs credentials? Devices get no more pushes until they are stored again.`)) return;
  act(() => api(`containers/${picked()}/apns/remove`, { method: 'POST' }),
    (settings) => { showPushAndSignIn(settings); say('APNs credentials removed.'); });
});

$('add-provider').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const body = { issuer: form.elements.issuer.value.trim(), audience: form.elements.audience.value.trim(), jwks: form.elements.jwks.value.trim() };
  act(() => api(`containers/${picked()}/providers`, { method: 'POST', body }),
    (settings) => { form.reset(); showPushAndSignIn(settings); say(`${body.issuer} trusted for ${body.audience}.`); });
});

$('container-settings').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const limits = {};
  for (const limit of state.settings.limits) {
    const text = form.elements[`limit-${limit.name}`].value.trim();
    const wanted = text === '' ? null : Number(text);
    if (wanted === null ? limit.set : !limit.set || wanted !== limit.value) limits[limit.name] = wanted;
  }
  const body = { limits };
  if (form.elements.signUp.checked !== state.settings.signUp) body.signUp = form.elements.signUp.checked;
  if (form.elements.userDiscovery.checked !== state.settings.userDiscovery) body.userDiscovery = form.elements.userDiscovery.checked;
  act(() => api(`containers/${picked()}/settings`, { method: 'POST', body }), async () => { await showSettings(); say('Settings saved.'); });
});

async function showKeys() {
  if (!$('container-pick').value) { $('key-rows').replaceChildren(); return; }
  const { keys } = await api(`containers/${picked()}/keys`);
  $('key-rows').replaceChildren(...keys.map((key) => revocableRow([key.keyID, key.environment, key.revoked ? 'revoked' : 'active'], {
    live: !key.revoked, label: `Revoke key ${key.keyID}`,
    question: `Revoke server-to-server key ${key.keyID} (${key.environment})? Requests it signs are refused from now on; a revoked key cannot be restored.`,
    revoke: () => api(`containers/${picked()}/keys/${encodeURIComponent(key.keyID)}/revoke`, { method: 'POST' }),
    done: async () => { await showKeys(); say(`Key ${key.keyID} revoked.`); },
  })));
}

// Runs a change, then refreshes; the message line is cleared first and shows an error if any.
async function act(change, refresh) {
  try { say(''); const answer = await change(); if (refresh) await refresh(answer); return answer; } catch (error) { say(error.message); }
}

function megabytes(bytes) { return `${(bytes / 1048576).toFixed(1)} MB`; }

// A size as people read it: 45.8 KB, 1.0 GB (powers of 1,024, as quotas are set).
function bytes(count) {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let value = count; let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return unit === 0 ? `${count} B` : `${value.toFixed(1)} ${units[unit]}`;
}

// Where the data is, and each read replica's state: how far behind the primary, how many reads it took.
function showStorage(status) {
  $('storage-engine').textContent = `Data: ${status.engine}.`
    + (status.replicas.length ? '' : ' No read replicas (nimbus serve --read-replica, PostgreSQL only).');
  // Partitions (nimbus partitions add): each with whether the server reached it the last time it tried.
  const partitions = status.partitions || [];
  $('storage-partitions').hidden = !partitions.length;
  $('storage-partitions').textContent = 'Partitions: ' + partitions
    .map((p) => (p.problem ? `${p.name} (not answering: ${p.problem})` : p.name)).join(', ') + '.';
  // Moves between partitions left half-way (nimbus partitions move, run again, finishes each).
  const moves = status.moves || [];
  $('storage-moves').hidden = !moves.length;
  $('storage-moves').textContent = 'Moves under way: ' + moves
    .map((m) => `${m.database}, ${m.source} to ${m.target}, next step ${m.step}`
      + (m.fenced ? ' (its writes are refused until the move is run again)' : ''))
    .join('; ') + '.';
  $('replica-table').hidden = !status.replicas.length;
  fill($('replica-rows'), status.replicas, [
    (r) => r.name,
    (r) => (r.up ? 'answering' : 'not answering: reads go to the primary'),
    (r) => `${bytes(r.lagBytes)}, ${r.lagSeconds.toFixed(1)} s`,
    (r) => String(r.reads),
  ]);
}

function showBackups(status) {
  const every = status.everySeconds ? `every ${status.everySeconds >= 3600 ? `${status.everySeconds / 3600} h` : `${status.everySeconds} s`}` : 'only when asked';
  $('backup-state').textContent = status.configured
    ? `Backups go to ${status.directory}, ${every}; the newest ${status.keep} are kept.`
      + (status.lastSuccess ? ` Last: ${new Date(status.lastSuccess.at).toLocaleString()}.` : ' None taken since the server started.')
    : 'This server keeps no backups of its own: start it with --backup-dir (and --backup-every), or run nimbus backup --to PATH.';
  $('backup-failure').hidden = !status.lastFailure;
  $('backup-failure').textContent = status.lastFailure
    ? `The last backup failed (${new Date(status.lastFailure.at).toLocaleString()}, ${status.failuresInARow} in a row): ${status.lastFailure.reason}`
    : '';
  $('take-backup').querySelector('button').disabled = !status.configured || status.running;
  fill($('backup-rows'), status.backups || [], [(b) => b.name, (b) => new Date(b.takenAt).toLocaleString(), (b) => megabytes(b.bytes), (b) => b.nimbusVersion]);
}

$('take-backup').addEventListener('submit', (event) => {
  event.preventDefault();
  const button = event.target.querySelector('button');
  button.disabled = true;
  act(() => api('backups', { method: 'POST' }), () => show('backups')).finally(() => { button.disabled = false; });
});

$('container-pick').addEventListener('change', () => show(current));
$('environment-pick').addEventListener('change', () => show(current));

$('create-container').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  act(() => api('containers', { method: 'POST', body: { id: form.elements.id.value } }), () => { form.reset(); return show('containers'); });
});

$('create-token').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  const origins = form.elements.origins.value.split(',').map((o) => o.trim()).filter(Boolean);
  const created = await act(() => api(`containers/${picked()}/tokens`, { method: 'POST', body: {
    environment: form.elements.environment.value, allowedOrigins: origins.length ? origins : ['*'],
    ...(form.elements.name.value.trim() ? { name: form.elements.name.value.trim() } : {}),
    ...(form.elements.callback.value ? { signInCallback: form.elements.callback.value } : {}) } }), showTokens);
  if (created) { $('new-token').textContent = created.apiToken; form.elements.name.value = ''; }
});

// Destructive actions ask first, naming what goes; the irreversible ones want the name typed.
function confirmed(question) { return window.confirm(question); }
function typedConfirmation(question, expected) {
  const typed = window.prompt(`${question}\n\nType ${expected} to confirm.`);
  if (typed === null) return false;
  if (typed.trim() !== expected) { say(`Nothing was changed: "${typed}" is not ${expected}.`); return false; }
  return true;
}

$('revoke-tokens').addEventListener('click', async () => {
  const environment = $('create-token').elements.environment.value;
  const container = picked();
  if (!typedConfirmation(`Revoke every ${environment} API token of ${container}? Every app and web page using one stops working until it is given a new token. This cannot be undone.`, container)) return;
  const answer = await act(() => api(`containers/${container}/tokens/revoke`, { method: 'POST', body: { environment } }), showTokens);
  if (answer) say(`${answer.revoked} ${environment} token(s) of ${container} revoked.`);
});

$('add-key').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  act(() => api(`containers/${picked()}/keys`, { method: 'POST', body: { environment: form.elements.environment.value, publicKeyPEM: form.elements.pem.value } }),
    () => { form.reset(); return showKeys(); });
});

for (const button of document.querySelectorAll('nav button')) button.addEventListener('click', () => show(button.dataset.view));

const SIGNED_OUT = 'nimbus-signed-out';
const farewell = sessionStorage.getItem(SIGNED_OUT);
sessionStorage.removeItem(SIGNED_OUT);
if (setupToken()) showSetup(); else api('session').then(signedIn, () => showSignIn(farewell || ''));

// ---- The app's areas: schema, data, people, sharing, logs (docs/dashboard.md) ----

const scope = () => ({ container: $('container-pick').value, environment: $('environment-pick').value });
const inContainer = (path) => `containers/${encodeURIComponent(scope().container)}/${path}`;
const isAdministrator = () => state.operator && state.operator.role === 'administrator';
const INDEXES = ['QUERYABLE', 'SORTABLE', 'SEARCHABLE'];

// Schema: types, fields and their indexes, roles and grants, the deploy diff, the schema file.
views.schema = async () => {
  const { environment } = scope();
  const schema = await api(inContainer(`schema/${environment}`));
  const development = environment === 'development';
  for (const node of document.querySelectorAll('.development-only')) node.hidden = !development || !isAdministrator();
  // Development only: a field or type goes when no record holds values of it (the server says which).
  const removable = development && isAdministrator();
  $('schema-types').replaceChildren(...schema.recordTypes.map((type) => {
    const rows = type.fields.map((field) => el('tr', {},
      el('td', {}, field.name), el('td', {}, field.type),
      // Only the indexes the field's type can use are offered (the server says which).
      ...INDEXES.map((index) => el('td', {}, field.applicableIndexes.includes(index) ? el('input', {
        type: 'checkbox', checked: field.indexes.includes(index), disabled: !isAdministrator(),
        'aria-label': `${type.name}.${field.name} ${index}`, 'data-index': index,
        onchange: (event) => setIndexes(type.name, field.name, event.target.closest('tr')),
      }) : el('span', { title: `${index} does not apply to ${field.type}` }, '—'))),
      removable ? el('td', {}, el('button', { type: 'button', className: 'danger', onclick: () => removeFromSchema(type.name, field.name) }, 'Delete')) : null));
    const grants = Object.entries(type.grants).map(([role, permissions]) => `${role}: ${permissions.join(', ') || 'none'}`).join('; ');
    return el('section', { className: 'record-type' },
      el('h3', {}, el('span', {}, type.name),
        removable && !['Users', 'cloudkit.share'].includes(type.name) ? el('button', { type: 'button', className: 'danger', onclick: () => removeFromSchema(type.name) }, 'Delete record type') : null),
      el('table', {}, el('thead', {}, el('tr', {}, ...['Field', 'Type', ...INDEXES, ...(removable ? [''] : [])].map((h) => el('th', { scope: 'col' }, h)))), el('tbody', {}, ...rows)),
      el('p', {}, `Grants: ${grants}`));
  }));
  // A forgotten deploy does not fail silently: production's refusals, by what it lacks.
  const refused = schema.refusedWrites || [];
  $('schema-refusals').hidden = refused.length === 0;
  $('schema-refusal-list').replaceChildren(...refused.map((refusal) =>
    el('li', {}, `${refusal.missing}: ${refusal.count} write(s) refused, the last ${new Date(refusal.lastAt).toLocaleString()}`)));
  $('roles-list').textContent = `Roles: ${schema.roles.join(', ')}`;
  $('export-link').href = `/admin/1/${inContainer(`schema/${environment}/export`)}`;
  $('deploy-diff').replaceChildren();
  $('deploy').hidden = true;
};

function removeFromSchema(recordType, field) {
  const what = field ? `field ${recordType}.${field}` : `record type ${recordType}`;
  if (!confirmed(`Delete ${what} from the development schema? Apps can add it again by saving a record with it.`)) return;
  act(() => api(inContainer('schema/development/remove'), { method: 'POST', body: { recordType, ...(field ? { field } : {}) } }),
    async () => { await views.schema(); say(`Deleted ${what}.`); });
}

$('reset-development').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  const answer = await act(() => api(inContainer('reset/development'), { method: 'POST', body: { confirm: form.elements.confirm.value } }));
  if (answer) {
    form.reset();
    say(`Development reset: ${answer.zones} zone(s) in ${answer.databases} database(s) and ${answer.subscriptions} subscription(s) removed; the schema is production's.`);
  }
});

async function setIndexes(recordType, field, row) {
  const indexes = [...row.querySelectorAll('input[data-index]')].filter((box) => box.checked).map((box) => box.dataset.index);
  await act(() => api(inContainer(`schema/${scope().environment}/indexes`), { method: 'POST', body: { recordType, field, indexes } }),
    () => say(`${recordType}.${field}: ${indexes.join(', ') || 'no index'} in ${scope().environment}.`));
}

$('add-field').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const what = `${form.elements.recordType.value}.${form.elements.field.value} (${form.elements.type.value})`;
  act(() => api(inContainer('schema/development/fields'), { method: 'POST', body: {
    recordType: form.elements.recordType.value, field: form.elements.field.value, type: form.elements.type.value } }),
  async () => { form.reset(); await views.schema(); say(`Added ${what} to development.`); });
});

function grantChange(granting) {
  const form = $('roles-form');
  const permissions = [...form.querySelectorAll('input[name=perm]')].filter((box) => box.checked).map((box) => box.value);
  const { recordType, role } = { recordType: form.elements.recordType.value, role: form.elements.role.value };
  return act(() => api(inContainer(`grants/${scope().environment}`), { method: 'POST', body: { recordType, role, permissions, granting } }),
    async () => { await views.schema(); say(`${granting ? 'Granted' : 'Revoked'} ${permissions.join(', ') || 'nothing'} on ${recordType} ${granting ? 'to' : 'from'} ${role} in ${scope().environment}.`); });
}
$('grant').addEventListener('click', () => grantChange(true));
$('revoke-grant').addEventListener('click', () => grantChange(false));
$('create-role').addEventListener('click', () => {
  const name = $('roles-form').elements.name.value;
  act(() => api(inContainer(`roles/${scope().environment}`), { method: 'POST', body: { name } }),
    async () => { await views.schema(); say(`Role ${name} created in ${scope().environment}.`); });
});

$('review-deploy').addEventListener('click', () => act(async () => {
  const plan = await api(inContainer('schema/deploy'));
  const list = (title, items, className) => (items.length ? [el('h4', { className }, title), el('ul', { className }, ...items.map((item) => el('li', {}, item)))] : []);
  const field = (f) => `${f.recordType}.${f.field} ${f.type}${f.indexes.length ? ` (${f.indexes.join(', ')})` : ''}`;
  const parts = [
    ...list('Conflicts: the deploy is refused', plan.conflicts, 'conflict'),
    ...list('New record types', plan.newRecordTypes),
    ...list('New fields', plan.newFields.map(field)),
    ...list('New indexes (production will have)', plan.newIndexes.map(field)),
    ...list('New roles', plan.newRoles),
    ...list('Grants that change', plan.changedGrants.map((g) => `${g.recordType}: ${g.role} ${g.permissions.join(', ') || 'none'}`)),
    ...list('Kept in production (a deploy never deletes)', plan.keptFields.map(field)),
  ];
  $('deploy-diff').replaceChildren(...(parts.length ? parts : [el('p', {}, 'Production has everything development has.')]));
  const changes = plan.newRecordTypes.length + plan.newFields.length + plan.newIndexes.length + plan.newRoles.length + plan.changedGrants.length;
  $('deploy').hidden = !isAdministrator() || plan.conflicts.length > 0 || changes === 0;
}));

$('deploy').addEventListener('click', () => act(async () => {
  const done = await api(inContainer('schema/deploy'), { method: 'POST' });
  $('deploy').hidden = true;
  $('deploy-diff').replaceChildren(el('p', { id: 'deployed' }, `Deployed: ${done.recordTypes} record type(s), ${done.fields} field(s), ${done.roles} role(s).`));
}));

$('import-schema').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  act(async () => {
    const done = await api(inContainer('schema/development/import'), { method: 'POST', body: { text: form.elements.text.value } });
    say(`Imported: ${done.recordTypes} new record type(s), ${done.fields} new field(s), ${done.roles} new role(s).`);
    form.reset();
  }, views.schema);
});

// Data: a query builder over the operator's data API, a record editor, asset previews.
const COMPARATORS = ['EQUALS', 'NOT_EQUALS', 'LESS_THAN', 'LESS_THAN_OR_EQUALS', 'GREATER_THAN', 'GREATER_THAN_OR_EQUALS', 'NEAR',
  'BEGINS_WITH', 'NOT_BEGINS_WITH', 'CONTAINS_ALL_TOKENS', 'CONTAINS_ANY_TOKENS', 'IN', 'NOT_IN', 'LIST_CONTAINS', 'NOT_LIST_CONTAINS',
  'LIST_CONTAINS_ANY', 'NOT_LIST_CONTAINS_ANY', 'LIST_CONTAINS_ALL', 'NOT_LIST_CONTAINS_ALL', 'LIST_MEMBER_BEGINS_WITH',
  'NOT_LIST_MEMBER_BEGINS_WITH'];
const VALUE_TYPES = ['STRING', 'INT64', 'DOUBLE', 'TIMESTAMP', 'REFERENCE', 'LOCATION', 'BYTES', 'STRING_LIST', 'INT64_LIST',
  'DOUBLE_LIST', 'TIMESTAMP_LIST', 'REFERENCE_LIST', 'LOCATION_LIST'];
const data = { marker: null, record: null, types: null };

// The environment's record types and their fields, offered as the names are typed (review
// defect 12), and checked before a query: a typo is said, not answered with nothing.
views.data = async () => {
  const schema = await api(inContainer(`schema/${scope().environment}`));
  // Each type's own fields (system fields are the record's, not the editor's), with their types.
  data.types = new Map(schema.recordTypes.map((type) => [type.name, type.fields.filter((field) => !field.name.startsWith('___'))]));
  $('type-names').replaceChildren(...[...data.types.keys()].map((name) => el('option', { value: name })));
  offerFields();
};

function offerFields() {
  const fields = (data.types && data.types.get($('query-form').elements.recordType.value.trim())) || [];
  $('field-names').replaceChildren(...fields.map((field) => el('option', { value: field.name })));
}
$('query-form').elements.recordType.addEventListener('input', offerFields);

// A record type the schema does not have, or a field its type does not have, said plainly.
async function checkNames(query) {
  if (!data.types) await views.data();  // a query sent before the schema arrived waits for it
  const system = ['___recordID', '___createTime', '___modTime', '___createdBy', '___modifiedBy'];
  const named = [...query.filterBy.map((filter) => filter.fieldName), ...(query.sortBy || []).map((sort) => sort.fieldName)].filter(Boolean);
  const fieldNames = () => (data.types.get(query.recordType) || []).map((field) => field.name);
  const fresh = () => data.types.has(query.recordType) && named.every((name) => fieldNames().includes(name) || system.includes(name));
  if (!fresh()) await views.data();  // development learns types and fields as apps save
  const known = data.types.has(query.recordType) && fieldNames();
  if (!known) throw new Error(`There is no record type '${query.recordType}' in the ${scope().environment} schema; it has ${[...data.types.keys()].join(', ') || 'none yet'}.`);
  const unknown = named.filter((name) => !known.includes(name) && !system.includes(name));
  if (unknown.length) throw new Error(`${query.recordType} has no field ${unknown.join(', ')}; its fields are ${known.join(', ')}.`);
}

function dataPath(endpoint) {
  const form = $('query-form');
  const user = form.elements.user.value.trim();
  const database = form.elements.database.value;
  const query = database !== 'public' && user ? `?user=${encodeURIComponent(user)}` : '';
  return inContainer(`data/${scope().environment}/${database}/${endpoint}${query}`);
}

function zoneID() {
  const value = $('query-form').elements.zone.value;
  return value ? JSON.parse(value) : { zoneName: '_defaultZone' };
}

// Zones belong to one database of one user in one environment and container: when any of
// those changes, the picker is back to the default zone until zones are loaded again.
function forgetZones() {
  $('query-form').elements.zone.replaceChildren(el('option', { value: '' }, '_defaultZone'));
}
for (const name of ['database', 'user']) $('query-form').elements[name].addEventListener('change', forgetZones);
for (const id of ['container-pick', 'environment-pick']) $(id).addEventListener('change', forgetZones);

// The picker refilled with the database's zones; `chosen` (a zone name) picked when there.
async function loadZones(chosen) {
  const { zones } = await api(dataPath('zones/list'), { method: 'POST', body: {} });
  const select = $('query-form').elements.zone;
  select.replaceChildren(...zones.map((z) => el('option', {
    value: z.zoneID.zoneName === '_defaultZone' ? '' : JSON.stringify(z.zoneID) }, z.zoneID.ownerRecordName && $('query-form').elements.database.value === 'shared'
    ? `${z.zoneID.zoneName} (${z.zoneID.ownerRecordName})` : z.zoneID.zoneName)));
  const match = [...select.options].find((option) => option.value && JSON.parse(option.value).zoneName === chosen);
  if (match) select.value = match.value;
}
$('load-zones').addEventListener('click', () => act(() => loadZones(zoneID().zoneName)));

// Zones made and deleted as an app does it (zones/modify), in the database and user picked.
$('new-zone').addEventListener('click', async () => {
  const name = (window.prompt('Name of the new zone (letters, digits, - and _):') || '').trim();
  if (!name) return;
  const answer = await act(async () => {
    const { zones } = await api(dataPath('zones/modify'), { method: 'POST', body: { operations: [{ operationType: 'create', zone: { zoneID: { zoneName: name } } }] } });
    if (zones[0].serverErrorCode) throw new Error(`${zones[0].serverErrorCode}: ${zones[0].reason}`);
    await loadZones(name);
    writeLink();
    return zones[0];
  });
  if (answer) say(`Zone ${name} made.`);
});

$('delete-zone').addEventListener('click', async () => {
  const zone = zoneID();
  if (zone.zoneName === '_defaultZone') { say('The default zone cannot be deleted; pick a custom zone (Load zones) first.'); return; }
  if (!typedConfirmation(`Delete zone ${zone.zoneName} and every record in it? Devices delete their copies when they next sync; this cannot be undone.`, zone.zoneName)) return;
  const answer = await act(async () => {
    const { zones } = await api(dataPath('zones/modify'), { method: 'POST', body: { operations: [{ operationType: 'delete', zone: { zoneID: zone } }] } });
    if (zones[0].serverErrorCode) throw new Error(`${zones[0].serverErrorCode}: ${zones[0].reason}`);
    $('record-rows').replaceChildren(); $('query-note').textContent = ''; $('record-detail').hidden = true; data.record = null;
    await loadZones(null);
    writeLink();
    return zones[0];
  });
  if (answer) say(`Zone ${zone.zoneName} deleted.`);
});

$('add-filter').addEventListener('click', () => {
  const remove = el('button', { type: 'button', onclick: () => row.remove() }, 'Remove');
  const row = el('div', { className: 'filter' },
    el('label', {}, 'Field', el('input', { name: 'field', placeholder: 'empty: any searchable field', list: 'field-names', autocomplete: 'off' })),
    el('label', {}, 'Comparator', el('select', { name: 'comparator' }, ...COMPARATORS.map((c) => el('option', {}, c)))),
    el('label', {}, 'Value', el('input', { name: 'value', placeholder: 'text; a, b for lists; lat, lon for places' })),
    el('label', {}, 'Type', el('select', { name: 'type' }, el('option', { value: '' }, 'as typed'), ...VALUE_TYPES.map((t) => el('option', {}, t)))),
    el('label', {}, 'Within km (NEAR)', el('input', { name: 'km', type: 'number', min: '0', step: 'any' })),
    remove);
  $('filters').append(row);
  row.querySelector('input').focus();
});

// A typed value from what was typed: numbers, dates, places and lists as the protocol wants them.
function wireValue(text, type) {
  const scalar = type.replace(/_LIST$/, '');
  if (type.endsWith('_LIST')) {
    const trimmed = text.trim();
    if (trimmed.startsWith('[')) return JSON.parse(trimmed);
    return trimmed ? trimmed.split(',').map((part) => wireValue(part.trim(), scalar)) : [];
  }
  switch (scalar) {
    case 'INT64': case 'DOUBLE': { const number = Number(text); if (Number.isNaN(number)) throw new Error(`'${text}' is not a number`); return number; }
    case 'TIMESTAMP': { const time = /^\d+$/.test(text.trim()) ? Number(text) : Date.parse(text); if (Number.isNaN(time)) throw new Error(`'${text}' is not a date`); return time; }
    case 'LOCATION': {
      // Checked here as the server checks it, so the mistake is said next to the field.
      const parts = text.split(',').map((part) => part.trim());
      const [latitude, longitude] = parts.map(Number);
      if (parts.length !== 2 || parts.some((part) => part === '') || Number.isNaN(latitude) || Number.isNaN(longitude)) {
        throw new Error(`'${text}' is not "latitude, longitude" in degrees, such as 48.8566, 2.3522`);
      }
      if (Math.abs(latitude) > 90) throw new Error(`latitude ${latitude} is outside -90…90`);
      if (Math.abs(longitude) > 180) throw new Error(`longitude ${longitude} is outside -180…180`);
      return { latitude, longitude };
    }
    case 'REFERENCE': return { recordName: text.trim(), action: 'NONE' };
    default: return text;
  }
}

const LIST_COMPARATORS = new Set(['IN', 'NOT_IN', 'LIST_CONTAINS_ANY', 'NOT_LIST_CONTAINS_ANY', 'LIST_CONTAINS_ALL', 'NOT_LIST_CONTAINS_ALL']);

function filtersFromForm() {
  return [...document.querySelectorAll('#filters .filter')].map((row) => {
    const field = row.querySelector('[name=field]').value.trim();
    const comparator = row.querySelector('[name=comparator]').value;
    const text = row.querySelector('[name=value]').value;
    let type = row.querySelector('[name=type]').value;
    if (comparator === 'NEAR') type = 'LOCATION';
    if (!type) type = /^-?\d+(\.\d+)?$/.test(text.trim()) ? (text.includes('.') ? 'DOUBLE' : 'INT64') : 'STRING';
    const many = LIST_COMPARATORS.has(comparator);
    const value = many ? wireValue(text, type.endsWith('_LIST') ? type : `${type}_LIST`) : wireValue(text, type.replace(/_LIST$/, ''));
    const filter = { comparator, fieldValue: { value, ...(type.endsWith('_LIST') || many ? {} : { type }) } };
    if (field) filter.fieldName = field;
    if (comparator === 'NEAR') filter.distance = Number(row.querySelector('[name=km]').value || '1') * 1000;
    return filter;
  });
}

async function runQuery(marker) {
  const form = $('query-form');
  const query = { recordType: form.elements.recordType.value.trim(), filterBy: filtersFromForm() };
  if (form.elements.sortField.value.trim()) query.sortBy = [{ fieldName: form.elements.sortField.value.trim(), ascending: form.elements.sortOrder.value === 'asc' }];
  const body = { zoneID: zoneID(), resultsLimit: Number(form.elements.limit.value || '50'), query, ...(marker ? { continuationMarker: marker } : {}) };
  // Whatever this query finds replaces what was shown; when it fails, nothing of an earlier one stays.
  $('record-rows').replaceChildren(); $('query-note').textContent = ''; $('next-page').hidden = true;
  await checkNames(query);
  const answer = await api(dataPath('records/query'), { method: 'POST', body });
  data.marker = answer.continuationMarker || null;
  $('next-page').hidden = !data.marker;
  const rows = (answer.records || []).filter((r) => !r.serverErrorCode);
  $('query-note').textContent = `${rows.length} record(s)${data.marker ? '; more on the next page' : ''}.`;
  writeLink();
  // One column per field of the type, in the schema's order (then any the schema has not
  // caught up with); references are links to the records they name (review defect 18).
  const columns = ((data.types && data.types.get(query.recordType)) || []).map((field) => field.name);
  for (const record of rows) for (const name of Object.keys(record.fields || {})) if (!columns.includes(name)) columns.push(name);
  $('record-head').replaceChildren(el('tr', {}, ...['Record', 'Modified', ...columns].map((name) => el('th', { scope: 'col' }, name))));
  $('record-rows').dataset.type = query.recordType;
  $('record-rows').replaceChildren(...rows.map((record) => el('tr', {},
    el('td', {}, el('button', { type: 'button', className: 'link', onclick: () => showRecord(record) }, record.recordName)),
    el('td', {}, record.modified ? moment(record.modified.timestamp) : ''),
    ...columns.map((name) => el('td', {}, ...cellContent((record.fields || {})[name]))))));
}

$('query-form').addEventListener('submit', (event) => { event.preventDefault(); act(() => runQuery(null)); });

// Time travel: what going back to a moment would change in the chosen zone (or every zone of
// the user's private database), then, confirmed, the change itself. Apply is offered only for
// the preview on screen: any edit of the moment, zone or user asks for a new preview.
function timeTravelBody(apply) {
  const query = $('query-form');
  const form = $('time-travel-form');
  const database = query.elements.database.value;
  if (database === 'shared') throw new Error("Time travel goes back in the owner's zones: choose the owner's private database.");
  const moment = form.elements.to.value;
  const body = { to: `${moment.length === 16 ? `${moment}:00` : moment}Z`, apply };
  if (database === 'private') {
    const user = query.elements.user.value.trim();
    if (!user) throw new Error("Name the user whose private database to go back in.");
    body.user = user;
  }
  if (!form.elements.everyZone.checked) body.zone = zoneID().zoneName;
  return body;
}

async function timeTravel(apply) {
  const answer = await api(inContainer(`time-travel/${scope().environment}`), { method: 'POST', body: timeTravelBody(apply) });
  const rows = answer.zones.flatMap((z) => [
    ...z.changes.map((c) => ({ zone: z.zone, recordName: c.recordName, recordType: c.recordType, change: c.change })),
    ...z.skipped.map((s) => ({ zone: z.zone, recordName: s.recordName, recordType: '', change: `left as it is: ${s.reason}` }))]);
  fill($('time-travel-rows'), rows, [(r) => r.zone, (r) => r.recordName, (r) => r.recordType, (r) => r.change]);
  const count = answer.zones.reduce((total, z) => total + z.changes.length, 0);
  $('time-travel-note').textContent = apply
    ? `${count} record(s) restored to ${answer.to}.`
    : `${count} record(s) would change going back to ${answer.to} (the oldest moment kept is ${answer.oldestAvailable}). Nothing has changed yet.`;
  $('time-travel-apply').disabled = apply || count === 0;
}

$('time-travel-form').addEventListener('submit', (event) => { event.preventDefault(); act(() => timeTravel(false)); });
for (const form of [$('time-travel-form'), $('query-form')]) form.addEventListener('input', () => { $('time-travel-apply').disabled = true; });
$('time-travel-apply').addEventListener('click', () => act(async () => {
  const count = [...$('time-travel-rows').children].filter((row) => !row.textContent.includes('left as it is')).length;
  if (!confirmed(`Restore ${count} record(s) as they were at ${$('time-travel-form').elements.to.value} UTC? Devices will fetch the change.`)) return;
  await timeTravel(true);
}));
$('next-page').addEventListener('click', () => act(() => runQuery(data.marker)));

// A field's value as text for people to read and edit.
// A time as the list shows it: local, with the zone said, like every time on the page.
const moment = (milliseconds) => new Date(milliseconds).toLocaleString(undefined, { timeZoneName: 'short' });

// A field's value in the record list: text, times local with their zone, references as links.
function cellContent(field) {
  if (!field) return [];
  const type = field.type || '';
  if (type === 'REFERENCE' || type === 'REFERENCE_LIST') {
    const references = type === 'REFERENCE' ? [field.value] : field.value || [];
    return references.flatMap((reference, index) => [index ? ', ' : null,
      el('button', { type: 'button', className: 'link', onclick: () => act(() => openRecord(reference.recordName)) }, reference.recordName)]);
  }
  if (type === 'TIMESTAMP') return [moment(field.value)];
  if (type === 'TIMESTAMP_LIST') return [(field.value || []).map(moment).join('; ')];
  return [shown(field)];
}

function shown(field) {
  const { value, type = '' } = field;
  if (value === null || value === undefined) return '';
  if (type.startsWith('ENCRYPTED_')) return '(encrypted on the device)';
  if (type.startsWith('ASSETID')) return Array.isArray(value) ? `${value.length} asset(s)` : `asset, ${value.size ?? '?'} bytes`;
  if (type === 'TIMESTAMP') return new Date(value).toISOString();
  if (type === 'LOCATION') return `${value.latitude}, ${value.longitude}`;
  if (type === 'REFERENCE') return value.recordName;
  // Lists as their elements, comma-separated, as the editor reads them back; JSON (which the
  // editor reads too) when an element holds a comma or a reference has an action to keep.
  if (type.endsWith('_LIST') && Array.isArray(value)) {
    const scalar = type.replace(/_LIST$/, '');
    const parts = value.map((element) => shown({ value: element, type: scalar }));
    const actions = scalar === 'REFERENCE' && value.some((reference) => reference.action && reference.action !== 'NONE');
    return actions || parts.some((part) => part.includes(',')) ? JSON.stringify(value) : parts.join(', ');
  }
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

function fieldRow(name, field) {
  const readOnly = !isAdministrator() || (field.type || '').startsWith('ASSETID') || (field.type || '').startsWith('ENCRYPTED_');
  const row = el('tr', {},
    el('td', {}, el('input', { name: 'name', value: name, 'aria-label': 'Field name', readOnly: Boolean(name) })),
    el('td', {}, el('select', { name: 'type', 'aria-label': 'Field type', disabled: readOnly },
      ...[...new Set([field.type || 'STRING', ...VALUE_TYPES])].map((t) => el('option', {}, t)))),
    el('td', {}, el('input', { name: 'value', value: shown(field), 'aria-label': `Value of ${name || 'the new field'}`, readOnly })),
    el('td', {}, readOnly ? '' : el('button', { type: 'button', onclick: () => row.remove() }, 'Remove')));
  row.original = field;
  row.querySelector('[name=type]').value = field.type || 'STRING';
  return row;
}

// Who a created/modified stamp names: an operator by name (the server says), else the user record.
const stampedBy = (stamp) => (stamp.operator ? `operator ${stamp.operator}` : stamp.userRecordName);

function showRecord(record) {
  data.record = record;
  $('record-detail').hidden = false;
  const form = $('record-form');
  form.elements.recordName.value = record ? record.recordName : '';
  form.elements.recordName.readOnly = Boolean(record);
  form.elements.recordType.value = record ? record.recordType : $('query-form').elements.recordType.value;
  form.elements.recordType.readOnly = Boolean(record);
  const facts = record ? [
    ['Change tag', record.recordChangeTag], ['Zone', record.zoneID && record.zoneID.zoneName],
    ['Created', record.created && `${new Date(record.created.timestamp).toLocaleString()} by ${stampedBy(record.created)}`],
    ['Modified', record.modified && `${new Date(record.modified.timestamp).toLocaleString()} by ${stampedBy(record.modified)}`],
    ['Parent', record.parent && record.parent.recordName], ['Share', record.share && record.share.recordName],
  ].filter(([, value]) => value) : [['New record', 'not saved yet']];
  $('record-system').replaceChildren(...facts.flatMap(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]));
  // A new record offers its type's fields from the schema, each with its type (defect 19).
  const offered = record ? [] : ((data.types && data.types.get(form.elements.recordType.value.trim())) || [])
    .filter((field) => !field.type.startsWith('ASSETID') && !field.type.startsWith('ENCRYPTED_'))
    .map((field) => {
      const row = Object.assign(fieldRow(field.name, { type: field.type }), { offered: true });
      row.querySelector('[name=value]').value = '';
      return row;
    });
  $('field-rows').replaceChildren(...offered, ...Object.entries(record ? record.fields || {} : {}).map(([name, field]) => fieldRow(name, field)));
  const assets = Object.entries(record ? record.fields || {} : {}).filter(([, f]) => (f.type || '').startsWith('ASSETID'))
    .flatMap(([name, f]) => (Array.isArray(f.value) ? f.value : [f.value]).filter((a) => a && a.downloadURL).map((a) => [name, a]));
  $('asset-preview').replaceChildren(...assets.map(([name, asset]) => el('figure', { className: 'asset' },
    el('img', { src: asset.downloadURL, alt: `${name} (not an image, or not loaded)` }),
    el('figcaption', {}, el('a', { href: asset.downloadURL, download: '' }, `Download ${name}`), ` (${asset.size ?? '?'} bytes)`))));
  $('delete-record').hidden = !record || !isAdministrator();
  $('record-title').textContent = record ? `Record ${record.recordName}` : 'New record';
  $('record-detail').scrollIntoView();
  writeLink();
}

$('new-record').addEventListener('click', () => showRecord(null));
$('add-value').addEventListener('click', () => $('field-rows').append(fieldRow('', { type: 'STRING', value: '' })));

$('record-form').addEventListener('submit', (event) => {
  event.preventDefault();
  act(async () => {
    const form = event.target;
    const fields = {};
    for (const row of $('field-rows').rows) {
      const name = row.querySelector('[name=name]').value.trim();
      if (!name) continue;
      const type = row.querySelector('[name=type]').value;
      if (row.querySelector('[name=value]').readOnly && row.original) { continue; }
      if (row.offered && row.querySelector('[name=value]').value === '') continue;  // offered, left empty: no value
      fields[name] = { value: wireValue(row.querySelector('[name=value]').value, type), type };
    }
    const recordType = data.record ? data.record.recordType : form.elements.recordType.value.trim();
    let recordName = data.record ? data.record.recordName : form.elements.recordName.value.trim();
    const file = form.elements.assetFile.files[0];
    if (file) {
      // As an app does: an upload token for the field, the bytes to its URL, the receipt as the value.
      const fieldName = form.elements.assetField.value.trim();
      if (!fieldName) throw new Error('Name the asset field the file goes in.');
      const { tokens } = await api(dataPath('assets/upload'), { method: 'POST', body: {
        zoneID: zoneID(), tokens: [{ recordType, fieldName, ...(recordName ? { recordName } : {}) }] } });
      const sent = await fetch(tokens[0].url, { method: 'POST', body: file });
      const receipt = await sent.json();
      if (!sent.ok) throw new Error(receipt.reason || `The upload failed (HTTP ${sent.status}).`);
      recordName = tokens[0].recordName;
      fields[fieldName] = { value: receipt.singleFile, type: 'ASSETID' };
    }
    const record = data.record
      ? { recordName, recordChangeTag: data.record.recordChangeTag, fields }
      : { recordType, fields, ...(recordName ? { recordName } : {}) };
    const answer = await api(dataPath('records/modify'), { method: 'POST', body: {
      zoneID: zoneID(), operations: [{ operationType: data.record ? 'update' : 'create', record }] } });
    const saved = onlyRecord(answer);
    form.elements.assetFile.value = '';
    showRecord(saved);
    if (form.closest('#data') && $('query-form').elements.recordType.value.trim()) await runQuery(null);  // the list shows what was saved
    say(`Saved ${saved.recordName}.`);
  });
});

// The one record a records/modify answered for, or its per-record error thrown.
function onlyRecord(answer) {
  const record = answer.records[0];
  if (record.serverErrorCode) throw new Error(`${record.serverErrorCode}: ${record.reason}`);
  return record;
}

$('delete-record').addEventListener('click', () => {
  if (!confirmed(`Delete record ${data.record.recordName} (${data.record.recordType})? Devices delete their copies when they next sync. Time travel can bring it back while versions are kept.`)) return;
  deleteRecord();
});

const deleteRecord = () => act(async () => {
  const answer = await api(dataPath('records/modify'), { method: 'POST', body: {
    zoneID: zoneID(), operations: [{ operationType: 'delete', record: { recordName: data.record.recordName, recordChangeTag: data.record.recordChangeTag } }] } });
  onlyRecord(answer);
  const name = data.record.recordName;
  $('record-detail').hidden = true;
  data.record = null;
  await runQuery(null);
  say(`Deleted ${name}.`);
});

// Subscriptions: every user's, container-wide; one deleted as its user would delete it.
views.subscriptions = async () => {
  const { subscriptions } = await api(inContainer(`subscriptions/${scope().environment}`));
  $('subscriptions-note').textContent = `${subscriptions.length} subscription(s).`;
  $('all-subscription-rows').replaceChildren(...subscriptions.map(({ user, database, createdAt, subscription: s }) => {
    const zone = s.zoneID ? s.zoneID.zoneName : '';
    return revocableRow([user, database, s.subscriptionID, s.subscriptionType, s.query ? s.query.recordType : (s.recordType || ''), zone, when(createdAt)], {
      live: true, verb: 'Delete', label: `Delete subscription ${s.subscriptionID} of ${user}`,
      question: `Delete ${user}'s subscription ${s.subscriptionID} (${database} database)? Their devices get no more notifications from it until the app subscribes again.`,
      revoke: () => api(inContainer(`subscriptions/${scope().environment}/delete`), { method: 'POST', body: { user, database, subscriptionID: s.subscriptionID } }),
      done: async () => { await views.subscriptions(); say(`Subscription ${s.subscriptionID} of ${user} deleted.`); },
    });
  }));
};

// People: members, then one person's sessions, roles, subscriptions and push tokens.
// Lists that page (review defect 23): a page at a time, "Show more" appends the next one.
const PAGE = 50;
async function morePeople(first) {
  const after = first ? 0 : state.lastUserID;
  const { users } = await api(inContainer(`users?limit=${PAGE}&after=${after}`));
  const rows = users.map((user) => el('tr', {},
    el('td', {}, el('button', { type: 'button', className: 'link', onclick: () => act(() => showPerson(user.name)) }, user.name)),
    el('td', {}, user.userRecordName), el('td', {}, user.email || ''), el('td', {}, new Date(user.joinedAt).toLocaleString())));
  if (first) $('people-rows').replaceChildren(...rows); else $('people-rows').append(...rows);
  if (users.length) state.lastUserID = users[users.length - 1].userID;
  $('more-people').hidden = users.length < PAGE;
}
views.people = async () => {
  await morePeople(true);
  $('person').hidden = true;
};
$('more-people').addEventListener('click', () => act(() => morePeople(false)));

$('create-user').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const name = form.elements.name.value.trim();
  act(() => api(inContainer('users'), { method: 'POST', body: { name, password: form.elements.password.value,
    ...(form.elements.email.value.trim() ? { email: form.elements.email.value.trim() } : {}) } }),
  async () => { form.reset(); await showPerson(name); say(`User ${name} made; they join this container's People when they first sign in to it.`); });
});

$('user-password').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  const name = state.person;
  if (!confirmed(`Set ${name}'s password? They are signed out on every device and sign in again with the new one.`)) return;
  act(() => api(inContainer(`users/${encodeURIComponent(name)}/password`), { method: 'POST', body: { password: form.elements.password.value } }),
    async () => { form.reset(); await showPerson(name); say(`${name}'s password set; signed out everywhere.`); });
});

async function showPerson(name) {
  const person = await api(inContainer(`users/${encodeURIComponent(name)}`));
  state.person = name;
  $('person').hidden = false;
  $('person-title').textContent = `${person.user.name} (${person.user.userRecordName || 'not in this container yet'})`;
  state.personDisabled = person.user.disabled;
  $('person-state').textContent = person.user.disabled ? 'Disabled: cannot sign in.' : 'Active.';
  $('person-disable').textContent = person.user.disabled ? 'Enable' : 'Disable';
  $('person-disable').className = person.user.disabled ? '' : 'danger';
  $('session-rows').replaceChildren(...person.sessions.map((session) => el('tr', {},
    el('td', {}, session.environment), el('td', {}, new Date(session.createdAt).toLocaleString()),
    el('td', {}, new Date(session.lastUsedAt).toLocaleString()),
    el('td', {}, isAdministrator() ? el('button', { type: 'button', className: 'danger', 'aria-label': `Revoke the ${session.environment} session`,
      onclick: () => {
        if (!confirmed(`Sign ${name} out of this ${session.environment} session (last used ${new Date(session.lastUsedAt).toLocaleString()})? The device must sign in again.`)) return;
        act(() => api(inContainer(`users/${encodeURIComponent(name)}/sessions/revoke`), { method: 'POST', body: { session: session.session } }),
          async () => { await showPerson(name); say(`Session of ${name} revoked.`); });
      } }, 'Revoke') : ''))));
  $('person-roles').textContent = Object.entries(person.roles).map(([env, roles]) => `${env}: ${roles.join(', ') || 'no custom role'}`).join('; ');
  $('subscription-rows').replaceChildren(...person.subscriptions.flatMap((group) => (group.list.subscriptions || []).map((s) => el('tr', {},
    el('td', {}, group.environment), el('td', {}, group.database), el('td', {}, s.subscriptionID), el('td', {}, s.subscriptionType)))));
  $('push-rows').replaceChildren(...person.pushTokens.map((t) => el('tr', {},
    el('td', {}, t.environment), el('td', {}, t.delivery), el('td', {}, t.token), el('td', {}, t.deviceID))));
  await showDevices(name);
}

// The sync doctor: each device of the person, what it fetched and was pushed, and what is wrong.
async function showDevices(name) {
  const report = await api(inContainer(`users/${encodeURIComponent(name)}/devices/${scope().environment}`));
  const zoneLine = (zone) => {
    let text;
    if (zone.status === 'behind') text = `${zone.zone}: ${zone.behind >= report.behindLimit ? `${zone.behind} or more` : zone.behind} change${zone.behind === 1 ? '' : 's'} behind`;
    else if (zone.status === 'current') text = `${zone.zone}: in step`;
    else text = `${zone.zone}: ${zone.status} (${zone.reason})`;
    return el('div', { className: zone.status === 'current' ? '' : 'attention' }, `${text}, fetched ${when(zone.fetchedAt)}`);
  };
  const pushText = (push) => (push.missed
    ? el('div', { className: 'attention' }, `${push.missed} missed since ${when(push.oldestMissedAt)}; last sent ${when(push.lastSentAt)}`)
    : el('div', {}, `none missed; last sent ${when(push.lastSentAt)}`));
  const rows = report.devices.map((device) => el('tr', {},
    el('td', {}, device.deviceID), el('td', {}, when(device.lastSeen)),
    el('td', {}, ...device.zones.map(zoneLine),
      ...(device.zonesNeverFetched.length ? [el('div', {}, `never fetched: ${device.zonesNeverFetched.join(', ')}`)] : [])),
    el('td', {}, pushText(device.push))));
  $('device-rows').replaceChildren(...(rows.length ? rows
    : [el('tr', {}, el('td', { colSpan: 4 }, `No device of ${name} fetched changes here in the last ${report.retentionDays} days.`))]));
}
$('refresh-devices').addEventListener('click', () => act(() => showDevices(state.person)));

// An account disabled (signed out everywhere, kept) or deleted with the user's own data in
// every container: the irreversible one wants the name typed.
$('person-disable').addEventListener('click', () => {
  const name = state.person;
  const disabling = !state.personDisabled;
  if (disabling && !confirmed(`Disable ${name}? They are signed out on every device and cannot sign in, in any container, until enabled again. Their data stays.`)) return;
  act(() => api(inContainer(`users/${encodeURIComponent(name)}`), { method: 'POST', body: { disabled: disabling } }),
    async () => { await showPerson(name); say(`${name} ${disabling ? 'disabled' : 'enabled'}.`); });
});

$('person-delete').addEventListener('click', () => {
  const name = state.person;
  if (!typedConfirmation(`Delete ${name}'s account and their own data in every container: private databases, subscriptions, places in shares, their user record? Records they made in the public database stay. This cannot be undone.`, name)) return;
  act(() => api(inContainer(`users/${encodeURIComponent(name)}/delete`), { method: 'POST' }), async (outcome) => {
    $('person').hidden = true;
    await morePeople(true);
    say(`${name} deleted: ${outcome.zones} zone(s) in ${outcome.containers} container(s), ${outcome.subscriptions} subscription(s).`);
  });
});

// Sharing: an owner's shares, zone by zone, with participants; revoke deletes the share.
views.sharing = async () => {};

$('shares-form').addEventListener('submit', (event) => {
  event.preventDefault();
  act(() => showShares(event.target.elements.user.value.trim()));
});

// The container's members by user record name, for people named rather than numbered; the
// Sharing area's user field offers their names.
views.sharing = async () => { await memberNames(); };
async function memberNames() {
  const { users } = await api(inContainer('users?limit=200'));
  $('member-names').replaceChildren(...users.map((user) => el('option', { value: user.name })));
  return new Map(users.map((user) => [user.userRecordName, user.name]));
}

// A share's participants, one a line: the person (by name when a member), role, permission, state.
function participantList(share, names) {
  return el('ul', { className: 'plain' }, ...(share.participants || []).map((participant) => {
    const identity = participant.userIdentity || {};
    const lookup = identity.lookupInfo || {};
    const who = names.get(identity.userRecordName) || lookup.emailAddress || lookup.phoneNumber || identity.userRecordName || '?';
    return el('li', {}, [who, participant.type, participant.permission, participant.acceptanceStatus].filter(Boolean).join(' · '));
  }));
}
const shareLink = (share) => (share.webpageURL ? el('a', { href: share.webpageURL }, 'open') : share.shortGUID || '');

async function showShares(owner) {
  const names = await memberNames();
  const base = inContainer(`data/${scope().environment}/private`);
  const who = `?user=${encodeURIComponent(owner)}`;
  const { zones } = await api(`${base}/zones/list${who}`, { method: 'POST', body: {} });
  const rows = [];
  for (const zone of zones.filter((z) => z.zoneID.zoneName !== '_defaultZone')) {
    const { records } = await api(`${base}/records/query${who}`, { method: 'POST', body: { zoneID: zone.zoneID, query: { recordType: 'cloudkit.share' } } });
    for (const share of records.filter((r) => !r.serverErrorCode)) {
      const revoke = isAdministrator() ? el('button', { type: 'button', className: 'danger', 'aria-label': `Revoke share ${share.recordName}`,
        onclick: () => {
          const count = (share.participants || []).length;
          if (!typedConfirmation(`Revoke ${owner}'s share ${share.recordName} in zone ${zone.zoneID.zoneName}? Its ${count} participant(s) lose access at once; sharing again needs a new share and new invitations.`, share.recordName)) return;
          act(() => api(`${base}/records/modify${who}`, { method: 'POST', body: { zoneID: zone.zoneID,
            operations: [{ operationType: 'forceDelete', record: { recordName: share.recordName } }] } }),
          async () => { await showShares(owner); say(`Share ${share.recordName} revoked.`); });
        } }, 'Revoke') : '';
      rows.push(el('tr', {}, el('td', {}, zone.zoneID.zoneName), el('td', {}, share.recordName), el('td', {}, share.publicPermission || 'NONE'),
        el('td', {}, participantList(share, names)), el('td', {}, shareLink(share)), el('td', {}, revoke)));
    }
  }
  $('share-rows').replaceChildren(...rows);
  // What others share with them: the zones of their shared database, and each zone's share.
  const shared = inContainer(`data/${scope().environment}/shared`);
  const { zones: joined } = await api(`${shared}/zones/list${who}`, { method: 'POST', body: {} });
  const joinedRows = [];
  for (const zone of joined) {
    const ownerName = names.get(zone.zoneID.ownerRecordName) || zone.zoneID.ownerRecordName || '?';
    const answer = await api(`${shared}/records/query${who}`, { method: 'POST', body: { zoneID: zone.zoneID, query: { recordType: 'cloudkit.share' } } })
      .catch(() => ({ records: [] }));
    const shares = (answer.records || []).filter((record) => !record.serverErrorCode);
    for (const share of shares.length ? shares : [null]) {
      joinedRows.push(el('tr', {}, el('td', {}, ownerName), el('td', {}, zone.zoneID.zoneName), el('td', {}, share ? share.recordName : ''),
        el('td', {}, share ? participantList(share, names) : ''), el('td', {}, share ? shareLink(share) : '')));
    }
  }
  $('joined-share-rows').replaceChildren(...joinedRows);
  say(rows.length || joinedRows.length ? '' : `${owner} shares nothing and takes part in no share in ${scope().environment}.`);
}

// Logs and numbers: charts of the last hour, errors by code, the request log, storage.
const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  return node;
}

function chart(target, minutes, series, label) {
  const width = 600; const height = 120; const now = Date.now(); const start = now - 3600000;
  const x = (time) => ((time - start) / 3600000) * width;
  const top = Math.max(1, ...minutes.flatMap((m) => series.map((s) => m[s.key] || 0)));
  const y = (value) => height - 14 - (value / top) * (height - 24);
  const nodes = [svg('line', { x1: 0, y1: height - 14, x2: width, y2: height - 14, class: 'axis' })];
  for (const s of series) {
    if (s.bars) {
      for (const m of minutes) nodes.push(svg('rect', { x: x(m.start), y: y(m[s.key] || 0), width: Math.max(2, width / 60 - 2), height: height - 14 - y(m[s.key] || 0), class: s.className }));
    } else {
      const known = minutes.filter((m) => m[s.key] !== null && m[s.key] !== undefined);
      if (known.length) nodes.push(svg('polyline', { points: known.map((m) => `${x(m.start) + 4},${y(m[s.key])}`).join(' '), class: s.className }));
      for (const m of known) nodes.push(svg('circle', { cx: x(m.start) + 4, cy: y(m[s.key]), r: 3, class: s.className }));
    }
  }
  const caption = svg('text', { x: 4, y: 12, class: 'label' });
  caption.textContent = `max ${Math.round(top * 100) / 100} ${label}`;
  nodes.push(caption);
  target.setAttribute('aria-label', `${label}: ${minutes.map((m) => series.map((s) => m[s.key] ?? '-').join('/')).join(', ') || 'no requests'}`);
  target.replaceChildren(...nodes);
}

views.logs = async () => {
  const { minutes } = await api('metrics');
  chart($('chart-requests'), minutes, [{ key: 'requests', bars: true, className: 'bar' }], 'requests a minute');
  chart($('chart-latency'), minutes, [{ key: 'p50', className: 'p50' }, { key: 'p99', className: 'p99' }], 'ms (p50, p99)');
  const errors = {};
  for (const m of minutes) for (const [code, count] of Object.entries(m.errors)) errors[code] = (errors[code] || 0) + count;
  fill($('error-rows'), Object.entries(errors).sort((a, b) => b[1] - a[1]), [(e) => e[0], (e) => String(e[1])]);
  await searchLog();
  const usage = await api(inContainer(`usage/${scope().environment}`));
  const share = (u) => `${Math.round((u.usedBytes / Math.max(1, u.quotaBytes)) * 1000) / 10}%`;
  fill($('usage-rows'), [{ name: 'public database', ...usage.public }, ...usage.users.map((u) => ({ ...u, name: `private: ${u.name}` }))],
    [(u) => u.name, (u) => bytes(u.usedBytes), (u) => bytes(u.quotaBytes), share, (u) => bytes(u.historyBytes)]);
};

// The log search as query parameters: the table and the export link use the same.
function logSearch() {
  const form = $('log-form');
  const params = new URLSearchParams();
  for (const name of ['user', 'error', 'route', 'database']) {
    const value = form.elements[name].value.trim();
    if (value) params.set(name, value);
  }
  // The container and environment picked at the top narrow the log too, as they narrow every area.
  if ($('container-pick').value) params.set('container', $('container-pick').value);
  params.set('environment', $('environment-pick').value);
  return params;
}

// A page of the log at a time; "Show more" asks for the entries older than the last one shown
// (the same search: the form as it was when searched, not as it has been edited since).
async function searchLog(first = true) {
  if (first) {
    state.logSearch = logSearch();
    $('log-export').href = `/admin/1/requests/export?${state.logSearch}`;
  }
  const params = new URLSearchParams(state.logSearch);
  params.set('limit', String(PAGE));
  if (!first) params.set('before', String(state.oldestLogID));
  const { requests } = await api(`requests?${params}`);
  const rows = requests.map((r) => el('tr', {}, ...[new Date(r.at).toLocaleString(), r.uuid, `${r.method} ${r.route}`, r.container,
    r.userName || r.user, String(r.status), r.serverErrorCode || (r.itemErrorCodes ? `in items: ${r.itemErrorCodes.join(", ")}` : ""),
    String(r.ms)].map((text) => el('td', {}, text ?? ''))));
  if (first) $('log-rows').replaceChildren(...rows); else $('log-rows').append(...rows);
  const last = requests[requests.length - 1];
  if (last) state.oldestLogID = last.id;
  // A log kept only in this node's memory has no ids to page by: its newest entries are all there is.
  $('more-log').hidden = requests.length < PAGE || !last?.id;
}

$('log-form').addEventListener('submit', (event) => { event.preventDefault(); act(() => searchLog(true)); });
$('more-log').addEventListener('click', () => act(() => searchLog(false)));

// ---- Deep links (docs/dashboard.md): the address names the area, the container and the
// environment (#/data?container=…&environment=…), and in Data the database, user, zone, record
// type and open record, so a reload or a link sent to a colleague lands in the same place.
// Changing area adds a history entry (Back returns); changes within an area replace it.
const LINKED_DATABASES = ['public', 'private', 'shared'];

function linkParams() {
  const params = new URLSearchParams();
  if ($('container-pick').value) params.set('container', $('container-pick').value);
  params.set('environment', $('environment-pick').value);
  if (current === 'data') {
    const form = $('query-form');
    if (form.elements.database.value !== 'public') params.set('database', form.elements.database.value);
    if (form.elements.user.value.trim()) params.set('user', form.elements.user.value.trim());
    const zone = zoneID();
    if (zone.zoneName !== '_defaultZone') params.set('zone', zone.zoneName);
    if (zone.ownerRecordName) params.set('owner', zone.ownerRecordName);
    if (form.elements.recordType.value.trim()) params.set('type', form.elements.recordType.value.trim());
    if (data.record && !$('record-detail').hidden) params.set('record', data.record.recordName);
  }
  return params;
}

function linkedView() {
  const match = /^#\/([a-z]+)(?:\?(.*))?$/.exec(location.hash);
  return match && views[match[1]] ? { view: match[1], params: new URLSearchParams(match[2] || '') } : null;
}

function writeLink() {
  const link = `#/${current}?${linkParams()}`;
  if (location.hash === link) return;
  const sameArea = linkedView() && linkedView().view === current;
  history[sameArea ? 'replaceState' : 'pushState'](null, '', link);
}

async function followLink() {
  const link = linkedView();
  if (!link) { await show('operators'); return; }
  const { view, params } = link;
  state.linkedContainer = params.get('container');
  if (['development', 'production'].includes(params.get('environment'))) $('environment-pick').value = params.get('environment');
  if (view === 'data') {
    const form = $('query-form');
    form.elements.database.value = LINKED_DATABASES.includes(params.get('database')) ? params.get('database') : 'public';
    form.elements.user.value = params.get('user') || '';
    const zoneName = params.get('zone');
    const zone = zoneName && { zoneName, ...(params.get('owner') ? { ownerRecordName: params.get('owner') } : {}) };
    form.elements.zone.replaceChildren(el('option', { value: zone ? JSON.stringify(zone) : '' }, zoneName || '_defaultZone'));
    form.elements.recordType.value = params.get('type') || '';
    $('record-detail').hidden = true; data.record = null;
    $('record-rows').replaceChildren(); $('query-note').textContent = '';
  }
  await show(view);
  if (view === 'data' && params.get('type')) await act(() => runQuery(null));
  if (view === 'data' && params.get('record')) await act(() => openRecord(params.get('record')));
}

async function openRecord(recordName) {
  const answer = await api(dataPath('records/lookup'), { method: 'POST', body: { zoneID: zoneID(), records: [{ recordName }] } });
  showRecord(onlyRecord(answer));
}

// An address typed, pasted or reached with Back/Forward; ignored until someone is signed in.
window.addEventListener('hashchange', () => { if (state.operator && linkedView()) followLink(); });

// ---- A QR code for the authenticator app (issue 38), made here: the secret never leaves the
// page for a QR service. Byte mode, error correction level M, versions 1 to 10 (up to 213
// bytes; an otpauth:// address is about 100), mask 0, per ISO/IEC 18004.
const QR_VERSIONS = [  // [error correction codewords per block, [blocks, data codewords]...], by version
  null, [10, [1, 16]], [16, [1, 28]], [26, [1, 44]], [18, [2, 32]], [24, [2, 43]], [16, [4, 27]], [18, [4, 31]],
  [22, [2, 38], [2, 39]], [22, [3, 36], [2, 37]], [26, [4, 43], [1, 44]],
];
const QR_ALIGNMENT = [null, [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34], [6, 22, 38], [6, 24, 42], [6, 26, 46], [6, 28, 50]];

// Multiplication in GF(2^8) with the QR polynomial x^8 + x^4 + x^3 + x^2 + 1.
function gfMultiply(x, y) {
  let z = 0;
  for (let i = 7; i >= 0; i--) { z = (z << 1) ^ ((z >>> 7) * 0x11d); z ^= ((y >>> i) & 1) * x; }
  return z;
}

// Reed-Solomon: the generator's coefficients for `degree` error correction codewords, then
// the remainder of a block divided by it (its error correction codewords).
function rsDivisor(degree) {
  const result = new Array(degree).fill(0);
  result[degree - 1] = 1;
  let root = 1;
  for (let i = 0; i < degree; i++) {
    for (let j = 0; j < degree; j++) {
      result[j] = gfMultiply(result[j], root);
      if (j + 1 < degree) result[j] ^= result[j + 1];
    }
    root = gfMultiply(root, 2);
  }
  return result;
}
function rsRemainder(data, divisor) {
  const result = divisor.map(() => 0);
  for (const byte of data) {
    const factor = byte ^ result.shift();
    result.push(0);
    divisor.forEach((coefficient, i) => { result[i] ^= gfMultiply(coefficient, factor); });
  }
  return result;
}

// The modules (true: dark) of `text`'s QR code.
function qrModules(text) {
  const bytes = [...new TextEncoder().encode(text)];
  const capacity = (version) => QR_VERSIONS[version].slice(1).reduce((sum, [blocks, size]) => sum + blocks * size, 0);
  const countBits = (version) => (version < 10 ? 8 : 16);
  let version = 1;
  while (version <= 10 && 4 + countBits(version) + 8 * bytes.length > 8 * capacity(version)) version++;
  if (version > 10) throw new Error('too long for a QR code here');
  // The bit stream: byte mode, the count, the bytes, a terminator, then padding codewords.
  const bits = [];
  const put = (value, length) => { for (let i = length - 1; i >= 0; i--) bits.push((value >>> i) & 1); };
  put(4, 4); put(bytes.length, countBits(version));
  for (const byte of bytes) put(byte, 8);
  const room = 8 * capacity(version);
  put(0, Math.min(4, room - bits.length));
  while (bits.length % 8) bits.push(0);
  for (let pad = 0xec; bits.length < room; pad ^= 0xec ^ 0x11) put(pad, 8);
  const data = [];
  for (let i = 0; i < bits.length; i += 8) data.push(bits.slice(i, i + 8).reduce((byte, bit) => (byte << 1) | bit, 0));
  // Blocks, each with its error correction, interleaved.
  const [ecLength, ...groups] = QR_VERSIONS[version];
  const divisor = rsDivisor(ecLength);
  const blocks = [];
  let offset = 0;
  for (const [count, size] of groups) {
    for (let b = 0; b < count; b++) { const block = data.slice(offset, offset + size); offset += size; blocks.push([block, rsRemainder(block, divisor)]); }
  }
  const codewords = [];
  for (let i = 0; i < Math.max(...blocks.map(([block]) => block.length)); i++) for (const [block] of blocks) if (i < block.length) codewords.push(block[i]);
  for (let i = 0; i < ecLength; i++) for (const [, ec] of blocks) codewords.push(ec[i]);

  const size = 17 + 4 * version;
  const modules = Array.from({ length: size }, () => new Array(size).fill(false));
  const reserved = Array.from({ length: size }, () => new Array(size).fill(false));
  const set = (x, y, dark) => { modules[y][x] = dark; reserved[y][x] = true; };
  for (let i = 0; i < size; i++) { set(6, i, i % 2 === 0); set(i, 6, i % 2 === 0); }  // timing
  for (const [cx, cy] of [[3, 3], [size - 4, 3], [3, size - 4]]) {  // finders with their separators
    for (let dy = -4; dy <= 4; dy++) for (let dx = -4; dx <= 4; dx++) {
      const x = cx + dx, y = cy + dy, distance = Math.max(Math.abs(dx), Math.abs(dy));
      if (x >= 0 && x < size && y >= 0 && y < size) set(x, y, distance !== 2 && distance !== 4);
    }
  }
  const centres = QR_ALIGNMENT[version];
  centres.forEach((cx, i) => centres.forEach((cy, j) => {
    const corner = (i === 0 && j === 0) || (i === 0 && j === centres.length - 1) || (i === centres.length - 1 && j === 0);
    if (corner) return;
    for (let dy = -2; dy <= 2; dy++) for (let dx = -2; dx <= 2; dx++) set(cx + dx, cy + dy, Math.max(Math.abs(dx), Math.abs(dy)) !== 1);
  }));
  // Format information: level M (00) and mask 0, BCH-protected, in both copies; the dark module.
  const format = (() => { const data = 0; let rem = data; for (let i = 0; i < 10; i++) rem = (rem << 1) ^ ((rem >>> 9) * 0x537); return ((data << 10) | rem) ^ 0x5412; })();
  const bit = (value, i) => ((value >>> i) & 1) !== 0;
  for (let i = 0; i <= 5; i++) set(8, i, bit(format, i));
  set(8, 7, bit(format, 6)); set(8, 8, bit(format, 7)); set(7, 8, bit(format, 8));
  for (let i = 9; i < 15; i++) set(14 - i, 8, bit(format, i));
  for (let i = 0; i < 8; i++) set(size - 1 - i, 8, bit(format, i));
  for (let i = 8; i < 15; i++) set(8, size - 15 + i, bit(format, i));
  set(8, size - 8, true);
  if (version >= 7) {  // version information, two copies
    let rem = version;
    for (let i = 0; i < 12; i++) rem = (rem << 1) ^ ((rem >>> 11) * 0x1f25);
    const info = (version << 12) | rem;
    for (let i = 0; i < 18; i++) { const a = size - 11 + (i % 3), b = Math.floor(i / 3); set(a, b, bit(info, i)); set(b, a, bit(info, i)); }
  }
  // The codewords, in the zigzag of two-module columns from the bottom right; mask 0 on them.
  let index = 0;
  for (let right = size - 1; right >= 1; right -= 2) {
    if (right === 6) right = 5;
    for (let step = 0; step < size; step++) {
      for (let j = 0; j < 2; j++) {
        const x = right - j;
        const y = ((right + 1) & 2) === 0 ? size - 1 - step : step;
        if (reserved[y][x]) continue;
        const dark = index < codewords.length * 8 && bit(codewords[index >>> 3], 7 - (index & 7));
        index++;
        modules[y][x] = dark !== ((x + y) % 2 === 0);
      }
    }
  }
  return modules;
}

// The QR code as an SVG drawing: black on white with the four-module quiet zone.
function qrDrawing(text) {
  const modules = qrModules(text);
  const side = modules.length + 8;
  const drawing = svg('svg', { viewBox: `0 0 ${side} ${side}`, class: 'qr', role: 'img', 'aria-label': 'QR code for an authenticator app' });
  drawing.append(svg('rect', { width: side, height: side, fill: '#fff' }));
  modules.forEach((row, y) => row.forEach((dark, x) => { if (dark) drawing.append(svg('rect', { x: x + 4, y: y + 4, width: 1, height: 1, fill: '#000' })); }));
  return drawing;
}
