// The dashboard: reads the fleet, events and waves once, then follows the server's stream of committed changes.
// Every button is one control-API request; what it changed comes back through the stream like any other change.
import { ApiError, answer, follow, get, post, request, setToken, token } from "./api.js";
import { COLORS, FleetView } from "./fleet.js";
import { Timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);
const state = { clock: null, vm: null, vmHistory: [], event: null, latencies: [], messages: 0, connected: false };

function showError(error) {
  const box = $("error");
  if (!error) { box.hidden = true; return; }
  box.hidden = false;
  box.textContent = error instanceof ApiError ? `${error.code}: ${error.message}` : String(error);
  if (error instanceof ApiError && error.status === 401) $("token-bar").hidden = false;
}

async function act(work) {
  try {
    showError(null);
    return await work();
  } catch (error) {
    showError(error);
    return null;
  }
}

const fleet = new FleetView($("fleet-scroll"), $("fleet-canvas"), () => selectionChanged(), (i) => openMachine(i));
const timeline = new Timeline($("timeline-scroll"), $("timeline-canvas"), (id, kind) => openEvent(id, kind));

// ------------------------------------------------------------------------------------------------- the clock
function simNow() {
  const c = state.clock;
  if (!c) return Date.now();
  const base = Date.parse(c.now);
  return c.mode === "real" ? base + (Date.now() / 1000 - c.wall) * 1000 * c.speed : base;
}

function setClock(clock) {
  state.clock = { ...clock, wall: Date.now() / 1000 };  // a running clock goes on from here, on the page's own time
  $("clock-mode").textContent = clock.mode === "real" ? `running ×${clock.speed}` : "paused (manual)";
  $("clock-next-deadline").textContent = clock.next_deadline ? `next deadline ${toSecond(clock.next_deadline)}` : "no deadline pending";
  $("clock-speed").value = clock.speed;
  tick();
}

// A time as the page shows it: UTC, to the second (a running clock's times have microseconds).
function toSecond(time) {
  return new Date(typeof time === "string" ? Date.parse(time) : time).toISOString().slice(0, 19) + "Z";
}

// A time in a table: the time of day when it is today (simulated, UTC), with the day otherwise.
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
function shortTime(time) {
  const iso = toSecond(time);
  if (iso.slice(0, 10) === toSecond(simNow()).slice(0, 10)) return iso.slice(11, 19);
  return `${MONTHS[Number(iso.slice(5, 7)) - 1]} ${Number(iso.slice(8, 10))} ${iso.slice(11, 16)}`;
}

function tick() {
  const now = simNow();
  $("clock-now").textContent = toSecond(now);
  timeline.now = now;
}

setInterval(() => {
  if (state.clock?.mode === "real") { tick(); timeline.draw(); }
}, 1000);

// --------------------------------------------------------------------------------------------- loading
async function loadAll() {
  const [snapshot, events, ec2, gce, waves] = await Promise.all([
    get("/v1/dashboard/fleet"), get("/v1/events?all=true"), get("/v1/ec2/events?all=true"),
    get("/v1/gce/maintenance?all=true"), get("/v1/waves"),
  ]);
  fleet.load(snapshot);
  timeline.names = snapshot.labels || {};
  timeline.events = new Map(events.map((e) => [e.event_id, e]));
  timeline.ec2Events = new Map(ec2.map((e) => [e.event_id, e]));
  timeline.gceEvents = new Map(gce.map((e) => [e.event_id, e]));
  timeline.waves = new Map(waves.map((w) => [w.wave_id, w]));
  setClock(snapshot.clock);
  const states = $("fleet-state");
  if (states.options.length === 1) {
    for (const name of snapshot.state_names) states.add(new Option(name, name));
    $("fleet-legend").innerHTML = snapshot.state_names
      .map((name) => `<span class="swatch" style="background:${COLORS[name]}"></span>${escape(name)}`).join("");
  }
  if (!timeline.view) timeline.follow(); else timeline.draw();
  refreshDeliveries().catch(() => {});
  refreshQueuePath().catch(() => {});
  loadScenarios().then(followRuns).catch(showError);
  renderSummary();
  renderEvents();
  renderWaves();
  selectionChanged();
  if (state.vm) await refreshMachine();
  if (state.event) renderEvent();
}

