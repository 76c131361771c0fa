"""One layout measurement run in both engines (Chromium via Playwright, WebKitGTK via WebKitWebDriver):
the same JavaScript, so the two are compared on what a person sees — line counts, overlaps and box
sizes — never on exact pixel positions (text metrics differ across engines).

When a modal dialog is open only what is inside it counts (the page behind is inert and covered).
"""
from __future__ import annotations

# Returns {timestamps: [...], small: [...], scrollWidth, innerWidth}.
#  timestamps: per `.msg-time` in scope — its line count (client rects grouped by top), whether any
#              visible control of its message intersects it, and whether something else is painted over
#              its left end, centre or right end (elementFromPoint);
#  small:      every visible touch target (buttons, links, inputs, selects, summaries, tabs, labels of
#              checkboxes/radios) narrower or shorter than 44 CSS px.
MEASURE_JS = r"""
const dialog = document.querySelector('dialog[open]');
const scope = dialog || document;
const CONTROLS = 'button, a[href], select, input, textarea, summary, [role=tab], [role=menuitem], [role=menuitemcheckbox], label';
const visible = (el) => {
  const r = el.getBoundingClientRect();
  const cs = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && cs.visibility !== 'hidden' && cs.display !== 'none';
};
const label = (el) => (el.getAttribute('aria-label') || el.textContent || el.getAttribute('placeholder') || el.tagName).trim().slice(0, 40);
const hit = (a, b) => !(a.right <= b.left || b.right <= a.left || a.bottom <= b.top || b.bottom <= a.top);
const timestamps = [];
for (const t of scope.querySelectorAll('.msg-time')) {
  if (!visible(t)) continue;
  t.scrollIntoView({block: 'center'});
  const r = t.getBoundingClientRect();
  const range = document.createRange();
  range.selectNodeContents(t);
  const tops = [];
  for (const q of range.getClientRects()) {
    if (q.width > 0 && !tops.some((y) => Math.abs(y - q.top) < q.height / 2)) tops.push(q.top);
  }
  const msg = t.closest('article.msg, .modal-msg');
  const covered = [];
  for (const c of (msg || scope).querySelectorAll(CONTROLS)) {
    if (visible(c) && !c.contains(t) && hit(r, c.getBoundingClientRect())) covered.push(label(c));
  }
  const painted = [[r.left + 1, r.top + r.height / 2], [r.left + r.width / 2, r.top + r.height / 2], [r.right - 1, r.top + r.height / 2]]
    .map(([x, y]) => { const el = document.elementFromPoint(x, y); return !!el && !!el.closest('.msg-time') && el.closest('.msg-time') === t; });
  timestamps.push({text: t.textContent, lines: tops.length, height: r.height, width: r.width, covered, painted});
}
const small = [];
for (const el of scope.querySelectorAll(CONTROLS)) {
  if (el.matches('input[type=checkbox], input[type=radio]')) continue;   // their label is the target
  if (el.matches('label') && !el.querySelector('input[type=checkbox], input[type=radio]')) continue;
  if (!visible(el)) continue;
  const r = el.getBoundingClientRect();
  if (r.width < 44 - 0.5 || r.height < 44 - 0.5) small.push({label: label(el), width: r.width, height: r.height, tag: el.tagName});
}
window.scrollTo(0, 0);
return {timestamps, small, scrollWidth: document.documentElement.scrollWidth, innerWidth: innerWidth, dialog: !!dialog};
"""


def assert_layout(report: dict, where: str, *, min_timestamps: int = 1) -> None:
    """Each timestamp on one line, uncovered and painted on top; every touch target ≥ 44 px; no sideways scroll."""
    ts = report["timestamps"]
    assert len(ts) >= min_timestamps, f"{where}: {len(ts)} timestamps measured"
    for t in ts:
        assert t["lines"] == 1, f"{where}: timestamp {t['text']!r} wraps onto {t['lines']} lines"
        assert not t["covered"], f"{where}: timestamp {t['text']!r} covered by {t['covered']}"
        assert all(t["painted"]), f"{where}: something is drawn over timestamp {t['text']!r} ({t['painted']})"
    assert not report["small"], f"{where}: touch targets under 44 px: {report['small']}"
    assert report["scrollWidth"] <= report["innerWidth"], f"{where}: scrolls sideways ({report['scrollWidth']} px)"
