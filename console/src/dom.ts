// A tiny DOM builder: h("button", { class: "x", onclick: fn }, "text", child). No framework.

type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, unknown>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v as EventListener);
    } else if (k === "dataset") {
      Object.assign(el.dataset, v);
    } else if (k === "value" && "value" in el) {
      (el as unknown as { value: string }).value = String(v);
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** Text a client wrote (a report's words, a quoted message), bidi-isolated in a <bdi>: a bidi override
 *  in it (U+202E, Trojan Source) reorders only that text, never the console's own words after it on the
 *  line (a " […]" marker, a "Show all" button). */
export function iso(text: string, attrs: Attrs = {}): HTMLElement {
  return h("bdi", attrs, text);
}

/** Replace the children of `el`. */
export function mount(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

/** `2026-11-30 21:04:05` in the viewer's local time, plus the ISO form in a <time> element. */
export function timeEl(d: Date | undefined): HTMLElement {
  if (!d) return h("span", { class: "muted" }, "—");
  const pad = (n: number) => String(n).padStart(2, "0");
  const text = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return h("time", { datetime: d.toISOString(), title: d.toISOString() }, text);
}
