// Definitions: templates and protocols, their versions, a side-by-side diff of any two, activation and
// rollback after a confirmation that shows the diff against the active version, and the rollouts applied.
// An address #protocols/ID@N (an event's link) shows that version and what it changed.
'use strict';
(function () {
  const { el, clear, api, modal, fmtTime, diffTable, stacked, report, banner, announce } = window.PG;
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
          on: { click: () => select(kind, e.name).then(() => { if (matchMedia('(max-width: 900px)').matches) $('def').scrollIntoView(); }).catch(report) } }, el('span', { text: e.name }), el('span', { class: 'muted', text: e.active ? 'v' + e.active : 'none' }))));
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
    stacked($('def-versions'));
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

  // change asks, showing what the next request will get, then activates version v (rollback: through the
  // rollback endpoint, which re-activates the version active before the current one and pops it from the
  // activation history).
  async function change(v, rollback) {
    const active = current.entry.active;
    const verb = rollback ? 'Re-activate' : 'Activate';
    const title = verb + ' ' + current.kind + '/' + current.name + ' version ' + v + ' (' + (active ? 'now active: ' + active : 'none active now') + ')?';
    const what = [];
    if (rollback) what.push(el('p', { text: 'Roll back re-activates the version that was active before the current one: version ' + v + '. Version ' + active + ' stays stored, and can be activated again.' }));
    what.push(el('p', { text: 'The next request gets version ' + v + '.' + (active ? ' Differences from the active version ' + active + ' (left) to version ' + v + ' (right):' : '') }));
    const ok = await modal(title, el('div', {}, what, active ? await diffBetween(active, v) : ''), verb + ' version ' + v, false);
    if (!ok) return;
    const path = rollback ? '/rollback' : '/activate';
    const res = await api('POST', '/admin/' + current.kind + '/' + encodeURIComponent(current.name) + path, rollback ? {} : { version: v });
    banner((rollback ? 'Rolled back' : 'Activated') + ': ' + label(current.kind, current.name, res.active) + ' is active (was ' + res.previous + ').', 'info');
    announce(verb + 'd version ' + res.active + '.');
    await Promise.all([loadLists(), select(current.kind, current.name), loadRollouts()]);
  }

  const activate = (v) => change(v, false).catch(report);
  const rollback = () => change(current.entry.rollbackTo, true).catch(report);

  // showLinked shows the version the page's address names (#protocols/ID@N, as an event links it): the
  // definition selected, its row marked, and the diff of what that version changed from the one before.
  async function showLinked() {
    const m = /^#(protocols|templates)\/(.+)@(\d+)$/.exec(location.hash);
    if (!m) return;
    const kind = m[1], v = Number(m[3]);
    let name;
    try { name = decodeURIComponent(m[2]); } catch (e) { return; }
    await select(kind, name);
    const row = document.querySelector('#def-versions tbody tr[data-version="' + v + '"]');
    if (!row) { banner(label(kind, name, v) + ' does not exist.'); return; }
    row.classList.add('linked');
    row.setAttribute('aria-current', 'true');
    const prev = current.entry.versions.map((x) => x.version).filter((x) => x < v).pop();
    $('diff-to').value = String(v);
    if (prev) {
      $('diff-from').value = String(prev);
      clear($('diff')).append(await diffBetween(prev, v));
    }
    $('def-state').textContent += ' Shown: version ' + v + (prev ? ', and what it changed from version ' + prev + '.' : ', the first.');
    $('def-title').tabIndex = -1;
    $('def-title').focus();
  }

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
    stacked($('rollouts'));
  }

  window.PG.start(async () => {
    $('def-rollback').addEventListener('click', rollback);
    $('diff-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        clear($('diff')).append(await diffBetween($('diff-from').value, $('diff-to').value));
      } catch (e) { report(e); }
    });
    window.addEventListener('hashchange', () => showLinked().catch(report));
    await Promise.all([loadLists(), loadRollouts()]);
    await showLinked();
  });
})();
