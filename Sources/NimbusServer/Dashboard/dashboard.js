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

for (const button of document.querySelectorAll('nav button')) button.addEventListener('click', () => show(button.dataset.view));

api('session').then(signedIn, () => showSignIn(''));
