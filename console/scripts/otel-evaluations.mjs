// Sends evaluations the way another product's Node service would (issue 24): the real OpenTelemetry JS
// SDK under a foreign resource (service.name js-judge), over OTLP/HTTP protobuf, in three forms:
//   gen_ai     - the OpenTelemetry GenAI `gen_ai.evaluation.result` span event, on a span parented to the
//                evaluated span (NodeTracerProvider + OTLPTraceExporter, POST /v1/traces);
//   annotation - an OpenInference annotation, a carrier span with one link to the rated span;
//   log        - the same GenAI event as a log record (LoggerProvider + OTLPLogExporter, POST /v1/logs):
//                `eventName` gen_ai.evaluation.result, emitted in the rated span's context so the record
//                carries its trace id (semantic-conventions docs/general/events.md).
// Usage: node scripts/otel-evaluations.mjs <OTLP/HTTP base URL> <JSON: {trace_id, response_id, events: [...]}>
// where each event is {form: "gen_ai" | "annotation" | "log", name, label?, score?, explanation?, kind?,
// identifier?}. Exits 0 once every span and log record was exported (the collector acknowledged it), 1 otherwise.
import { context, trace, TraceFlags } from "@opentelemetry/api";
import { OTLPLogExporter } from "@opentelemetry/exporter-logs-otlp-proto";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { LoggerProvider, SimpleLogRecordProcessor } from "@opentelemetry/sdk-logs";
import { NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { randomBytes } from "node:crypto";

const [base, spec] = process.argv.slice(2);
const { trace_id: traceId, response_id: responseId, events } = JSON.parse(spec);
let failed = 0; // the SDK reports export failures to its error handler only: count them to exit non-zero
const counted = (exporter) => {
  const send = exporter.export.bind(exporter);
  exporter.export = (items, done) => send(items, (result) => { if (result.code !== 0) failed += 1; done(result); });
  return exporter;
};
const resource = resourceFromAttributes({ "service.name": "js-judge" });
const spanExporter = counted(new OTLPTraceExporter({ url: `${base}/v1/traces` }));
const logExporter = counted(new OTLPLogExporter({ url: `${base}/v1/logs` }));
const provider = new NodeTracerProvider({ resource, spanProcessors: [new SimpleSpanProcessor(spanExporter)] });
const loggers = new LoggerProvider({ resource, processors: [new SimpleLogRecordProcessor({ exporter: logExporter })] });
const tracer = provider.getTracer("js-judge");
const logger = loggers.getLogger("js-judge");
const rated = () => ({ traceId, spanId: randomBytes(8).toString("hex"), traceFlags: TraceFlags.SAMPLED, isRemote: true });
const inRated = () => trace.setSpanContext(context.active(), rated());

for (const e of events) {
  if (e.form === "gen_ai" || e.form === "log") {
    // semantic-conventions-genai events.yaml: event gen_ai.evaluation.result
    const attrs = { "gen_ai.evaluation.name": e.name };
    if (e.label) attrs["gen_ai.evaluation.score.label"] = e.label;
    if (e.score !== undefined) attrs["gen_ai.evaluation.score.value"] = e.score;
    if (e.explanation) attrs["gen_ai.evaluation.explanation"] = e.explanation;
    if (responseId) attrs["gen_ai.response.id"] = responseId;
    if (e.form === "log") {
      logger.emit({ eventName: "gen_ai.evaluation.result", attributes: attrs, context: inRated() });
      continue;
    }
    const span = tracer.startSpan("evaluate", {}, inRated());
    span.addEvent("gen_ai.evaluation.result", attrs);
    span.end();
  } else {
    const a = { "openinference.span.kind": "EVALUATOR", "annotations.0.annotation.name": e.name,
                "annotations.0.annotation.annotator_kind": e.kind ?? "LLM" };
    for (const k of ["label", "identifier", "explanation"]) if (e[k]) a[`annotations.0.annotation.${k}`] = e[k];
    if (e.score !== undefined) a["annotations.0.annotation.score"] = e.score;
    tracer.startSpan("annotation", { attributes: a, links: [{ context: rated() }], root: true }).end();
  }
}
await Promise.all([provider.forceFlush(), loggers.forceFlush()]);
await Promise.all([provider.shutdown(), loggers.shutdown()]);
if (failed) {
  console.error(`${failed} export(s) failed`);
  process.exit(1);
}
