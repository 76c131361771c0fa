"""The feedback service's data model: frozen dataclasses every layer shares, one module per aggregate
(`report`, `rating`, `statistics`, `audit`, `capture`) and the proto-numbered `enums`; import each name
from its module.

The repository returns these (never `asyncpg.Record`), the use cases decide on them, `codec.py`
turns them into protos and back. Field names follow the proto's, so a reader can hold the two side
by side.
"""
