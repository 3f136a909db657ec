//! Which span attributes mean what, per instrumentation convention: OpenTelemetry GenAI
//! (`gen_ai.*`), OpenInference (`input.value`, `llm.*`), OpenLLMetry/Traceloop (`traceloop.*`,
//! `gen_ai.prompt.N.*`, `llm.usage.*`), Vercel AI SDK (`ai.*`), and heddle/Weave's own `wandb.*`.
//! The lists follow the Weave server's (first match wins, in list order), so traces read the
//! same on both; `docs/otlp.md` renders this table for users.

/// Where a call's `inputs` come from. The first key present wins and the inputs are
/// `{key: value}`; `events.<name>` means the attributes of the span's events of that name.
pub const INPUT_KEYS: &[&str] = &[
    "ai.prompt",
    "gen_ai.prompt",
    "input.value",
    "mlflow.spanInputs",
    "gen_ai.input.messages",
    "pydantic_ai.all_messages",
    "traceloop.entity.input",
    "gcp.vertex.agent.tool_call_args",
    "gcp.vertex.agent.llm_request",
    "events.gen_ai.user.message",
    "input",
    "inputs",
];

/// Where a call's `output` comes from (same rules as [`INPUT_KEYS`]).
pub const OUTPUT_KEYS: &[&str] = &[
    "ai.response",
    "gen_ai.completion",
    "output.value",
    "gen_ai.output.messages",
    "mlflow.spanOutputs",
    "final_result",
    "gen_ai.content.completion",
    "traceloop.entity.output",
    "gcp.vertex.agent.tool_response",
    "gcp.vertex.agent.llm_response",
    "events.gen_ai.choice",
    "output",
    "outputs",
];

/// Token counts: `(usage field, attribute keys)`. Values may be ints or numeric strings.
pub const USAGE_KEYS: &[(&str, &[&str])] = &[
    ("input_tokens", &["gen_ai.usage.input_tokens", "ai.usage.inputTokens"]),
    (
        "prompt_tokens",
        &["gen_ai.usage.prompt_tokens", "llm.token_count.prompt", "ai.usage.promptTokens"],
    ),
    ("output_tokens", &["gen_ai.usage.output_tokens", "ai.usage.outputTokens"]),
    (
        "completion_tokens",
        &[
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
            "ai.usage.completionTokens",
        ],
    ),
    (
        "total_tokens",
        &[
            "llm.usage.total_tokens",
            "llm.token_count.total",
            "gen_ai.usage.total_tokens",
            "ai.usage.totalTokens",
        ],
    ),
    (
        "cache_read_input_tokens",
        &[
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "llm.token_count.prompt_details.cache_read",
            "ai.usage.cachedInputTokens",
        ],
    ),
    (
        "cache_creation_input_tokens",
        &[
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.usage.cache_creation_input_tokens",
            "llm.token_count.prompt_details.cache_write",
        ],
    ),
];

/// Fields of a call's `attributes` taken from well-known keys: `(field, attribute keys)`.
pub const ATTRIBUTE_KEYS: &[(&str, &[&str])] = &[
    ("system", &["gen_ai.system_instructions", "gen_ai.system", "llm.system", "system_prompt"]),
    ("kind", &["weave.span.kind", "traceloop.span.kind", "openinference.span.kind"]),
    ("model", &["gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "ai.model.id"]),
    ("provider", &["gen_ai.provider.name", "llm.provider", "ai.model.provider"]),
    ("model_parameters", &["gen_ai.request", "llm.invocation_parameters"]),
    ("operation_name", &["gen_ai.operation.name", "ai.operationId"]),
    ("response_id", &["gen_ai.response.id", "ai.response.id"]),
    ("finish_reasons", &["gen_ai.response.finish_reasons", "ai.response.finishReason"]),
    ("agent_name", &["gen_ai.agent.name"]),
    ("agent_id", &["gen_ai.agent.id"]),
    ("tools", &["gen_ai.agent.tools"]),
];

/// Call columns set from attributes.
pub const DISPLAY_NAME_KEYS: &[&str] = &["wandb.display_name"];
pub const THREAD_ID_KEYS: &[&str] =
    &["gen_ai.conversation.id", "gcp.vertex.agent.session_id", "wandb.thread_id"];
/// A span in a thread is a turn when one of these is truthy (a conversation id or session id
/// marks every span carrying it as a turn, as on the Weave server).
pub const IS_TURN_KEYS: &[&str] =
    &["gen_ai.conversation.id", "gcp.vertex.agent.session_id", "wandb.is_turn"];
/// An object merged into `attributes` as is.
pub const EXTRA_ATTRIBUTES_KEY: &str = "wandb.attributes";
pub const WB_RUN_ID_KEYS: &[&str] = &["wandb.wb_run_id"];
pub const WB_RUN_STEP_KEYS: &[&str] = &["wandb.wb_run_step"];
pub const WB_RUN_STEP_END_KEYS: &[&str] = &["wandb.wb_run_step_end"];

/// Resource attributes naming the project when the request has no `project_id` header.
pub const ENTITY_KEY: &str = "wandb.entity";
pub const PROJECT_KEY: &str = "wandb.project";