// "1 host", "4 hosts": as the server's messages count (core/words.py)
function counted(number, noun) {
  return `${number.toLocaleString("en-US")} ${number === 1 ? noun : noun + "s"}`;
}

function renderSummary() {
  const m = fleet.data.machines;
  const counts = {};
  for (const code of m.state) counts[code] = (counts[code] || 0) + 1;
  const parts = Object.entries(counts).map(([code, n]) => `${n} ${fleet.data.state_names[code]}`);
  $("fleet-summary").textContent =
    `${counted(m.name.length, "machine")} on ${counted(fleet.data.hosts.length, "host")}: ${parts.join(", ")}` +
    (fleet.aggregate ? ` · ${fleet.shown} shown as totals per group (click one to open it)` : "");
  const empty = $("fleet-empty");
  empty.hidden = fleet.shown > 0;
  if (!empty.hidden) {
    const filters = [fleet.search && `named like “${fleet.search}”`, fleet.stateFilter && `${fleet.stateFilter}`].filter(Boolean);
    empty.textContent = `No machine ${filters.join(" and ")}: nothing matches (names, EC2 Name tags).`;
  }
}

// ------------------------------------------------------------------------------------------- the stream
function apply(message) {
  if (message.clock) setClock(message.clock);
  if (message.dropped || message.resync) return loadAll();
  let touchedMachine = false;
  for (const e of message.events || []) {
    timeline.events.set(e.event_id, e);
    if (state.vm && e.resources.includes(state.vm.name)) touchedMachine = true;
    if (state.vm && state.vm.scope === e.scope) touchedMachine = true;
  }
  for (const e of message.ec2_events || []) {
    timeline.ec2Events.set(e.event_id, e);
    if (state.vm && e.instance_id === state.vm.name) touchedMachine = true;
  }
  for (const e of message.gce_events || []) {
    timeline.gceEvents.set(e.event_id, e);
    if (state.vm && e.instance === state.vm.name) touchedMachine = true;
  }
  for (const w of message.waves || []) timeline.waves.set(w.wave_id, w);
  let statesChanged = false;
  for (const [name, code] of Object.entries(message.states || {})) {
    statesChanged = fleet.setState(name, code) || statesChanged;
    if (state.vm && name === state.vm.name) touchedMachine = true;
  }
  if (touchedMachine || (message.clock && state.vm)) refreshMachine();
  if (statesChanged && fleet.stateFilter) pending.layout = true;
  if (message.committed) pending.committed.push(message.committed);
  queuePathSoon();
  scheduleRender();
}

// A burst of messages (a wave step, a fast real clock) is drawn once, at the next frame.
const pending = { frame: false, layout: false, committed: [] };

function scheduleRender() {
  if (pending.frame) return;
  pending.frame = true;
  requestAnimationFrame(() => {
    pending.frame = false;
    if (pending.layout) fleet.layout();
    pending.layout = false;
    fleet.draw();
    timeline.draw();
    renderSummary();
    renderEvents();
    renderWaves();
    if (state.event) renderEvent();
    const drawn = Date.now() / 1000;
    for (const committed of pending.committed.splice(0)) state.latencies.push(drawn - committed);
    state.latencies.splice(0, Math.max(0, state.latencies.length - 100));
  });
}

