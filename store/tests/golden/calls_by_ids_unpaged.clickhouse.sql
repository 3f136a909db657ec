SELECT id, project_id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, toUnixTimestamp64Micro(started_at) AS started_us, toUnixTimestamp64Micro(ended_at) AS ended_us, CAST(NULL, 'Nullable(String)') AS attributes_out, CAST(inputs, 'Nullable(String)') AS inputs_out, CAST(NULL, 'Nullable(String)') AS output_out, exception, summary, CAST(NULL, 'Nullable(String)') AS otel_dump_out, wb_user_id, wb_run_id, wb_run_step, wb_run_step_end FROM (SELECT project_id, id,
    argMaxIf(trace_id, version, trace_id IS NOT NULL) AS trace_id,
    countIf(has_start = 1) > 0 AS started,
    countIf(has_end = 1) > 0 AS ended,
    argMaxIf(op_name, version, has_start = 1) AS op_name,
    multiIf(countIf(kind = 'rename') > 0,
            argMaxIf(tuple(display_name), version, kind = 'rename').1,
            countIf(has_end = 1 AND display_name IS NOT NULL) > 0,
            argMaxIf(display_name, version, has_end = 1 AND display_name IS NOT NULL),
            argMaxIf(tuple(display_name), version, has_start = 1).1) AS display_name,
    argMaxIf(tuple(parent_id), version, has_start = 1).1 AS parent_id,
    argMaxIf(tuple(thread_id), version, has_start = 1).1 AS thread_id,
    argMaxIf(tuple(turn_id), version, has_start = 1).1 AS turn_id,
    argMaxIf(started_at, version, has_start = 1) AS started_at,
    argMaxIf(attributes, version, has_start = 1) AS attributes,
    argMaxIf(attributes_q, version, has_start = 1) AS attributes_q,
    argMaxIf(inputs, version, has_start = 1) AS inputs,
    argMaxIf(inputs_q, version, has_start = 1) AS inputs_q,
    argMaxIf(input_refs, version, has_start = 1) AS input_refs,
    argMaxIf(tuple(otel_dump), version, has_start = 1).1 AS otel_dump,
    argMaxIf(tuple(wb_user_id), version, has_start = 1).1 AS wb_user_id,
    argMaxIf(tuple(wb_run_id), version, has_start = 1).1 AS wb_run_id,
    argMaxIf(tuple(wb_run_step), version, has_start = 1).1 AS wb_run_step,
    if(ended, argMaxIf(ended_at, version, has_end = 1), NULL) AS ended_at,
    argMaxIf(summary, version, has_end = 1) AS summary,
    argMaxIf(summary_q, version, has_end = 1) AS summary_q,
    argMaxIf(tuple(output), version, has_end = 1).1 AS output,
    argMaxIf(output_q, version, has_end = 1) AS output_q,
    argMaxIf(output_refs, version, has_end = 1) AS output_refs,
    argMaxIf(tuple(exception), version, has_end = 1).1 AS exception,
    argMaxIf(tuple(wb_run_step_end), version, has_end = 1).1 AS wb_run_step_end,
    if(countIf(kind = 'delete') > 0, minIf(deleted_at, kind = 'delete'), NULL) AS deleted_at
FROM call_parts
WHERE project_id = {p0:String} AND id IN {p1:Array(String)} GROUP BY project_id, id) AS c WHERE started AND deleted_at IS NULL AND ifNull(id IN {p2:Array(String)}, 0) ORDER BY started_at ASC NULLS FIRST, id ASC NULLS FIRST OFFSET {p3:UInt64} ROWS
-- parameters
-- Str("e/p")
-- StrList(["a", "b"])
-- StrList(["a", "b"])
-- UInt(3)
