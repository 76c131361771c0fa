-- Ours, additive (the exporter's INSERT names its columns, so it keeps working and leaves this ''):
-- the attribute values whose OTLP type the exporter's Map(String, String) loses (int, double, bool,
-- array, kvlist, empty), as compact JSON {"s": span, "r": resource, "e": {event index: …},
-- "l": {link index: …}} holding only values whose JSON differs from the Map's string (so a span of
-- string attributes stores ''). GetTrace overlays them on the Map, giving our API's typed values.
ALTER TABLE ${db}.${table} ${on_cluster} ADD COLUMN IF NOT EXISTS AgentFeedbackTypes String DEFAULT '' CODEC(ZSTD(1))
