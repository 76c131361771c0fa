// Session (bearer token + gateway URL), the gRPC-web transport, service clients, error text.
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { ChatService } from "./gen/agentfeedback/chat/v1/chat_pb";
import { FeedbackService } from "./gen/agentfeedback/feedback/v1/feedback_pb";
import { TraceQueryService } from "./gen/agentfeedback/traces/v1/traces_pb";
import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb";

const TOKEN_KEY = "agentfeedback.token";
const GATEWAY_KEY = "agentfeedback.gateway";

/** The gateway: `?gateway=` (remembered), else the remembered one, else VITE_GATEWAY_URL, else this host on :8080. */
export function gatewayUrl(): string {
  const fromQuery = new URLSearchParams(location.search).get("gateway");
  if (fromQuery) localStorage.setItem(GATEWAY_KEY, fromQuery);
  return (
    fromQuery ??
    localStorage.getItem(GATEWAY_KEY) ??
    (import.meta.env.VITE_GATEWAY_URL as string | undefined) ??
    `${location.protocol}//${location.hostname}:8080`
  );
}

export interface Principal {
  sub: string;
  scopes: Set<string>;
  exp: number;
}

/** Claims of the stored token (not verified here: the services verify every call). */
export function principal(): Principal | null {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) return null;
  try {
    const payload = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    const claims = JSON.parse(atob(payload.padEnd(payload.length + ((4 - (payload.length % 4)) % 4), "=")));
    return { sub: String(claims.sub ?? ""), scopes: new Set(String(claims.scope ?? "").split(" ").filter(Boolean)), exp: Number(claims.exp ?? 0) };
  } catch {
    return null;
  }
}

/** Store `token` if it is a JWT; returns an error text otherwise. */
export function signIn(token: string): string | null {
  const t = token.trim().replace(/^Bearer\s+/i, "");
  if (t.split(".").length !== 3) return "That is not a token: paste the JWT that `make run` printed (three dot-separated parts).";
  sessionStorage.setItem(TOKEN_KEY, t);
  if (!principal()) {
    sessionStorage.removeItem(TOKEN_KEY);
    return "The token's claims could not be read.";
  }
  return null;
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

const auth: Interceptor = (next) => async (req) => {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) req.header.set("authorization", `Bearer ${token}`);
  return next(req);
};

function transport() {
  return createGrpcWebTransport({ baseUrl: gatewayUrl(), useBinaryFormat: true, interceptors: [auth] });
}

export interface Clients {
  chat: Client<typeof ChatService>;
  feedback: Client<typeof FeedbackService>;
  traces: Client<typeof TraceQueryService>;
}

let cached: { url: string; clients: Clients } | null = null;

export function api(): Clients {
  const url = gatewayUrl();
  if (!cached || cached.url !== url) {
    const t = transport();
    cached = { url, clients: { chat: createClient(ChatService, t), feedback: createClient(FeedbackService, t), traces: createClient(TraceQueryService, t) } };
  }
  return cached.clients;
}

/** The ErrorInfo reason of an error (e.g. `TRACE_EXPIRED`), or "". */
export function errorReason(e: unknown): string {
  const err = ConnectError.from(e);
  return err.findDetails(ErrorInfoSchema)[0]?.reason ?? "";
}

export function errorCode(e: unknown): Code {
  return ConnectError.from(e).code;
}

/** Human text for an RPC error: `NOT_FOUND: message` plus the fields a BadRequest names. */
export function errorText(e: unknown): string {
  const err = ConnectError.from(e);
  if (err.code === Code.Unknown && /fetch|network/i.test(err.rawMessage)) {
    // The browser never reached the gateway (down, wrong URL, CORS refusal, or a port browsers block).
    return `cannot reach the gateway at ${gatewayUrl()} (${err.rawMessage}): is it running, is this page's origin ` +
      "allowed, and is its port one browsers allow (not e.g. 10080)?";
  }
  const name = Code[err.code]?.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase() ?? String(err.code);
  const fields = err.findDetails(BadRequestSchema).flatMap((b) => b.fieldViolations.map((v) => `${v.field}: ${v.description}`));
  const base = `${name}: ${err.rawMessage || "(no message)"}`;
  return fields.length && !fields.every((f) => base.includes(f)) ? `${base} (${fields.join("; ")})` : base;
}

export { Code };

/** UUID4 for `request_id` (AIP-155); crypto.randomUUID needs a secure context, so fall back to getRandomValues. */
export function uuid4(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** `instances/abc` → `abc`. */
export function lastSegment(name: string): string {
  return name.split("/").pop() ?? name;
}
