// One paged, sortable table over a list RPC (the Feedback page, the dashboard's feeds): a row per item, a "Details"
// button expanding the row to the item's whole record, Previous / Next over the API's page tokens
// (a stack of the tokens seen: AIP-158 tokens are opaque, so "previous" is the token that led here).
// Columns sort the rows of the page on screen; the server's order (newest first) is the default.
// Filters belong to the caller: `reload()` starts again from the first page.
import { errorText } from "../api";
import { h, mount } from "../dom";
import { plural } from "../names";

type Cell = Node | string | null;

export interface Column<T> {
  key: string;
  label: string;
  cell: (item: T) => Cell | Cell[];
  /** Sortable when given: the value rows are ordered by. */
  sort?: (item: T) => string | number;
  /** Hidden at 480 px and below (style.css: the phone keeps the columns that say what). */
  wide?: boolean;
}

export interface TableOptions<T> {
  cls: string;
  columns: Column<T>[];
  load: (pageToken: string) => Promise<{ items: T[]; next: string }>;
  key: (item: T) => string;
  detail: (item: T, row: HTMLElement) => HTMLElement;
  /** The accessible name of a row's Details button (what the row is). */
  label: (item: T) => string;
  empty: string;
  noun: string;
  /** Next to a row's Details button (a link out, say). */
  extra?: (item: T) => Node | null;
  /** Rows opened as soon as they are drawn (a highlighted item, `expand=all`). */
  expand?: (item: T) => boolean;
}

/** The table and its pager; `reload()` shows the first page again (after a filter change); `ready`
 *  settles once the first page is drawn (or its error shown). */
export function dataTable<T>(o: TableOptions<T>): { el: HTMLElement; reload: () => Promise<void>; ready: Promise<void> } {
  const body = h("tbody", {});
  const error = h("p", { class: "error", role: "alert" });
  const info = h("span", { class: "muted dt-page-info", role: "status" });
  const prev = h("button", { type: "button", class: "dt-prev", disabled: true }, "Previous page");
  const next = h("button", { type: "button", class: "dt-next", disabled: true }, "Next page");
  const width = String(o.columns.length + 1);
  let sort: { key: string; desc: boolean } | null = null; // null: the server's order
  let items: T[] = [];
  let tokens = [""]; // tokens[i] = the page token of page i
  let page = 0;
  let generation = 0; // a load started later wins: an earlier answer arriving after it is dropped

  const th = (c: Column<T>) => {
    if (!c.sort) return h("th", { scope: "col", class: `col-${c.key}${c.wide ? " col-wide" : ""}` }, c.label);
    const b = h("button", { type: "button", class: "link sort", dataset: { sort: c.key } }, c.label);
    b.addEventListener("click", () => {
      sort = { key: c.key, desc: sort?.key === c.key ? !sort.desc : false };
      draw();
    });
    return h("th", { scope: "col", class: `col-${c.key}${c.wide ? " col-wide" : ""}`, "aria-sort": "none" }, b);
  };
  const head = h("tr", {}, o.columns.map(th), h("th", { scope: "col" }, h("span", { class: "offscreen" }, "Details")));
  const table = h("table", { class: `fb-table dt-table ${o.cls}` }, h("thead", {}, head), body);

  const toggle = (item: T, tr: HTMLElement) => {
    const btn = tr.querySelector<HTMLButtonElement>(".dt-expand")!;
    const open = tr.nextElementSibling?.classList.contains("dt-detail");
    if (open) { tr.nextElementSibling!.remove(); btn.setAttribute("aria-expanded", "false"); btn.textContent = "Details"; return; }
    const detail = h("tr", { class: "dt-detail fb-detail", dataset: { key: o.key(item) } }, h("td", { colspan: width }));
    detail.firstElementChild!.append(o.detail(item, detail));
    tr.after(detail);
    btn.setAttribute("aria-expanded", "true");
    btn.textContent = "Hide";
  };
  const rowOf = (item: T) => {
    const btn = h("button", { type: "button", class: "dt-expand", "aria-expanded": "false", "aria-label": `Details of ${o.label(item)}` }, "Details");
    const tr = h("tr", { class: "dt-row", dataset: { key: o.key(item) } },
      o.columns.map((c) => h("td", { class: `col-${c.key}${c.wide ? " col-wide" : ""}` }, c.cell(item))),
      h("td", { class: "col-actions" }, btn, o.extra?.(item) ?? null));
    btn.addEventListener("click", () => toggle(item, tr));
    return tr;
  };
  const draw = () => {
    const col = sort && o.columns.find((c) => c.key === sort!.key);
    const shown = col?.sort ? [...items].sort((a, b) => {
      const x = col.sort!(a), y = col.sort!(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (sort!.desc ? -1 : 1);
    }) : items;
    head.querySelectorAll("th[aria-sort]").forEach((c) => c.setAttribute("aria-sort", "none"));
    if (col) head.querySelector(`th.col-${col.key}`)?.setAttribute("aria-sort", sort!.desc ? "descending" : "ascending");
    mount(body, shown.length ? shown.map(rowOf) : h("tr", {}, h("td", { colspan: width, class: "muted empty" }, o.empty)));
    if (o.expand) {
      for (const tr of body.querySelectorAll<HTMLElement>("tr.dt-row")) {
        const item = shown.find((x) => o.key(x) === tr.dataset.key);
        if (item && o.expand(item)) toggle(item, tr);
      }
    }
  };
  const load = async (to: number) => {
    const mine = ++generation;
    error.textContent = "";
    table.setAttribute("aria-busy", "true");
    try {
      const r = await o.load(tokens[to]);
      if (mine !== generation) return;
      page = to;
      items = r.items;
      tokens[to + 1] = r.next;
      tokens.length = to + 2;
      prev.disabled = page === 0;
      next.disabled = !r.next;
      info.textContent = `Page ${page + 1}: ${plural(items.length, o.noun)}${r.next ? ", more on the next page" : ""}`;
      draw();
    } catch (e) {
      if (mine === generation) error.textContent = errorText(e);
    } finally {
      if (mine === generation) table.removeAttribute("aria-busy");
    }
  };
  prev.addEventListener("click", () => void load(page - 1));
  next.addEventListener("click", () => void load(page + 1));
  const reload = () => { tokens = [""]; return load(0); };
  const ready = reload();
  return { el: h("div", { class: `dt-box ${o.cls}-box` }, h("div", { class: "table-wrap" }, table), error,
    h("div", { class: "dt-pager fb-pager inline-form" }, prev, info, next)), reload, ready };
}
