// The fleet view: every machine a cell on one canvas, grouped by set, zone or host, coloured by what it is going
// through. Up to TILE_LIMIT shown machines each cell is a tile wide enough for its name and, when it is not ok, its
// state, stretched to fill the pane; beyond, small squares (a tooltip names the one under the pointer). Only the rows
// in view are drawn, so 10,000 cells cost what the screen shows. Past CELL_LIMIT shown machines each group is one bar
// of its state counts (click a bar to open that group's cells).

import { sizedContext } from "./canvas.js";

export const COLORS = {
  ok: "#c9d3df", scheduled: "#f0b429", started: "#e8590c", impacted: "#c92a2a",
  stopped: "#7048e8", deleted: "#495057", evicted: "#862e9c",
};
const SQUARE = { width: 11, height: 11 };
const TILE = { width: 132, height: 34 };  // the narrowest tile: a name of about 18 characters
const GAP = 2;
export const TILE_LIMIT = 600;
const HEADER = 18;
const BAR = 14;
const PAD = 6;
export const CELL_LIMIT = 20000;

export class FleetView {
  constructor(scroll, canvas, onSelect, onOpen) {
    this.scroll = scroll;
    this.canvas = canvas;
    this.spacer = scroll.querySelector("div");
    this.tooltip = scroll.parentElement.querySelector(".tooltip");
    this.onSelect = onSelect;
    this.onOpen = onOpen;
    this.selected = new Set();
    this.expanded = new Set();
    this.groupBy = "set";
    this.search = "";
    this.stateFilter = "";
    this.data = null;
    this.groups = [];
    this.cell = SQUARE;
    this.labels = [];  // the names the last paint wrote, with where: {name, text, x, y, width} (canvas pixels)
    this.painted = 0;  // cells drawn by the last paint
    this.drawn = 0;  // paints so far
    scroll.addEventListener("scroll", () => { this.tooltip.hidden = true; this.draw(); });
    new ResizeObserver(() => { this.layout(); this.draw(); }).observe(scroll);
    canvas.addEventListener("click", (e) => this.click(e));
    canvas.addEventListener("mousemove", (e) => this.hover(e));
    canvas.addEventListener("mouseleave", () => { this.tooltip.hidden = true; });
    canvas.addEventListener("dblclick", (e) => {
      const hit = this.hit(e);
      if (hit && hit.machine !== undefined) this.onOpen(hit.machine);
    });
  }

  load(data) {
    this.data = data;
    this.index = new Map(data.machines.name.map((name, i) => [name, i]));
    const known = this.index;
    this.selected = new Set([...this.selected].filter((i) => i < data.machines.name.length && known.has(data.machines.name[i])));
    this.layout();
    this.draw();
  }

  setState(name, code) {
    const i = this.index?.get(name);
    if (i === undefined) return false;
    this.data.machines.state[i] = code;
    return true;
  }

  stateName(i) { return this.data.state_names[this.data.machines.state[i]]; }

  // What people call it: an EC2 instance's Name tag, else its name.
  label(i) {
    const name = this.data.machines.name[i];
    return this.data.labels?.[name] ?? name;
  }

  matches(i, search) {
    const name = this.data.machines.name[i];
    if (name.toLowerCase().includes(search)) return true;
    const label = this.data.labels?.[name];
    return label !== undefined && label.toLowerCase().includes(search);
  }

