// Sign in with a bearer token (the dev token `make run` prints, or any JWT the services accept).
import { gatewayUrl, signIn } from "../api";
import { h, mount } from "../dom";
import { go } from "../router";

export function signInPage(main: HTMLElement): void {
  const token = h("textarea", { id: "token", rows: 4, autocomplete: "off", spellcheck: "false", placeholder: "eyJhbGciOi…" });
  const error = h("p", { class: "error", role: "alert" });
  const form = h(
    "form",
    {
      class: "card narrow",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const problem = signIn(token.value);
        if (problem) error.textContent = problem;
        else go("#/agents");
      },
    },
    h("h1", {}, "Sign in"),
    h("label", { for: "token" }, "Token"),
    token,
    h("p", { class: "muted" }, "Paste the dev token that ", h("code", {}, "make run"), " printed. Gateway: ", h("code", {}, gatewayUrl())),
    error,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
  );
  mount(main, form);
  token.focus();
}
