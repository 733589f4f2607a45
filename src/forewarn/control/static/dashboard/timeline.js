// The timeline: one row per scope (Azure) or instance (EC2, Compute Engine), each event a bar: pale from its creation to NotBefore
// (Scheduled), solid while Started, to Completed or Canceled; approvals marked with who approved; the simulated now a
// red line; waves as bands above the rows. Wheel zooms around the pointer, drag pans. Only rows in view are drawn.
// Until the user zooms or pans, the view follows the simulated now: from a little before it to the deadlines of the
// next few hours (a 14-day EC2 notice runs off the right edge rather than squeezing everything else to a sliver).

import { sizedContext } from "./canvas.js";
import { fitText } from "./fleet.js";

const TYPE_COLORS = {
  Freeze: "#4dabf7", Reboot: "#f59f00", Redeploy: "#e8590c", Preempt: "#862e9c", Terminate: "#495057",
};
const EC2_COLOR = "#12b886";
const GCE_COLORS = { MIGRATE_ON_HOST_MAINTENANCE: "#4263eb", TERMINATE_ON_HOST_MAINTENANCE: "#c2255c" };
const LABEL = 170;
const AXIS = 30;
const MINUTE = 60 * 1000;
const HOUR = 60 * MINUTE;
// The opening view reaches the deadlines this close to now (and, when none is, the next one).
const HORIZON = 6 * HOUR;
const ROW = 18;
const WAVE_ROW = 16;

const ms = (text) => (text ? Date.parse(text) : null);

