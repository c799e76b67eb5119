// corral's dashboard: one hand-written script, no framework. It reads the admin API and the
// OpenAI API with the keys its user gives it (kept in sessionStorage only), renders six views
// selected by the URL's hash, and polls only what the shown view needs.
//
// Every string from the server goes into the page through escapeHtml or textContent. The page is
// served with a strict Content-Security-Policy (no inline style), so sizes are set through the
// CSSOM (`element.style`) or with <meter>/<progress>, never with style attributes.
(() => {
  'use strict';

  const VIEWS = ['models', 'workers', 'memory', 'cache', 'activity', 'chat'];
  const STORAGE = { api: 'corral.apiKey', admin: 'corral.adminKey' };
  const NEEDS_ADMIN = 'needs the admin key';
  const MAX_ACTIVITY_ROWS = 200;
  /** How many of a model's last requests the cache view's recent share sums. */
  const RECENT_SHARE_REQUESTS = 20;
  const RECONNECT_MS = 2000;
  const DASH = '—';

  const $ = (id) => document.getElementById(id);

  const state = {
    view: 'models',
    /** The last answer of `GET /admin/access`; null until it comes. */
    access: null,
    /** The key that answer was for. */
    keyInUse: '',

    /** `GET /v1/models/status` data. */
    models: [],
    /** `GET /admin/workers` data. */
    workers: [],
    /** Model id → whether it reads images, from `GET /v1/models`. */
    vision: new Map(),
    /** Activity rows by request id, `started` and `finished` merged. */
    requests: new Map(),
    pulling: false,
    /** The text of the notice a failing poll put up, so that a later success clears only it. */
    pollNotice: null,
  };

  // ---------------------------------------------------------------------------------------------
  // Formatting

  function escapeHtml(value) {
    const entities = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
    return String(value ?? '').replace(/[&<>"']/g, (char) => entities[char]);
  }

  function formatBytes(bytes) {
    if (bytes == null) return DASH;
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let value = bytes;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
  }

  function formatDuration(secs) {
    if (secs == null) return DASH;
    if (secs < 1) return `${Math.round(secs * 1000)} ms`;
    if (secs < 60) return `${secs.toFixed(1)} s`;
    const whole = Math.floor(secs);
    const days = Math.floor(whole / 86400);
    const hours = Math.floor((whole % 86400) / 3600);
    const minutes = Math.floor((whole % 3600) / 60);
    if (days) return `${days}d ${hours}h`;
    if (hours) return `${hours}h ${minutes}m`;
    return whole % 60 ? `${minutes}m ${whole % 60}s` : `${minutes}m`;
  }

  const formatMs = (ms) => (ms == null ? DASH : formatDuration(ms / 1000));

  function formatNumber(value, digits = 0) {
    if (value == null) return DASH;
    return value.toLocaleString(undefined, {
      minimumFractionDigits: digits,
      maximumFractionDigits: digits,
    });
  }

  /** Parameter counts: 8.0B, 350.0M. */
  function formatCount(count) {
    for (const [size, suffix] of [[1e12, 'T'], [1e9, 'B'], [1e6, 'M'], [1e3, 'K']]) {
      if (count >= size) return `${(count / size).toFixed(1)}${suffix}`;
    }
    return String(count);
  }

  const formatPercent = (part, whole) => (whole > 0 ? `${((100 * part) / whole).toFixed(1)}%` : DASH);
  const formatClock = (ms) => new Date(ms).toLocaleTimeString([], { hour12: false });

  /** A sampling value: f32s arrive as 0.699999988, so four significant digits. */
  function formatSampling(value) {
    if (Array.isArray(value)) return JSON.stringify(value);
    return typeof value === 'number' ? String(Number(value.toPrecision(4))) : String(value);
  }

  /** A user agent in a few characters: the browser and its major version, or the first product. */
  function shortClient(userAgent) {
    const agent = (userAgent ?? '').trim();
    if (!agent) return DASH;
    if (agent.startsWith('Mozilla/')) {
      const browsers = [['Edg', 'Edge'], ['OPR', 'Opera'], ['Firefox', 'Firefox'], ['Chrome', 'Chrome'], ['Safari', 'Safari']];
      for (const [token, name] of browsers) {
        const match = agent.match(new RegExp(`${token}/(\\d+)`));
        if (match) return `${name} ${match[1]}`;
      }
    }
    const product = agent.match(/^\S+(?: \d[\w.]*)?/)[0];
    return product.length > 32 ? `${product.slice(0, 31)}…` : product;
  }

  function parseJson(text) {
    try {
      return JSON.parse(text);
    } catch {
      return null;
    }
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // ---------------------------------------------------------------------------------------------
  // Keys, requests and access

  function storedKey(which) {
    return sessionStorage.getItem(STORAGE[which]) || '';
  }

  function storeKey(which, value) {
    if (value) sessionStorage.setItem(STORAGE[which], value);
    else sessionStorage.removeItem(STORAGE[which]);
  }

  /** The admin key is accepted everywhere an API key is, so it wins when both are set. */
  const bearer = () => storedKey('admin') || storedKey('api');

  /** fetch with the key. A 401 means the key was changed or revoked: access is asked again. */
  async function api(path, options = {}) {
    const headers = new Headers(options.headers);
    const key = bearer();
    if (key) headers.set('Authorization', `Bearer ${key}`);
    const response = await fetch(path, { ...options, headers, cache: 'no-store' });
    if (response.status === 401) recheckAccess();
    return response;
  }

  /** An error response's `error.message` (OpenAI's and Anthropic's shape), else its text. */
  async function errorMessage(response) {
    const text = await response.text().catch(() => '');
    const message = parseJson(text)?.error?.message;
    return message || text.trim() || `${response.status} ${response.statusText}`;
  }

  async function getJson(path) {
    const response = await api(path);
    if (!response.ok) throw new Error(await errorMessage(response));
    return response.json();
  }

  async function postJson(path, body) {
    const options = { method: 'POST' };
    if (body !== undefined) {
      options.headers = { 'Content-Type': 'application/json' };
      options.body = JSON.stringify(body);
    }
    const response = await api(path, options);
    if (!response.ok) throw new Error(await errorMessage(response));
    return response;
  }

  /** A model id in a path: `org/name` stays two segments, each encoded. */
  const modelPath = (id) => id.split('/').map(encodeURIComponent).join('/');

  const accessLevel = (access) => (!access.read ? 'locked' : access.operate ? 'admin' : 'read-only');
  const canOperate = () => Boolean(state.access?.operate);

  let accessCheck = null;

  /** Asks `/admin/access` once, however many 401s arrive together. */
  function recheckAccess() {
    accessCheck ??= checkAccess().finally(() => {
      accessCheck = null;
    });
    return accessCheck;
  }

  async function checkAccess() {
    try {
      const response = await fetch('/admin/access', {
        headers: bearer() ? { Authorization: `Bearer ${bearer()}` } : {},
        cache: 'no-store',
      });
      if (!response.ok) throw new Error(await errorMessage(response));
      setAccess(await response.json());
    } catch (error) {
      notify(`Cannot reach the server: ${error.message}`, 'error');
      setTimeout(recheckAccess, 5000);
    }
  }

  function setAccess(access) {
    const level = accessLevel(access);
    // A 401 from one route while the key still reads must not restart everything in a loop:
    // only a new level or a new key does.
    const changed = !state.access || level !== accessLevel(state.access) || bearer() !== state.keyInUse;
    state.access = access;
    state.keyInUse = bearer();
    const badge = $('access');
    badge.textContent = level;
    badge.className = `access ${level}`;
    const locked = level === 'locked';
    $('locked').hidden = !locked;
    $('nav').hidden = locked;
    showView(locked ? null : state.view);
    applyOperate();
    if (!changed) return;
    if (locked) {
      stopActivityStream();
      clearData();
    } else {
      // The key may have changed: the stream reconnects with it (its replay fills the table).
      startActivityStream();
      pollNow();
    }
  }

  /** Disables every operation for a key that may only read. */
  function applyOperate() {
    for (const button of document.querySelectorAll('[data-action]')) lockButton(button, canOperate());
    lockButton($('pull-start'), canOperate() && !state.pulling);
  }

  function lockButton(button, enabled) {
    button.disabled = !enabled;
    if (!canOperate()) button.title = NEEDS_ADMIN;
    else button.removeAttribute('title');
  }

  /** The attributes of an action button rendered as HTML, matching applyOperate. */
  const operateAttrs = () => (canOperate() ? '' : ` disabled title="${NEEDS_ADMIN}"`);

  /** Once the key is gone, nothing read with it stays in the page. */
  function clearData() {
    state.requests.clear();
    state.models = [];
    state.workers = [];
    for (const [table, columns] of [['models', 10], ['workers', 13], ['cache', 9], ['activity', 11]]) {
      $(table).tBodies[0].innerHTML = `<tr class="empty"><td colspan="${columns}">Loading…</td></tr>`;
    }
    for (const table of ['mem-workers', 'mem-evictions', 'mem-recent']) $(table).tBodies[0].replaceChildren();
    $('log').textContent = '';
    $('chat-model').replaceChildren();
    chat.optionsKey = '';
    newChat();
  }

  // ---------------------------------------------------------------------------------------------
  // Notice and confirmation

  let noticeTimer = null;

  function notify(text, kind = 'info') {
    const notice = $('notice');
    notice.textContent = text;
    notice.className = `notice ${kind}`;
    clearTimeout(noticeTimer);
    // Successes fade; errors stay until something replaces them.
    if (kind === 'ok') noticeTimer = setTimeout(() => notify(''), 10000);
  }

  /** Resolves true when the operator confirms; Escape or Cancel resolve false. */
  function confirmAction(text) {
    const dialog = $('confirm');
    if (dialog.open) return Promise.resolve(false);
    $('confirm-text').textContent = text;
    // Escape closes without touching returnValue, so a previous "yes" must not linger.
    dialog.returnValue = '';
    dialog.showModal();
    // The harmless answer has the focus, so a stray Enter does not confirm.
    $('confirm-no').focus();
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => resolve(dialog.returnValue === 'yes'), { once: true });
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Views and polling

  function routeFromHash() {
    const name = location.hash.slice(1);
    return VIEWS.includes(name) ? name : 'models';
  }

  /** Shows one view (none when `name` is null) and marks its link as the current page. */
  function showView(name) {
    for (const view of VIEWS) $(`view-${view}`).hidden = view !== name;
    for (const link of $('nav').querySelectorAll('a')) {
      if (link.hash === `#${name}`) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
  }

  function onHashChange() {
    state.view = routeFromHash();
    // Until access is known the skeletons show; once locked, no view does.
    if (state.access && !state.access.read) return;
    showView(state.view);
    // Keyboard and screen reader users land at the top of the view they chose.
    $(`h-${state.view}`).focus();
    renderFromState();
    pollNow();
  }

  const isView = (...names) => names.includes(state.view);

  /** What each view needs, and how often; the models list feeds every view and the chat. */
  const tasks = [
    { every: 2000, when: () => true, run: refreshModels },
    { every: 2000, when: () => isView('workers', 'cache'), run: refreshWorkers },
    { every: 2000, when: () => isView('memory'), run: refreshMemory },
    { every: 10000, when: () => isView('activity'), run: refreshHistory },
    { every: 5000, when: () => isView('activity'), run: refreshLogs },
    { every: 30000, when: () => isView('chat'), run: refreshVision },
  ].map((task) => ({ ...task, due: 0, busy: false }));

  /** Runs each task that is due, never two of one at once, and nothing in a hidden tab. */
  function heartbeat() {
    if (document.visibilityState !== 'visible' || !state.access?.read) return;
    const now = Date.now();
    for (const task of tasks) {
      if (task.busy || now < task.due || !task.when()) continue;
      task.busy = true;
      task.due = now + task.every;
      task
        .run()
        .then(() => pollSucceeded(), pollFailed)
        .finally(() => {
          task.busy = false;
        });
    }
  }

  function pollNow() {
    for (const task of tasks) task.due = 0;
    heartbeat();
  }

  function pollFailed(error) {
    const text = `Refreshing failed: ${error.message}`;
    if ($('notice').textContent && $('notice').textContent !== state.pollNotice) return;
    state.pollNotice = text;
    notify(text, 'error');
  }

  function pollSucceeded() {
    if (state.pollNotice && $('notice').textContent === state.pollNotice) notify('');
    state.pollNotice = null;
  }

  // ---------------------------------------------------------------------------------------------
  // Table rows that survive refreshes

  const renderedHtml = new WeakMap();
  const rowTemplate = document.createElement('template');

  /**
   * Makes `tbody` hold one row per item, keyed by `data-ATTR`, in the items' order. Only the
   * cells whose content changed are replaced, so a poll that moves an uptime leaves the row's
   * buttons in place: they keep the focus, and a click aimed at one does not land on a node
   * that has just been swapped out.
   */
  function syncRows(tbody, items, { attr, key, row, columns, empty }) {
    for (const tr of [...tbody.rows]) if (!(attr in tr.dataset)) tr.remove();
    const existing = new Map([...tbody.rows].map((tr) => [tr.dataset[attr], tr]));
    let previous = null;
    for (const item of items) {
      const id = String(key(item));
      let tr = existing.get(id);
      existing.delete(id);
      if (!tr) {
        tr = document.createElement('tr');
        tr.dataset[attr] = id;
      }
      setRowHtml(tr, row(item));
      const next = previous ? previous.nextElementSibling : tbody.firstElementChild;
      if (tr !== next) tbody.insertBefore(tr, next);
      previous = tr;
    }
    for (const tr of existing.values()) tr.remove();
    if (!items.length) {
      tbody.innerHTML = `<tr class="empty"><td colspan="${columns}">${escapeHtml(empty)}</td></tr>`;
    }
  }

  function setRowHtml(tr, html) {
    if (renderedHtml.get(tr) === html) return;
    renderedHtml.set(tr, html);
    const focused = tr.contains(document.activeElement) ? document.activeElement.dataset.action : null;
    rowTemplate.innerHTML = `<tr>${html}</tr>`;
    const cells = [...rowTemplate.content.firstElementChild.cells];
    if (cells.length !== tr.cells.length) {
      tr.replaceChildren(...cells);
    } else {
      cells.forEach((cell, index) => {
        if (!cell.isEqualNode(tr.cells[index])) tr.cells[index].replaceWith(cell);
      });
    }
    // A replaced cell took its focused button with it: focus its successor.
    if (focused && !tr.contains(document.activeElement)) tr.querySelector(`[data-action="${focused}"]`)?.focus();
  }

  /** Rows without buttons are simply rewritten. */
  function fillBody(tbody, rowsHtml, columns, empty) {
    tbody.innerHTML = rowsHtml.length
      ? rowsHtml.map((html) => `<tr>${html}</tr>`).join('')
      : `<tr class="empty"><td colspan="${columns}">${escapeHtml(empty)}</td></tr>`;
  }

  const numCell = (value, digits = 0) => `<td class="num">${formatNumber(value, digits)}</td>`;
  const bytesCell = (bytes) => `<td class="num">${formatBytes(bytes)}</td>`;
  const stateCell = (name) => `<td class="state"><span class="dot ${escapeHtml(name)}"></span>${escapeHtml(name)}</td>`;

  function actionButton(action, label, model) {
    return `<button type="button" data-action="${action}" aria-label="${escapeHtml(`${label} ${model}`)}"${operateAttrs()}>${label}</button>`;
  }

  // ---------------------------------------------------------------------------------------------
  // Models

  async function refreshModels() {
    const status = await getJson('/v1/models/status');
    state.models = status.data;
    renderModels(status);
    updateChatModels();
  }

  function renderModels(status) {
    const loaded = status.data.filter((model) => model.loaded).length;
    $('models-summary').textContent = `${status.data.length} models · ${loaded} loaded · workers hold ${formatBytes(status.memory.used_bytes)} of ${formatBytes(status.memory.ceiling_bytes)}`;
    syncRows($('models').tBodies[0], status.data, {
      attr: 'model',
      key: (model) => model.id,
      row: modelRow,
      columns: 10,
      empty: 'No models found',
    });
  }

  function modelRow(model) {
    const servable = model.unservable
      ? `<td class="wrap bad">${escapeHtml(model.unservable)}</td>`
      : '<td>yes</td>';
    return `<th scope="row" class="mono" title="${escapeHtml(model.path)}">${escapeHtml(model.id)}<span class="sub">${escapeHtml(model.kind)} · ${escapeHtml(model.source)}</span></th>
      ${modelFormatCell(model)}
      ${bytesCell(model.size_bytes)}
      ${servable}
      ${stateCell(model.state)}
      <td>${model.loaded ? 'yes' : 'no'}${model.pinned ? ' · <strong>pinned</strong>' : ''}</td>
      ${bytesCell(model.memory_bytes)}
      ${samplingCell(model.sampling_defaults)}
      ${settingsCell(model)}
      <td><div class="actions">
        ${actionButton('load', 'Load', model.id)}
        ${actionButton('unload', 'Unload', model.id)}
        ${actionButton('kill', 'Kill', model.id)}
        ${actionButton('pin', model.pinned ? 'Unpin' : 'Pin', model.id)}
      </div></td>`;
  }

  function modelFormatCell(model) {
    const kind = [model.format, model.architecture, model.quantization].filter(Boolean).join(' · ');
    const sizes = [];
    if (model.parameters != null) sizes.push(`${formatCount(model.parameters)} params`);
    if (model.active_parameters != null) sizes.push(`${formatCount(model.active_parameters)} active`);
    return `<td>${escapeHtml(kind || DASH)}<span class="sub">${escapeHtml(sizes.join(', '))}</span></td>`;
  }

  const SOURCE_LABELS = { config: 'cfg', ollama: 'ollama', gguf: 'gguf', 'generation_config.json': 'gen', default: 'def' };

  /** Only the values some source of the model set; the full list with sources is the tooltip. */
  function samplingCell(defaults) {
    const fields = Object.entries(defaults ?? {});
    const title = fields.map(([name, { value, source }]) => `${name} = ${formatSampling(value)} (${source})`).join('\n');
    const stated = fields.filter(([, { source }]) => source !== 'default');
    const shown = stated.length
      ? stated.map(([name, { value, source }]) => `<span class="kv">${escapeHtml(name)}=${escapeHtml(formatSampling(value))}<small> ${escapeHtml(SOURCE_LABELS[source] ?? source)}</small></span>`).join('')
      : '<span class="muted">corral defaults</span>';
    return `<td class="wrap" title="${escapeHtml(title)}">${shown}</td>`;
  }

  /** The model's serving settings; each is shown only when set (the worker's context once ready). */
  function settingsCell(model) {
    const parts = [];
    if (model.context_length != null) parts.push(`ctx ${formatNumber(model.context_length)}`);
    if (model.speculative != null) parts.push(`spec ${model.speculative}`);
    if (model.draft != null) parts.push(`draft ${model.draft}`);
    if (model.idle_timeout_secs != null) parts.push(`idle ${formatDuration(model.idle_timeout_secs)}`);
    if (model.mtp && model.mtp !== 'none') parts.push(`mtp ${model.mtp}`);
    return `<td class="mono">${parts.length ? parts.map(escapeHtml).join('<br>') : DASH}</td>`;
  }

  // ---------------------------------------------------------------------------------------------
  // Operations

  function stopSummary(stopped) {
    const ranks = stopped.ranks?.length ? `, ${stopped.ranks.length} more ranks` : '';
    return `pid ${stopped.pid}, ${stopped.step}, freed ${formatBytes(stopped.freed_bytes)} in ${formatMs(stopped.duration_ms)}${ranks}`;
  }

  /** What each row button asks, where it posts, and how its answer reads. */
  const ACTIONS = {
    load: {
      doing: () => 'Loading',
      ask: (model) => `Load ${model}? Its worker starts now and holds memory until it is unloaded or evicted.`,
      path: (model) => `/v1/models/${modelPath(model)}/load`,
      done: (model, result) => `Loaded ${model}${result.pid ? ` (pid ${result.pid})` : ''}`,
    },
    unload: {
      doing: () => 'Unloading',
      ask: (model) => `Unload ${model}? Its requests in flight finish first.`,
      path: (model) => `/v1/models/${modelPath(model)}/unload`,
      done: (model, result) => `Unloaded ${model}: ${stopSummary(result)}`,
    },
    kill: {
      doing: () => 'Killing',
      ask: (model) => `Kill ${model} now? Its requests in flight fail.`,
      path: (model) => `/admin/workers/${modelPath(model)}/kill`,
      done: (model, result) => `Killed ${model}: ${stopSummary(result)}`,
    },
    pin: {
      doing: (pinned) => (pinned ? 'Unpinning' : 'Pinning'),
      ask: (model, pinned) => (pinned
        ? `Unpin ${model}? It may then be evicted, or stopped when idle.`
        : `Pin ${model}? A pinned model is never evicted nor stopped for idleness.`),
      path: (model) => `/admin/workers/${modelPath(model)}/pin`,
      body: (pinned) => ({ pinned: !pinned }),
      done: (model, result, pinned) => `${pinned ? 'Unpinned' : 'Pinned'} ${model}`,
    },
  };

  async function runAction(action, model) {
    const spec = ACTIONS[action];
    const pinned = state.models.find((entry) => entry.id === model)?.pinned ?? false;
    if (!(await confirmAction(spec.ask(model, pinned)))) return;
    notify(`${spec.doing(pinned)} ${model}…`);
    try {
      const response = await postJson(spec.path(model), spec.body?.(pinned));
      const result = await response.json().catch(() => ({}));
      notify(spec.done(model, result, pinned), 'ok');
    } catch (error) {
      notify(`Could not ${action} ${model}: ${error.message}`, 'error');
    }
    pollNow();
  }

  function onActionClick(event) {
    const button = event.target.closest('button[data-action]');
    const row = button?.closest('tr[data-model]');
    if (!row || button.disabled) return;
    runAction(button.dataset.action, row.dataset.model);
  }

  // ---------------------------------------------------------------------------------------------
  // Pull

  async function startPull(event) {
    event.preventDefault();
    const model = $('pull-model').value.trim();
    if (!model || state.pulling || !canOperate()) return;
    if (!(await confirmAction(`Pull ${model} from the Hugging Face hub? Its files download into the local cache.`))) return;
    const view = $('pull-progress');
    view.textContent = `Asking the hub for ${model}…`;
    state.pulling = true;
    applyOperate();
    try {
      const response = await postJson('/admin/models/pull', { model });
      const outcome = await followPull(response, view);
      const served = outcome.served_as?.length
        ? `served as ${outcome.served_as.join(', ')}`
        : 'not served: the rescan failed, or another revision of it is served';
      view.textContent = `Pulled ${outcome.model} at ${String(outcome.commit).slice(0, 12)}, ${served}`;
      notify(`Pulled ${outcome.model}`, 'ok');
      $('pull-model').value = '';
    } catch (error) {
      view.textContent = `Pull failed: ${error.message}`;
      notify(`Pulling ${model} failed: ${error.message}`, 'error');
    } finally {
      state.pulling = false;
      applyOperate();
      pollNow();
    }
  }

  /** Reads the NDJSON progress until `done` (returned) or `error` (thrown). */
  async function followPull(response, view) {
    const pull = { model: '', total: 0, files: new Map(), current: '' };
    for await (const line of readLines(response)) {
      const event = parseJson(line);
      if (!event) continue;
      if (event.status === 'done') return event;
      if (event.status === 'error') throw new Error(event.message);
      trackPull(pull, event);
      renderPull(view, pull);
    }
    throw new Error('the progress stream ended before the pull did');
  }

  function trackPull(pull, event) {
    if (event.status === 'resolved') {
      pull.model = `${event.model}@${event.revision} (${String(event.commit).slice(0, 12)})`;
      pull.total = event.bytes;
      for (const file of event.files) pull.files.set(file, 0);
    } else if (event.status === 'downloading') {
      pull.files.set(event.file, event.bytes);
      pull.current = event.file;
    } else if (event.status === 'cached') {
      pull.files.set(event.file, event.total);
      pull.current = `${event.file} (cached)`;
    }
  }

  function renderPull(view, pull) {
    const done = [...pull.files.values()].reduce((sum, bytes) => sum + bytes, 0);
    const total = Math.max(pull.total, done);
    view.innerHTML = `<div>${escapeHtml(pull.model)}</div>
      <progress max="${total || 1}" value="${done}" aria-label="Download progress"></progress>${formatBytes(done)} of ${formatBytes(total)} (${formatPercent(done, total)})
      <div class="muted">${escapeHtml(pull.current)}</div>`;
  }

  // ---------------------------------------------------------------------------------------------
  // Workers

  async function refreshWorkers() {
    const list = await getJson('/admin/workers');
    state.workers = list.data;
    if (isView('workers')) renderWorkers();
    if (isView('cache')) renderCache();
  }

  function renderWorkers() {
    const running = state.workers.filter((worker) => worker.state !== 'not_running');
    syncRows($('workers').tBodies[0], running, {
      attr: 'model',
      key: (worker) => worker.model,
      row: workerRow,
      columns: 13,
      empty: 'No worker is running',
    });
  }

  function workerRow(worker) {
    const stats = worker.stats;
    const since = worker.state === 'ready' ? worker.uptime_secs : worker.state_secs;
    const stateNote = [worker.stop_reason, worker.pinned ? 'pinned' : ''].filter(Boolean).join(', ');
    const queue = stats
      ? `${stats.queued_requests} / ${stats.active_sequences}`
      : worker.stats_error ? `<span class="warn" title="${escapeHtml(worker.stats_error)}">no stats</span>` : DASH;
    return `<th scope="row" class="mono">${escapeHtml(worker.model)}<span class="sub">${escapeHtml(worker.kind)}</span></th>
      <td class="state"><span class="dot ${escapeHtml(worker.state)}"></span>${escapeHtml(worker.state)}<span class="sub">${escapeHtml(stateNote)}</span></td>
      <td class="pid">${worker.pid ?? DASH}</td>
      <td class="num" title="${worker.state === 'ready' ? 'up' : `${escapeHtml(worker.state)} for`}">${formatDuration(since)}</td>
      ${numCell(worker.restarts)}
      <td class="footprint">${formatBytes(worker.footprint_bytes)}</td>
      <td class="num">${formatBytes(worker.estimate_bytes)}</td>
      ${numCell(worker.leases)}
      <td class="num">${queue}</td>
      <td class="num">${stats ? `${formatNumber(stats.completed)}<span class="sub">${formatNumber(stats.cancelled)} cancelled</span>` : DASH}</td>
      <td class="wrap">${escapeHtml(worker.last_exit ?? DASH)}</td>
      <td>${rankList(worker.ranks, (rank) => `#${rank.rank} ${rank.host} pid ${rank.pid} ${formatBytes(rank.footprint_bytes)}`)}</td>
      <td><div class="actions">${actionButton('kill', 'Kill', worker.model)}</div></td>`;
  }

  function rankList(ranks, describe) {
    if (!ranks?.length) return DASH;
    return `<ul class="ranks">${ranks.map((rank) => `<li>${escapeHtml(describe(rank))}</li>`).join('')}</ul>`;
  }

  // ---------------------------------------------------------------------------------------------
  // Memory

  async function refreshMemory() {
    renderMemory(await getJson('/admin/memory'));
  }

  function renderMemory(memory) {
    const ceiling = memory.ceiling_bytes || 1;
    const position = (bytes) => `${Math.min(100, (100 * bytes) / ceiling)}%`;
    const used = $('mem-used');
    used.style.width = position(memory.used_bytes);
    used.classList.toggle('over-hard', memory.used_bytes > memory.hard_watermark_bytes);
    used.classList.toggle('over-soft', memory.used_bytes > memory.soft_watermark_bytes && memory.used_bytes <= memory.hard_watermark_bytes);
    $('mem-soft').style.left = position(memory.soft_watermark_bytes);
    $('mem-hard').style.left = position(memory.hard_watermark_bytes);

    const legend = `used ${formatBytes(memory.used_bytes)} of ${formatBytes(memory.ceiling_bytes)} (${formatPercent(memory.used_bytes, memory.ceiling_bytes)}) · soft watermark ${formatBytes(memory.soft_watermark_bytes)} · hard watermark ${formatBytes(memory.hard_watermark_bytes)}`;
    $('mem-bar').setAttribute('aria-label', legend);
    $('mem-legend').innerHTML = escapeHtml(legend) + (memory.refusing_loads ? ' · <strong class="bad">over the hard watermark: refusing loads</strong>' : '');
    $('mem-system').innerHTML = [
      ['System total', formatBytes(memory.system_total_bytes)],
      ['System available', formatBytes(memory.system_available_bytes)],
      ['Ceiling', formatBytes(memory.ceiling_bytes)],
    ].map(([name, value]) => `<div><dt>${name}</dt><dd>${value}</dd></div>`).join('');

    fillBody($('mem-workers').tBodies[0], memory.workers.map((worker) => `<th scope="row" class="mono">${escapeHtml(worker.model)}</th>
      <td class="num">${worker.pid ?? DASH}</td>${bytesCell(worker.bytes)}
      <td><meter min="0" max="${ceiling}" value="${worker.bytes}" title="${formatPercent(worker.bytes, ceiling)}"></meter> ${formatPercent(worker.bytes, ceiling)}</td>`), 4, 'No worker holds memory');

    fillBody($('mem-evictions').tBodies[0], Object.entries(memory.evictions).map(([reason, totals]) => `<th scope="row">${escapeHtml(reason)}</th>
      ${numCell(totals.count)}${bytesCell(totals.freed_bytes)}<td class="num">${formatMs(totals.duration_ms)}</td>`), 4, 'Nothing stopped yet');

    // The server lists them oldest first; the newest matter most.
    fillBody($('mem-recent').tBodies[0], [...memory.recent_evictions].reverse().map((stop) => `<th scope="row" class="mono">${escapeHtml(stop.model)}</th>
      <td class="num">${stop.pid}</td><td>${escapeHtml(stop.reason)}</td><td>${escapeHtml(stop.step)}</td>
      ${bytesCell(stop.freed_bytes)}<td class="num">${formatMs(stop.duration_ms)}</td>
      <td class="num">${formatBytes(stop.available_before_bytes)} → ${formatBytes(stop.available_after_bytes)}</td>
      <td>${rankList(stop.ranks, stoppedRank)}</td>`), 8, 'No evictions yet');
  }

  function stoppedRank(rank) {
    const end = rank.status ?? 'end not reported';
    return `#${rank.rank} ${rank.host} pid ${rank.pid} freed ${formatBytes(rank.freed_bytes)}, ${end}${rank.confirmed ? '' : ' (unconfirmed)'}`;
  }

  // ---------------------------------------------------------------------------------------------
  // Cache

  /** Cached over prompt tokens in each model's last finished requests, newest first. */
  function recentCacheShares() {
    const shares = new Map();
    const finished = [...state.requests.values()]
      .filter((request) => request.phase === 'finished' && request.model && request.prompt_tokens > 0)
      .sort((a, b) => b.id - a.id);
    for (const request of finished) {
      const share = shares.get(request.model) ?? { cached: 0, prompt: 0, count: 0, latest: request };
      if (share.count === RECENT_SHARE_REQUESTS) continue;
      share.cached += request.cached_tokens ?? 0;
      share.prompt += request.prompt_tokens;
      share.count += 1;
      shares.set(request.model, share);
    }
    return shares;
  }

  const divergedNote = (request) =>
    (request.diverged_at != null ? `, diverged at token ${formatNumber(request.diverged_at)}` : '');

  function renderCache() {
    const shares = recentCacheShares();
    const rows = new Map();
    for (const worker of state.workers) {
      if (worker.stats) rows.set(worker.model, { model: worker.model, cache: worker.stats.prefix_cache ?? null, ready: true });
    }
    for (const model of shares.keys()) if (!rows.has(model)) rows.set(model, { model, cache: null, ready: false });
    const sorted = [...rows.values()].sort((a, b) => a.model.localeCompare(b.model));
    syncRows($('cache').tBodies[0], sorted, {
      attr: 'model',
      key: (row) => row.model,
      row: (row) => cacheRow(row, shares.get(row.model)),
      columns: 9,
      empty: 'No worker is ready and no request was seen yet',
    });
  }

  function cacheRow({ model, cache, ready }, share) {
    const name = `<th scope="row" class="mono">${escapeHtml(model)}</th>`;
    const recent = share
      ? `<td class="num">${formatPercent(share.cached, share.prompt)}<span class="sub">last ${share.count}: ${formatNumber(share.cached)} of ${formatNumber(share.prompt)} tok; latest ${formatNumber(share.latest.cached_tokens ?? 0)}/${formatNumber(share.latest.prompt_tokens)}${divergedNote(share.latest)}</span></td>`
      : `<td class="num">${DASH}</td>`;
    if (!cache) {
      const why = ready ? 'no prefix cache' : 'worker not ready';
      return `${name}<td colspan="7" class="muted">${why}</td>${recent}`;
    }
    const backlog = cache.saves_enqueued - cache.saves_persisted - cache.save_drops;
    const errors = cache.load_errors ? `<span class="sub warn">${formatNumber(cache.load_errors)} bad files</span>` : '';
    return `${name}
      ${bytesCell(cache.ram_bytes)}${bytesCell(cache.disk_bytes)}
      <td class="num">${formatNumber(cache.disk_files)}${errors}</td>
      <td class="num">${formatPercent(cache.hit_tokens, cache.hit_tokens + cache.miss_tokens)}</td>
      <td class="num">${formatNumber(cache.hit_tokens)} / ${formatNumber(cache.miss_tokens)}</td>
      <td class="num">${formatNumber(cache.ram_evictions)} / ${formatNumber(cache.disk_evictions)}</td>
      <td class="num">${formatNumber(backlog)}<span class="sub">${formatNumber(cache.save_drops)} dropped</span></td>
      ${recent}`;
  }

  // ---------------------------------------------------------------------------------------------
  // Streams: fetch bodies read as they arrive (EventSource cannot send Authorization)

  async function* readText(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        yield decoder.decode(value, { stream: true });
      }
      const rest = decoder.decode();
      if (rest) yield rest;
    } finally {
      // A reader that stops early (`[DONE]`, a pull's outcome) closes the connection.
      reader.cancel().catch(() => {});
    }
  }

  async function* readLines(response) {
    let buffer = '';
    for await (const text of readText(response)) {
      buffer += text;
      const lines = buffer.split('\n');
      buffer = lines.pop();
      for (const line of lines) if (line.trim()) yield line;
    }
    if (buffer.trim()) yield buffer;
  }

  /** The data of each Server-Sent Event: events end at a blank line; data lines join with \n. */
  async function* readSse(response) {
    let buffer = '';
    for await (const text of readText(response)) {
      // A lone \r at the end may be the first half of \r\n: it waits for the next piece.
      buffer = (buffer + text).replace(/\r\n|\r(?!$)/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const data = sseData(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (data !== null) yield data;
      }
    }
  }

  function sseData(block) {
    const lines = block
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).replace(/^ /, ''));
    return lines.length ? lines.join('\n') : null;
  }

  // ---------------------------------------------------------------------------------------------
  // Activity

  let activityAbort = null;

  function startActivityStream() {
    stopActivityStream();
    activityAbort = new AbortController();
    followActivity(activityAbort.signal);
  }

  function stopActivityStream() {
    activityAbort?.abort();
    activityAbort = null;
  }

  /** Follows `/admin/activity` for as long as the page may read, reconnecting when it ends. */
  async function followActivity(signal) {
    while (!signal.aborted) {
      try {
        const response = await api('/admin/activity', { signal, headers: { Accept: 'text/event-stream' } });
        if (response.ok) {
          for await (const data of readSse(response)) {
            const event = parseJson(data);
            if (event) addActivity(event);
          }
        } else {
          response.body?.cancel();
        }
      } catch {
        // A dropped connection is retried below; an abort ends the loop.
      }
      if (!signal.aborted) await sleep(RECONNECT_MS);
    }
  }

  function addActivity(event) {
    const known = state.requests.get(event.id);
    // A reconnect replays finished events; a late `started` must not reopen a finished row.
    if (known?.phase === 'finished' && event.phase === 'started') return;
    const startedAt = known?.startedAt
      ?? (event.phase === 'started' ? event.at_ms : event.at_ms - (event.duration_ms ?? 0));
    state.requests.set(event.id, { ...known, ...event, startedAt });
    if (state.requests.size > MAX_ACTIVITY_ROWS) {
      const oldest = [...state.requests.keys()].sort((a, b) => a - b);
      for (const id of oldest.slice(0, state.requests.size - MAX_ACTIVITY_ROWS)) state.requests.delete(id);
    }
    scheduleActivityRender();
  }

  let activityRenderQueued = false;

  /** A replay brings a hundred events at once: they are drawn in one frame. */
  function scheduleActivityRender() {
    if (activityRenderQueued) return;
    activityRenderQueued = true;
    requestAnimationFrame(() => {
      activityRenderQueued = false;
      if (isView('activity')) renderActivity();
      if (isView('cache')) renderCache();
    });
  }

  /** Draws a newly shown view from what is already known, before its first poll answers. */
  function renderFromState() {
    if (isView('activity')) renderActivity();
    if (isView('cache')) renderCache();
    if (isView('workers')) renderWorkers();
  }

  function renderActivity() {
    const rows = [...state.requests.values()].sort((a, b) => b.id - a.id);
    syncRows($('activity').tBodies[0], rows, {
      attr: 'request',
      key: (request) => request.id,
      row: activityRow,
      columns: 11,
      empty: 'Waiting for requests…',
    });
  }

  function activityRow(request) {
    const finished = request.phase === 'finished';
    let status = '<span class="dot running"></span>running';
    if (finished) status = `<span class="${request.status >= 400 ? 'bad' : ''}">${request.status ?? DASH}</span>`;
    return `<td class="mono">${formatClock(request.startedAt)}</td>
      <td title="${escapeHtml(request.route)}">${escapeHtml(request.api)}</td>
      <td title="${escapeHtml(request.client)}">${escapeHtml(shortClient(request.client))}</td>
      <td class="mono">${escapeHtml(request.model || DASH)}</td>
      ${numCell(request.prompt_tokens)}${cachedCell(request)}${numCell(request.output_tokens)}
      ${numCell(request.ttft_ms)}${numCell(request.tokens_per_second, 1)}
      <td>${status}</td>
      <td class="num">${finished ? formatMs(request.duration_ms) : DASH}</td>`;
  }

  /** The cached tokens, and where the prompt parted from the cache when the worker could tell. */
  function cachedCell(request) {
    const diverged = request.diverged_at != null
      ? `<span class="sub warn">diverged at token ${formatNumber(request.diverged_at)}</span>`
      : '';
    return `<td class="num">${formatNumber(request.cached_tokens)}${diverged}</td>`;
  }

  async function refreshLogs() {
    const tail = await getJson('/admin/logs?lines=200');
    const log = $('log');
    // Follow the end only for a reader who has not scrolled up.
    const following = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent = tail.lines.length ? tail.lines.join('\n') : '(no lines yet)';
    if (following) log.scrollTop = log.scrollHeight;
  }

  // ---------------------------------------------------------------------------------------------
  // Charts: inline SVG polylines, stretched to their figure; labels are HTML beside them

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const CHART = { width: 300, height: 60, pad: 4 };

  async function refreshHistory() {
    const history = await getJson('/admin/history');
    const samples = history.samples ?? [];
    drawChart('chart-tps', samples, (sample) => sample.tokens_per_second, (value) => formatNumber(value, 1));
    drawChart('chart-ttft', samples, (sample) => sample.ttft_ms, (value) => `${formatNumber(value)} ms`);
    drawChart('chart-memory', samples, (sample) => sample.used_bytes, formatBytes);
    const span = samples.length > 1 ? (samples[samples.length - 1].at_ms - samples[0].at_ms) / 1000 : 0;
    for (const label of document.querySelectorAll('.chart-span')) label.textContent = span ? `−${formatDuration(span)}` : '';
  }

  function svgElement(name, attributes) {
    const element = document.createElementNS(SVG_NS, name);
    for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, value);
    return element;
  }

  /** Draws `pick` of each sample, 0 at the bottom and the maximum at the top. */
  function drawChart(id, samples, pick, format) {
    const { width, height, pad } = CHART;
    const values = samples.map(pick).filter((value) => value != null);
    const max = Math.max(0, ...values);
    const latest = samples.length ? pick(samples[samples.length - 1]) : null;
    $(`${id}-label`).textContent = samples.length ? `now ${format(latest)} · max ${format(max)}` : 'no samples yet';

    const first = samples[0]?.at_ms;
    const last = samples[samples.length - 1]?.at_ms;
    const x = (at) => (last > first ? ((at - first) / (last - first)) * width : width);
    const y = (value) => (max > 0 ? height - pad - (value / max) * (height - 2 * pad) : height - pad);
    // A sample without a value (no request, so no TTFT) breaks the line rather than dropping to 0.
    const segments = [[]];
    for (const sample of samples) {
      const value = pick(sample);
      if (value == null) {
        if (segments[segments.length - 1].length) segments.push([]);
      } else {
        segments[segments.length - 1].push([x(sample.at_ms), y(value)]);
      }
    }
    const stroke = { 'vector-effect': 'non-scaling-stroke' };
    const children = [
      svgElement('line', { x1: 0, y1: height - pad, x2: width, y2: height - pad, ...stroke }),
      svgElement('line', { x1: 0, y1: pad, x2: width, y2: pad, 'stroke-dasharray': '2 3', ...stroke }),
    ];
    for (const segment of segments) {
      if (segment.length === 1) {
        const [[cx, cy]] = segment;
        children.push(svgElement('circle', { cx, cy, r: 1.5 }));
      } else if (segment.length > 1) {
        const points = segment.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' ');
        children.push(svgElement('polyline', { points, ...stroke }));
      }
    }
    $(id).replaceChildren(...children);
  }

  // ---------------------------------------------------------------------------------------------
  // Chat

  const chat = {
    /** The conversation sent with each request (the system prompt is added at send time). */
    transcript: [],
    controller: null,
    /** The model options last rendered, so a poll does not rebuild an open <select>. */
    optionsKey: '',
  };

  function updateChatModels() {
    const select = $('chat-model');
    const models = state.models.filter((model) => model.kind === 'chat' && !model.unservable);
    const key = models.map((model) => `${model.id}:${model.loaded}`).join('\n');
    if (key === chat.optionsKey) return;
    chat.optionsKey = key;
    const chosen = select.value;
    if (!models.length) {
      select.replaceChildren(new Option('no chat model is servable', ''));
    } else {
      select.replaceChildren(...models.map((model) => new Option(model.loaded ? `${model.id} (loaded)` : model.id, model.id)));
      // Keep the user's choice; else start with a model that answers at once.
      const keep = models.some((model) => model.id === chosen);
      select.value = keep ? chosen : (models.find((model) => model.loaded) ?? models[0]).id;
    }
    updateImageInput();
  }

  async function refreshVision() {
    const list = await getJson('/v1/models');
    state.vision = new Map(list.data.map((model) => [model.id, Boolean(model.vision)]));
    updateImageInput();
  }

  /** The image input is usable only for a model that reads images. */
  function updateImageInput() {
    const reads = state.vision.get($('chat-model').value) === true;
    const input = $('chat-image');
    input.disabled = !reads;
    if (!reads) input.value = '';
    $('chat-image-hint').hidden = reads;
  }

  function readDataUrl(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result);
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  /** A plain string, or OpenAI's content parts when an image goes with the text. */
  async function userContent(text, file) {
    if (!file) return text;
    const parts = text ? [{ type: 'text', text }] : [];
    parts.push({ type: 'image_url', image_url: { url: await readDataUrl(file) } });
    return parts;
  }

  function appendMessage(role, content) {
    const message = document.createElement('div');
    message.className = `msg ${role}`;
    const label = document.createElement('div');
    label.className = 'msg-role';
    label.textContent = role;
    const body = document.createElement('div');
    body.className = 'msg-body';
    const parts = typeof content === 'string' ? [{ type: 'text', text: content }] : content;
    body.textContent = parts.filter((part) => part.type === 'text').map((part) => part.text).join('\n');
    message.append(label, body);
    for (const part of parts.filter((item) => item.type === 'image_url')) {
      const image = document.createElement('img');
      image.src = part.image_url.url;
      image.alt = 'attached image';
      message.append(image);
    }
    $('chat-transcript').append(message);
    message.scrollIntoView({ block: 'nearest' });
    return { message, body };
  }

  /** The latest assistant message carries #chat-answer. */
  function startAnswer() {
    $('chat-answer')?.removeAttribute('id');
    const answer = appendMessage('assistant', '');
    answer.body.id = 'chat-answer';
    return answer;
  }

  function shellQuote(text) {
    return `'${text.replace(/'/g, `'\\''`)}'`;
  }

  /**
   * The curl that repeats the request. The key stays a variable, in double quotes so the shell
   * expands it; the line is left out where the server needs no API key.
   */
  function curlCommand(body) {
    const parts = [`curl ${location.origin}/v1/chat/completions`, `-H 'Content-Type: application/json'`];
    if (state.access?.api_keys) parts.push('-H "Authorization: Bearer $CORRAL_API_KEY"');
    parts.push(`-d ${shellQuote(JSON.stringify(body))}`);
    return parts.join(' ');
  }

  function chatRequest(model, content) {
    const system = $('chat-system').value.trim();
    const messages = system ? [{ role: 'system', content: system }] : [];
    const body = {
      model,
      messages: [...messages, ...chat.transcript, { role: 'user', content }],
      stream: true,
      stream_options: { include_usage: true },
    };
    const temperature = $('chat-temperature').value;
    const maxTokens = $('chat-max-tokens').value;
    if (temperature !== '') body.temperature = Number(temperature);
    if (maxTokens !== '') body.max_tokens = Number(maxTokens);
    return body;
  }

  function setStreaming(streaming) {
    $('chat-send').disabled = streaming;
    $('chat-stop').disabled = !streaming;
    $('chat-answer')?.setAttribute('aria-busy', String(streaming));
  }

  function showChatError(message) {
    const error = $('chat-error');
    error.textContent = message;
    error.hidden = !message;
  }

  async function sendChat(event) {
    event.preventDefault();
    if (chat.controller) return;
    const model = $('chat-model').value;
    const input = $('chat-input');
    const text = input.value.trim();
    const file = $('chat-image').disabled ? null : $('chat-image').files[0];
    if (!model) return showChatError('No chat model to send to.');
    if (!text && !file) return showChatError('Write a message first.');
    showChatError('');

    const content = await userContent(text, file);
    const body = chatRequest(model, content);
    $('chat-curl').textContent = curlCommand(body);
    const question = appendMessage('user', content);
    // "New chat" during the stream replaces the transcript; this turn's ending stays in its own.
    const transcript = chat.transcript;
    transcript.push({ role: 'user', content });
    input.value = '';
    $('chat-image').value = '';

    const reply = await streamReply(body);
    if (reply) {
      transcript.push({ role: 'assistant', content: reply });
    } else {
      // Nothing came back: the unanswered turn leaves the conversation and its text returns.
      transcript.pop();
      question.message.classList.add('failed');
      if (!input.value) input.value = text;
    }
  }

  /** Streams one answer into the page; returns its text, or '' when none came. */
  async function streamReply(body) {
    const answer = startAnswer();
    const reasoning = $('chat-reasoning');
    const reasoningText = $('chat-reasoning-text');
    reasoning.hidden = true;
    reasoningText.textContent = '';
    $('chat-stats').textContent = 'waiting for the first token…';
    chat.controller = new AbortController();
    setStreaming(true);
    const started = performance.now();
    let firstAt = null;
    let text = '';
    let usage = null;
    try {
      const response = await api('/v1/chat/completions', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
        signal: chat.controller.signal,
      });
      if (!response.ok) throw new Error(await errorMessage(response));
      for await (const data of readSse(response)) {
        if (data === '[DONE]') break;
        const chunk = parseJson(data);
        if (!chunk) continue;
        // Past the headers, a failure arrives as an event of its own.
        if (chunk.error) throw new Error(chunk.error.message || 'the generation failed');
        const delta = chunk.choices?.[0]?.delta ?? {};
        if ((delta.content || delta.reasoning_content) && firstAt === null) firstAt = performance.now();
        if (delta.reasoning_content) {
          reasoning.hidden = false;
          reasoningText.textContent += delta.reasoning_content;
        }
        if (delta.content) {
          text += delta.content;
          answer.body.textContent = text;
        }
        if (chunk.usage) usage = chunk.usage;
      }
      $('chat-stats').textContent = chatStats(usage, started, firstAt);
    } catch (error) {
      if (error.name === 'AbortError') {
        $('chat-stats').textContent = `stopped · ${chatStats(usage, started, firstAt)}`;
      } else {
        $('chat-stats').textContent = '';
        showChatError(error.message);
      }
    } finally {
      setStreaming(false);
      chat.controller = null;
    }
    if (!text) answer.message.remove();
    return text;
  }

  /** Usage, time to first token and the decode rate (tokens after the first over their time). */
  function chatStats(usage, started, firstAt) {
    const end = performance.now();
    const parts = [];
    if (usage) {
      parts.push(`${formatNumber(usage.prompt_tokens)} prompt`);
      const cached = usage.prompt_tokens_details?.cached_tokens;
      if (cached) parts.push(`${formatNumber(cached)} cached`);
      parts.push(`${formatNumber(usage.completion_tokens)} output`);
    }
    if (firstAt !== null) parts.push(`TTFT ${formatNumber(firstAt - started)} ms`);
    const tokens = usage?.completion_tokens ?? 0;
    if (tokens > 1 && firstAt !== null && end > firstAt) {
      parts.push(`${formatNumber((tokens - 1) / ((end - firstAt) / 1000), 1)} tokens/s`);
    }
    parts.push(`${formatMs(end - started)} total`);
    return parts.join(' · ');
  }

  function newChat() {
    chat.controller?.abort();
    chat.transcript = [];
    $('chat-transcript').replaceChildren();
    $('chat-reasoning').hidden = true;
    $('chat-reasoning-text').textContent = '';
    $('chat-stats').textContent = '';
    showChatError('');
  }

  async function copyCurl() {
    const curl = $('chat-curl');
    try {
      await navigator.clipboard.writeText(curl.textContent);
      notify('Copied the curl command', 'ok');
    } catch {
      // The clipboard API needs a secure context; a LAN address over http is not one.
      const range = document.createRange();
      range.selectNodeContents(curl);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      notify('The command is selected: press Ctrl+C to copy it');
    }
  }

  function onChatKey(event) {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      $('chat-form').requestSubmit();
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Keys form

  function loadKeyInputs() {
    $('api-key').value = storedKey('api');
    $('admin-key').value = storedKey('admin');
  }

  function saveKeys(event) {
    event.preventDefault();
    storeKey('api', $('api-key').value.trim());
    storeKey('admin', $('admin-key').value.trim());
    notify('Keys saved for this tab', 'ok');
    recheckAccess();
  }

  function forgetKeys() {
    storeKey('api', '');
    storeKey('admin', '');
    loadKeyInputs();
    notify('Keys forgotten', 'ok');
    recheckAccess();
  }

  // ---------------------------------------------------------------------------------------------
  // Start: the skeleton of the current view shows at once; data follows the access check.

  function start() {
    loadKeyInputs();
    state.view = routeFromHash();
    showView(state.view);
    // Until the server says otherwise, nothing may be operated.
    applyOperate();

    $('keys').addEventListener('submit', saveKeys);
    $('forget-keys').addEventListener('click', forgetKeys);
    window.addEventListener('hashchange', onHashChange);
    document.addEventListener('click', onActionClick);
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') pollNow();
    });
    $('confirm-yes').addEventListener('click', () => $('confirm').close('yes'));
    $('confirm-no').addEventListener('click', () => $('confirm').close('no'));
    $('pull-form').addEventListener('submit', startPull);
    $('chat-form').addEventListener('submit', sendChat);
    $('chat-input').addEventListener('keydown', onChatKey);
    $('chat-model').addEventListener('change', updateImageInput);
    $('chat-stop').addEventListener('click', () => chat.controller?.abort());
    $('chat-new').addEventListener('click', newChat);
    $('chat-copy').addEventListener('click', copyCurl);

    setInterval(heartbeat, 500);
    recheckAccess();
  }

  start();
})();
