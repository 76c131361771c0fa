// Hash routes: `#/a/b?x=1` → { path: ["a", "b"], query: x=1 }.

export interface Route {
  path: string[];
  query: URLSearchParams;
}

export function parseRoute(): Route {
  const [path, query = ""] = location.hash.replace(/^#\/?/, "").split("?", 2);
  return { path: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

/** Navigate to `hash`; re-renders even when it is the current hash. */
export function go(hash: string): void {
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}
