//! OTLP trace ingest (docs/api/otel.md, `docs/otlp.md`): `POST /otel/v1/traces` — and the SDK's own
//! `/agents/otel/v1/traces` — with OTLP/protobuf or OTLP/JSON bodies, gzip or not; and the
//! OTLP/gRPC `TraceService/Export`. Both transports share [`OtlpIngest::export`]: decode and
//! convert on the blocking pool (never on the reactor), authorise every project, and hand each
//! new span name's placeholder op (`heddle_proto::otlp::op`), then the calls, to the same sink
//! as the call endpoints (the store, or Kafka) — answering only once they are durable.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Router};
use bytes::Bytes;
use heddle_api::budget::{Admitted, UNCHARGED_BYTES};
use heddle_api::settings::{Admission, Ingested, WriteSettings, prepare};
use heddle_api::{ApiError, AppState, EncodedBody, Principal, admit_and_decode, admit_json_shape};
use heddle_proto::lazy_part::LazyPart;
use heddle_proto::otlp::{self, op};
use heddle_proto::{ProjectId, ProtoError};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

/// Where a conversion hands each call it makes.
pub(crate) type Each<'e> = &'e mut dyn FnMut(LazyPart) -> Result<(), ProtoError>;

/// Placeholder ops this process already wrote; beyond this many, the memory is reset.
const KNOWN_OPS_LIMIT: usize = 100_000;

/// The OTLP front shared by the HTTP routes and the gRPC service.
pub struct OtlpIngest {
    state: Arc<AppState>,
    known_ops: Mutex<HashSet<(ProjectId, String)>>,
    /// Requests decoded and converted at once: one per core. Conversion is CPU-bound, so more at
    /// once only adds memory (a request being converted holds its body, the structs read from
    /// it and the calls it becomes) — under overload the others wait holding just their bodies.
    converting: tokio::sync::Semaphore,
}

/// An OTLP/HTTP body format, from `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Protobuf,
    Json,
}

impl Format {
    const PROTOBUF_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/x-protobuf");

    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Format, ApiError> {
        let ct = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match mime.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Format::Protobuf),
            "application/json" => Ok(Format::Json),
            _ => Err(ApiError::Unsupported(format!(
                "Content-Type {ct:?} is not OTLP: send application/x-protobuf or application/json"
            ))),
        }
    }

    /// Admits an export body against the memory budget and inflates it (`admit_and_decode`);
    /// a JSON body over [`UNCHARGED_BYTES`] is then held to OTLP's bounds on its shape and
    /// charged by it, as every JSON body is (`admit_json_shape`): a body of small values parses
    /// into many times its bytes.
    pub(crate) async fn admit(
        self,
        state: &AppState,
        body: EncodedBody,
    ) -> Result<(Bytes, Option<Admitted>), ApiError> {
        let (bytes, admitted) = admit_and_decode(state, body).await?;
        if self == Format::Protobuf || (bytes.len() <= UNCHARGED_BYTES && admitted.is_none()) {
            return Ok((bytes, admitted));
        }
        // OTLP's own bounds on the shape first, so that a body they refuse takes no room.
        let refuse = |shape: &_| otlp::check_json_shape(shape).map_err(ApiError::from);
        let (bytes, admitted) = admit_json_shape(state, bytes, admitted, refuse).await?;
        Ok((bytes, Some(admitted)))
    }

    /// Decodes a trace export body and converts its spans, each call to `each` (see
    /// [`otlp::convert_each`]). A protobuf body is read in place; a JSON one is decoded into
    /// prost's types, then read the same way.
    fn convert(
        self,
        body: &[u8],
        project: Option<&ProjectId>,
        user: Option<&str>,
        each: Each,
    ) -> Result<otlp::Converted, ProtoError> {
        match self {
            Format::Protobuf => {
                otlp::convert_each(&otlp::decode_protobuf(body)?, project, user, each)
            }
            Format::Json => {
                let request = otlp::decode_json(body)?;
                otlp::convert_each(&otlp::Request::from(&request), project, user, each)
            }
        }
    }

    /// An export answer (traces or logs: a message whose only field is `partial_success`).
    pub(crate) fn respond<M>(self, res: M) -> Response
    where
        M: Message + serde::Serialize + Default + PartialEq,
    {
        match self {
            Format::Protobuf => {
                ([(CONTENT_TYPE, Format::PROTOBUF_CONTENT_TYPE)], res.encode_to_vec())
                    .into_response()
            }
            // The empty message is `{}`, not `{"partialSuccess": null}`.
            Format::Json if res == M::default() => {
                axum::Json(serde_json::json!({})).into_response()
            }
            Format::Json => axum::Json(res).into_response(),
        }
    }
}