async function live() {
  for (;;) {
    // Messages are handled one after another: a change that arrives while the fleet is being read is applied
    // after the read (the read may be older than the change), never before it and then overwritten.
    let chain = Promise.resolve();
    try {
      await follow((message) => {
        state.messages++;
        chain = chain.then(async () => {
          if (message.hello) {
            await loadAll();  // whatever happened while the stream was down is in the fresh read
            state.connected = true;
            $("live").textContent = "live";
            $("live").className = "live on";
          } else {
            await apply(message);
          }
        }).catch(showError);
      });
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) { showError(error); }
    }
    state.connected = false;
    $("live").textContent = "offline";
    $("live").className = "live off";
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

// --------------------------------------------------------------------------------------------- selection
function selected(cloud) {
  const m = fleet.data.machines;
  return [...fleet.selected].filter((i) => cloud === undefined || m.cloud[i] === cloud).map((i) => m.name[i]);
}

function selectionChanged() {
  const names = [...fleet.selected].map((i) => fleet.label(i));
  $("selection-count").textContent = names.length;
  $("selection-names").textContent = names.slice(0, 8).join(", ") + (names.length > 8 ? ", …" : "");
}

// ------------------------------------------------------------------------------------------ events table
const GCE_KINDS = { MIGRATE_ON_HOST_MAINTENANCE: "migrate", TERMINATE_ON_HOST_MAINTENANCE: "terminate" };

function renderEvents() {
  const rows = [...timeline.events.values()].filter((e) => e.status === "Scheduled" || e.status === "Started")
    .map((e) => ({ id: e.event_id, type: e.type, status: e.status, targets: e.resources.join(", "), nb: e.not_before, kind: "azure" }))
    .concat([...timeline.ec2Events.values()].filter((e) => e.state === "active")
      .map((e) => ({ id: e.event_id, type: e.code, status: e.state, targets: timeline.names[e.instance_id] ?? e.instance_id, label: e.instance_id, nb: e.not_before, kind: "ec2" })))
    .concat([...timeline.gceEvents.values()].filter((e) => ["pending", "notified", "ongoing"].includes(e.state))
      .map((e) => ({ id: e.event_id, type: GCE_KINDS[e.kind] ?? e.kind, status: e.state, targets: e.instance, nb: e.window_start, kind: "gce" })));
  $("events-count").textContent = rows.length ? `(${rows.length} live)` : "";
  $("events-none").hidden = rows.length > 0;
  const body = $("events").tBodies[0];
  body.replaceChildren(...rows.slice(0, 200).map((r) => {
    const tr = document.createElement("tr");
    tr.dataset.eventId = r.id;
    tr.innerHTML = `<td><a href="#" title="${escape(r.id)}">${escape(r.id.replace(/^instance-event-/, "").slice(0, 8))}</a></td><td>${escape(r.type)}</td><td class="status">${escape(r.status)}</td>` +
      `<td class="targets"></td><td title="${escape(r.nb ?? "")}">${escape(r.nb ? shortTime(r.nb) : "")}</td><td></td>`;
    tr.querySelector(".targets").textContent = r.targets;
    tr.cells[4].className = "when";
    if (r.label) tr.querySelector(".targets").title = r.label;
    tr.querySelector("a").onclick = (e) => { e.preventDefault(); openEvent(r.id, r.kind); };
    const cell = tr.lastElementChild;
    if (r.kind === "azure" && r.status === "Scheduled") {
      cell.append(button("Approve", () => approve(r.id)), button("Cancel", () => cancelEvent(r.id, r.kind)));
    } else if (r.kind === "ec2" || (r.kind === "gce" && r.status === "pending")) {
      cell.append(button("Cancel", () => cancelEvent(r.id, r.kind)));
    }
    return tr;
  }));
}

function button(text, onClick) {
  const b = document.createElement("button");
  b.textContent = text;
  b.onclick = onClick;
  return b;
}

const approve = (id) => act(() => post("/v1/approvals", { event_ids: [id], by: "dashboard" }));
const CANCEL = { azure: (id) => `/v1/events/${id}/cancel`, ec2: (id) => `/v1/ec2/events/${id}/cancel`, gce: (id) => `/v1/gce/maintenance/${id}/cancel` };
const cancelEvent = (id, kind) => act(() => post(CANCEL[kind](id)));

// ----------------------------------------------------------------------------------------- one event
// The detail pane shows what was opened last at its top, in view (a machine opened under an open event included).
function bringToTop(view) {
  const detail = $("detail");
  $("detail-none").hidden = true;
  detail.insertBefore(view, $("detail-none").nextSibling);
  detail.scrollTop = 0;
}

function openEvent(id, kind) {
  state.event = { id, kind };
  bringToTop($("event-view"));
  timeline.selected = id;
  timeline.draw();
  renderEvent();
}

function renderEvent() {
  const { id, kind } = state.event;
  const e = { azure: timeline.events, ec2: timeline.ec2Events, gce: timeline.gceEvents }[kind].get(id);
  const view = $("event-view");
  view.hidden = !e;
  if (!e) return;
  view.innerHTML = `<h2>Event <code>${escape(id)}</code></h2><pre class="event-json"></pre><div class="row"></div>
    <div id="event-central"></div>`;
  view.querySelector("pre").textContent = JSON.stringify(e, null, 2);
  if (kind === "azure") renderCentral(id);
  const actions = view.querySelector(".row");
  if (kind === "azure" && e.status === "Scheduled") actions.append(button("Approve", () => approve(id)));
  if ((kind === "azure" && e.status === "Scheduled") || (kind === "ec2" && e.state === "active") || (kind === "gce" && e.state === "pending")) {
    actions.append(button("Cancel", () => cancelEvent(id, kind)));
  }
}

// Central delivery: the outbox (Event Grid and AWS Health messages), and an event's Resource Graph row. The outbox
// changes when the sender delivers, which no committed command announces: read (the latest 500, not the fleet)
// every 3 s while the page is shown.
async function refreshDeliveries() {
  if (document.hidden) return;
  const deliveries = await get("/v1/deliveries?limit=500");
  state.deliveries = deliveries;
  const byTarget = new Map();
  for (const d of deliveries) {
    const key = `${d.kind} ${d.target}`;
    if (!byTarget.has(key)) byTarget.set(key, {});
    const counts = byTarget.get(key);
    counts[d.status] = (counts[d.status] || 0) + 1;
  }
  const rows = [...byTarget.entries()].map(([key, counts]) =>
    `<tr><td class="targets">${escape(key)}</td><td>${Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ")}</td></tr>`);
  const last = deliveries.slice(-5).reverse().map((d) =>
    `<tr><td>${escape(d.created_at.slice(0, 19))}</td><td>${escape(d.kind)}</td><td>${escape(d.status)}</td><td>${d.attempts}</td><td class="targets">${escape(d.last_error || "")}</td></tr>`);
  $("deliveries").innerHTML = deliveries.length
    ? `<table><tr><th>target</th><th>messages</th></tr>${rows.join("")}</table>
       <table><tr><th>latest</th><th>kind</th><th>status</th><th>attempts</th><th>last error</th></tr>${last.join("")}</table>`
    : "none yet";
  if (state.event && state.event.kind === "azure") renderCentral(state.event.id, false);
}

// The EC2 queue path: queue depths change with every message and with forewarn's clock (visibility timeouts), which
// no stream message names one by one: read again (one small read) after a burst of stream messages, and every 3 s.
let queuePathTimer = null;
function queuePathSoon() {
  if (queuePathTimer) return;
  queuePathTimer = setTimeout(() => { queuePathTimer = null; refreshQueuePath().catch(() => {}); }, 250);
}

async function refreshQueuePath() {
  if (document.hidden) return;
  const path = await get("/v1/dashboard/ec2/queue-path");
  $("queue-path").hidden = !path.queues.length && !path.lifecycle_actions.length;
  $("queues").hidden = !path.queues.length;
  $("queues").tBodies[0].innerHTML = path.queues.map((q) => {
    const dlq = q.dead_letter_queue ? `${escape(q.dead_letter_queue)}: ${q.dead_letter_depth ?? "missing"}` : "";
    return `<tr data-queue="${escape(q.name)}"><td>${escape(q.name)}</td><td>${q.visible}</td><td>${q.in_flight}</td><td>${q.delayed}</td><td>${dlq}</td></tr>`;
  }).join("");
  $("lifecycle-actions").hidden = !path.lifecycle_actions.length;
  $("lifecycle-none").hidden = path.lifecycle_actions.length > 0;
  $("lifecycle-actions").tBodies[0].innerHTML = path.lifecycle_actions.map((a) =>
    `<tr data-instance="${escape(a.instance_id)}"><td>${escape(a.name ? `${a.name} (${a.instance_id})` : a.instance_id)}</td><td>${escape(`${a.group}/${a.hook}`)}</td><td>${escape(a.state)}</td><td class="when" title="${escape(a.deadline)}">${escape(shortTime(a.deadline))}</td></tr>`).join("");
}
setInterval(() => refreshQueuePath().catch(() => {}), 3000);

// A document as people read it: JSON indented (the bytes served are under it); anything else as it is.
function formatted(body) {
  const text = body.trim();
  if (!text.startsWith("{") && !text.startsWith("[")) return body;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (_) {
    return body;
  }
}

// XML indented, one element a line (the EC2 API's answers come on one line).
function formattedXml(body) {
  const xml = new DOMParser().parseFromString(body, "application/xml");
  if (xml.querySelector("parsererror")) return body;
  const lines = [];
  const walk = (node, depth) => {
    const pad = "  ".repeat(depth);
    const children = [...node.children];
    const name = node.nodeName;
    if (!children.length) { lines.push(`${pad}<${name}>${node.textContent}</${name}>`); return; }
    lines.push(`${pad}<${name}>`);
    for (const child of children) walk(child, depth + 1);
    lines.push(`${pad}</${name}>`);
  };
  walk(xml.documentElement, 0);
  return lines.join("\n");
}

function escape(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
}

async function renderCentral(id, fetchRow = true) {
  const box = $("event-central");
  if (!box) return;
  if (fetchRow) state.centralRow = (await act(() => get(`/v1/events/${id}/central`)))?.resource_graph ?? null;
  const mine = (state.deliveries || []).filter((d) => JSON.stringify(d.payload).includes(id));
  box.innerHTML = `<h2>Resource Graph row</h2><pre id="event-row"></pre><h2>Its deliveries</h2><pre id="event-deliveries"></pre>`;
  $("event-row").textContent = state.centralRow ? JSON.stringify(state.centralRow, null, 2)
    : "none: its VMs' policy does not publish to Event Grid and Resource Graph (forewarn policy set OWNER --central)";
  $("event-deliveries").textContent = mine.length
    ? mine.map((d) => `${d.created_at.slice(0, 19)} ${d.target} ${d.status} after ${counted(d.attempts, "attempt")}`).join("\n")
    : "none";
}

setInterval(() => refreshDeliveries().catch(() => {}), 3000);

// -------------------------------------------------------------------------------------------- one VM
function openMachine(i) {
  const m = fleet.data.machines;
  state.vm = { name: m.name[i], cloud: m.cloud[i], scope: null, etag: null };
  state.vmHistory = [];
  bringToTop($("vm-view"));
  refreshMachine();
}

async function refreshMachine() {
  const vm = state.vm;
  if (!vm) return;
  const view = $("vm-view");
  view.hidden = false;
  try {
    if (vm.cloud === 0) {
      const [info, response] = await Promise.all([
        get(`/v1/vms/${encodeURIComponent(vm.name)}`),
        request("GET", `/v1/vms/${encodeURIComponent(vm.name)}/scheduledevents`),
      ]);
      if (state.vm !== vm) return;
      vm.scope = info.scope;
      const body = await response.text();
      const etag = response.headers.get("etag");
      if (etag !== vm.etag) {
        if (vm.etag !== null) state.vmHistory.unshift({ etag: vm.etag, body: vm.body, seen: vm.seen });
        if (state.vmHistory.length > 50) state.vmHistory.pop();
        Object.assign(vm, { etag, body, seen: new Date(simNow()).toISOString() });
      }
      const incarnation = JSON.parse(body).DocumentIncarnation;
      view.innerHTML = `<h2>VM <code>${escape(vm.name)}</code> <span class="meta">${escape(`${info.power}, host ${info.host}, scope ${info.scope}`)}</span></h2>
        <div class="meta">GET /metadata/scheduledevents: DocumentIncarnation <b id="vm-incarnation">${incarnation}</b>, ETag <code id="vm-etag"></code></div>
        <pre id="vm-document"></pre><details><summary>the bytes served</summary><pre id="vm-document-raw"></pre></details>
        <h2>Earlier documents (since this view opened)</h2><div id="vm-history"></div>`;
      $("vm-etag").textContent = etag;
      $("vm-document").textContent = formatted(body);
      $("vm-document-raw").textContent = body;
      $("vm-history").replaceChildren(...state.vmHistory.map((h) => {
        const pre = document.createElement("pre");
        pre.textContent = `${toSecond(h.seen)}  ETag ${h.etag}\n${formatted(h.body)}`;
        return pre;
      }));
    } else if (vm.cloud === 2) {
      await renderGceInstance(vm, view);
    } else {
      const id = encodeURIComponent(vm.name);
      const [info, events, metadata, status] = await Promise.all([
        get(`/v1/ec2/instances/${id}`), get("/v1/ec2/events?all=true"),
        request("GET", `/v1/ec2/instances/${id}/metadata`).then((r) => r.text()),
        request("GET", `/v1/ec2/instances/${id}/status`).then((r) => r.text()),
      ]);
      if (state.vm !== vm) return;
      const mine = events.filter((e) => e.instance_id === vm.name);
      const named = info.name && info.name !== vm.name ? `${info.name} ` : "";
      view.innerHTML = `<h2>EC2 instance <code>${escape(named)}${escape(vm.name)}</code> <span class="meta">${escape(`${info.state}, ${info.instance_type}, ${info.availability_zone}, host ${info.host}`)}</span></h2>
        <div class="meta">GET /latest/meta-data/events/maintenance/scheduled</div><pre id="vm-document"></pre>
        <details><summary>the bytes served</summary><pre id="vm-document-raw"></pre></details>
        <div class="meta">DescribeInstanceStatus (its item)</div><pre id="vm-status"></pre>
        <h2>Its events</h2><pre id="vm-history"></pre>`;
      $("vm-document").textContent = formatted(metadata);
      $("vm-document-raw").textContent = metadata;
      $("vm-status").textContent = formattedXml(status);
      $("vm-history").textContent = JSON.stringify(mine, null, 2);
    }
  } catch (error) {
    showError(error);
  }
}

// A Compute Engine instance: the maintenance-event and upcoming-maintenance answers its metadata server gives now
// (status, bytes and ETag, rendered by the metadata server itself), its maintenance events, and what its user can do.
const GCE_KEYS = ["maintenance-event", "upcoming-maintenance"];

async function renderGceInstance(vm, view) {
  const id = encodeURIComponent(vm.name);
  const [info, events, ...answers] = await Promise.all([
    get(`/v1/gce/instances/${id}`), get("/v1/gce/maintenance?all=true"),
    ...GCE_KEYS.map((key) => answer(`/v1/gce/instances/${id}/metadata?path=/computeMetadata/v1/instance/${key}`)),
  ]);
  if (state.vm !== vm) return;
  const mine = events.filter((e) => e.instance === vm.name);
  const meta = `${info.status}, ${info.machine_type}, ${info.zone}, host ${info.host}, onHostMaintenance ${info.on_host_maintenance}` +
    (info.provisioning_model === "SPOT" || info.preemptible ? `, ${info.provisioning_model === "SPOT" ? "Spot" : "preemptible"}` : "") +
    (info.preempted ? ", preempted" : "") + (info.watched ? ", watches maintenance-event" : ", has not read maintenance-event (no notice)");
  view.innerHTML = `<h2>Compute Engine instance <code>${escape(vm.name)}</code> <span class="meta"></span></h2>` +
    GCE_KEYS.map((key) => `<div class="meta">GET /computeMetadata/v1/instance/${key}: <b id="gce-${key}-status"></b>, ETag <code id="gce-${key}-etag"></code></div>
      <pre id="gce-${key}"></pre><details><summary>the bytes served</summary><pre id="gce-${key}-raw"></pre></details>`).join("") +
    `<div class="row" id="gce-actions"></div><h2>Its maintenance</h2><pre id="vm-history"></pre>`;
  view.querySelector(".meta").textContent = meta;
  GCE_KEYS.forEach((key, k) => {
    $(`gce-${key}-status`).textContent = answers[k].status;
    $(`gce-${key}-etag`).textContent = answers[k].etag ?? "none";
    // A 404 is the metadata server's HTML page for a key it does not have now: nothing announced.
    $(`gce-${key}`).textContent = answers[k].status === 404 ? "none (404: nothing announced now)" : formatted(answers[k].body);
    $(`gce-${key}-raw`).textContent = answers[k].body;
  });
  $("vm-history").textContent = JSON.stringify(mine, null, 2);
  const actions = $("gce-actions");
  const instanceAction = (what) => () => act(() => post(`/v1/gce/instances/${id}/${what}`));
  if (info.status === "RUNNING") actions.append(button("Simulate maintenance event", instanceAction("simulate-maintenance")));
  if (info.upcoming && info.upcoming.state === "pending" && info.upcoming.can_reschedule) {
    actions.append(button("Perform maintenance now", instanceAction("perform-maintenance")));
  }
  if (info.status === "TERMINATED" && !info.deleted) actions.append(button("Start", instanceAction("start")));
}

// ------------------------------------------------------------------------------------------- controls
function wire() {
  $("clock-next").onclick = () => act(() => post("/v1/clock/next"));
  $("clock-advance").onclick = () => act(() => post("/v1/clock/advance", { by: $("clock-by").value }));
  $("clock-pause").onclick = () => act(() => post("/v1/clock/mode", { mode: "manual" }));
  $("clock-run").onclick = () => act(() => post("/v1/clock/mode", { mode: "real", speed: Number($("clock-speed").value) }));
  $("schedule-azure").onclick = () => act(() => {
    const body = { type: $("azure-type").value, vms: selected(0) };
    if ($("azure-notice").value) body.notice = $("azure-notice").value;
    return post("/v1/events", body);
  });
  $("schedule-ec2").onclick = () => act(() => {
    const body = { code: $("ec2-code").value, instances: selected(1) };
    if ($("ec2-notice").value) body.notice = $("ec2-notice").value;
    return post("/v1/ec2/events", body);
  });
  $("schedule-gce").onclick = () => act(() => {
    const body = { instances: selected(2) };
    for (const [key, input] of [["kind", "gce-kind"], ["notice", "gce-notice"], ["window", "gce-window"]]) {
      if ($(input).value) body[key] = $(input).value;
    }
    return post("/v1/gce/maintenance", body);
  });
  $("gce-preempt").onclick = () => act(() => post("/v1/gce/preempt", { instances: selected(2) }));
  $("gce-host-error").onclick = () => act(() => post("/v1/gce/host-error", { instances: selected(2) }));
  $("platform-hardware").onclick = () => act(() => {
    const m = fleet.data.machines;
    const hosts = [...new Set([...fleet.selected].filter((i) => m.cloud[i] === 0).map((i) => fleet.data.hosts[m.host[i]]))];
    return post("/v1/platform/hardware-failure", { hosts });
  });
  $("platform-evict").onclick = () => act(() => post("/v1/platform/evict", { vms: selected(0) }));
  $("platform-restart").onclick = () => act(() => post("/v1/vms/restart", { vms: selected(0) }));
  $("wave-start").onclick = () => act(() => {
    const m = fleet.data.machines;
    // The page starts Azure waves: a selection of other clouds' instances must not become "the whole fleet".
    if (fleet.selected.size && !selected(0).length) throw new Error("the page starts waves over Azure VMs only (Compute Engine: forewarn wave start --cloud gce): select Azure VMs, or clear the selection for the whole fleet");
    const groups = [...new Set([...fleet.selected].filter((i) => m.cloud[i] === 0).map((i) => {
      const set = fleet.data.sets[m.set[i]];
      return set === "standalone" ? m.name[i] : set.replace(/^(scale|availability) set /, "");
    }))];
    const body = { type: $("wave-type").value, by: $("wave-by").value, concurrency: Number($("wave-concurrency").value), groups };
    if ($("wave-notice").value) body.notice = $("wave-notice").value;
    return post("/v1/waves", body);
  });
  $("scenario-run").onclick = () => act(async () => {
    await post(`/v1/scenarios/${$("scenario-name").value}/run`, { timing: $("scenario-timing").value });
    await followRuns();
  });
  $("scenario-name").onchange = () => scenarioChosen();
  $("fleet-search").oninput = (e) => { fleet.search = e.target.value.trim(); fleet.layout(); fleet.draw(); renderSummary(); };
  $("fleet-group").onchange = (e) => { fleet.groupBy = e.target.value; fleet.layout(); fleet.draw(); };
  $("fleet-state").onchange = (e) => { fleet.stateFilter = e.target.value; fleet.layout(); fleet.draw(); renderSummary(); };
  $("fleet-select-matching").onclick = () => { for (const i of fleet.members()) fleet.selected.add(i); fleet.draw(); selectionChanged(); };
  $("fleet-clear").onclick = () => { fleet.selected.clear(); fleet.draw(); selectionChanged(); };
  $("timeline-fit").onclick = () => timeline.fit();
  $("timeline-now").onclick = () => timeline.centerNow();
  $("timeline-ended").onchange = (e) => { timeline.showEnded = e.target.checked; timeline.draw(); };
  $("token-save").onclick = () => { setToken($("token").value); $("token-bar").hidden = true; showError(null); };
}

// Scenario runs: the server runs the scenario runner against its own control API; the page follows its progress
// (a small read, once a second, only while a run is going). A scenario is written against its own fleet: those this
// server's fleet fits come first and run; the others are listed apart, and choosing one says what it lacks and the
// command that serves its fleet, instead of a run that could only fail.
const scenarios = new Map();

async function loadScenarios() {
  const select = $("scenario-name");
  if (select.options.length) return;
  const listed = await get("/v1/scenarios");
  for (const [label, fits] of [["Run on this fleet", true], ["Written for a fleet of their own", false]]) {
    const group = document.createElement("optgroup");
    group.label = label;
    for (const found of listed.filter((s) => s.fits === fits)) {
      scenarios.set(found.name, found);
      group.append(new Option(`${found.name}: ${found.title}${fits ? "" : " (its own fleet)"}`, found.name));
    }
    if (group.children.length) select.append(group);
  }
  scenarioChosen();
}

function scenarioChosen() {
  const found = scenarios.get($("scenario-name").value);
  const note = $("scenario-note");
  $("scenario-run").disabled = !found || !found.fits;
  note.hidden = !found || found.fits;
  if (note.hidden) return;
  note.innerHTML = `<span></span><br>To run it, serve its fleet beside this server, then open that server's page (<a></a>): <code></code>`;
  note.querySelector("span").textContent = `${found.name} is written for a fleet of its own: this server's ${found.differs}.`;
  note.querySelector("a").textContent = found.page;
  note.querySelector("a").href = found.page;
  // The line wraps between its options only (a browser would break "--db" after its dashes): each option a piece.
  const code = note.querySelector("code");
  found.serve.split(/ (?=--)/).forEach((piece, i) => {
    const span = document.createElement("span");
    span.textContent = piece;
    code.append(...(i ? [" ", span] : [span]));
  });
}

function clockTime(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });
}

