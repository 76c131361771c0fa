// The owner's actions on one feedback row: delete (confirm, then DeleteFeedback: a hard delete) and
// "File issue" (FileFeedback, scope feedback:triage: the tracker's link is stored on the report; a
// failure shows its status and reason and the button stays, so it can be retried), and its history
// (ListAuditRecords for this report: who changed, filed or read it, when; never the body).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorReason, errorText, principal, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { AuditAction, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";

/** Delete control: the first press asks, the second deletes; the row is replaced by a line saying so. */
export function deleteControl(fb: Feedback, row: HTMLElement): HTMLElement {
  const slot = h("span", { class: "fb-delete" });
  // One request id per row: a retried delete is answered OK, never "not found" (AIP-155).
  const requestId = uuid4();
  const ask = h("button", { type: "button", class: "act-delete-report" }, "Delete");
  const doDelete = async (confirm: HTMLButtonElement, msg: HTMLElement) => {
    confirm.disabled = true;
    try {
      await api().feedback.deleteFeedback({ name: fb.name, requestId });
      row.replaceChildren(h("p", { class: "muted deleted", role: "status" }, "Report deleted (removed for good, with its frozen evidence)."));
      row.classList.add("gone");
    } catch (e) {
      msg.textContent = errorText(e);
      confirm.disabled = false;
    }
  };
  ask.addEventListener("click", () => {
    const msg = h("span", { class: "error", role: "alert" });
    const confirm = h("button", { type: "button", class: "danger confirm-delete-report" }, "Delete for good");
    const cancel = h("button", { type: "button" }, "Keep");
    confirm.addEventListener("click", () => void doDelete(confirm, msg));
    cancel.addEventListener("click", () => mount(slot, ask));
    mount(slot, h("span", { class: "confirm-text" }, "Delete this report and its frozen evidence? This cannot be undone. "), confirm, cancel, msg);
    confirm.focus();
  });
  mount(slot, ask);
  return slot;
}

/** "File issue" for a report without a link yet (feedback:triage); `onFiled` gets the stored row. */
export function fileControl(fb: Feedback, onFiled: (fb: Feedback) => void): HTMLElement | null {
  if (fb.issueUrl || !principal()?.scopes.has("feedback:triage")) return null;
  const msg = h("span", { class: "error file-msg", role: "alert" });
  const requestId = uuid4();
  const button = h("button", { type: "button", class: "act-file" }, "File issue");
  button.addEventListener("click", async () => {
    button.disabled = true;
    msg.textContent = "";
    try {
      onFiled(await api().feedback.fileFeedback({ name: fb.name, requestId }));
    } catch (e) {
      const reason = errorReason(e);
      msg.textContent = `Not filed: ${errorText(e)}${reason && !errorText(e).includes(reason) ? ` (${reason})` : ""}. You can try again.`;
      button.textContent = "Try filing again";
      button.disabled = false;
    }
  });
  return h("span", { class: "fb-file" }, button, msg);
}

const ACTION_TEXT: Record<number, string> = {
  [AuditAction.UPDATE_FEEDBACK]: "changed", [AuditAction.FILE_FEEDBACK]: "filed", [AuditAction.DELETE_FEEDBACK]: "deleted",
  [AuditAction.RESOLVE_FEEDBACK]: "resolved (MCP)", [AuditAction.READ_BODY]: "read the words (operator)",
};

/** "History": the report's audit records, loaded when first opened. */
export function historyControl(fb: Feedback): HTMLElement {
  const list = h("ul", { class: "audit" });
  const box = h("details", { class: "fb-history" }, h("summary", {}, "History"), list);
  let loaded = false;
  box.addEventListener("toggle", async () => {
    if (!box.open || loaded) return;
    loaded = true;
    mount(list, h("li", { class: "muted" }, "Loading…"));
    try {
      const r = await api().feedback.listAuditRecords({ feedback: fb.name, pageSize: 50 });
      mount(list, r.auditRecords.length
        ? r.auditRecords.map((a) => h("li", { class: "audit-record", dataset: { action: AuditAction[a.action] ?? String(a.action) } },
            timeEl(a.time ? timestampDate(a.time) : undefined), " ", h("strong", {}, a.actor), " ", ACTION_TEXT[a.action] ?? "acted",
            a.changes.map((c) => h("span", { class: "muted" }, ` · ${c.field}: ${c.oldValue || "—"} → ${c.newValue || "—"}`))))
        : h("li", { class: "muted" }, "No changes since it was reported."));
    } catch (e) {
      loaded = false;
      mount(list, h("li", { class: "error" }, errorText(e)));
    }
  });
  return box;
}
