-- heddle's ClickHouse schema, version 10: tags and aliases of object versions
-- (docs/api/objects.md#tags-and-aliases). Idempotent like version 1.
--
-- Append-only like call_parts: every add, remove, set or move is a row, and the state of a
-- (version, tag) or (object, alias) is its newest row by `row_version`. `present = 0` rows
-- remove a tag; an alias row with digest '' removes the alias. Writes go under the per-object
-- lock of objects.rs, which also writes the removal rows when versions are deleted.
CREATE TABLE IF NOT EXISTS object_tags (
    project_id  String,
    object_id   String,
    digest      String,
    tag         String,
    present     UInt8,
    created_at  DateTime64(6, 'UTC'),
    wb_user_id  Nullable(String),
    row_version UInt64
) ENGINE = MergeTree
ORDER BY (project_id, object_id, digest, tag);

CREATE TABLE IF NOT EXISTS object_aliases (
    project_id  String,
    object_id   String,
    alias       String,
    digest      String,
    created_at  DateTime64(6, 'UTC'),
    wb_user_id  Nullable(String),
    row_version UInt64
) ENGINE = MergeTree
ORDER BY (project_id, object_id, alias);