/// The `project_id: <entity>/<project>` header, when sent.
pub(crate) fn header_project(headers: &HeaderMap) -> Result<Option<ProjectId>, ApiError> {
    match headers.get("project_id").map(|v| v.to_str()) {
        None => Ok(None),
        Some(Ok(s)) => Ok(Some(ProjectId::parse(s.trim())?)),
        Some(Err(_)) => Err(ApiError::bad_request("the project_id header is not valid text")),
    }
}

impl OtlpIngest {
    pub(crate) fn state(&self) -> &AppState {
        &self.state
    }

    pub fn new(state: Arc<AppState>) -> Arc<OtlpIngest> {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Arc::new(OtlpIngest {
            state,
            known_ops: Mutex::default(),
            converting: tokio::sync::Semaphore::new(cores),
        })
    }

    /// The OTLP/gRPC `TraceService` and `LogsService`: gzip accepted, messages up to `max_message_bytes`
    /// (decompressed; larger ones fail with OUT_OF_RANGE or RESOURCE_EXHAUSTED). Every request
    /// is authenticated on its headers before tonic reads, decompresses or decodes the message
    /// (`crate::grpc`), so a request without a valid key costs no more than its headers.
    pub fn grpc_service(self: Arc<Self>, max_message_bytes: usize) -> tonic::service::Routes {
        crate::grpc::routes(self, max_message_bytes)
    }

    /// Decodes and converts one export request (with `convert`, on the blocking pool), then
    /// authorises and stores it; the answer carries the rejected spans.
    ///
    /// With a header project every span is that project's, authorised before any work and its
    /// settings known: each call is sampled and handed to the sink's stager
    /// ([`heddle_pipeline::Sink::stager`]) as soon as it is made, on the thread that made it
    /// and while it is in its cache (docs/benchmarks.md, "Calls staged where they are made"),
    /// its members written straight into its Kafka record unless it is to be redacted.
    /// Without one, the projects are known only once converted, and all of that follows
    /// authorisation.
    pub(crate) async fn export(
        &self,
        who: &Principal,
        header_project: Option<ProjectId>,
        convert: impl FnOnce(
            Option<&ProjectId>,
            Option<&str>,
            Each,
        ) -> Result<otlp::Converted, ProtoError>
        + Send
        + 'static,
    ) -> Result<ExportTraceServiceResponse, ApiError> {
        let settings = match &header_project {
            Some(p) => {
                // Before its settings are read from the store; `convert` checks it again, as it
                // does for the logs.
                who.check(p)?;
                Some(WriteSettings::fetch(&self.state.settings, [p]).await?)
            }
            None => None,
        };
        let state = self.state.clone();
        let (converted, staged, unprepared) = self
            .convert(who, header_project, move |project, user| {
                let mut staged = state.sink.stager();
                // Parts whose settings are not known here (none, with a header project).
                let mut unprepared = Vec::new();
                let metrics = &state.ingest_metrics;
                let converted = convert(project, user, &mut |part| {
                    let admission = match &settings {
                        Some(s) if s.covers(part.project) => {
                            s.admit(metrics, part.project, Some(part.trace_id), true)
                        }
                        _ => {
                            unprepared.push(part.into_part()?);
                            return Ok(());
                        }
                    };
                    match admission {
                        Admission::Dropped => {}
                        Admission::Kept => staged.push_lazy(&part)?,
                        Admission::Redacted => {
                            let mut part = part.into_part()?;
                            part.redact();
                            staged.push(part);
                        }
                    }
                    Ok(())
                })?;
                Ok((converted, staged, unprepared))
            })
            .await?;
        let projects: BTreeSet<&ProjectId> = converted.ops.iter().map(|(p, _)| p).collect();
        for p in projects {
            who.check(p)?;
        }
        self.ensure_ops(&converted.ops, who.user_id()).await?;
        let response = converted.response();
        if !staged.is_empty() {
            self.state.sink.write_staged(staged).await?;
        }
        // Sampling and redaction (docs/api/project-settings.md) before anything is written.
        let parts = prepare(&self.state.settings, &self.state.ingest_metrics, unprepared).await?;
        if !parts.is_empty() {
            self.state.sink.write(parts).await?;
        }
        Ok(response)
    }

