// The timeline: one row per scope (Azure) or instance (EC2, Compute Engine), each event a bar: pale from its creation to NotBefore
// (Scheduled), solid while Started, to Completed or Canceled; approvals marked with who approved; the simulated now a
// red line; waves as bands above the rows. Wheel zooms around the pointer, drag pans. Only rows in view are drawn.

import { sizedContext } from "./canvas.js";

const TYPE_COLORS = {
  Freeze: "#4dabf7", Reboot: "#f59f00", Redeploy: "#e8590c", Preempt: "#862e9c", Terminate: "#495057",
};
const EC2_COLOR = "#12b886";
const GCE_COLORS = { MIGRATE_ON_HOST_MAINTENANCE: "#4263eb", TERMINATE_ON_HOST_MAINTENANCE: "#c2255c" };
const LABEL = 150;
const AXIS = 22;
const ROW = 18;
const WAVE_ROW = 16;

const ms = (text) => (text ? Date.parse(text) : null);

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
      add("a:" + e.scope, e.scope, {
        id: e.event_id, kind: "azure", status: e.status, color: TYPE_COLORS[e.type] || "#888",
        start: ms(e.created_at), notBefore: ms(e.not_before), started: ms(e.started_at),
        end: ms(e.ended_at) ?? (e.status === "Started" ? ms(e.ends_at) : null), approvals: e.approvals,
        text: `${e.type} ${e.resources.join(",")}`,
      });
    }
    for (const e of this.ec2Events.values()) {
      if (!this.showEnded && e.state !== "active") continue;
      add("e:" + e.instance_id, e.instance_id, {
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

  fit() {
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
    if (!this.view) return this.fit();
    const span = this.view.t1 - this.view.t0;
    this.view = { t0: this.now - span / 2, t1: this.now + span / 2 };
    this.draw();
  }

  x(t, width) {
    return LABEL + ((t - this.view.t0) / (this.view.t1 - this.view.t0)) * (width - LABEL);
  }

  zoom(e) {
    e.preventDefault();
    if (!this.view) return;
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
    const steps = [1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400, 7 * 86400].map((s) => s * 1000);
    const step = steps.find((s) => (s / span) * (width - LABEL) > 90) || steps[steps.length - 1];
    ctx.fillStyle = "#f4f5f7";
    ctx.fillRect(0, 0, width, AXIS);
    for (let t = Math.ceil(this.view.t0 / step) * step; t < this.view.t1; t += step) {
      const x = this.x(t, width);
      ctx.strokeStyle = "#e4e6ea";
      ctx.beginPath();
      ctx.moveTo(x, AXIS);
      ctx.lineTo(x, height);
      ctx.stroke();
      ctx.fillStyle = "#556";
      const iso = new Date(t).toISOString();
      ctx.fillText(step >= 86400000 ? iso.slice(0, 10) : iso.slice(11, step < 60000 ? 19 : 16), x + 2, AXIS / 2);
    }
    // waves: a band from start to finish (or now), with progress
    waves.forEach((w, k) => {
      const y = AXIS + k * WAVE_ROW;
      const x0 = this.x(ms(w.created_at), width);
      const x1 = this.x(ms(w.finished_at) ?? this.now, width);
      ctx.fillStyle = "rgba(59,125,216,0.18)";
      ctx.fillRect(x0, y + 1, Math.max(x1 - x0, 2), WAVE_ROW - 2);
      ctx.fillStyle = "#0b3d91";
      ctx.fillText(`${w.wave_id} ${w.type} by ${w.by}: ${w.done}/${w.units} ${w.status}`, Math.max(x0, LABEL) + 3, y + WAVE_ROW / 2);
    });
    // rows
    const bars = [];
    const first = Math.max(0, Math.floor((top - 10) / ROW));
    const last = Math.min(rows.length, first + Math.ceil((height - header) / ROW) + 1);
    for (let r = first; r < last; r++) {
      const row = rows[r];
      const y = header + (r - first) * ROW;
      ctx.fillStyle = "#1d2330";
      ctx.fillText(row.label.length > 24 ? "…" + row.label.slice(-23) : row.label, 4, y + ROW / 2);
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
    }
    // the simulated now
    const nx = this.x(this.now, width);
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