  layout() {
    if (!this.data) return;
    this.tooltip.hidden = true;  // the cell it named may have moved or gone
    const m = this.data.machines;
    const table = this.groupBy === "zone" ? this.data.zones : this.groupBy === "host" ? this.data.hosts : this.data.sets;
    const column = m[this.groupBy];
    const search = this.search.toLowerCase();
    const wanted = this.stateFilter === "" ? -1 : this.data.state_names.indexOf(this.stateFilter);
    const byGroup = new Map();
    let shown = 0;
    for (let i = 0; i < m.name.length; i++) {
      if (wanted >= 0 && m.state[i] !== wanted) continue;
      if (search && !this.matches(i, search)) continue;
      const g = column[i];
      let list = byGroup.get(g);
      if (!list) byGroup.set(g, (list = []));
      list.push(i);
      shown++;
    }
    this.shown = shown;
    this.aggregate = shown > CELL_LIMIT;
    const width = this.scroll.clientWidth - 2 * PAD;
    if (shown <= TILE_LIMIT) {  // named tiles, as many a row as fit, stretched to the pane's width
      const perRow = Math.max(1, Math.floor((width + GAP) / (TILE.width + GAP)));
      this.cell = { width: Math.floor((width + GAP) / perRow) - GAP, height: TILE.height, named: true };
    } else {
      this.cell = SQUARE;
    }
    const cell = this.cell;
    this.perRow = Math.max(1, Math.floor((width + GAP) / (cell.width + GAP)));
    let y = PAD;
    this.groups = [...byGroup.entries()]
      .map(([g, members]) => ({ name: table[g], members }))
      .sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }))
      .map((group) => {
        group.y = y;
        const cells = !this.aggregate || this.expanded.has(group.name);
        group.rows = cells ? Math.ceil(group.members.length / this.perRow) : 0;
        group.height = HEADER + (cells ? group.rows * (cell.height + GAP) : BAR + GAP) + 4;
        y += group.height;
        return group;
      });
    this.height = y + PAD;
    this.spacer.style.height = this.height + "px";
  }

  members() {
    return this.groups.flatMap((group) => group.members);
  }

  draw() {
    if (!this.data) return;
    const { ctx, width, height } = sizedContext(this.canvas, this.scroll);
    const top = this.scroll.scrollTop;
    const m = this.data.machines;
    const names = this.data.state_names;
    let painted = 0;
    const cell = this.cell;
    this.labels = [];
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "top";
    for (const group of this.groups) {
      if (group.y + group.height < top) continue;
      if (group.y > top + height) break;
      const counts = new Array(names.length).fill(0);
      for (const i of group.members) counts[m.state[i]]++;
      const y0 = group.y - top;
      ctx.fillStyle = "#1d2330";
      const busy = group.members.length - counts[0];
      ctx.fillText(`${group.name} · ${group.members.length}` + (busy ? ` · ${busy} in maintenance` : ""), PAD, y0 + 3);
      if (group.rows === 0) {
        let x = PAD;
        const full = width - 2 * PAD;
        counts.forEach((count, code) => {
          if (!count) return;
          const w = (count / group.members.length) * full;
          ctx.fillStyle = COLORS[names[code]];
          ctx.fillRect(x, y0 + HEADER, Math.max(w, 1), BAR);
          x += w;
        });
        continue;
      }
      const firstRow = Math.max(0, Math.floor((top - group.y - HEADER) / (cell.height + GAP)));
      const lastRow = Math.min(group.rows, Math.ceil((top + height - group.y - HEADER) / (cell.height + GAP)) + 1);
      for (let row = firstRow; row < lastRow; row++) {
        for (let col = 0; col < this.perRow; col++) {
          const k = row * this.perRow + col;
          if (k >= group.members.length) break;
          const i = group.members[k];
          const x = PAD + col * (cell.width + GAP);
          const y = y0 + HEADER + row * (cell.height + GAP);
          ctx.fillStyle = COLORS[names[m.state[i]]];
          ctx.fillRect(x, y, cell.width, cell.height);
          if (cell.named) this.drawName(ctx, i, x, y);
          if (this.selected.has(i)) {
            ctx.strokeStyle = "#0b3d91";
            ctx.lineWidth = cell.named ? 3 : 2;
            ctx.strokeRect(x + 1, y + 1, cell.width - 2, cell.height - 2);
          }
          painted++;
        }
      }
    }
    this.painted = painted;
    this.drawn++;
  }

  // A tile's name (cut with an ellipsis to its width) and, when it is not ok, its state under it.
  drawName(ctx, i, x, y) {
    const state = this.stateName(i);
    const room = this.cell.width - 10;
    const text = fitText(ctx, this.label(i), room);
    ctx.fillStyle = DARK_TEXT.has(state) ? "#1d2330" : "#fff";
    ctx.font = "600 12px system-ui, sans-serif";
    ctx.fillText(text, x + 5, y + 4);
    ctx.font = "11px system-ui, sans-serif";
    if (state !== "ok") ctx.fillText(state, x + 5, y + 19);
    ctx.font = "12px system-ui, sans-serif";
    this.labels.push({ name: this.data.machines.name[i], text, state, x: x + 5, y: y + 4, width: ctx.measureText(text).width });
  }

  hover(e) {
    const hit = this.hit(e);
    const tip = this.tooltip;
    if (!hit || hit.machine === undefined) { tip.hidden = true; return; }
    const i = hit.machine;
    const d = this.data;
    const m = d.machines;
    const label = d.labels?.[m.name[i]];
    tip.textContent = [
      label ? `${label} (${m.name[i]})` : m.name[i], this.stateName(i), d.sets[m.set[i]],
      `zone ${d.zones[m.zone[i]] || "none"} · host ${d.hosts[m.host[i]]}`,
    ].join("\n");
    tip.hidden = false;
    const box = this.scroll.parentElement.getBoundingClientRect();
    tip.style.left = Math.min(e.clientX - box.left + 12, box.width - tip.offsetWidth - 4) + "px";
    tip.style.top = e.clientY - box.top + 14 + "px";
  }

  hit(e) {
    const rect = this.canvas.getBoundingClientRect();
    const x = e.clientX - rect.left;
    const y = e.clientY - rect.top + this.scroll.scrollTop;
    const group = this.groups.find((g) => y >= g.y && y < g.y + g.height);
    if (!group) return null;
    if (y < group.y + HEADER || group.rows === 0) return { group };
    const cell = this.cell;
    const col = Math.floor((x - PAD) / (cell.width + GAP));
    const row = Math.floor((y - group.y - HEADER) / (cell.height + GAP));
    if (col < 0 || col >= this.perRow) return { group };
    const k = row * this.perRow + col;
    return k < group.members.length ? { group, machine: group.members[k] } : { group };
  }

  click(e) {
    const hit = this.hit(e);
    if (!hit) return;
    if (hit.machine === undefined) {
      if (this.aggregate) {  // a group's bar or header: open or close its cells
        if (this.expanded.has(hit.group.name)) this.expanded.delete(hit.group.name);
        else this.expanded.add(hit.group.name);
        this.layout();
      } else {  // a header: select or unselect the whole group
        const all = hit.group.members.every((i) => this.selected.has(i));
        for (const i of hit.group.members) all ? this.selected.delete(i) : this.selected.add(i);
      }
    } else if (this.selected.has(hit.machine)) {
      this.selected.delete(hit.machine);
    } else {
      this.selected.add(hit.machine);
    }
    this.draw();
    this.onSelect(hit.machine);
  }

  // Where a machine's cell is, in page coordinates (the tests click there, as a person would).
  cellCenter(name) {
    const i = this.index.get(name);
    const cell = this.cell;
    for (const group of this.groups) {
      const k = group.members.indexOf(i);
      if (k < 0 || group.rows === 0) continue;
      const y = group.y + HEADER + Math.floor(k / this.perRow) * (cell.height + GAP);
      if (y < this.scroll.scrollTop || y + cell.height > this.scroll.scrollTop + this.scroll.clientHeight) {
        this.scroll.scrollTop = Math.max(0, y - 40);
        this.draw();
      }
      const rect = this.canvas.getBoundingClientRect();
      return {
        x: rect.left + PAD + (k % this.perRow) * (cell.width + GAP) + cell.width / 2,
        y: rect.top + y - this.scroll.scrollTop + cell.height / 2,
      };
    }
    return null;
  }
}

// States light enough for dark text on their colour.
const DARK_TEXT = new Set(["ok", "scheduled"]);

// `text`, cut with an ellipsis to `room` pixels in the context's font.
export function fitText(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {  // the longest prefix that fits with its ellipsis
    const mid = Math.ceil((lo + hi) / 2);
    if (ctx.measureText(text.slice(0, mid) + "…").width <= room) lo = mid; else hi = mid - 1;
  }
  return text.slice(0, lo) + "…";
}
