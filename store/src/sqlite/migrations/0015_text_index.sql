-- The substring index of call inputs and outputs (docs/storage.md#substring-index,
-- store/src/sqlite/text_index.rs): per block of 64 consecutive rowids of `calls`, the hashed
-- trigrams of its rows' inputs and outputs. Contentless and without positions: it only says
-- which blocks may hold a needle.
CREATE VIRTUAL TABLE calls_text USING fts5(grams, content='', contentless_delete=1, detail=none,
                                           tokenize='ascii');
-- Blocks whose entry is missing or out of date, rebuilt by the writer when it is idle. A query
-- reads every pending block in full, so the index is never wrong, only behind. The writer lists
-- a block in the transaction that writes a row of it (calls.rs apply_call_parts). Not by triggers:
-- a statement that fires one is journalled page by page in case it must be undone, which
-- halved the call ingest (docs/benchmarks.md, "Substring index").
CREATE TABLE calls_text_pending (block INTEGER PRIMARY KEY);
-- Every existing row (6 is text_index.rs BLOCK_SHIFT): a database upgraded from 0014 is indexed
-- in the background, not here.
INSERT INTO calls_text_pending (block) SELECT DISTINCT rowid >> 6 FROM calls;
