// MCP: the door's servers and their pin sets (versions, rollback), each tool definition pinned, a changed
// one's review (the pinned and the listed definition side by side, what the scan found) and approval, and
// the latest MCP decisions. Every change is confirmed first; the admin API records it in the audit log.
'use strict';
(function () {
  const { el, clear, api, modal, every, fmtTime, diffTable, stacked, report, banner, announce, facts } = window.PG;
  const $ = (id) => document.getElementById(id);
  let last = '';
  let state = null; // the last /admin/mcp/servers answer

  function serverPath(server) { return '/admin/mcp/servers/' + encodeURIComponent(server); }
  function toolPath(server, tool) { return serverPath(server) + '/tools/' + encodeURIComponent(tool); }

  // pinState is a pin's state as a badge: pinned, or a definition that waits for approval (or is only
  // reported, where the door lets changes through).
  function pinState(p) {
    if (!p.pending) return el('span', { class: 'badge ok', text: 'pinned' });
    const report = state.onDefinitionChange === 'report';
    if (!p.pinned) return el('span', { class: 'badge bad', text: 'flagged: waits for approval' });
    return el('span', { class: 'badge warn', text: report ? 'changed: reported, passes' : 'changed: held back, waits for approval' });
  }

  async function refresh(force) {
    let data;
    try {
      data = await api('GET', '/admin/mcp/servers');
    } catch (e) {
      if (e.status === 404) { $('mcp-off').hidden = false; $('mcp-on').hidden = true; return; }
      throw e;
    }
    const events = await recentDecisions();
    const key = JSON.stringify([data, events]);
    if (key === last && !force) return;
    last = key;
    state = data;
    $('mcp-off').hidden = true;
    $('mcp-on').hidden = false;
    $('mcp-mode').textContent = 'A changed definition is ' + (data.onDefinitionChange === 'report' ? 'reported and passes' : 'held back until approved') +
      ' (mcp.onDefinitionChange: ' + data.onDefinitionChange + '); a call no model call released is ' +
      (data.requireModelCall ? 'refused' : 'judged by the information-flow rules') + ' unless its protocol says otherwise (requireModelCall).';
    await renderServers(data.servers);
    renderPins(data.servers);
    renderRecent(events);
  }

  async function renderServers(servers) {
    const tbody = clear($('mcp-servers').tBodies[0]);
    for (const s of servers) {
      let entry = null;
      if (s.stored) {
        try { entry = await api('GET', serverPath(s.name) + '/versions'); } catch (e) { report(e); }
      }
      const pinSet = !s.version ? 'nothing pinned yet' : 'version ' + s.version + (s.stored ? ' (stored)' : ' (in this instance only)');
      tbody.append(el('tr', { dataset: { server: s.name } },
        el('th', { scope: 'row', class: 'name', text: s.name }),
        el('td', { class: 'mono', text: s.origin }),
        el('td', { text: s.protocol || 'chosen by route, key or header' }),
        el('td', { class: 'mono', text: s.toolPrefix || '—' }),
        el('td', { text: pinSet }),
        el('td', { text: s.fresh ? 'read since its last change' : 'read again before its next call' }),
        el('td', {},
          entry && entry.versions.length ? el('button', { type: 'button', 'aria-label': 'Versions of the pin set of ' + s.name, on: { click: () => versions(s.name, entry).catch(report) } }, 'Versions') : '',
          entry && entry.rollbackTo ? [' ', el('button', { type: 'button', 'aria-label': 'Roll back to version ' + entry.rollbackTo + ' (pin set of ' + s.name + ')',
            on: { click: () => rollback(s.name, entry).catch(report) } }, 'Roll back to version ' + entry.rollbackTo + '…')] : '')));
    }
    stacked($('mcp-servers'));
  }

  function renderPins(servers) {
    const tbody = clear($('mcp-pins').tBodies[0]);
    let n = 0;
    for (const s of servers) {
      for (const p of s.tools) {
        n++;
        const pinned = p.pinned ? fmtTime(p.pinnedAt) + ' by ' + (p.pinnedBy || '—') : 'not pinned';
        const digest = (p.pending || p.pinned).digest.slice(0, 16);
        tbody.append(el('tr', { dataset: { server: s.name, tool: p.tool } },
          el('th', { scope: 'row', class: 'name', text: p.tool }),
          el('td', { text: s.name }),
          el('td', {}, pinState(p)),
          el('td', { text: pinned }),
          el('td', { class: 'mono', text: 'sha256:' + digest }),
          el('td', {}, p.pending
            ? el('button', { type: 'button', class: 'primary', 'aria-label': 'Review change of ' + p.tool + ' on ' + s.name, on: { click: () => review(s.name, p.tool).catch(report) } }, 'Review change…')
            : el('button', { type: 'button', 'aria-label': 'View ' + p.tool + ' on ' + s.name, on: { click: () => viewPin(s.name, p) } }, 'View'))));
      }
    }
    if (!n) tbody.append(el('tr', {}, el('td', { colspan: 6, class: 'muted', text: 'No definition is pinned yet: the first tools/list of a server pins them.' })));
    stacked($('mcp-pins'));
  }

  // recentDecisions are the latest decisions of the three MCP kinds, newest first.
  async function recentDecisions() {
    const kinds = ['mcp_call', 'mcp_list', 'mcp_definition'];
    const all = await Promise.all(kinds.map((k) => api('GET', '/admin/audit?kind=' + k + '&limit=30')));
    return all.flatMap((d) => d.events).sort((a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0)).slice(0, 50);
  }

  function renderRecent(events) {
    const tbody = clear($('mcp-recent').tBodies[0]);
    if (!events.length) tbody.append(el('tr', {}, el('td', { colspan: 6, class: 'muted', text: 'No MCP decision yet.' })));
    for (const e of events) {
      tbody.append(el('tr', { dataset: { kind: e.kind, verdict: e.verdict } },
        el('th', { scope: 'row', text: fmtTime(e.time) }),
        el('td', { text: e.kind }),
        el('td', { text: (e.target || '').replace(/^mcp\//, '') || '—' }),
        el('td', { class: 'name', text: e.tool || '—' }),
        el('td', {}, el('span', { class: 'badge v-' + e.verdict, text: e.verdict })),
        el('td', { class: 'reason', text: e.reason || '' })));
    }
    stacked($('mcp-recent'));
  }

  // defText is a definition as the review compares it, one field a line, the schemas pretty-printed.
  function defText(d) {
    if (!d) return '';
    const lines = ['name: ' + d.name, 'description:'];
    for (const l of (d.description || '').split('\n')) lines.push('  ' + l);
    lines.push('inputSchema:');
    for (const l of (d.inputSchema ? JSON.stringify(d.inputSchema, null, 2) : '(none)').split('\n')) lines.push('  ' + l);
    lines.push('extra (title, annotations, outputSchema, _meta, ...):');
    for (const l of (d.extra ? JSON.stringify(d.extra, null, 2) : '(none)').split('\n')) lines.push('  ' + l);
    return lines.join('\n') + '\n';
  }

  // unified is a unified diff of two texts, one hunk (the longest common subsequence of their lines), as
  // PG.diffTable reads it.
  function unified(a, b) {
    const x = a.split('\n'), y = b.split('\n');
    if (a === b) return '';
    const n = x.length, m = y.length;
    const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
    for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    const out = ['@@ -1,' + n + ' +1,' + m + ' @@'];
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && x[i] === y[j]) { out.push(' ' + x[i]); i++; j++; }
      else if (i < n && (j === m || lcs[i + 1][j] >= lcs[i][j + 1])) out.push('-' + x[i++]);
      else out.push('+' + y[j++]);
    }
    return out.join('\n') + '\n';
  }

  function viewPin(server, p) {
    modal(server + '/' + p.tool + ': the pinned definition', el('pre', { text: defText(p.pinned) }));
  }

  // review shows what changed between the pinned and the listed definition, then, confirmed, approves the
  // listed one: the door pins it as a new version of the server's pin set.
  async function review(server, tool) {
    const d = await api('GET', toolPath(server, tool) + '/diff');
    const props = d.properties || {};
    const list = (k) => (props[k] && props[k].length ? props[k].join(', ') : 'none');
    const findings = (d.pending.findings || []);
    const info = facts(el('dl', { class: 'facts' }), [
      ['Pinned', d.pinned ? 'version ' + d.version + ', sha256:' + d.pinned.digest.slice(0, 16) : 'nothing: first seen with a finding'],
      ['Listed now', 'sha256:' + d.pending.digest.slice(0, 16)],
      ['Fields that differ', d.changed.length ? d.changed.join(', ') : (d.pinned ? 'none' : 'all (first definition)')],
      ['Schema properties', 'added: ' + list('added') + '; removed: ' + list('removed') + '; changed: ' + list('changed')],
      ['Description scan', findings.length ? findings.join('; ') : 'nothing found']]);
    const body = el('div', {}, info,
      el('p', { text: 'The pinned definition (left) and the one the server lists now (right):' }),
      diffTable(unified(defText(d.pinned), defText(d.pending)), d.pinned ? 'pinned, version ' + d.version : 'pinned: none', 'listed now'),
      el('p', { class: 'muted', text: 'Approving pins the listed definition as a new version of the pin set of ' + server +
        ': the model is told this description and calls are vetted against this schema. A rollback of the pin set undoes it.' }));
    if (!await modal('Review the change of ' + tool + ' on ' + server, body, 'Approve and pin', false)) return;
    const pin = await api('POST', toolPath(server, tool) + '/approve', { digest: d.pending.digest });
    banner('Approved: ' + server + '/' + tool + ' is pinned at sha256:' + pin.pinned.digest.slice(0, 16) + ' (pin set version ' + pin.version + ').', 'info');
    announce('Approved ' + tool + '.');
    await refresh(true);
  }

  function versionsTable(entry) {
    const t = el('table', { class: 'stack' },
      el('caption', { class: 'visually-hidden', text: 'Versions of the pin set, newest first' }),
      el('thead', {}, el('tr', {}, ['Version', 'Created', 'Author', 'Note', 'State'].map((h) => el('th', { scope: 'col', text: h })))));
    const tbody = el('tbody');
    for (const v of entry.versions.slice().reverse()) {
      const st = v.version === entry.active ? 'active' : v.version === entry.rollbackTo ? 'rollback target' : '';
      tbody.append(el('tr', {}, el('th', { scope: 'row', text: v.version }), el('td', { text: fmtTime(v.createdAt) }),
        el('td', { text: v.author || '—' }), el('td', { text: v.note || '' }),
        el('td', {}, st ? el('span', { class: 'badge ' + (st === 'active' ? 'ok' : 'warn'), text: st }) : '')));
    }
    t.append(tbody);
    return stacked(t);
  }

  function versions(server, entry) {
    return modal('Pin set of ' + server + ': versions', el('div', {}, versionsTable(entry),
      el('p', { class: 'muted', text: 'The set is a definition of the store (mcppins/' + server + '): every instance of a fleet serves its active version.' })));
  }

  // rollback re-activates the version of the pin set that was active before the current one.
  async function rollback(server, entry) {
    const v = entry.rollbackTo;
    const body = el('div', {},
      el('p', { text: 'Roll back re-activates version ' + v + ' of the pin set of ' + server + ' (now active: ' + entry.active + '). ' +
        'Its definitions are enforced again: a tool whose server lists another definition is held back until approved.' }),
      versionsTable(entry));
    if (!await modal('Re-activate version ' + v + ' of the pin set of ' + server + '?', body, 'Re-activate version ' + v, false)) return;
    const res = await api('POST', '/admin/mcppins/' + encodeURIComponent(server) + '/rollback', {});
    banner('Rolled back: the pin set of ' + server + ' is at version ' + res.active + ' (was ' + res.previous + ').', 'info');
    announce('Re-activated version ' + res.active + '.');
    await refresh(true);
  }

  window.PG.start(async () => {
    await refresh(true);
    every(5000, () => refresh(false));
  });
})();
