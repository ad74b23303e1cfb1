// promptgate console: what every page shares. Text reaches the page only through textContent and DOM
// building (el, svg below), never through innerHTML, so whatever an event or a definition holds is shown
// as text. The admin token lives in sessionStorage and goes only into the Authorization header of requests
// to this origin.
'use strict';
(function () {
  const TOKEN = 'promptgate.console.token';
  const ACTOR = 'promptgate.console.actor';
  const $ = (id) => document.getElementById(id);
  let pageStart = null;
  let started = false;
  let locked = true; // true while the login form is shown: polls pause, calls are not sent

  // el builds an element: attrs may hold class, text, on (event handlers), dataset, and attributes;
  // children are nodes or strings (added as text), arrays are flattened, null and false are skipped.
  function el(tag, attrs, ...children) {
    return fill(document.createElement(tag), attrs, children);
  }
  function svg(tag, attrs, ...children) {
    return fill(document.createElementNS('http://www.w3.org/2000/svg', tag), attrs, children);
  }
  function fill(node, attrs, children) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') node.textContent = String(v);
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
      else if (k === 'dataset') Object.assign(node.dataset, v);
      else if (k === 'class') node.setAttribute('class', v);
      else if (k === 'value') node.value = v;
      else node.setAttribute(k, v === true ? '' : String(v));
    }
    append(node, children);
    return node;
  }
  function append(node, children) {
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      if (Array.isArray(c)) append(node, c);
      else node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  function clear(node) { node.replaceChildren(); return node; }

  function banner(msg, kind) {
    const b = $('banner');
    b.className = 'banner' + (kind === 'info' ? ' info' : '');
    b.textContent = msg;
    b.hidden = !msg;
  }
  function announce(msg) { $('status').textContent = msg; }

  // APIError is an error answer of the admin API: its status, code and message.
  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  // api calls the admin API and returns the decoded JSON (opts.raw: {data, text}); a string body is sent as
  // it is, with opts.contentType (default JSON). An error answer throws an APIError holding its body (data).
  async function api(method, path, body, opts) {
    if (locked && !(opts && opts.probe)) throw new APIError(401, 'unauthorized', 'not signed in');
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = 'Bearer ' + token;
    const actor = sessionStorage.getItem(ACTOR);
    if (actor && method !== 'GET') headers['X-Promptgate-Actor'] = actor;
    const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      headers['Content-Type'] = (opts && opts.contentType) || 'application/json';
      init.body = typeof body === 'string' ? body : JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'network', 'the admin listener did not answer: ' + e.message);
    }
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
    if (!resp.ok) {
      const err = data && data.error ? data.error : {};
      const e = new APIError(resp.status, err.code || 'http_' + resp.status, err.message || ('HTTP ' + resp.status));
      e.data = data;
      if (resp.status === 401 && !(opts && opts.probe)) showLogin(refusedText(Boolean(token)), token);
      throw e;
    }
    return opts && opts.raw ? { data, text } : data;
  }

  function refusedText(hadToken) {
    return hadToken
      ? 'The admin API refused the token of this tab (401 unauthorized): it is not PROMPTGATE_ADMIN_TOKEN. Enter the right token.'
      : 'This admin listener has a token (PROMPTGATE_ADMIN_TOKEN): enter it to use the console.';
  }

  // showLogin shows the sign-in form; the token that was refused, if any, is forgotten.
  function showLogin(why, refused) {
    locked = true;
    if (refused && sessionStorage.getItem(TOKEN) === refused) sessionStorage.removeItem(TOKEN);
    $('page').hidden = true;
    $('login').hidden = false;
    $('logout').hidden = true;
    $('session-state').textContent = 'not signed in';
    $('login-why').textContent = why;
    $('login-token').focus();
  }

  // probe checks the credentials with a cheap call, then shows the page.
  async function probe() {
    const token = sessionStorage.getItem(TOKEN);
    const hadToken = Boolean(token);
    try {
      await api('GET', '/admin/tools', undefined, { probe: true });
    } catch (e) {
      if (e.status === 401) showLogin(refusedText(hadToken), token);
      else banner('The admin API answered ' + (e.status || 'nothing') + ' (' + e.code + '): ' + e.message);
      return;
    }
    locked = false;
    $('login').hidden = true;
    $('page').hidden = false;
    const actor = sessionStorage.getItem(ACTOR);
    $('session-state').textContent = hadToken ? 'signed in' + (actor ? ' as ' + actor : '') : 'no token configured (loopback only)';
    $('logout').hidden = !hadToken;
    if (!started && pageStart) {
      started = true;
      try { await pageStart(); } catch (e) { report(e); }
    }
  }

  // report shows a failed call in the banner (a 401 already shows the login form).
  function report(e) {
    if (e instanceof APIError && e.status === 401) return;
    banner(e instanceof APIError ? e.message + ' (' + e.code + ')' : String(e && e.message || e));
  }

  // every calls fn every ms while the tab is visible and signed in, never two at once.
  function every(ms, fn) {
    let busy = false;
    const tick = async () => {
      if (busy || locked || document.hidden) return;
      busy = true;
      try { await fn(); } catch (e) { report(e); } finally { busy = false; }
    };
    return setInterval(tick, ms);
  }

  // settleOpen answers the dialog's current opening (see modal); null when none waits.
  let settleOpen = null;

  // modal shows the dialog; with confirmLabel it resolves true when the operator confirms.
  function modal(title, body, confirmLabel, danger) {
    const d = $('dialog');
    if (settleOpen) settleOpen(); // an earlier opening closed, its close event not come yet
    $('dialog-title').textContent = title;
    clear($('dialog-body')).append(body);
    const ok = $('dialog-confirm');
    ok.hidden = !confirmLabel;
    ok.textContent = confirmLabel || '';
    ok.className = danger ? 'danger' : 'primary';
    $('dialog-cancel').textContent = confirmLabel ? 'Cancel' : 'Close';
    d.returnValue = '';
    return new Promise((resolve) => {
      // The close event comes in a later task: one of an earlier opening may arrive while this one
      // is shown, and must not answer it.
      const onClose = () => { if (!d.open) settle(); };
      const settle = () => {
        d.removeEventListener('close', onClose);
        if (settleOpen === settle) settleOpen = null;
        resolve(d.returnValue === 'confirm');
      };
      settleOpen = settle;
      d.addEventListener('close', onClose);
      d.showModal();
      scrollable($('dialog-body'));
      $('dialog-cancel').focus();
    });
  }

  // scrollable makes a box that scrolls a tab stop, so that a keyboard can scroll it too; one that does not
  // scroll is none.
  function scrollable(box) {
    if (box.scrollHeight > box.clientHeight + 1 || box.scrollWidth > box.clientWidth + 1) box.tabIndex = 0;
    else box.removeAttribute('tabindex');
  }

  // stacked labels each data cell of a table's body with its column's header (data-label), which the style
  // sheet shows beside the value when a narrow screen stacks the rows into cards (table.stack); a row's
  // header cell is the card's title. The cell's content moves into one span, the label's neighbour.
  function stacked(table) {
    const heads = [...table.tHead.rows[0].cells].map((c) => c.textContent);
    for (const row of table.tBodies[0].rows) {
      let col = 0;
      for (const cell of row.cells) {
        if (cell.tagName === 'TD' && cell.colSpan === 1 && heads[col] && !cell.dataset.label) {
          cell.dataset.label = heads[col];
          cell.append(el('span', { class: 'v' }, [...cell.childNodes]));
        }
        col += cell.colSpan;
      }
    }
    return table;
  }

  function pad(n, w) { return String(n).padStart(w || 2, '0'); }
  // fmtTime shows an RFC 3339 time in the browser's time zone, to the second.
  function fmtTime(iso) {
    if (!iso || iso.startsWith('0001-')) return '—';
    const d = new Date(iso);
    if (isNaN(d)) return iso;
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }
  function fmtSeconds(s) {
    if (!s) return '—';
    if (s < 0.001) return (s * 1e6).toFixed(0) + ' µs';
    if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + ' ms';
    return s.toFixed(2) + ' s';
  }
  function chars(s) { return Array.from(s || '').length; }
  function facts(dl, pairs) {
    clear(dl);
    for (const [k, v] of pairs) dl.append(el('dt', { text: k }), el('dd', {}, v instanceof Node ? v : String(v)));
    return dl;
  }

  // diffTable renders a unified diff (as the admin API's diff endpoint answers it) side by side: the older
  // version left, the newer right, changed lines paired row by row.
  function diffTable(unified, leftLabel, rightLabel) {
    const table = el('table', { class: 'diff' },
      el('caption', { class: 'visually-hidden', text: 'Differences: ' + leftLabel + ' (left) and ' + rightLabel + ' (right)' }),
      el('colgroup', {}, el('col', { class: 'ln' }), el('col'), el('col', { class: 'ln' }), el('col')),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', colspan: 2, text: leftLabel }), el('th', { scope: 'col', colspan: 2, text: rightLabel }))));
    const body = el('tbody');
    table.append(body);
    if (!unified) {
      body.append(el('tr', {}, el('td', { colspan: 4, text: 'The two versions are the same.' })));
      return table;
    }
    let l = 0, r = 0, dels = [], adds = [];
    const row = (ln, lt, lc, rn, rt, rc) => body.append(el('tr', {},
      el('td', { class: 'ln', text: ln }), el('td', { class: lc }, lt),
      el('td', { class: 'ln', text: rn }), el('td', { class: rc }, rt)));
    const flush = () => {
      for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
        const d = dels[i], a = adds[i];
        let dt = d === undefined ? '' : d, at = a === undefined ? '' : a;
        // A changed line pair marks what differs between the common head and tail.
        if (d !== undefined && a !== undefined) [dt, at] = marked(d, a);
        row(d === undefined ? '' : ++l, dt, d === undefined ? '' : 'del',
          a === undefined ? '' : ++r, at, a === undefined ? '' : 'add');
      }
      dels = []; adds = [];
    };
    const lines = unified.split('\n');
    if (lines[lines.length - 1] === '') lines.pop();
    for (const line of lines) {
      if (line.startsWith('--- ') || line.startsWith('+++ ')) continue;
      const h = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@/.exec(line);
      if (h) {
        flush();
        l = Number(h[1]) - 1; r = Number(h[2]) - 1;
        if (l < 0) l = 0;
        if (r < 0) r = 0;
        body.append(el('tr', { class: 'hunk' }, el('td', { colspan: 4, text: line })));
        continue;
      }
      if (line.startsWith('\\')) continue;
      const kind = line[0], text = line.slice(1);
      if (kind === '-') { if (adds.length) flush(); dels.push(text); }
      else if (kind === '+') adds.push(text);
      else { flush(); row(++l, text, '', ++r, text, ''); }
    }
    flush();
    return table;
  }

  // marked returns both lines as nodes with the part that differs (after the common head, before the
  // common tail) in a <mark>.
  function marked(a, b) {
    let head = 0;
    while (head < a.length && head < b.length && a[head] === b[head]) head++;
    let tail = 0;
    while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
    const part = (s) => [s.slice(0, head), s.length - tail > head ? el('mark', { text: s.slice(head, s.length - tail) }) : '', s.slice(s.length - tail)];
    return [part(a), part(b)];
  }

  // parseExact parses JSON keeping each number as written (1.0, 12345678901234567890, 1e400): a
  // number is held as its source text, which JSON.stringify writes back unchanged, so a definition
  // shown for editing says what is stored, not what a double makes of it.
  function parseExact(text) {
    return JSON.parse(text, (key, value, ctx) =>
      typeof value === 'number' && ctx && typeof ctx.source === 'string' ? JSON.rawJSON(ctx.source) : value);
  }

  // scanJSON reads text by the JSON grammar (RFC 8259, and no key twice in one object, as the admin
  // API reads it) and returns {error: {at, message}} at the first offset where it breaks, or
  // {paths}: where each member and element is, by its path as the admin API's messages write it
  // (toolCalls.rules[0].pattern): the key (start, end; an element's first character) and the value
  // (vstart, vend).
  function scanJSON(text) {
    const paths = new Map();
    let i = 0;
    const fail = (message) => { throw { at: i, message }; };
    const ws = () => { while (i < text.length && ' \t\n\r'.includes(text[i])) i++; };
    const string = () => {
      const start = i++;
      for (;;) {
        if (i >= text.length) { i = start; fail('a string that does not end: its closing " is missing'); }
        const c = text.charCodeAt(i);
        if (c === 0x22) { i++; return text.slice(start, i); }
        if (c === 0x5c) {
          const e = text[i + 1];
          if (e !== undefined && '"\\/bfnrt'.includes(e)) i += 2;
          else if (e === 'u' && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) i += 6;
          else fail('an escape JSON does not have (it has \\" \\\\ \\/ \\b \\f \\n \\r \\t and \\uXXXX)');
        } else if (c === 0x0a) fail('the line ends inside a string: its closing " is missing (or write a line break as \\n)');
        else if (c < 0x20) fail('a control character inside a string (write a tab as \\t)');
        else i++;
      }
    };
    const number = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
    const value = (path) => {
      ws();
      if (i >= text.length) fail('the text ends where a value should be');
      const c = text[i];
      if (c === '{' || c === '[') {
        const obj = c === '{', close = obj ? '}' : ']';
        i++;
        ws();
        if (text[i] === close) { i++; return; }
        const seen = new Set();
        for (let n = 0; ; n++) {
          ws();
          if (text[i] === close) fail('a comma before ' + close + ' (JSON has no comma after the last ' + (obj ? 'member' : 'element') + ')');
          let p, at = { start: i, end: i + 1 };
          if (obj) {
            if (text[i] !== '"') fail('a key in double quotes should be here');
            const key = JSON.parse(string());
            if (seen.has(key)) { i = at.start; fail('the key "' + key + '" a second time in one object'); }
            seen.add(key);
            p = path === '' ? key : path + '.' + key;
            at.end = i;
            ws();
            if (text[i] !== ':') fail('a colon should follow the key');
            i++;
            ws();
          } else p = path + '[' + n + ']';
          at.vstart = i;
          value(p);
          at.vend = i;
          paths.set(p, at);
          ws();
          if (text[i] === ',') { i++; continue; }
          if (text[i] === close) { i++; return; }
          fail(i >= text.length ? 'the text ends inside ' + (obj ? 'an object: a } is missing' : 'a list: a ] is missing')
            : 'a comma or ' + close + ' should follow the value');
        }
      }
      if (c === '"') { string(); return; }
      number.lastIndex = i;
      if ((c === '-' || (c >= '0' && c <= '9')) && number.test(text)) { i = number.lastIndex; return; }
      for (const lit of ['true', 'false', 'null']) if (text.startsWith(lit, i)) { i += lit.length; return; }
      fail('a value should be here: a string in double quotes, a number, true, false, null, { or [');
    };
    try {
      value('');
      ws();
      if (i < text.length) fail('more text after the end of the JSON value');
      return { paths };
    } catch (e) {
      if (e instanceof RangeError) return { error: { at: 0, message: 'nested too deeply to read' } };
      if (e instanceof Error) throw e;
      return { error: e };
    }
  }

  // lineCol is where offset at is in text: line and column (in characters), from 1.
  function lineCol(text, at) {
    const before = text.slice(0, at);
    const nl = before.lastIndexOf('\n');
    return { line: before.split('\n').length, col: Array.from(before.slice(nl + 1)).length + 1 };
  }

  function start(fn) { pageStart = fn; }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const tok = $('login-token').value.trim();
      const actor = $('login-actor').value.trim();
      // Header values are Latin-1: a browser refuses to send others.
      if (!/^[\x20-\x7e\xa0-\xff]*$/.test(actor) || !/^[\x21-\x7e]*$/.test(tok)) {
        $('login-why').textContent = 'The token and the name must be plain Latin-1 text (a browser sends no other in a header).';
        return;
      }
      if (tok) sessionStorage.setItem(TOKEN, tok);
      if (actor) sessionStorage.setItem(ACTOR, actor); else sessionStorage.removeItem(ACTOR);
      $('login-token').value = '';
      banner('');
      probe();
    });
    $('logout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN);
      sessionStorage.removeItem(ACTOR);
      showLogin('Signed out. The token was removed from this tab.');
    });
    probe();
  });

  window.PG = { el, svg, clear, api, banner, announce, report, every, modal, fmtTime, fmtSeconds, chars, facts, diffTable, stacked, scanJSON, parseExact, lineCol, start, APIError };
})();
