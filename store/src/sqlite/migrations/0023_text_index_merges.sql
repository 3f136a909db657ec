-- FTS5 merges the substring index's segments eight at a level instead of four
-- (docs/storage.md#substring-index). Every block is written once as a small segment by an index
-- step and then copied at each merge above it; with eight per level each block is copied about
-- two thirds as often. A query reads at most twice as many segments per level, of which there
-- are fewer. The setting is kept in `calls_text_config`, so it holds for every later connection.
INSERT INTO calls_text (calls_text, rank) VALUES ('automerge', 8);
