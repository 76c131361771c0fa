-- SearchTraces attribute filters (issue 17): one GIN index per daily partition on the span
-- attribute document, operator class jsonb_path_ops (one hashed entry per key path + value, about
-- a third the size of jsonb_ops and cheaper to insert into). A filter `key = "v"` is answered with
-- `attributes @> '{"key": "v"}'` (plus the number / boolean forms of "v", OR-ed), rechecked exactly
-- with `attributes ->> key = 'v'` (repository.py SEARCH_CANDIDATES). Declared on the parent so every
-- partition made by the retention pass gets its own index (dropped with its day, never rebuilt).
CREATE INDEX spans_attributes_idx ON spans USING gin (attributes jsonb_path_ops);
