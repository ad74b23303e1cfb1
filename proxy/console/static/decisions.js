// Decisions: the audit log, newest first, refreshed every second while "Live" is on; a chart of the
// blocked and removed decisions over time and by reason; each event shown whole on demand, linked to the
// protocol version that decided it, with "Record as a test" for a decision on a tool or a call (the case goes
// to the Preview page's policy test). The table is one tab stop; the arrow keys move between its events.
'use strict';
(function () {
  const { el, svg, clear, api, every, modal, fmtTime, facts, stacked, report, APIError } = window.PG;
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

  // eventKey names an event among those shown, so that the focus stays on it when the list is redrawn.
  function eventKey(e) { return [e.time, e.requestId, e.kind, e.tool, e.verdict, e.target, e.rule].join('\u0000'); }

  function render(events) {
    const tbody = $('events').tBodies[0];
    const focused = tbody.contains(document.activeElement) ? document.activeElement.closest('tr').dataset.key : null;
    clear(tbody);
    $('events-count').textContent = events.length === 0 ? 'No event matches.' : events.length + ' event' + (events.length === 1 ? '' : 's') + ', newest first.';
    const seen = new Map();
    for (const e of events) {
      // Two events alike in every field shown get distinct keys by their order.
      const base = eventKey(e);
      const n = seen.get(base) || 0;
      seen.set(base, n + 1);
      const proto = e.protocol ? e.protocol + (e.protocolVersion ? '@' + e.protocolVersion : '') : '';
      tbody.append(el('tr', { dataset: { kind: e.kind, verdict: e.verdict, key: base + '\u0000' + n } },
        el('td', {}, el('button', { type: 'button', class: 'link', tabindex: '-1', title: 'Show the whole event', on: { click: () => details(e) } }, fmtTime(e.time))),
        el('td', {}, badge(e.verdict)),
        el('td', { text: e.kind }),
        el('td', { text: proto }),
        el('td', { class: 'name', text: e.tool || e.target || '' }),
        el('td', { class: 'reason', text: e.reason }),
        el('td', { class: 'mono', text: e.requestId })));
    }
    stacked($('events'));
    const rows = [...tbody.rows].filter((r) => r.querySelector('button'));
    const keep = rows.find((r) => r.dataset.key === focused);
    rove(keep || rows[0], Boolean(keep));
  }

  // rove makes the button of row the table's one tab stop (a roving tabindex), focusing it if focus is set.
  function rove(row, focus) {
    if (!row) return;
    for (const b of $('events').tBodies[0].querySelectorAll('button[tabindex="0"]')) b.tabIndex = -1;
    const b = row.querySelector('button');
    b.tabIndex = 0;
    if (focus) b.focus();
  }

  // keys moves the focus between the events' rows: up, down, a page of ten, first, last.
  function keys(ev) {
    const rows = [...$('events').tBodies[0].rows].filter((r) => r.querySelector('button'));
    const at = rows.indexOf(ev.target.closest('tr'));
    if (at < 0) return;
    const to = { ArrowDown: at + 1, ArrowUp: at - 1, PageDown: at + 10, PageUp: at - 10, Home: 0, End: rows.length - 1 }[ev.key];
    if (to === undefined) return;
    ev.preventDefault();
    rove(rows[Math.max(0, Math.min(rows.length - 1, to))], true);
  }

  // versionLink links a protocol or template version to the Definitions page, which shows it and what it
  // changed.
  function versionLink(kind, name, version) {
    const text = name + '@' + version;
    return el('a', { href: '/console/definitions#' + kind + '/' + encodeURIComponent(name) + '@' + version }, text);
  }

  // recordKinds are the kinds of event a policy test case can be recorded from: a tool removed, a call decided.
  const recordKinds = ['tool_removed', 'tool_call', 'provenance', 'flow', 'budget', 'confirm'];

  // recordTest writes a case from the decisions of request id (POST /admin/tests/record) and opens it in
  // the Preview page's policy test; a refusal is shown in the dialog.
  async function recordTest(id, button, out) {
    button.disabled = true;
    out.textContent = 'Recording…';
    let r;
    try {
      r = await api('POST', '/admin/tests/record', { requestId: id });
    } catch (err) {
      button.disabled = false;
      out.textContent = err instanceof APIError ? 'Not recorded: ' + err.message + ' (' + err.code + ')' : String(err);
      return;
    }
    sessionStorage.setItem('promptgate.console.testcase', r.caseFile);
    location.assign('/console/preview#policy-test');
  }

  function recordPart(e) {
    if (!e.requestId || !e.protocol || !recordKinds.includes(e.kind)) return null;
    const out = el('p', { class: 'muted', role: 'status' });
    const button = el('button', { type: 'button', id: 'record-test', text: 'Record as a test' });
    button.addEventListener('click', () => recordTest(e.requestId, button, out));
    return el('div', { class: 'record-test' },
      el('p', { text: 'Write a policy test case from what the decision log kept of request ' + e.requestId +
        ' (every decision of it), and open it in the policy test on the Preview page.' }), button, out);
  }

  function details(e) {
    const decidedBy = e.protocol && e.protocolVersion ? versionLink('protocols', e.protocol, e.protocolVersion) : (e.protocol || '—');
    const pairs = [['Time', e.time], ['Verdict', e.verdict], ['Kind', e.kind], ['Request id', e.requestId || '—'],
      ['Protocol', decidedBy], ['Tool', e.tool || '—'], ['Reason', e.reason || '—'], ['Rule', e.rule || '—']];
    if (e.actor) pairs.push(['Actor', e.actor]);
    if (e.target) {
      const [kind, name] = e.target.split(/\/(.*)/s);
      pairs.push(['Target', e.version && (kind === 'protocols' || kind === 'templates') ? versionLink(kind, name, e.version) : e.target + (e.version ? '@' + e.version : '')]);
    }
    if (e.argumentsSha256) pairs.push(['Arguments SHA-256', e.argumentsSha256]);
    if (e.arguments) pairs.push(['Arguments', e.arguments]);
    const body = el('div', {}, facts(el('dl', { class: 'facts' }), pairs), recordPart(e),
      el('h3', { text: 'As JSON' }), el('pre', { text: JSON.stringify(e, null, 2) }));
    modal('Event ' + (e.requestId || e.kind), body);
  }

  let summary = null;

  async function chart() {
    summary = await api('GET', '/admin/audit/summary?window=' + encodeURIComponent($('chart-window').value));
    fillMenus(summary.filters);
    const s = summary;
    $('chart-total').textContent = s.total + ' blocked or removed from ' + fmtTime(s.since) + ' to now' +
      (s.covered ? '' : ' (the audit ring does not reach back that far: older events were dropped)') + '.';
    reasons(s);
    overTime(s);
  }

  // reasons fills the table of counts by kind and reason: the six most frequent, then the rest in one
  // row, so that the rows add up to the total above them.
  function reasons(s) {
    const tbody = clear($('chart-reasons').tBodies[0]);
    const rows = s.reasons.slice(0, 6).map((r) => ({ label: r.kind + ' · ' + r.reason, count: r.count }));
    const rest = s.reasons.slice(6);
    if (rest.length) rows.push({ label: 'other: ' + rest.length + ' more reason' + (rest.length === 1 ? '' : 's'), count: rest.reduce((n, r) => n + r.count, 0) });
    const max = Math.max(1, ...rows.map((r) => r.count));
    for (const r of rows) {
      tbody.append(el('tr', { dataset: { count: r.count } },
        el('th', { scope: 'row', class: 'name', text: r.label }),
        el('td', { class: 'bar-cell' }, el('span', { class: 'bar', 'aria-hidden': 'true', dataset: { share: (r.count / max).toFixed(3) } }), el('span', { class: 'count', text: r.count }))));
    }
    for (const b of tbody.querySelectorAll('.bar')) b.style.width = (Number(b.dataset.share) * 100).toFixed(1) + '%';
    if (!rows.length) tbody.append(el('tr', {}, el('td', { colspan: 2, class: 'muted', text: 'Nothing blocked or removed in this window.' })));
  }

  // overTime draws the counts per bucket as columns on a time axis, at the pixel width of its box, so
  // that its text keeps the page's size on any screen.
  function overTime(s) {
    const box = clear($('chart-time'));
    const n = s.buckets.length;
    if (!n) return;
    const step = (Date.parse(s.buckets[n > 1 ? 1 : 0].start) - Date.parse(s.buckets[0].start)) / 60000 || 60;
    $('chart-time-title').textContent = 'Over time, per ' + (step % 60 ? step + ' minutes' : step / 60 === 1 ? 'hour' : step / 60 + ' hours');
    const w = Math.max(240, box.clientWidth), h = 150, left = 34, right = 8, top = 10, bottom = 26;
    const max = Math.max(1, ...s.buckets.map((b) => b.count));
    const yMax = max <= 4 ? max : Math.ceil(max / 4) * 4;
    const plotW = w - left - right, plotH = h - top - bottom, bw = plotW / n;
    const peak = s.buckets.reduce((p, b) => (b.count > p.count ? b : p), s.buckets[0]);
    const g = svg('svg', { width: w, height: h, viewBox: '0 0 ' + w + ' ' + h, role: 'img',
      'aria-label': 'Blocked or removed per bucket from ' + hhmm(s.buckets[0].start) + ' to now: ' + s.total + ' in all' +
        (s.total ? ', most ' + peak.count + ' from ' + hhmm(peak.start) : '') + '.' });
    // The y axis: 0, the middle and the top, with grid lines.
    for (const v of [...new Set([0, Math.round(yMax / 2), yMax])]) {
      const y = top + plotH - (v / yMax) * plotH;
      g.append(svg('line', { class: v ? 'grid' : 'axis', x1: left, x2: w - right, y1: y, y2: y }),
        svg('text', { class: 'tick', x: left - 6, y: y + 4, 'text-anchor': 'end', text: v }));
    }
    s.buckets.forEach((b, i) => {
      const bh = (b.count / yMax) * plotH;
      g.append(svg('rect', { class: 'col', x: left + i * bw + 1, y: top + plotH - bh, width: Math.max(1, bw - 2), height: bh, dataset: { count: b.count } },
        svg('title', { text: fmtTime(b.start) + ': ' + b.count })));
    });
    // The x axis: a bucket's start time under every k-th column, k such that labels are 56 px apart.
    const k = Math.max(1, Math.ceil(56 / bw));
    for (let i = 0; i < n; i += k) {
      const x = left + i * bw;
      g.append(svg('line', { class: 'axis', x1: x, x2: x, y1: top + plotH, y2: top + plotH + 4 }),
        svg('text', { class: 'tick', x, y: h - 8, 'text-anchor': i ? 'middle' : 'start', text: hhmm(s.buckets[i].start) }));
    }
    box.append(g);
  }

  function hhmm(iso) { return fmtTime(iso).slice(11, 16); }

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
    $('events').tBodies[0].addEventListener('keydown', keys);
    $('events').tBodies[0].addEventListener('focusin', (ev) => { if (ev.target.matches('button')) rove(ev.target.closest('tr'), false); });
    let resized;
    window.addEventListener('resize', () => { clearTimeout(resized); resized = setTimeout(() => summary && overTime(summary), 150); });
    await Promise.all([chart(), refresh()]);
    every(1000, () => $('f-live').checked ? refresh() : null);
    every(10000, () => $('f-live').checked ? chart() : null);
  });
})();