    /// Checks the key against the header's project, then decodes and converts an export
    /// request with `convert` (given the header's project and the key's user) on the blocking
    /// pool, one request per core at a time (see [`OtlpIngest::converting`]). Traces and logs
    /// alike.
    pub(crate) async fn convert<T: Send + 'static>(
        &self,
        who: &Principal,
        header_project: Option<ProjectId>,
        convert: impl FnOnce(Option<&ProjectId>, Option<&str>) -> Result<T, ProtoError> + Send + 'static,
    ) -> Result<T, ApiError> {
        if let Some(p) = &header_project {
            who.check(p)?;
        }
        let user = who.user_id().to_owned();
        let _slot = self.converting.acquire().await.expect("the semaphore is never closed");
        heddle_api::blocking(move || -> Result<T, ApiError> {
            Ok(convert(header_project.as_ref(), Some(&user))?)
        })
        .await
    }

    /// Writes the placeholder op (and its source file) of every span name not yet known to
    /// this process, before the calls that name it. Idempotent, so racing requests and restarts
    /// are harmless.
    async fn ensure_ops(
        &self,
        ops: &BTreeSet<(ProjectId, String)>,
        user: &str,
    ) -> Result<(), ApiError> {
        let missing: BTreeSet<(ProjectId, String)> = {
            let known = self.known_ops.lock().expect("not poisoned");
            ops.iter().filter(|k| !known.contains(*k)).cloned().collect()
        };
        if missing.is_empty() {
            return Ok(());
        }
        self.state.sink.write_ops(op::placeholder_writes(&missing, Some(user))).await?;
        let mut known = self.known_ops.lock().expect("not poisoned");
        if known.len() + missing.len() > KNOWN_OPS_LIMIT {
            known.clear();
        }
        known.extend(missing);
        Ok(())
    }
}

/// `POST /otel/v1/traces` and `POST /agents/otel/v1/traces`, and `POST /otel/v1/logs`
/// (`crate::otlp_logs`).
pub fn routes(ingest: Arc<OtlpIngest>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/otel/v1/traces", post(export_http))
        .route("/agents/otel/v1/traces", post(export_http))
        .layer(Extension(ingest.clone()))
        .merge(crate::otlp_logs::routes(ingest))
}

async fn export_http(
    Extension(ingest): Extension<Arc<OtlpIngest>>,
    who: Principal,
    headers: HeaderMap,
    body: EncodedBody,
) -> Result<Response, ApiError> {
    let format = Format::from_headers(&headers)?;
    let project = header_project(&headers)?;
    // Held until the spans are converted and written: decoding is where a body grows.
    let (bytes, _admitted) = format.admit(&ingest.state, body).await?;
    let convert = move |project: Option<&ProjectId>, user: Option<&str>, each: Each| {
        format.convert(&bytes, project, user, each)
    };
    Ok(format.respond(ingest.export(&who, project, convert).await?))
}
