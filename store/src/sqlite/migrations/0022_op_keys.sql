-- Integer keys of ops (docs/storage.md#op-keys, store/src/sqlite/op_keys.rs). `calls_by_op` held
-- each call's op name, a ref of 80 to 110 bytes whose first 30 or so (`weave:///entity/project/op/`)
-- are the same for every call of a project: the largest index, and every step of every descent
-- compared that prefix. A row now names its op by `op_key` too, and the index holds the key.
-- Every row that has an op name gets its key here.
CREATE TABLE call_ops (
    op_key      INTEGER PRIMARY KEY,
    project_key INTEGER NOT NULL,
    name        TEXT NOT NULL,
    UNIQUE (project_key, name)
);
INSERT INTO call_ops (project_key, name)
SELECT DISTINCT project_key, op_name FROM calls WHERE op_name IS NOT NULL;
ALTER TABLE calls ADD COLUMN op_key INTEGER;
UPDATE calls SET op_key = (
    SELECT o.op_key FROM call_ops o WHERE o.project_key = calls.project_key AND o.name = calls.op_name
) WHERE op_name IS NOT NULL;
DROP INDEX calls_by_op;
CREATE INDEX calls_by_op ON calls (project_key, op_key, deleted_at, started_at);
