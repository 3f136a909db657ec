SELECT id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, started_at, ended_at, NULL, inputs, NULL, exception, summary, NULL, wb_user_id, wb_run_id, wb_run_step, wb_run_step_end, deleted_at, NULL FROM calls WHERE project_key = (SELECT project_key FROM project_keys WHERE project_id = ?) AND deleted_at IS NULL AND started_at IS NOT NULL AND id IN (SELECT value FROM json_each(?)) ORDER BY started_at ASC, id ASC LIMIT ? OFFSET ?
-- parameters
-- Text("e/p")
-- Text("[\"a\",\"b\"]")
-- Integer(-1)
-- Integer(3)
