// A Node gRPC-web client in TEXT mode (application/grpc-web-text, base64 frames), built on the
// official `grpc-web` runtime (google's GrpcWebClientBase with format "text") and protobuf-es
// codecs; Node has no XMLHttpRequest, so `xhr2` provides it. Used by tests/e2e/test_grpcweb_clients.py.
//
// Usage: node scripts/grpcweb-text-client.mjs <gateway-url> <token|-> [page_size]
// Prints one JSON line: {"ok": true, "feedback": [{"name", "body", "status"}...]}
//                    or {"ok": false, "code": <grpc code>, "message": "..."}
import XMLHttpRequest from "xhr2";
import grpcWeb from "grpc-web";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ListFeedbackRequestSchema,
  ListFeedbackResponseSchema,
  Status,
} from "../.gen-node/agentfeedback/feedback/v1/feedback_pb.js";

globalThis.XMLHttpRequest = XMLHttpRequest;
const { GrpcWebClientBase, MethodDescriptor, MethodType } = grpcWeb;

const [gateway, token, pageSize = "50"] = process.argv.slice(2);
if (!gateway || !token) {
  console.error("usage: grpcweb-text-client.mjs <gateway-url> <token|-> [page_size]");
  process.exit(2);
}

class Req {}
class Resp {}
const listFeedback = new MethodDescriptor(
  "/agentfeedback.feedback.v1.FeedbackService/ListFeedback",
  MethodType.UNARY,
  Req,
  Resp,
  (req) => toBinary(ListFeedbackRequestSchema, req),
  (bytes) => fromBinary(ListFeedbackResponseSchema, bytes),
);

const client = new GrpcWebClientBase({ format: "text" });
const metadata = token === "-" ? {} : { authorization: `Bearer ${token}` };
try {
  const resp = await client.unaryCall(
    `${gateway}/agentfeedback.feedback.v1.FeedbackService/ListFeedback`,
    create(ListFeedbackRequestSchema, { pageSize: Number(pageSize) }),
    metadata,
    listFeedback,
  );
  const feedback = resp.feedback.map((f) => ({ name: f.name, body: f.body, status: Status[f.status] }));
  console.log(JSON.stringify({ ok: true, feedback }));
} catch (e) {
  console.log(JSON.stringify({ ok: false, code: e.code, message: e.message }));
}
