// Definitions: templates and protocols, their versions, a side-by-side diff of any two, activation and
// rollback after a confirmation that shows the diff against the active version, and the rollouts applied.
'use strict';
(function () {
  const { el, clear, api, modal, fmtTime, diffTable, report, banner, announce } = window.PG;
  const $ = (id) => document.getElementById(id);
  const kinds = ['protocols', 'templates'];
  let current = null; // {kind, name, entry}

  function label(kind, name, v) { return kind + '/' + name + (v ? '@' + v : ''); }

  async function loadLists() {
    for (const kind of kinds) {
      const data = await api('GET', '/admin/' + kind);
      const ul = clear($('list-' + kind));
      for (const e of data[kind]) {
        const pressed = current && current.kind === kind && current.name === e.name;
        ul.append(el('li', {}, el('button', { type: 'button', 'aria-pressed': pressed ? 'true' : 'false', dataset: { kind, name: e.name },
          on: { click: () => select(kind, e.name) } }, el('span', { text: e.name }), el('span', { class: 'muted', text: e.active ? 'v' + e.active : 'none' }))));
      }
    }
  }

  async function select(kind, name) {
    const entry = await api('GET', '/admin/' + kind + '/' + encodeURIComponent(name));
    current = { kind, name, entry };
    for (const b of document.querySelectorAll('.side button')) b.setAttribute('aria-pressed', b.dataset.kind === kind && b.dataset.name === name ? 'true' : 'false');
    $('def').hidden = false;
    $('def-empty').hidden = true;
    $('def-title').textContent = label(kind, name);
    $('def-state').textContent = (entry.active ? 'Version ' + entry.active + ' is active' : 'No version is active') +
      (entry.rollbackTo ? '; a rollback re-activates version ' + entry.rollbackTo + '.' : '; there is no earlier version to roll back to.');
    const rb = $('def-rollback');
    rb.disabled = !entry.rollbackTo;
    rb.textContent = entry.rollbackTo ? 'Roll back to version ' + entry.rollbackTo + '…' : 'Roll back';
    const tbody = clear($('def-versions').tBodies[0]);
    for (const v of entry.versions.slice().reverse()) {
      const state = v.version === entry.active ? 'active' : v.version === entry.rollbackTo ? 'rollback target' : '';
      tbody.append(el('tr', { dataset: { version: v.version } },
        el('th', { scope: 'row', text: v.version }),
        el('td', { text: fmtTime(v.createdAt) }),
        el('td', { text: v.author || '—' }),
        el('td', { text: v.note || '' }),
        el('td', {}, state ? el('span', { class: 'badge ' + (state === 'active' ? 'ok' : 'warn'), text: state }) : ''),
        el('td', {},
          el('button', { type: 'button', on: { click: () => view(v.version) }, 'aria-label': 'View version ' + v.version }, 'View'), ' ',
          v.version === entry.active ? '' : el('button', { type: 'button', class: 'primary', on: { click: () => activate(v.version) }, 'aria-label': 'Activate version ' + v.version }, 'Activate…'))));
    }
    for (const id of ['diff-from', 'diff-to']) {
      const s = clear($(id));
      for (const v of entry.versions.slice().reverse()) s.append(el('option', { value: v.version, text: 'v' + v.version + (v.version === entry.active ? ' (active)' : '') }));
    }
    const n = entry.versions.length;
    if (n) {
      $('diff-to').value = String(entry.versions[n - 1].version);
      $('diff-from').value = String(entry.versions[Math.max(0, n - 2)].version);
    }
    clear($('diff'));
  }

  // diffBetween asks the admin API for the diff of two versions and renders it side by side.
  async function diffBetween(from, to) {
    const d = await api('GET', '/admin/' + current.kind + '/' + encodeURIComponent(current.name) + '/diff?from=' + from + '&to=' + to);
    return diffTable(d.diff, label(current.kind, current.name, from), label(current.kind, current.name, to));
  }

  async function view(v) {
    const rec = await api('GET', '/admin/' + current.kind + '/' + encodeURIComponent(current.name) + '/versions/' + v);
    const text = current.kind === 'templates' && rec.body && typeof rec.body.text === 'string' ? rec.body.text : JSON.stringify(rec.body, null, 2);
    modal(label(current.kind, current.name, v) + ' by ' + (rec.author || '—') + ', ' + fmtTime(rec.createdAt), el('pre', { text }));
  }

  async function change(what, v, path, body) {
    const active = current.entry.active;
    const intro = el('p', { text: active ? 'Differences from the active version ' + active + ' (left) to version ' + v + ' (right). The next request gets version ' + v + '.' : 'No version is active now.' });
    const ok = await modal(what + ' ' + label(current.kind, current.name, v) + '?', el('div', {}, intro, active ? await diffBetween(active, v) : ''), what, false);
    if (!ok) return;
    const res = await api('POST', '/admin/' + current.kind + '/' + encodeURIComponent(current.name) + path, body);
    banner(what + ': ' + label(current.kind, current.name, res.active) + ' is active (was ' + res.previous + ').', 'info');
    announce(what + ' done.');
    await Promise.all([loadLists(), select(current.kind, current.name), loadRollouts()]);
  }

  const activate = (v) => change('Activate', v, '/activate', { version: v }).catch(report);
  const rollback = () => change('Roll back', current.entry.rollbackTo, '/rollback', {}).catch(report);

  async function loadRollouts() {
    const data = await api('GET', '/admin/rollouts');
    const tbody = clear($('rollouts').tBodies[0]);
    const fmt = (m) => Object.keys(m || {}).sort().map((k) => k + '@' + (m[k] || 'none')).join(', ');
    const applied = data.applied.slice().reverse();
    if (!applied.length) tbody.append(el('tr', {}, el('td', { colspan: 5, class: 'muted', text: 'No rollout is applied.' })));
    applied.forEach((r, i) => tbody.append(el('tr', {},
      el('th', { scope: 'row', class: 'mono', text: r.id }), el('td', { text: fmtTime(r.appliedAt) }),
      el('td', { text: fmt(r.activated) }), el('td', { text: fmt(r.previous) }),
      el('td', { text: i === 0 ? 'applied (latest: `promptgate migrate down` reverts it)' : 'applied' }))));
  }

  window.PG.start(async () => {
    $('def-rollback').addEventListener('click', rollback);
    $('diff-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        clear($('diff')).append(await diffBetween($('diff-from').value, $('diff-to').value));
      } catch (e) { report(e); }
    });
    await Promise.all([loadLists(), loadRollouts()]);
  });
})();
