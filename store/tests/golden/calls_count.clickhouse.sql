SELECT count() FROM (SELECT 1 FROM (SELECT project_id, id,
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
WHERE project_id = {p0:String} AND id IN (SELECT id FROM call_parts WHERE project_id = {p1:String} AND trace_id IN {p2:Array(String)}) AND id IN (SELECT id FROM call_parts WHERE project_id = {p3:String} AND parent_id IN {p4:Array(String)}) GROUP BY project_id, id) AS c WHERE started AND deleted_at IS NULL AND ifNull(parent_id IN {p5:Array(String)}, 0) AND ifNull(trace_id IN {p6:Array(String)}, 0) AND ifNull(wb_user_id IN {p7:Array(String)}, 0) AND ifNull(wb_run_id IN {p8:Array(String)}, 0) AND ifNull(thread_id IN {p9:Array(String)}, 0) AND ifNull(turn_id IN {p10:Array(String)}, 0) AND (op_name IN {p11:Array(String)} OR startsWith(op_name, {p12:String})) AND hasAny(input_refs, {p13:Array(String)}) AND hasAny(output_refs, {p14:Array(String)}) AND parent_id IS NULL AND (((op_name = {p15:String}) AND (started_at > fromUnixTimestamp64Micro({p16:Int64}, 'UTC')) AND (NOT ifNull(((display_name IS NULL)), 0)) AND ((wb_run_step < {p17:Int64}) OR (intDiv(toUnixTimestamp64Micro(ended_at) - toUnixTimestamp64Micro(started_at), 1000) <= {p18:Float64}) OR (multiIf(exception IS NOT NULL, 'error', ended_at IS NULL, 'running', JSONType(summary, 'status_counts', 'error') IN ('Int64', 'UInt64', 'Double') AND JSONExtractFloat(summary, 'status_counts', 'error') > 0, 'descendant_error', 'success') >= {p19:String})) AND ((ifNull(display_name, if(startsWith(op_name, 'weave:///') AND position(substring(op_name, 10), '/op/') > 0, splitByChar(':', substring(substring(op_name, 10), position(substring(op_name, 10), '/op/') + 4))[1], op_name)) = {p20:String}) OR (ifNull(display_name, if(startsWith(op_name, 'weave:///') AND position(substring(op_name, 10), '/op/') > 0, splitByChar(':', substring(substring(op_name, 10), position(substring(op_name, 10), '/op/') + 4))[1], op_name)) = op_name)) AND ((position(lowerUTF8(display_name), lowerUTF8({p21:String})) > 0)) AND ((position((op_name), ({p22:String})) > 0)) AND ((position(lowerUTF8(multiIf(NOT (1), '', JSONType(if(empty(inputs_q), inputs, inputs_q), {p23:String}) = 'String', JSONExtractString(if(empty(inputs_q), inputs, inputs_q), {p24:String}), JSONType(if(empty(inputs_q), inputs, inputs_q), {p25:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(inputs_q), inputs, inputs_q), {p26:String}), '')), lowerUTF8({p27:String})) > 0)))) LIMIT {p28:UInt64})
-- parameters
-- Str("e/p")
-- Str("e/p")
-- StrList(["t1"])
-- Str("e/p")
-- StrList(["p1"])
-- StrList(["p1"])
-- StrList(["t1"])
-- StrList(["u"])
-- StrList(["r"])
-- StrList([])
-- StrList(["x"])
-- StrList(["g"])
-- Str("weave:///e/p/op/f:")
-- StrList(["weave:///e/p/object/o:d"])
-- StrList(["weave:///e/p/object/o:d"])
-- Str("f")
-- Int(1767225600000000)
-- Int(3)
-- Float(2.5)
-- Str("error")
-- Str("a")
-- Str("Ab")
-- Str("x")
-- Str("question")
-- Str("question")
-- Str("question")
-- Str("question")
-- Str("Vortex")
-- UInt(10)
