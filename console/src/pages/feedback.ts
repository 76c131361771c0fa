// The account-wide Feedback page: everything the owner flagged across agents, filtered by status.
import { h, mount } from "../dom";
import { Status } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { feedbackList, STATUS_NAMES } from "./feedbackList";

export async function feedbackPage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  const wanted = query.get("status") ?? "";
  const status = STATUS_NAMES.find(([, n]) => n === wanted)?.[0] ?? Status.UNSPECIFIED;
  const filter = h("select", { id: "status-filter", "aria-label": "Filter by status",
    onchange: () => { location.hash = filter.value ? `#/feedback?status=${filter.value}` : "#/feedback"; } },
    h("option", { value: "" }, "all statuses"),
    STATUS_NAMES.map(([v, n]) => h("option", { value: n, selected: v === status }, n)));
  const body = h("div", {});
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Feedback"), h("label", {}, "Status ", filter)), body);
  await feedbackList(body, { status, highlight: query.get("highlight") ?? undefined });
}
