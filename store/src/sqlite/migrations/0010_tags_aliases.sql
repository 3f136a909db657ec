-- Tags and aliases of object versions (docs/api/objects.md#tags-and-aliases). A tag row labels
-- one version; an alias row names one version of an object, so (project, object, alias) is
-- unique and setting it elsewhere moves it. Deleting a version deletes its rows (objects.rs).
-- The second index of each answers the project-wide lists and the filters of /objs/query.
CREATE TABLE object_tags (
    project_id TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    digest     TEXT NOT NULL,
    tag        TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    wb_user_id TEXT,
    PRIMARY KEY (project_id, object_id, digest, tag)
);
CREATE INDEX object_tags_by_tag ON object_tags (project_id, tag);
CREATE TABLE object_aliases (
    project_id TEXT NOT NULL,
    object_id  TEXT NOT NULL,
    alias      TEXT NOT NULL,
    digest     TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    wb_user_id TEXT,
    PRIMARY KEY (project_id, object_id, alias)
);
CREATE INDEX object_aliases_by_alias ON object_aliases (project_id, alias);
