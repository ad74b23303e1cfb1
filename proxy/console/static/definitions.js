// Definitions: templates and protocols, their versions, a side-by-side diff of any two, activation
// and rollback after a confirmation that shows the diff against the active version, and the
// rollouts applied. An address #protocols/ID@N (an event's link) shows that version and what it
// changed. A protocol's version can be put in shadow (and taken out): the page shows what it would
// change over a window, what learn mode learned of the protocol's traffic, and the version learn
// mode proposes. New version… opens an editor on the active version's JSON: it is checked as JSON
// before anything is sent, saved as a version that is not active, then shown with its diff against
// the active one and the preview of a sample request under it (POST /admin/prompts/preview with the
// version as candidate), and activated only when asked.
'use strict';
(function () {
  const { el, clear, api, modal, fmtTime, diffTable, stacked, report, banner, announce, facts, scanJSON, parseExact, lineCol } = window.PG;
  const $ = (id) => document.getElementById(id);
  const kinds = ['protocols', 'templates'];
  let current = null; // {kind, name, entry}
  let editing = null; // {kind, name, saved}: the definition the editor is open on, and the version it saved
  const drafts = new Map(); // the editor's text by 'kind/name', kept while the page is open

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
    if (editing && (editing.kind !== kind || editing.name !== name)) closeEditor();
    else if (editing && editing.saved) savedState();
    for (const b of document.querySelectorAll('.side button')) b.setAttribute('aria-pressed', b.dataset.kind === kind && b.dataset.name === name ? 'true' : 'false');
    $('def').hidden = false;
    $('def-empty').hidden = true;
    $('def-title').textContent = label(kind, name);
    $('def-state').textContent = (entry.active ? 'Version ' + entry.active + ' is active' : 'No version is active') +
      (entry.rollbackTo ? '; a rollback re-activates version ' + entry.rollbackTo + '.' : '; there is no earlier version to roll back to.') +
      (entry.shadow ? ' Version ' + entry.shadow + ' is in shadow.' : '');
    const rb = $('def-rollback');
    rb.disabled = !entry.rollbackTo;
    rb.textContent = entry.rollbackTo ? 'Roll back to version ' + entry.rollbackTo + '…' : 'Roll back';
    const tbody = clear($('def-versions').tBodies[0]);
    for (const v of entry.versions.slice().reverse()) {
      const state = v.version === entry.active ? 'active' : v.version === entry.shadow ? 'in shadow' : v.version === entry.rollbackTo ? 'rollback target' : '';
      const canShadow = kind === 'protocols' && v.version !== entry.active && v.version !== entry.shadow;
      tbody.append(el('tr', { dataset: { version: v.version } },
        el('th', { scope: 'row', text: v.version }),
        el('td', { text: fmtTime(v.createdAt) }),
        el('td', { text: v.author || '—' }),
        el('td', { text: v.note || '' }),
        el('td', {}, state ? el('span', { class: 'badge ' + (state === 'active' ? 'ok' : 'warn'), text: state }) : ''),
        el('td', {},
          el('button', { type: 'button', on: { click: () => view(v.version) }, 'aria-label': 'View version ' + v.version }, 'View'), ' ',
          v.version === entry.active ? '' : el('button', { type: 'button', class: 'primary', on: { click: () => activate(v.version) }, 'aria-label': 'Activate version ' + v.version }, 'Activate…'),
          canShadow ? [' ', el('button', { type: 'button', on: { click: () => putInShadow(v.version) }, 'aria-label': 'Put version ' + v.version + ' in shadow' }, 'Shadow…')] : '')));
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
    const proto = kind === 'protocols';
    $('shadow-card').hidden = !proto;
    $('learn-card').hidden = !proto;
    if (proto) await Promise.all([loadShadow(), loadLearned()]);
  }

  // loadShadow shows the protocol's version in shadow and what it would change over the window chosen.
  async function loadShadow() {
    const entry = current.entry;
    $('shadow-state').textContent = entry.shadow
      ? 'Version ' + entry.shadow + ' is in shadow: every request routed to ' + current.name + ' is also judged by it, for the record only. Nothing it decides reaches the upstream or the client. Activating it ends the shadow.'
      : 'No version is in shadow. Put a version in shadow (Shadow… in the table) to see, on live traffic, what it would change before you activate it.';
    $('shadow-clear').hidden = !entry.shadow;
    $('shadow-clear').textContent = entry.shadow ? 'Stop the shadow of version ' + entry.shadow + '…' : 'Stop the shadow…';
    const data = await api('GET', '/admin/shadow?window=' + encodeURIComponent($('shadow-window').value) + '&protocol=' + encodeURIComponent(current.name));
    const tbody = clear($('shadow-changes').tBodies[0]);
    if (!data.changes.length) {
      tbody.append(el('tr', {}, el('td', { colspan: 7, class: 'muted', text: entry.shadow ? 'No difference yet in this window.' : 'Nothing: no version was in shadow in this window.' })));
    }
    for (const c of data.changes) {
      tbody.append(el('tr', {},
        el('th', { scope: 'row', class: 'mono', text: c.tool || '(the request)' }),
        el('td', {}, el('span', { class: 'badge', text: c.activeVerdict })),
        el('td', {}, el('span', { class: 'badge ' + (c.shadowVerdict === 'allowed' ? 'ok' : 'warn'), text: c.shadowVerdict + ' (v' + c.shadowVersion + ')' })),
        el('td', { class: 'mono', text: c.rule || '—' }),
        el('td', { class: 'reason', text: c.reason }),
        el('td', { text: c.count }),
        el('td', { class: 'mono', text: c.requests.join(', ') })));
    }
    stacked($('shadow-changes'));
  }

  // putInShadow asks, showing the diff against the active version, then puts version v in shadow.
  async function putInShadow(v) {
    const active = current.entry.active;
    const title = 'Put protocols/' + current.name + ' version ' + v + ' in shadow?';
    const what = el('p', { text: 'Every request routed to ' + current.name + ' is then also judged by version ' + v + ': the tools it would keep, the prompt it would build and every call of the answer. Nothing it decides reaches the upstream or the client; where it decides otherwise, the decision log says so.' +
      (current.entry.shadow ? ' Version ' + current.entry.shadow + ' leaves the shadow.' : '') + (active ? ' Differences from the active version ' + active + ' (left) to version ' + v + ' (right):' : '') });
    const ok = await modal(title, el('div', {}, what, active ? await diffBetween(active, v) : ''), 'Shadow version ' + v, false);
    if (!ok) return;
    const res = await api('POST', '/admin/protocols/' + encodeURIComponent(current.name) + '/shadow', { version: v });
    banner('In shadow: protocols/' + current.name + '@' + res.shadow + (res.previous ? ' (was ' + res.previous + ')' : '') + '.', 'info');
    announce('Version ' + res.shadow + ' is in shadow.');
    await Promise.all([loadLists(), select(current.kind, current.name)]);
  }

  async function stopShadow() {
    const v = current.entry.shadow;
    const ok = await modal('Take protocols/' + current.name + ' version ' + v + ' out of shadow?',
      el('p', { text: 'Requests are no longer judged by version ' + v + '. It stays stored, and can be put in shadow or activated again.' }), 'Stop the shadow', false);
    if (!ok) return;
    await api('DELETE', '/admin/protocols/' + encodeURIComponent(current.name) + '/shadow');
    banner('Version ' + v + ' of protocols/' + current.name + ' is no longer in shadow.', 'info');
    announce('The shadow stopped.');
    await Promise.all([loadLists(), select(current.kind, current.name)]);
  }

  // counted is "N" or "at least N" conversations.
  function convs(c) { return (c.conversationsAtLeast ? 'at least ' : '') + c.conversations; }
  function sourceText(s) { return s.source + (s.field ? ' (' + s.field + ')' : ''); }

  // loadLearned shows what learn mode learned of the protocol over the window chosen.
  async function loadLearned() {
    const tbody = clear($('learned').tBodies[0]);
    let data;
    try {
      data = await api('GET', '/admin/learn/' + encodeURIComponent(current.name) + '?since=' + encodeURIComponent($('learn-since').value));
    } catch (e) {
      if (e.code !== 'learn_off') throw e;
      $('learn-state').textContent = 'Learn mode keeps nothing on this instance: ' + e.message;
      $('learn-suggest').disabled = true;
      return;
    }
    $('learn-suggest').disabled = !data.requests;
    $('learn-state').textContent = data.requests
      ? 'Learned from ' + data.requests + ' requests since ' + fmtTime(data.since) + ': where each argument value occurred in the conversation, and the hosts, domains and IBAN countries found in it — counts, never the values.'
      : 'Nothing learned in this window. Learn mode runs while the protocol\'s onViolation is audit, or a version of it is in shadow.';
    for (const tool of data.tools) {
      tbody.append(el('tr', { class: 'group' },
        el('th', { scope: 'row', class: 'mono', text: tool.tool }),
        el('td', { text: tool.calls }), el('td', { text: convs(tool) }),
        el('td', { text: 'offered in ' + tool.offered + ' requests; at most ' + tool.maxPerConversation + ' calls in one conversation' }),
        el('td', { text: tool.undeclared ? tool.undeclared + ' values at paths the schema does not declare (not kept)' : '—' })));
      for (const a of tool.args) {
        tbody.append(el('tr', {},
          el('th', { scope: 'row', class: 'mono', text: tool.tool + ' · ' + a.path }),
          el('td', { text: a.calls }), el('td', { text: convs(a) }),
          el('td', { text: a.sets.map((s) => (s.sources.length ? s.sources.map(sourceText).join(' + ') : 'nowhere') + ': ' + s.calls).join('; ') || '—' }),
          el('td', { text: a.items.map((i) => i.kind + ' ' + i.name + ': ' + i.calls).join('; ') || '—' })));
      }
    }
    if (!data.tools.length) tbody.append(el('tr', {}, el('td', { colspan: 5, class: 'muted', text: 'No tool was offered or called in this window.' })));
    stacked($('learned'));
  }

  // suggest shows the version learn mode proposes: each proposal with its evidence, then the definition.
  async function suggest() {
    const since = $('learn-since').value;
    const sg = await api('GET', '/admin/protocols/' + encodeURIComponent(current.name) + '/suggest?since=' + encodeURIComponent(since));
    const rows = sg.proposals.map((p) => el('tr', {},
      el('th', { scope: 'row', text: p.kind + (p.rule ? ' ' + p.rule : '') }),
      el('td', { text: p.text }),
      el('td', { text: p.evidence.calls ? p.evidence.calls + ' calls in ' + convs(p.evidence) + ' conversations' : '—' }),
      el('td', { text: p.wouldBlock.calls ? p.wouldBlock.calls + ' calls' + (p.wouldBlock.requests && p.wouldBlock.requests.length ? ' (' + p.wouldBlock.requests.join(', ') + ')' : '') : 'none' })));
    const table = el('table', { class: 'stack', id: 'suggestions' },
      el('caption', { text: 'Proposals, from ' + sg.requests + ' requests learned since ' + fmtTime(sg.since) }),
      el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Proposal' }), el('th', { scope: 'col', text: 'What and why' }), el('th', { scope: 'col', text: 'Evidence' }), el('th', { scope: 'col', text: 'Would have blocked' }))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: 4, text: 'Nothing to propose: the active version already governs what was learned.' }))));
    stacked(table);
    await modal('Proposed version of protocols/' + current.name + ' (based on version ' + sg.basedOnVersion + ')', el('div', {},
      el('p', { text: 'Edit it, test it, add it as a version (promptgate protocols push), put it in shadow, then activate it.' }),
      el('div', { class: 'table-wrap' }, table),
      el('pre', { text: JSON.stringify(sg.definition, null, 2) })));
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

  // change asks, showing what the next request will get, then activates version v (rollback:
  // through the rollback endpoint, which re-activates the version active before the current one and
  // pops it from the activation history); it resolves true once the change is made.
  async function change(v, rollback) {
    const active = current.entry.active;
    const verb = rollback ? 'Re-activate' : 'Activate';
    const title = verb + ' ' + current.kind + '/' + current.name + ' version ' + v + ' (' + (active ? 'now active: ' + active : 'none active now') + ')?';
    const what = [];
    if (rollback) what.push(el('p', { text: 'Roll back re-activates the version that was active before the current one: version ' + v + '. Version ' + active + ' stays stored, and can be activated again.' }));
    what.push(el('p', { text: 'The next request gets version ' + v + '.' + (active ? ' Differences from the active version ' + active + ' (left) to version ' + v + ' (right):' : '') }));
    const ok = await modal(title, el('div', {}, what, active ? await diffBetween(active, v) : ''), verb + ' version ' + v, false);
    if (!ok) return false;
    const path = rollback ? '/rollback' : '/activate';
    const res = await api('POST', '/admin/' + current.kind + '/' + encodeURIComponent(current.name) + path, rollback ? {} : { version: v });
    banner((rollback ? 'Rolled back' : 'Activated') + ': ' + label(current.kind, current.name, res.active) + ' is active (was ' + res.previous + ').', 'info');
    announce(verb + 'd version ' + res.active + '.');
    await Promise.all([loadLists(), select(current.kind, current.name), loadRollouts()]);
    return true;
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

  // --- the editor of a new version ---

  // pathIn is the longest path of paths that an error message's line names (null: none): as a.b[0].c,
  // cut in two by ": " (toolCalls: rules[0].pattern), or as an unknown field "x" in a.b.
  function pathIn(line, paths) {
    let best = null;
    const consider = (p) => { if (paths.has(p) && (!best || p.length > best.length)) best = p; };
    const seg = /[A-Za-z_$][\w$-]*(?:\[\d+\])*/g;
    for (const text of [line, line.replace(/([\w\]]): (?=[A-Za-z_$])/g, '$1.')]) {
      for (const m of text.matchAll(/[A-Za-z_$][\w$-]*(?:\[\d+\])*(?:\.[A-Za-z_$][\w$-]*(?:\[\d+\])*)*/g)) {
        const parts = m[0].match(seg);
        for (let a = 0; a < parts.length; a++) for (let b = a + 1; b <= parts.length; b++) consider(parts.slice(a, b).join('.'));
      }
    }
    const u = /unknown field "([^"]+)"(?: in ([\w$.\[\]-]+))?/.exec(line);
    if (u) consider(u[2] ? u[2] + '.' + u[1] : u[1]);
    return best;
  }

  // showInEditor selects text[start, end) in the editor, scrolled to it, and focuses it.
  function showInEditor(start, end) {
    const ta = $('edit-text');
    ta.focus();
    ta.setSelectionRange(start, end);
    const lh = parseFloat(getComputedStyle(ta).lineHeight) || 19;
    ta.scrollTop = Math.max(0, (lineCol(ta.value, start).line - 3) * lh);
  }

  // problems shows a list of problems under a lead line in box; each may carry [label, start, end]:
  // a button that shows that place in the editor.
  function problems(box, lead, items) {
    clear(box).append(el('p', { text: lead }), el('ul', {}, items.map(([text, at]) => el('li', {}, el('span', { text }),
      at ? [' ', el('button', { type: 'button', class: 'link', on: { click: () => showInEditor(at[1], at[2]) } }, at[0])] : ''))));
    box.hidden = false;
  }

  function editorErrors(lead, items) {
    problems($('edit-errors'), lead, items);
    $('edit-text').setAttribute('aria-invalid', 'true');
    $('edit-text').setAttribute('aria-describedby', 'edit-errors edit-help');
  }

  function clearEditorErrors() {
    clear($('edit-errors')).hidden = true;
    $('edit-text').removeAttribute('aria-invalid');
    $('edit-text').setAttribute('aria-describedby', 'edit-help');
  }

  const draftKey = () => editing.kind + '/' + editing.name;

  // openEditor opens the editor on the selected definition: the draft kept for it, else the active
  // version's JSON (the latest version's when none is active), pretty-printed.
  async function openEditor() {
    const { kind, name, entry } = current;
    editing = { kind, name, saved: 0 };
    const from = entry.active || entry.versions[entry.versions.length - 1].version;
    let text = drafts.get(draftKey());
    $('edit-from').textContent = text !== undefined ? 'Your draft, as you left it.'
      : 'A copy of version ' + from + (from === entry.active ? ', the active one' : ', the latest (none is active)') + ': change it, then save it as a new version.';
    if (text === undefined) {
      const got = await api('GET', '/admin/' + kind + '/' + encodeURIComponent(name) + '/versions/' + from, undefined, { raw: true });
      text = JSON.stringify(parseExact(got.text).body, null, 2) + '\n';
      drafts.set(draftKey(), text);
    }
    $('edit-title').textContent = 'New version of ' + label(kind, name);
    $('edit-text').value = text;
    clearEditorErrors();
    $('edit-result').hidden = true;
    $('edit-card').hidden = false;
    $('edit-text').focus();
    $('edit-text').setSelectionRange(0, 0);
    $('edit-text').scrollTop = 0;
  }

  function closeEditor() {
    editing = null;
    $('edit-card').hidden = true;
  }

  // save checks the editor's text as JSON, then stores it as a new version (not active); the text
  // stays in the editor whatever happens.
  async function save() {
    const text = $('edit-text').value;
    const scan = scanJSON(text);
    if (scan.error) {
      const { line, col } = lineCol(text, scan.error.at);
      const where = 'line ' + line + ', column ' + col;
      editorErrors('This is not valid JSON, so nothing was sent:', [['At ' + where + ': ' + scan.error.message + '.', ['Show ' + where + ' in the editor', scan.error.at, scan.error.at + 1]]]);
      $('edit-text').setSelectionRange(scan.error.at, scan.error.at);
      announce('Not saved: the JSON breaks at ' + where + '.');
      return;
    }
    const { kind, name } = editing;
    const note = $('edit-note').value.trim();
    $('edit-save').disabled = true;
    let res;
    try {
      res = await api('POST', '/admin/' + kind + '/' + encodeURIComponent(name) + '/versions' + (note ? '?note=' + encodeURIComponent(note) : ''), text);
    } catch (e) {
      if (e.status === 401) return;
      editorErrors('The admin API did not store it (' + (e.status || 'no answer') + ' ' + e.code + '):', apiProblems(e, scan.paths));
      announce('Not saved: the admin API refused the definition.');
      return;
    } finally {
      $('edit-save').disabled = false;
    }
    clearEditorErrors();
    await saved(res.version);
  }

  // apiProblems are the lines of an error answer, each with a button to the place it names when the
  // text has it (the error's param, else the longest path the line names).
  function apiProblems(e, paths) {
    const param = e.data && e.data.error && e.data.error.param;
    const lines = e.message.split('\n').filter((l) => l.trim());
    return lines.map((line) => {
      const p = param && lines.length === 1 && paths.has(param) ? param : pathIn(line, paths);
      return [line, p ? ['Show ' + p + ' in the editor', paths.get(p).start, paths.get(p).end] : null];
    });
  }

  // saved shows the version just stored: its diff against the active one, the preview of the sample
  // request under it, and the offer to activate it.
  async function saved(v) {
    editing.saved = v;
    const { kind, name } = editing;
    await Promise.all([loadLists(), select(kind, name)]);
    const active = current.entry.active;
    clear($('edit-diff')).append(active ? await diffBetween(active, v) : el('p', { class: 'muted', text: 'No version is active: there is nothing to compare with.' }));
    $('edit-protocol-field').hidden = kind !== 'templates';
    if (kind === 'templates') await protocolsOf(name);
    $('edit-result').hidden = false;
    $('edit-saved').focus();
    announce('Saved as version ' + v + ', not active.');
    await preview();
  }

  // protocolsOf fills the protocol choice of a template's preview: every protocol, the first whose
  // active version is based on the template chosen.
  async function protocolsOf(template) {
    const sel = clear($('edit-protocol'));
    sel.append(el('option', { value: '', text: 'as the request is routed' }));
    let pick = '';
    for (const p of (await api('GET', '/admin/protocols')).protocols) {
      sel.append(el('option', { value: p.name, text: p.name }));
      if (pick || !p.active) continue;
      const rec = await api('GET', '/admin/protocols/' + encodeURIComponent(p.name) + '/versions/' + p.active);
      if (rec.body && rec.body.promptTemplate && rec.body.promptTemplate.base === template) pick = p.name;
    }
    sel.value = pick;
  }

  const sampleRequest = {
    model: 'gpt-4o-mini',
    messages: [{ role: 'system', content: 'You are the support assistant of Example Ltd.' }, { role: 'user', content: 'Where is my order?' }],
    tools: [{ type: 'function', function: { name: 'web_fetch', description: 'Fetch a page', parameters: { type: 'object', properties: { url: { type: 'string' } } } } }],
  };

  // preview asks for the exact request the proxy would send upstream for the sample if the saved
  // version were active, and shows who decided it, the tools and the system prompt, and the body
  // byte for byte.
  async function preview() {
    const out = clear($('edit-preview'));
    const sample = $('edit-sample').value;
    const scan = scanJSON(sample);
    if (scan.error) {
      const { line, col } = lineCol(sample, scan.error.at);
      problems(out.appendChild(el('div', { class: 'problems' })), 'The sample request is not valid JSON, so nothing was sent:', [['At line ' + line + ', column ' + col + ': ' + scan.error.message + '.']]);
      return;
    }
    const { kind, name, saved: v } = editing;
    const protocol = kind === 'protocols' ? name : $('edit-protocol').value;
    const body = '{"request":' + sample + (protocol ? ',"protocol":' + JSON.stringify(protocol) : '') + ',"candidate":' + JSON.stringify({ kind, name, version: v }) + '}';
    let res;
    try {
      res = await api('POST', '/admin/prompts/preview', body, { raw: true });
    } catch (e) {
      if (e.status === 401) return;
      problems(out.appendChild(el('div', { class: 'problems' })), 'The preview refused the sample request (' + (e.status || 'no answer') + ' ' + e.code + '):', e.message.split('\n').map((l) => [l]));
      return;
    }
    const r = res.data;
    const up = scanJSON(res.text).paths.get('upstreamRequest');
    const mine = kind === 'protocols' ? r.protocolVersion === v : r.templateName === name && r.templateVersion === v;
    const systems = ((r.upstreamRequest || {}).messages || []).filter((m) => m.role === 'system')
      .map((m) => typeof m.content === 'string' ? m.content : JSON.stringify(m.content));
    out.append(
      mine ? '' : el('p', { class: 'problems', text: 'This request runs under protocol ' + r.protocolId + ' with template ' + r.templateName + ': version ' + v + ' of ' + name + ' is not in it. Choose a protocol based on ' + name + '.' }),
      facts(el('dl', { class: 'facts' }), [
        ['Protocol', r.protocolId + '@' + r.protocolVersion + (kind === 'protocols' && mine ? ' (the new version)' : '')],
        ['Template', r.templateName + '@' + r.templateVersion + (kind === 'templates' && mine ? ' (the new version)' : '')],
        ['Tools kept', r.tools.kept.length ? r.tools.kept.join(', ') : 'none'],
        ['Tools removed', r.tools.removed.length ? r.tools.removed.map((t) => t.name + ' (' + t.reason + ')').join(', ') : 'none'],
        ['Prompt', r.sizes.filledChars + ' characters'],
      ]),
      el('h4', { text: 'The system prompt sent upstream' }),
      el('pre', { class: 'wrap', text: systems.join('\n\n') || '(none)' }),
      el('details', {}, el('summary', { text: 'The exact upstream body' }), el('pre', { class: 'wrap', text: up ? res.text.slice(up.vstart, up.vend) : '' })));
  }

  // savedState says whether the version the editor saved is active (as the selected entry has it),
  // and offers to activate it while it is not.
  function savedState() {
    const v = editing.saved, active = current.entry.active, on = active === v;
    $('edit-saved').textContent = 'Version ' + v + ' of ' + label(editing.kind, editing.name) + (on ? ' is active' : ' is stored, not active');
    $('edit-state').textContent = on ? 'The next request gets version ' + v + '.'
      : 'Requests get ' + (active ? 'version ' + active : 'no version') + ' until you activate it.' +
        (active ? ' Below: its differences from the active version ' + active + ' (left), then a request as the proxy would send it with version ' + v + ' active.' : '');
    $('edit-activate').hidden = on;
    $('edit-activate').textContent = 'Activate version ' + v + '…';
  }

  async function activateSaved() {
    if (await change(editing.saved, false)) $('edit-saved').focus();
  }

  window.PG.start(async () => {
    $('def-rollback').addEventListener('click', rollback);
    $('def-new').addEventListener('click', () => openEditor().catch(report));
    $('edit-close').addEventListener('click', () => { closeEditor(); $('def-new').focus(); });
    $('edit-text').addEventListener('input', () => { if (editing) drafts.set(draftKey(), $('edit-text').value); });
    $('edit-form').addEventListener('submit', (ev) => { ev.preventDefault(); save().catch(report); });
    $('edit-preview-form').addEventListener('submit', (ev) => { ev.preventDefault(); preview().catch(report); });
    $('edit-protocol').addEventListener('change', () => preview().catch(report));
    $('edit-activate').addEventListener('click', () => activateSaved().catch(report));
    $('edit-sample').value = JSON.stringify(sampleRequest, null, 2);
    $('shadow-clear').addEventListener('click', () => stopShadow().catch(report));
    $('shadow-window').addEventListener('change', () => loadShadow().catch(report));
    for (const id of ['shadow-form', 'learn-form']) $(id).addEventListener('submit', (ev) => ev.preventDefault());
    $('learn-since').addEventListener('change', () => loadLearned().catch(report));
    $('learn-suggest').addEventListener('click', () => suggest().catch(report));
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
