// Tools: every tool configured, switched or seen, its enablement and access policy, what the last request
// that declared it did with it and how many of its calls were blocked, and the kill switch (with a
// confirmation; the admin API records each change in the audit log).
'use strict';
(function () {
  const { el, clear, api, modal, every, fmtTime, stacked, report, banner, announce } = window.PG;
  const $ = (id) => document.getElementById(id);
  let last = '';

  function policy(t) {
    if (!t.config) return 'none configured';
    const parts = [];
    if (t.config.scope) parts.push('scope ' + t.config.scope);
    if (t.config.allowedProtocols.length) parts.push('protocols ' + t.config.allowedProtocols.join(', '));
    if (t.config.enabled === false) parts.push('disabled in the config');
    return parts.length ? parts.join('; ') : 'no restriction';
  }

  async function refresh(force) {
    const data = await api('GET', '/admin/tools/inventory');
    const key = JSON.stringify(data.tools);
    if (key === last && !force) return;
    last = key;
    const tbody = clear($('tools').tBodies[0]);
    if (!data.tools.length) tbody.append(el('tr', {}, el('td', { colspan: 8, class: 'muted', text: 'No tool is configured, switched or seen yet.' })));
    for (const t of data.tools) {
      const s = t.seen;
      const by = { override: 'kill switch', config: 'config', default: 'default' }[t.enabledBy] || t.enabledBy;
      tbody.append(el('tr', { dataset: { tool: t.name } },
        el('th', { scope: 'row', class: 'name', text: t.name }),
        el('td', {}, el('span', { class: 'badge ' + (t.enabled ? 'ok' : 'bad'), text: t.enabled ? 'enabled' : 'disabled' }), ' ', el('span', { class: 'muted', text: 'by ' + by })),
        el('td', { class: 'kill' },
          el('button', { type: 'button', class: t.enabled ? 'danger' : 'primary', 'aria-label': (t.enabled ? 'Switch off ' : 'Switch on ') + t.name,
            on: { click: () => toggle(t.name, !t.enabled) } }, t.enabled ? 'Switch off…' : 'Switch on…'),
          t.override ? [' ', el('button', { type: 'button', 'aria-label': 'Clear override of ' + t.name, on: { click: () => clearOverride(t.name) } }, 'Clear override…')] : ''),
        el('td', { text: policy(t) }),
        el('td', { text: s ? fmtTime(s.lastSeen) + ' (' + s.lastProtocol + ')' : 'not since the start' }),
        el('td', { text: s ? s.requests + (s.removed ? ' (' + s.removed + ' removed it)' : '') : '—' }),
        el('td', { class: 'side' }, s ? (s.lastKept ? 'kept in the request' : 'removed from the request: ' + s.lastReason) : '—'),
        el('td', { class: 'blocked' }, blocked(s))));
    }
    stacked($('tools'));
  }

  // blocked says how many of the model's calls of the tool were blocked since the start: a tool kept in the
  // requests may still have every call blocked by its schema or the protocol's rules.
  function blocked(s) {
    if (!s) return '—';
    if (!s.blocked) return 'none';
    return [el('span', { class: 'badge bad', text: s.blocked + (s.blocked === 1 ? ' call' : ' calls') + ' blocked' }), ' ',
      el('span', { class: 'muted', text: 'last ' + fmtTime(s.lastBlocked) })];
  }

  function toolPath(name) { return '/admin/tools/' + encodeURIComponent(name) + '/enabled'; }

  async function toggle(name, enabled) {
    const body = el('div', {},
      el('p', {}, enabled ? 'Requests after this one keep ' : 'Every request after this one, in every protocol, has ', el('code', { text: name }),
        enabled ? ' where their protocol allows it.' : ' removed (reason: disabled by the operator), and a model calling it is blocked.'),
      el('p', { class: 'muted', text: 'The change is stored, survives restarts, and is recorded in the audit log.' }));
    if (!await modal((enabled ? 'Switch on ' : 'Switch off ') + name + '?', body, enabled ? 'Switch on' : 'Switch off', !enabled)) return;
    await api('PUT', toolPath(name), { enabled });
    banner(name + ' is switched ' + (enabled ? 'on' : 'off') + '.', 'info');
    announce(name + (enabled ? ' switched on.' : ' switched off.'));
    await refresh(true);
  }

  async function clearOverride(name) {
    const body = el('p', {}, 'The config file decides again whether ', el('code', { text: name }), ' is enabled.');
    if (!await modal('Clear the kill switch of ' + name + '?', body, 'Clear override', false)) return;
    await api('DELETE', toolPath(name));
    banner('The kill switch of ' + name + ' is cleared.', 'info');
    await refresh(true);
  }

  window.PG.start(async () => {
    $('switch-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const name = $('switch-name').value.trim();
      if (name) toggle(name, false).catch(report);
    });
    await refresh(true);
    every(5000, () => refresh(false));
  });
})();
