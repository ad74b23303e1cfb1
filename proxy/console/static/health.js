// Health: the store, the definitions served, the context sources, request counts and rate, the proxy's
// overhead and the audit ring, refreshed every 5 seconds. The request rate is the difference of two reports.
'use strict';
(function () {
  const { el, clear, api, every, facts, fmtTime, fmtSeconds, stacked } = window.PG;
  const $ = (id) => document.getElementById(id);
  let prev = null;

  function state(ok, text) { return el('span', { class: 'badge ' + (ok ? 'ok' : 'bad'), text }); }

  async function refresh() {
    const h = await api('GET', '/admin/health');
    const st = h.store;
    const storeFacts = [['Backend', st.backend], ['Connected', state(st.connected, st.connected ? 'connected' : 'disconnected')]];
    if (st.reason) storeFacts.push(['Why', st.reason]);
    storeFacts.push(['Definitions', st.stale ? state(false, 'stale: ' + st.stale) : state(true, 'current')]);
    if (st.backend === 'etcd') storeFacts.push(['Endpoints', st.endpoints], ['Prefix', st.prefix], ['Fleet members', 'not tracked by the store: every instance on this prefix serves the same versions']);
    facts($('h-store'), storeFacts);

    let rate = '— (needs two reports)';
    const now = Date.parse(h.time);
    if (prev && now > prev.at) rate = ((h.requests.total - prev.total) / ((now - prev.at) / 1000)).toFixed(2) + ' per second';
    prev = { at: now, total: h.requests.total };
    const statuses = Object.keys(h.requests.byStatus).sort().map((k) => k + ': ' + h.requests.byStatus[k]).join(', ');
    facts($('h-traffic'), [['Since the start', h.requests.total + ' requests'], ['Rate', rate], ['By status', statuses || '—'],
      ['Overhead p50', fmtSeconds(h.overhead.p50Seconds)], ['Overhead p99', fmtSeconds(h.overhead.p99Seconds)], ['Observed', h.overhead.count + ' requests'], ['Report time', fmtTime(h.time)]]);
    const a = h.audit;
    facts($('h-audit'), a ? [['Written', a.written], ['Dropped (buffer full)', state(a.dropped === 0, String(a.dropped))], ['Failed (write errors)', state(a.failed === 0, String(a.failed))]] : [['Ring', 'not configured']]);

    const served = clear($('h-served').tBodies[0]);
    for (const d of h.served) served.append(el('tr', {}, el('td', { text: d.kind }), el('td', { text: d.name }), el('td', { text: d.version })));
    if (!h.served.length) served.append(el('tr', {}, el('td', { colspan: 3, class: 'muted', text: 'Not reported (no metrics registry).' })));
    stacked($('h-served'));

    const plugins = clear($('h-plugins').tBodies[0]);
    for (const p of h.plugins) {
      const errs = Object.keys(p.errors).sort().map((k) => k + ': ' + p.errors[k]).join(', ');
      plugins.append(el('tr', {},
        el('th', { scope: 'row', text: p.name }), el('td', { text: p.module || '—' }),
        el('td', {}, state(p.up, p.up ? 'running' : 'down'), ' ', el('span', { class: 'muted', text: p.up ? 'since ' + fmtTime(p.upSince) : p.down }), p.required ? el('span', { class: 'muted', text: ' (required)' }) : ''),
        el('td', { text: p.restarts }), el('td', { text: p.calls }),
        el('td', { text: fmtSeconds(p.latency.p50Seconds) }), el('td', { text: fmtSeconds(p.latency.p99Seconds) }),
        el('td', { text: errs || 'none' })));
    }
    if (!h.plugins.length) plugins.append(el('tr', {}, el('td', { colspan: 8, class: 'muted', text: 'No context source is configured.' })));
    stacked($('h-plugins'));
  }

  window.PG.start(async () => {
    await refresh();
    every(5000, refresh);
  });
})();
