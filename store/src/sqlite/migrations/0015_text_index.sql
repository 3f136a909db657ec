-- The substring index of call inputs and outputs (docs/storage.md#substring-index,
-- store/src/sqlite/text_index.rs): per block of 64 consecutive rowids of `calls`, the hashed
-- trigrams of its rows' inputs and outputs. Contentless and without positions: it only says
-- which blocks may hold a needle.
CREATE VIRTUAL TABLE calls_text USING fts5(grams, content='', contentless_delete=1, detail=none,
                                           tokenize='ascii');
-- Blocks whose entry is missing or out of date, rebuilt by the writer when it is idle. A query
-- reads every pending block in full, so the index is never wrong, only behind. The triggers
-- list a block in the same transaction as the change; 6 is text_index.rs BLOCK_SHIFT.
CREATE TABLE calls_text_pending (block INTEGER PRIMARY KEY);
-- Every existing row: a database upgraded from 0014 is indexed in the background, not here.
INSERT INTO calls_text_pending (block) SELECT DISTINCT rowid >> 6 FROM calls;
CREATE TRIGGER calls_text_on_insert AFTER INSERT ON calls BEGIN
    INSERT OR IGNORE INTO calls_text_pending (block) VALUES (new.rowid >> 6);
END;
CREATE TRIGGER calls_text_on_update AFTER UPDATE OF inputs, output ON calls
WHEN new.inputs IS NOT old.inputs OR new.output IS NOT old.output BEGIN
    INSERT OR IGNORE INTO calls_text_pending (block) VALUES (new.rowid >> 6);
END;
CREATE TRIGGER calls_text_on_delete AFTER DELETE ON calls BEGIN
    INSERT OR IGNORE INTO calls_text_pending (block) VALUES (old.rowid >> 6);
END;
