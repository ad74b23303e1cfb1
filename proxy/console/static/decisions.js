// Decisions: the audit log, newest first, refreshed every second while "Live" is on; a chart of the
// blocked and removed decisions by reason; each event shown whole on demand.
'use strict';
(function () {
  const { el, svg, clear, api, every, modal, fmtTime, facts, report } = window.PG;
  const $ = (id) => document.getElementById(id);
  let last = '';

  // query is the audit query of the filters.
  function query() {
    const q = new URLSearchParams();
    for (const [id, name] of [['f-verdict', 'verdict'], ['f-kind', 'kind'], ['f-protocol', 'protocol'], ['f-tool', 'tool'], ['f-request', 'requestId'], ['f-limit', 'limit']]) {
      const v = $(id).value.trim();
      if (v) q.set(name, v);
    }
    for (const [id, name] of [['f-since', 'since'], ['f-until', 'until']]) {
      const v = $(id).value;
      if (v) q.set(name, new Date(v).toISOString());
    }
    return q.toString();
  }

  async function refresh() {
    const data = await api('GET', '/admin/audit?' + query());
    const key = JSON.stringify(data.events);
    if (key === last) return;
    last = key;
    render(data.events);
  }

  function badge(verdict) { return el('span', { class: 'badge v-' + verdict, text: verdict }); }

  function render(events) {
    const tbody = clear($('events').tBodies[0]);
    $('events-count').textContent = events.length === 0 ? 'No event matches.' : events.length + ' event' + (events.length === 1 ? '' : 's') + ', newest first.';
    for (const e of events) {
      const proto = e.protocol ? e.protocol + (e.protocolVersion ? '@' + e.protocolVersion : '') : '';
      tbody.append(el('tr', { dataset: { kind: e.kind, verdict: e.verdict } },
        el('td', {}, el('button', { type: 'button', class: 'link', title: 'Show the whole event', on: { click: () => details(e) } }, fmtTime(e.time))),
        el('td', {}, badge(e.verdict)),
        el('td', { text: e.kind }),
        el('td', { text: proto }),
        el('td', { class: 'name', text: e.tool || e.target || '' }),
        el('td', { class: 'reason', text: e.reason }),
        el('td', { class: 'mono', text: e.requestId })));
    }
  }

  function details(e) {
    const pairs = [['Time', e.time], ['Verdict', e.verdict], ['Kind', e.kind], ['Request id', e.requestId || '—'],
      ['Protocol', e.protocol ? e.protocol + '@' + e.protocolVersion : '—'], ['Tool', e.tool || '—'], ['Reason', e.reason || '—'], ['Rule', e.rule || '—']];
    if (e.actor) pairs.push(['Actor', e.actor]);
    if (e.target) pairs.push(['Target', e.target + (e.version ? '@' + e.version : '')]);
    if (e.argumentsSha256) pairs.push(['Arguments SHA-256', e.argumentsSha256]);
    if (e.arguments) pairs.push(['Arguments', e.arguments]);
    const body = el('div', {}, facts(el('dl', { class: 'facts' }), pairs),
      el('h3', { text: 'As JSON' }), el('pre', { text: JSON.stringify(e, null, 2) }));
    modal('Event ' + (e.requestId || e.kind), body);
  }

  async function chart() {
    const s = await api('GET', '/admin/audit/summary?window=' + encodeURIComponent($('chart-window').value));
    fillMenus(s.filters);
    $('chart-total').textContent = s.total + ' blocked or removed since ' + fmtTime(s.since) + (s.covered ? '' : ' (the audit ring does not reach back that far: older events were dropped)');
    const box = clear($('chart'));
    const rows = s.reasons.slice(0, 8);
    const w = 760, rowH = 22, labelW = 380, top = 50;
    const max = Math.max(1, ...rows.map((r) => r.count));
    const bucketMax = Math.max(1, ...s.buckets.map((b) => b.count));
    const h = top + Math.max(1, rows.length) * rowH + 8;
    const g = svg('svg', { viewBox: '0 0 ' + w + ' ' + h, width: w, height: h, role: 'img', 'aria-labelledby': 'chart-title chart-desc' },
      svg('desc', { id: 'chart-desc', text: rows.length ? rows.map((r) => r.reason + ': ' + r.count).join('; ') : 'nothing blocked in this window' }));
    // The count per time bucket, as a strip of columns over the window.
    const bw = (w - labelW) / s.buckets.length;
    g.append(svg('text', { x: 0, y: 14, text: 'over time (' + s.buckets.length + ' columns)' }));
    s.buckets.forEach((b, i) => {
      const bh = Math.round((b.count / bucketMax) * 30);
      g.append(svg('rect', { class: 'spark', x: labelW + i * bw + 1, y: 34 - bh, width: Math.max(1, bw - 2), height: Math.max(bh, b.count ? 2 : 0) },
        svg('title', { text: fmtTime(b.start) + ': ' + b.count })));
    });
    if (!rows.length) g.append(svg('text', { x: 0, y: top + 14, text: 'Nothing blocked or removed in this window.' }));
    rows.forEach((r, i) => {
      const y = top + i * rowH;
      const label = r.kind + ' · ' + r.reason;
      g.append(svg('text', { x: 0, y: y + 15, text: label.length > 58 ? label.slice(0, 57) + '…' : label }, svg('title', { text: label })));
      const bl = Math.max(2, Math.round(((w - labelW - 50) * r.count) / max));
      g.append(svg('rect', { class: 'bar', x: labelW, y: y + 4, width: bl, height: rowH - 8 }));
      g.append(svg('text', { x: labelW + bl + 6, y: y + 15, text: r.count }));
    });
    box.append(g);
  }

  let menusFilled = false;
  function fillMenus(f) {
    if (menusFilled) return;
    menusFilled = true;
    for (const [id, values] of [['f-verdict', f.verdicts], ['f-kind', f.kinds]]) {
      for (const v of values) $(id).append(el('option', { value: v, text: v }));
    }
  }

  window.PG.start(async () => {
    $('filters').addEventListener('submit', (ev) => { ev.preventDefault(); last = ''; refresh().catch(report); });
    $('filters').addEventListener('reset', () => setTimeout(() => { last = ''; refresh().catch(report); }, 0));
    for (const id of ['f-verdict', 'f-kind', 'f-limit', 'f-since', 'f-until']) $(id).addEventListener('change', () => { last = ''; refresh().catch(report); });
    for (const id of ['f-protocol', 'f-tool', 'f-request']) {
      let t;
      $(id).addEventListener('input', () => { clearTimeout(t); t = setTimeout(() => { last = ''; refresh().catch(report); }, 300); });
    }
    $('chart-window').addEventListener('change', () => chart().catch(report));
    await Promise.all([chart(), refresh()]);
    every(1000, () => $('f-live').checked ? refresh() : null);
    every(10000, () => $('f-live').checked ? chart() : null);
  });
})();