async function followRuns() {
  const runs = await get("/v1/scenarios/runs");
  $("scenario-runs").replaceChildren(...runs.slice(-3).reverse().map((run) => {
    const div = document.createElement("div");
    div.className = "scenario-run";
    div.dataset.status = run.status;
    const p = run.progress;
    const where = p ? `step ${p.steps_done}/${p.steps}, ${Math.round(p.offset)} s simulated, ${counted(p.moves, "clock move")}` : "starting";
    const checks = run.expectations.map((e) => `${e.passed ? "ok  " : "FAIL"}  ${e.what}${e.passed ? "" : "\n      " + e.detail}`);
    div.innerHTML = `<b></b> <span class="meta"></span><pre></pre>`;
    div.querySelector("b").textContent = `${run.scenario} (${run.timing}): ${run.status}`;
    div.querySelector(".meta").textContent = `started ${clockTime(run.started)}${run.status === "running" ? `; ${where}` : ""}`;
    div.querySelector("pre").textContent = [...checks, run.error ? `error: ${run.error}` : ""].filter(Boolean).join("\n") || run.lines.slice(-3).join("\n");
    if (run.status !== "running") {
      const dismiss = button("Dismiss", () => act(async () => { await request("DELETE", `/v1/scenarios/runs/${run.run_id}`); await followRuns(); }));
      dismiss.title = "forget this run (the server keeps the last runs until dismissed)";
      div.querySelector(".meta").after(dismiss);
    }
    return div;
  }));
  if (runs.some((run) => run.status === "running")) setTimeout(() => followRuns().catch(showError), 1000);
}

function renderWaves() {
  $("waves").replaceChildren(...[...timeline.waves.values()].slice(-10).map((w) => {
    const div = document.createElement("div");
    div.className = "wave";
    const share = w.units ? (100 * (w.done + w.skipped.length)) / w.units : 100;
    div.innerHTML = `<code>${escape(w.wave_id)}</code> ${escape(`${w.type} by ${w.by}`)}: <span class="bar"><span style="width:${share}%"></span></span> ${escape(`${w.done}/${w.units} ${w.status}`)}`;
    if (w.status === "running") div.append(button("Cancel", () => act(() => post(`/v1/waves/${w.wave_id}/cancel`))));
    return div;
  }));
}

// The token may come once in the address (#token=...): kept for this tab, then taken out of the address bar.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("token")) {
  setToken(fragment.get("token"));
  history.replaceState(null, "", location.pathname);
}
$("token").value = token() || "";
wire();
live();

// For tests and measurements: what the page holds and painted.
window.forewarn = { state, fleet, timeline, openMachine: (name) => openMachine(fleet.index.get(name)) };