// A broadcast scope's key as people read it: "vm:SUB/RG/name" → "name", "avset:SUB/RG/westno" → "availability set
// westno", "vmss:SUB/RG/web/pg0" → "scale set web · pg0".
export function scopeLabel(scope) {
  const [kind, rest] = scope.split(/:(.*)/s);
  const parts = (rest ?? "").split("/");
  if (kind === "vm") return parts.slice(2).join("/") || scope;
  if (kind === "avset") return `availability set ${parts.slice(2).join("/")}`;
  if (kind === "vmss") return `scale set ${parts[2]}` + (parts[3] ? ` · ${parts[3]}` : "");
  return scope;
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const two = (n) => String(n).padStart(2, "0");

// An axis tick in UTC: the time, with the day where the day changes (and on the first tick).
function tickText(t, step, withDay) {
  const d = new Date(t);
  const day = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
  if (step >= 86400000) return day;
  const time = `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}` + (step < MINUTE ? `:${two(d.getUTCSeconds())}` : "");
  return withDay ? `${day} ${time}` : time;
}

export class Timeline {
  constructor(scroll, canvas, onSelectEvent) {
    this.scroll = scroll;
    this.canvas = canvas;
    this.spacer = scroll.querySelector("div");
    this.onSelectEvent = onSelectEvent;
    this.events = new Map();
    this.ec2Events = new Map();
    this.gceEvents = new Map();
    this.waves = new Map();
    this.now = Date.now();
    this.view = null;
    this.following = true;  // the view follows now until the user zooms, pans or fits
    this.names = {};  // machine labels (an EC2 instance's Name tag) by name
    this.rowLabels = [];  // what the last paint wrote in the label column: {text, row, y}
    this.ticks = [];  // the axis's last labels: {text, x}
    this.barLabels = [];  // the bars' and waves' texts the last paint wrote: {text, x}
    this.waveBands = [];  // where the last paint drew each wave: {id, x0, x1}
    this.labelWidth = LABEL;
    this.showEnded = true;
    this.visibleBars = [];
    this.selected = null;
    scroll.addEventListener("scroll", () => this.draw());
    new ResizeObserver(() => this.draw()).observe(scroll);
    canvas.addEventListener("wheel", (e) => this.zoom(e), { passive: false });
    canvas.addEventListener("mousedown", (e) => this.drag(e));
  }

  rows() {
    const rows = new Map();
    const add = (key, label, bar) => {
      let row = rows.get(key);
      if (!row) rows.set(key, (row = { label, bars: [], first: Infinity }));
      row.bars.push(bar);
      row.first = Math.min(row.first, bar.start);
    };
    for (const e of this.events.values()) {
      if (!this.showEnded && (e.status === "Completed" || e.status === "Canceled")) continue;
      add("a:" + e.scope, scopeLabel(e.scope), {
        id: e.event_id, kind: "azure", status: e.status, color: TYPE_COLORS[e.type] || "#888",
        start: ms(e.created_at), notBefore: ms(e.not_before), started: ms(e.started_at),
        end: ms(e.ended_at) ?? (e.status === "Started" ? ms(e.ends_at) : null), approvals: e.approvals,
        text: `${e.type} ${e.resources.join(",")}`,
      });
    }
    for (const e of this.ec2Events.values()) {
      if (!this.showEnded && e.state !== "active") continue;
      const name = this.names[e.instance_id];
      add("e:" + e.instance_id, name ? `${name} (${e.instance_id})` : e.instance_id, {
        id: e.event_id, kind: "ec2", status: e.state, color: EC2_COLOR,
        start: ms(e.created_at), notBefore: ms(e.not_before), started: ms(e.started_at), end: ms(e.ended_at),
        approvals: [], text: e.code,
      });
    }
    // Compute Engine: from its creation to its start (a tick), solid while it is under way.
    for (const e of this.gceEvents.values()) {
      const ended = e.state === "completed" || e.state === "canceled";
      if (!this.showEnded && ended) continue;
      add("g:" + e.instance, e.instance, {
        id: e.event_id, kind: "gce", status: e.state, color: GCE_COLORS[e.kind] || "#888",
        start: ms(e.created_at), notBefore: ms(e.window_start), started: ms(e.started_at), end: ms(e.ended_at),
        approvals: [], text: e.kind.replace("_ON_HOST_MAINTENANCE", "").toLowerCase(),
      });
    }
    // Events of one scope that overlap in time go on lanes of their own, under the scope's label.
    const lanes = [];
    for (const row of [...rows.values()].sort((a, b) => a.first - b.first || a.label.localeCompare(b.label))) {
      const own = [];
      for (const bar of row.bars.sort((a, b) => a.start - b.start)) {
        const until = bar.end ?? Math.max(bar.notBefore, this.now);
        let lane = own.find((l) => l.until < bar.start);
        if (!lane) own.push((lane = { label: own.length ? "" : row.label, bars: [], until }));
        lane.bars.push(bar);
        lane.until = Math.max(lane.until, until);
      }
      lanes.push(...own);
    }
    return lanes;
  }

  // The events that matter now: from a little before now to the live events' deadlines within HORIZON (or the next
  // one when none is that close), waves included.
  nowView() {
    const deadlines = [];
    const live = (times) => { for (const t of times) if (t !== null && t > this.now) deadlines.push(t); };
    for (const e of this.events.values()) {
      if (e.status === "Scheduled" || e.status === "Started") live([ms(e.not_before), ms(e.ends_at)]);
    }
    for (const e of this.ec2Events.values()) if (e.state === "active") live([ms(e.not_before)]);
    for (const e of this.gceEvents.values()) if (!["completed", "canceled"].includes(e.state)) live([ms(e.window_start)]);
    const near = deadlines.filter((t) => t <= this.now + HORIZON);
    const until = near.length ? Math.max(...near) : deadlines.length ? Math.min(...deadlines) : this.now;
    const ahead = Math.max(until - this.now, 15 * MINUTE) * 1.25;
    return { t0: this.now - Math.max(ahead * 0.15, 2 * MINUTE), t1: this.now + ahead };
  }

  follow() {
    this.following = true;
    this.view = this.nowView();
    this.draw();
  }

  fit() {
    this.following = false;
    let lo = Infinity;
    let hi = -Infinity;
    for (const e of this.events.values()) {
      lo = Math.min(lo, ms(e.created_at));
      hi = Math.max(hi, ms(e.ended_at) ?? ms(e.ends_at) ?? ms(e.not_before));
    }
    for (const e of this.ec2Events.values()) {
      lo = Math.min(lo, ms(e.created_at));
      hi = Math.max(hi, ms(e.ended_at) ?? ms(e.not_before));
    }
    for (const e of this.gceEvents.values()) {
      lo = Math.min(lo, ms(e.created_at));
      hi = Math.max(hi, ms(e.ended_at) ?? ms(e.window_start));
    }
    lo = Math.min(lo, this.now);
    hi = Math.max(hi, this.now);
    const span = Math.max(hi - lo, 30 * 60 * 1000);
    this.view = { t0: lo - span * 0.05, t1: lo + span * 1.1 };
    this.draw();
  }

  centerNow() {
    this.follow();
  }

  x(t, width) {
    return LABEL + ((t - this.view.t0) / (this.view.t1 - this.view.t0)) * (width - LABEL);
  }

  zoom(e) {
    e.preventDefault();
    if (!this.view) return;
    this.following = false;
    const width = this.scroll.clientWidth;
    const rect = this.canvas.getBoundingClientRect();
    const px = Math.max(LABEL, e.clientX - rect.left);
    const t = this.view.t0 + ((px - LABEL) / (width - LABEL)) * (this.view.t1 - this.view.t0);
    const factor = Math.exp(e.deltaY * 0.0015);
    const span = Math.min(Math.max((this.view.t1 - this.view.t0) * factor, 1000), 1000 * 86400 * 3650);
    const share = (t - this.view.t0) / (this.view.t1 - this.view.t0);
    this.view = { t0: t - share * span, t1: t - share * span + span };
    this.draw();
  }

  drag(e) {
    if (!this.view) return;
    const startX = e.clientX;
    const start = { ...this.view };
    let moved = false;
    const move = (m) => {
      const dx = m.clientX - startX;
      if (Math.abs(dx) > 3) moved = true;
      if (!moved) return;
      this.following = false;
      const perPx = (start.t1 - start.t0) / (this.scroll.clientWidth - LABEL);
      this.view = { t0: start.t0 - dx * perPx, t1: start.t1 - dx * perPx };
      this.draw();
    };
    const up = (u) => {
      window.removeEventListener("mousemove", move);
      window.removeEventListener("mouseup", up);
      if (!moved) this.click(u);
    };
    window.addEventListener("mousemove", move);
    window.addEventListener("mouseup", up);
  }

  click(e) {
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top;
    const bar = this.visibleBars.find((b) => x >= b.x0 - 3 && x <= b.x1 + 3 && y >= b.y && y <= b.y + ROW - 4);
    if (bar) {
      this.selected = bar.id;
      this.onSelectEvent(bar.id, bar.kind);
      this.draw();
    }
  }

  draw() {
    if (!this.view) return;
    if (this.following) this.view = this.nowView();
    const { ctx, width, height } = sizedContext(this.canvas, this.scroll);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    const rows = this.rows();
    const waves = [...this.waves.values()];
    const header = AXIS + waves.length * WAVE_ROW;
    this.spacer.style.height = header + rows.length * ROW + 10 + "px";
    const top = this.scroll.scrollTop;
    // time axis
    const span = this.view.t1 - this.view.t0;
    const steps = [1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 7 * 86400]
      .map((s) => s * 1000);
    const step = steps.find((s) => (s / span) * (width - LABEL) > 80) || steps[steps.length - 1];
    ctx.fillStyle = "#f4f5f7";
    ctx.fillRect(0, 0, width, AXIS);
    ctx.fillStyle = "#556";
    ctx.fillText("UTC", 4, AXIS / 2);
    this.ticks = [];
    let lastDay = null;
    for (let t = Math.ceil(this.view.t0 / step) * step; t < this.view.t1; t += step) {
      const x = this.x(t, width);
      ctx.strokeStyle = "#e4e6ea";
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x, height);
      ctx.stroke();
      const day = new Date(t).toISOString().slice(0, 10);
      const text = tickText(t, step, day !== lastDay);
      lastDay = day;
      if (x + 3 + ctx.measureText(text).width > width) continue;  // a label the edge would cut: its line is enough
      ctx.fillStyle = "#556";
      ctx.fillText(text, x + 3, AXIS / 2);
      this.ticks.push({ text, x });
    }
    // Bars, waves and their labels stay right of the label column.
    ctx.save();
    ctx.beginPath();
    ctx.rect(LABEL, 0, width - LABEL, height);
    ctx.clip();
    this.barLabels = [];
    this.waveBands = [];
    // waves: a band from start to finish (or now), with progress
    waves.forEach((w, k) => {
      const y = AXIS + k * WAVE_ROW;
      const x0 = this.x(ms(w.created_at), width);
      // A running wave goes on past now: its band reaches the right edge.
      const x1 = w.finished_at ? this.x(ms(w.finished_at), width) : w.status === "running" ? width : this.x(this.now, width);
      ctx.fillStyle = "rgba(59,125,216,0.18)";
      ctx.fillRect(x0, y + 1, Math.max(x1 - x0, 4), WAVE_ROW - 2);
      ctx.fillStyle = "#0b3d91";
      const text = `${w.wave_id} ${w.type} by ${w.by}: ${w.done}/${w.units} ${w.status}`;
      ctx.fillText(text, Math.max(x0, LABEL) + 3, y + WAVE_ROW / 2);
      this.barLabels.push({ text, x: Math.max(x0, LABEL) + 3 });
      this.waveBands.push({ id: w.wave_id, x0: Math.max(x0, LABEL), x1: Math.min(x1, width) });
    });
    ctx.restore();
    // rows
    const bars = [];
    const first = Math.max(0, Math.floor((top - 10) / ROW));
    const last = Math.min(rows.length, first + Math.ceil((height - header) / ROW) + 1);
    this.rowLabels = [];
    for (let r = first; r < last; r++) {
      const row = rows[r];
      const y = header + (r - first) * ROW;
      if (row.label) {
        ctx.fillStyle = "#1d2330";
        const text = fitText(ctx, row.label, LABEL - 10);
        ctx.fillText(text, 4, y + ROW / 2);
        this.rowLabels.push({ text, row: row.label, y });
      }
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL, y, width - LABEL, ROW);
      ctx.clip();
      for (const bar of row.bars) {
        const x0 = this.x(bar.start, width);
        const phaseEnd = bar.started ?? (bar.end ?? Math.max(bar.notBefore, this.now));
        const xs = this.x(Math.min(phaseEnd, bar.end ?? phaseEnd), width);
        ctx.globalAlpha = bar.status === "Completed" || bar.status === "completed" ? 0.5 : 1;
        ctx.fillStyle = bar.color + "55";
        ctx.fillRect(x0, y + 3, Math.max(xs - x0, 2), ROW - 6);
        const nb = this.x(bar.notBefore, width);  // NotBefore: a tick
        ctx.fillStyle = bar.color;
        ctx.fillRect(nb - 1, y + 2, 2, ROW - 4);
        let x1 = xs;
        if (bar.started !== null) {
          x1 = this.x(bar.end ?? this.now, width);
          ctx.fillRect(xs, y + 3, Math.max(x1 - xs, 2), ROW - 6);
        }
        if (bar.status === "Canceled" || bar.status === "canceled") {
          ctx.strokeStyle = "#c92a2a";
          ctx.beginPath();
          ctx.moveTo(xs, y + 3);
          ctx.lineTo(xs, y + ROW - 3);
          ctx.stroke();
        }
        ctx.globalAlpha = 1;
        const room = Math.max(x1, nb) - Math.max(x0, LABEL);
        if (room > 70) {
          ctx.fillStyle = "#1d2330";
          ctx.save();
          ctx.beginPath();
          ctx.rect(Math.max(x0, LABEL), y, room, ROW);
          ctx.clip();
          ctx.fillText(`${bar.text} · ${bar.status}`, Math.max(x0, LABEL) + 3, y + ROW / 2);
          this.barLabels.push({ text: `${bar.text} · ${bar.status}`, x: Math.max(x0, LABEL) + 3 });
          ctx.restore();
        }
        if (bar.approvals.length) {
          ctx.fillStyle = "#2b8a3e";
          ctx.fillText("✓ " + bar.approvals.join(","), (bar.started !== null ? xs : nb) + 3, y + ROW / 2);
        }
        if (bar.id === this.selected) {
          ctx.strokeStyle = "#0b3d91";
          ctx.lineWidth = 2;
          ctx.strokeRect(x0 - 1, y + 2, Math.max(x1, nb) - x0 + 2, ROW - 4);
          ctx.lineWidth = 1;
        }
        bars.push({ id: bar.id, kind: bar.kind, status: bar.status, row: row.label, x0, x1: Math.max(x1, nb), y: y + 2 });
      }
      ctx.restore();
    }
    ctx.strokeStyle = "#ccd";
    ctx.beginPath();
    ctx.moveTo(LABEL - 0.5, 0);
    ctx.lineTo(LABEL - 0.5, height);
    ctx.stroke();
    if (!rows.length && !waves.length) {
      ctx.fillStyle = "#667";
      ctx.fillText("No events yet: select machines and schedule one, or start a wave or a scenario.", LABEL + 12, AXIS + 16);
    }
    // the simulated now
    const nx = this.x(this.now, width);
    if (nx < LABEL) { this.visibleBars = bars; return; }
    ctx.strokeStyle = "#e03131";
    ctx.lineWidth = 2;
    ctx.beginPath();
    ctx.moveTo(nx, 0);
    ctx.lineTo(nx, height);
    ctx.stroke();
    ctx.lineWidth = 1;
    this.visibleBars = bars;
  }
}
