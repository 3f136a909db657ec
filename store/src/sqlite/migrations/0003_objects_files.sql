-- Files in chunks (see store/src/files.rs): the file row keeps digest, size and chunk count;
-- `content` stays empty for chunked files and holds the whole content of files stored before
-- this migration (n_chunks = 0), which are read as they are.
ALTER TABLE files ADD COLUMN n_chunks INTEGER NOT NULL DEFAULT 0;
CREATE TABLE file_chunks (
    project_id  TEXT NOT NULL,
    digest      TEXT NOT NULL,
    chunk_index INTEGER NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (project_id, digest, chunk_index)
);
-- /objs/query lists a project's live versions; without this it reads deleted ones too.
CREATE INDEX objects_live ON objects (project_id, object_id, version_index) WHERE deleted_at IS NULL;
