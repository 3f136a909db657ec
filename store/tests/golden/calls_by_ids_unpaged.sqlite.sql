SELECT id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, started_at, ended_at, NULL, inputs, NULL, exception, summary, NULL, wb_user_id, wb_run_id, wb_run_step, wb_run_step_end, deleted_at, NULL FROM calls NOT INDEXED WHERE project_key = (SELECT project_key FROM project_keys WHERE project_id = ?) AND deleted_at IS NULL AND started_at IS NOT NULL AND rowid IN (SELECT c.rowid FROM json_each(?) j CROSS JOIN call_ids d CROSS JOIN calls c WHERE d.project_key = (SELECT project_key FROM project_keys WHERE project_id = ?) AND d.id = j.value AND c.project_key = d.project_key AND c.bucket = d.bucket AND c.id = d.id UNION ALL SELECT c.rowid FROM call_buckets b CROSS JOIN json_each(?) j CROSS JOIN calls c WHERE b.project_key = (SELECT project_key FROM project_keys WHERE project_id = ?) AND b.bucket > (SELECT merged FROM call_ids_merged) AND c.project_key = b.project_key AND c.bucket = b.bucket AND c.id = j.value) ORDER BY started_at ASC, id ASC LIMIT ? OFFSET ?
-- parameters
-- Text("e/p")
-- Text("[\"a\",\"b\"]")
-- Text("e/p")
-- Text("[\"a\",\"b\"]")
-- Text("e/p")
-- Integer(-1)
-- Integer(3)
