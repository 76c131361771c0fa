// The console shell: hash routes, the top navigation, sign-in guard.
//   #/signin                      sign in with a token
//   #/agents                      the owner's agents
//   #/agents/<id>/chat|feedback|trace[?trace=<id>&feedback=<name>]
//   #/queue[?agent=&category=&author=&status=&age=&text=&item=]  the review queue (pages/queue.ts)
//   #/feedback[?status=OPEN]      everything the owner flagged, across agents
//   #/ratings[?agent=<id>]        the owner's judgements, per agent or overall, editable in place
//   #/defects[?all=1]             suspected defects the platform caught (all=1: every owner, feedback:admin)
//   #/stats[?window=N]            the operator dashboard (scope feedback:admin)
import "./style.css";
import { principal, signOut } from "./api";
import { h, mount } from "./dom";
import { agentPage } from "./pages/agent";
import { agentsPage } from "./pages/agents";
import { defectsPage } from "./pages/defects";
import { feedbackPage } from "./pages/feedback";
import { queuePage } from "./pages/queue";
import { ratingsPage } from "./pages/ratings";
import { signInPage } from "./pages/signin";
import { statsPage } from "./pages/stats";
import { go, parseRoute } from "./router";

const app = document.getElementById("app")!;

function nav(active: string) {
  const p = principal();
  const link = (href: string, label: string, key: string) =>
    h("a", { href, class: active === key ? "active" : "", "aria-current": active === key ? "page" : undefined }, label);
  // Signed out there is nowhere to go: the brand only, no navigation.
  return h(
    "header",
    { class: "top" },
    h("strong", { class: "brand" }, "agent-feedback"),
    p && h(
      "nav",
      {},
      link("#/agents", "Agents", "agents"),
      p.scopes.has("feedback:triage") ? link("#/queue", "Review queue", "queue") : null,
      link("#/feedback", "Feedback", "feedback"),
      link("#/ratings", "My ratings", "ratings"),
      link("#/defects", "Suspected defects", "defects"),
      p?.scopes.has("feedback:admin") ? link("#/stats", "Statistics", "stats") : null,
    ),
    h(
      "span",
      { class: "who" },
      p ? h("span", { class: "muted", "data-testid": "who" }, p.sub) : null,
      p ? h("button", { class: "link", onclick: () => { signOut(); go("#/signin"); } }, "Sign out") : null,
    ),
  );
}

async function render(): Promise<void> {
  const route = parseRoute();
  const p = principal();
  const section = route.path[0] ?? "";
  if (!p && section !== "signin") {
    location.hash = "#/signin";
    return;
  }
  const main = h("main", {});
  mount(app, nav(section), main);
  switch (section) {
    case "signin":
      return signInPage(main);
    case "agents":
      return route.path[1] ? agentPage(main, route.path[1], route.path[2] ?? "chat", route.query) : agentsPage(main, route.query);
    case "queue":
      return queuePage(main, route.query);
    case "feedback":
      return feedbackPage(main, route.query);
    case "ratings":
      return ratingsPage(main, route.query);
    case "defects":
      return defectsPage(main, route.query);
    case "stats":
      return statsPage(main, route.query);
    default:
      location.hash = "#/agents";
  }
}

window.addEventListener("hashchange", () => void render());
void render();
