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

function cell(row, text) { const td = document.createElement('td'); td.textContent = text ?? ''; row.append(td); }

function fill(tbody, items, columns) {
  tbody.replaceChildren(...items.map((item) => {
    const row = document.createElement('tr');
    for (const column of columns) cell(row, column(item));
    return row;
  }));
}

function showSignIn(reason) {
  state.csrf = null; state.operator = null;
  $('app').hidden = true; $('who').hidden = true; $('sign-in').hidden = false;
  say(reason);
  $('sign-in-form').elements.name.focus();
}

function signedIn(answer) {
  state.csrf = answer.csrfToken; state.operator = answer.operator;
  $('operator-name').textContent = answer.operator.name;
  $('operator-role').textContent = answer.operator.role;
  const readOnly = answer.operator.role !== 'administrator';
  for (const form of document.querySelectorAll('.admin-only')) form.hidden = readOnly;
  for (const form of document.querySelectorAll('.every-container')) form.hidden = readOnly || Boolean(answer.operator.containers);
  $('sign-in').hidden = true; $('who').hidden = false; $('app').hidden = false;
  say('');
  show('operators');
}

async function show(view) {
  for (const button of document.querySelectorAll('nav button')) button.setAttribute('aria-pressed', String(button.dataset.view === view));
  for (const section of document.querySelectorAll('.view')) section.hidden = section.id !== view;
  try {
    if (view === 'operators') {
      const { operators } = await api('operators');
      fill($('operator-rows'), operators, [(o) => o.name, (o) => o.role, (o) => (o.containers ? o.containers.join(', ') : 'every container')]);
    } else if (view === 'containers') {
      const { containers } = await api('containers');
      fill($('container-rows'), containers, [(c) => c.id, (c) => new Date(c.createdAt).toLocaleString()]);
      const pick = $('container-pick');
      const chosen = pick.value;
      pick.replaceChildren(...containers.map((c) => { const option = document.createElement('option'); option.textContent = c.id; return option; }));
      if (containers.some((c) => c.id === chosen)) pick.value = chosen;
      await showKeys();
    } else {
      const { entries } = await api('audit?limit=100');
      fill($('audit-rows'), entries, [(e) => new Date(e.at).toLocaleString(), (e) => e.operator, (e) => e.action, (e) => e.container, (e) => e.detail]);
    }
  } catch (error) { say(error.message); }
}

$('sign-in-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const form = event.target;
  try {
    signedIn(await api('session', { method: 'POST', body: { name: form.elements.name.value, password: form.elements.password.value } }));
    form.reset();
  } catch (error) { say(error.message); }
});

$('sign-out').addEventListener('click', async () => {
  try { await api('session/end', { method: 'POST' }); } catch (error) { /* signed out either way */ }
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
    form.elements.name.value = '';
    show('operators');
  } catch (error) { say(error.message); }
});

const picked = () => encodeURIComponent($('container-pick').value);

async function showKeys() {
  if (!$('container-pick').value) { $('key-rows').replaceChildren(); return; }
  const { keys } = await api(`containers/${picked()}/keys`);
  const readOnly = state.operator.role !== 'administrator';
  $('key-rows').replaceChildren(...keys.map((key) => {
    const row = document.createElement('tr');
    cell(row, key.keyID); cell(row, key.environment); cell(row, key.revoked ? 'revoked' : 'active');
    const action = document.createElement('td');
    if (!key.revoked && !readOnly) {
      const button = document.createElement('button');
      button.type = 'button'; button.textContent = 'Revoke';
      button.setAttribute('aria-label', `Revoke key ${key.keyID}`);
      button.addEventListener('click', () => act(() => api(`containers/${picked()}/keys/${encodeURIComponent(key.keyID)}/revoke`, { method: 'POST' }), showKeys));
      action.append(button);
    }
    row.append(action);
    return row;
  }));
}

// Runs a change, shows its error if any, then refreshes.
async function act(change, refresh) {
  try { const answer = await change(); say(''); if (refresh) await refresh(); return answer; } catch (error) { say(error.message); }
}

$('container-pick').addEventListener('change', () => act(showKeys));

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
    ...(form.elements.callback.value ? { signInCallback: form.elements.callback.value } : {}) } }));
  if (created) $('new-token').textContent = created.apiToken;
});

$('revoke-tokens').addEventListener('click', async () => {
  const environment = $('create-token').elements.environment.value;
  const answer = await act(() => api(`containers/${picked()}/tokens/revoke`, { method: 'POST', body: { environment } }));
  if (answer) say(`${answer.revoked} ${environment} token(s) revoked.`);
});

$('add-key').addEventListener('submit', (event) => {
  event.preventDefault();
  const form = event.target;
  act(() => api(`containers/${picked()}/keys`, { method: 'POST', body: { environment: form.elements.environment.value, publicKeyPEM: form.elements.pem.value } }),
    () => { form.reset(); return showKeys(); });
});

for (const button of document.querySelectorAll('nav button')) button.addEventListener('click', () => show(button.dataset.view));

api('session').then(signedIn, () => showSignIn(''));
