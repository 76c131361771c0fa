// Sends evaluations the way another product's Node service would (issue 24): the real OpenTelemetry JS
// SDK (NodeTracerProvider + the OTLP/HTTP protobuf exporter) under a foreign resource, emitting the
// OpenTelemetry GenAI `gen_ai.evaluation.result` span event (on a span parented to the evaluated span)
// and an OpenInference annotation (a carrier span with one link to the rated span).
// Usage: node scripts/otel-evaluations.mjs <OTLP/HTTP traces URL> <JSON: {trace_id, response_id, events: [...]}>
// where each event is {form: "gen_ai" | "annotation", name, label?, score?, explanation?, kind?, identifier?}.
// Exits 0 once every span was exported (the collector acknowledged it), 1 otherwise.
import { context, trace, TraceFlags } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";
import { randomBytes } from "node:crypto";

const [url, spec] = process.argv.slice(2);
const { trace_id: traceId, response_id: responseId, events } = JSON.parse(spec);
const exporter = new OTLPTraceExporter({ url });
let failed = 0; // the SDK reports export failures to its error handler only: count them to exit non-zero
const exportSpans = exporter.export.bind(exporter);
exporter.export = (spans, done) => exportSpans(spans, (result) => { if (result.code !== 0) failed += 1; done(result); });
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "js-judge" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
const tracer = provider.getTracer("js-judge");
const rated = () => ({ traceId, spanId: randomBytes(8).toString("hex"), traceFlags: TraceFlags.SAMPLED, isRemote: true });

for (const e of events) {
  if (e.form === "gen_ai") {
    const attrs = { "gen_ai.evaluation.name": e.name };
    if (e.label) attrs["gen_ai.evaluation.score.label"] = e.label;
    if (e.score !== undefined) attrs["gen_ai.evaluation.score.value"] = e.score;
    if (e.explanation) attrs["gen_ai.evaluation.explanation"] = e.explanation;
    if (responseId) attrs["gen_ai.response.id"] = responseId;
    const span = tracer.startSpan("evaluate", {}, trace.setSpanContext(context.active(), rated()));
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
await provider.forceFlush();
await provider.shutdown();
if (failed) {
  console.error(`${failed} export(s) failed`);
  process.exit(1);
}
