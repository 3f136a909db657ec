SELECT id, project_id, op_name, display_name, trace_id, parent_id, thread_id, turn_id, toUnixTimestamp64Micro(started_at) AS started_us, toUnixTimestamp64Micro(ended_at) AS ended_us, CAST(attributes, 'Nullable(String)') AS attributes_out, CAST(inputs, 'Nullable(String)') AS inputs_out, CAST(output, 'Nullable(String)') AS output_out, exception, summary, CAST(otel_dump, 'Nullable(String)') AS otel_dump_out, wb_user_id, wb_run_id, wb_run_step, wb_run_step_end FROM (SELECT project_id, id,
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
WHERE project_id = {p0:String} GROUP BY project_id, id) AS c WHERE started AND deleted_at IS NULL AND (((multiIf(NOT (1 AND JSONType(if(empty(inputs_q), inputs, inputs_q), {p1:String}) = 'Array'), '', JSONType(if(empty(inputs_q), inputs, inputs_q), {p2:String}, {p3:Int64}, {p4:String}) = 'String', JSONExtractString(if(empty(inputs_q), inputs, inputs_q), {p5:String}, {p6:Int64}, {p7:String}), JSONType(if(empty(inputs_q), inputs, inputs_q), {p8:String}, {p9:Int64}, {p10:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(inputs_q), inputs, inputs_q), {p11:String}, {p12:Int64}, {p13:String}), '') = {p14:String}) AND (multiIf(NOT (1), '', JSONType(if(empty(attributes_q), attributes, attributes_q), {p15:String}) = 'String', JSONExtractString(if(empty(attributes_q), attributes, attributes_q), {p16:String}), JSONType(if(empty(attributes_q), attributes, attributes_q), {p17:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(attributes_q), attributes, attributes_q), {p18:String}), '') = '') AND (if(isFinite(ifNull(toFloat64OrNull(trimBoth(multiIf(NOT (1), '', JSONType(if(empty(output_q), ifNull(output, ''), output_q), {p19:String}) = 'String', JSONExtractString(if(empty(output_q), ifNull(output, ''), output_q), {p20:String}), JSONType(if(empty(output_q), ifNull(output, ''), output_q), {p21:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(output_q), ifNull(output, ''), output_q), {p22:String}), ''))), nan)), toFloat64OrNull(trimBoth(multiIf(NOT (1), '', JSONType(if(empty(output_q), ifNull(output, ''), output_q), {p23:String}) = 'String', JSONExtractString(if(empty(output_q), ifNull(output, ''), output_q), {p24:String}), JSONType(if(empty(output_q), ifNull(output, ''), output_q), {p25:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(output_q), ifNull(output, ''), output_q), {p26:String}), ''))), NULL) > {p27:Float64}) AND (toInt64OrNull(trimBoth(multiIf(NOT (1), '', JSONType(if(empty(output_q), ifNull(output, ''), output_q)) = 'String', JSONExtractString(if(empty(output_q), ifNull(output, ''), output_q)), JSONType(if(empty(output_q), ifNull(output, ''), output_q)) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(output_q), ifNull(output, ''), output_q)), ''))) = {p28:Int64}) AND (multiIf((multiIf(NOT (1), '', JSONType(if(empty(summary_q), summary, summary_q), {p29:String}) = 'String', JSONExtractString(if(empty(summary_q), summary, summary_q), {p30:String}), JSONType(if(empty(summary_q), summary, summary_q), {p31:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(summary_q), summary, summary_q), {p32:String}), '')) IN ('true', '1'), 1, (multiIf(NOT (1), '', JSONType(if(empty(summary_q), summary, summary_q), {p33:String}) = 'String', JSONExtractString(if(empty(summary_q), summary, summary_q), {p34:String}), JSONType(if(empty(summary_q), summary, summary_q), {p35:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(summary_q), summary, summary_q), {p36:String}), '')) IN ('false', '0'), 0, NULL) = {p37:Int64}) AND ((1 AND JSONType(if(empty(inputs_q), inputs, inputs_q), {p38:String}) != 'Null') = {p39:Int64}) AND (toString(wb_run_step) = {p40:String}) AND ((toUnixTimestamp64Micro(started_at) / 1e6) > {p41:Int64}) AND (intDiv(toUnixTimestamp64Micro(ended_at), 1000000) > {p42:Int64}) AND (toString(toUnixTimestamp64Micro(started_at)) = {p43:String}))) ORDER BY (1 AND JSONType(if(empty(inputs_q), inputs, inputs_q), {p44:String}) != 'Null') DESC, if(isFinite(ifNull(toFloat64OrNull(trimBoth(multiIf(NOT (1), '', JSONType(if(empty(inputs_q), inputs, inputs_q), {p45:String}) = 'String', JSONExtractString(if(empty(inputs_q), inputs, inputs_q), {p46:String}), JSONType(if(empty(inputs_q), inputs, inputs_q), {p47:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(inputs_q), inputs, inputs_q), {p48:String}), ''))), nan)), toFloat64OrNull(trimBoth(multiIf(NOT (1), '', JSONType(if(empty(inputs_q), inputs, inputs_q), {p49:String}) = 'String', JSONExtractString(if(empty(inputs_q), inputs, inputs_q), {p50:String}), JSONType(if(empty(inputs_q), inputs, inputs_q), {p51:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(inputs_q), inputs, inputs_q), {p52:String}), ''))), NULL) DESC NULLS LAST, multiIf(NOT (1), '', JSONType(if(empty(inputs_q), inputs, inputs_q), {p53:String}) = 'String', JSONExtractString(if(empty(inputs_q), inputs, inputs_q), {p54:String}), JSONType(if(empty(inputs_q), inputs, inputs_q), {p55:String}) IN ('Int64', 'UInt64', 'Double', 'Bool'), JSONExtractRaw(if(empty(inputs_q), inputs, inputs_q), {p56:String}), '') DESC, id ASC NULLS FIRST
-- parameters
-- Str("e/p")
-- Str("a")
-- Str("a")
-- Int(1)
-- Str("b")
-- Str("a")
-- Int(1)
-- Str("b")
-- Str("a")
-- Int(1)
-- Str("b")
-- Str("a")
-- Int(1)
-- Str("b")
-- Str("x")
-- Str("k.x")
-- Str("k.x")
-- Str("k.x")
-- Str("k.x")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Float(0.5)
-- Int(2)
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Str("ok")
-- Int(1)
-- Str("n")
-- Int(0)
-- Str("3")
-- Int(1)
-- Int(1)
-- Str("1")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
-- Str("score")
