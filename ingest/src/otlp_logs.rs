//! OTLP log ingest (docs/api/otel.md, `docs/otlp.md` "Log records"): `POST /otel/v1/logs` with
//! OTLP/protobuf or OTLP/JSON bodies, gzip or not, and the OTLP/gRPC `LogsService/Export`
//! (`crate::grpc`). Served like traces: the key is checked before the body is read, decoding
//! and conversion run on the blocking pool, every project is authorised, and the answer comes
//! once the records are durable (the store, or Kafka). The records are merged into their spans'
//! calls when calls are read (`heddle_store::otel_logs`).

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};
use heddle_api::settings::prepare;
use heddle_api::{ApiError, AppState, EncodedBody, Principal};
use heddle_proto::otlp::logs;
use heddle_proto::{ProjectId, ProtoError};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};

use crate::otlp::{Format, OtlpIngest, header_project};

impl OtlpIngest {
    /// Decodes (with `decode`, on the blocking pool), converts, authorises and stores one logs
    /// export request; the answer carries the rejected records.
    pub(crate) async fn export_logs(
        &self,
        who: &Principal,
        header_project: Option<ProjectId>,
        decode: impl FnOnce() -> Result<ExportLogsServiceRequest, ProtoError> + Send + 'static,
    ) -> Result<ExportLogsServiceResponse, ApiError> {
        let convert = move |project: Option<&ProjectId>, user: Option<&str>| {
            logs::convert(&decode()?, project, user)
        };
        let converted = self.convert(who, header_project, convert).await?;
        // Nothing is stored unless the key may write every project of the request.
        for p in &converted.projects {
            who.check(p)?;
        }
        let response = converted.response();
        // Sampling and redaction (docs/api/project-settings.md) before anything is written.
        let state = self.state();
        let logs = prepare(&state.settings, &state.ingest_metrics, converted.logs).await?;
        if !logs.is_empty() {
            state.sink.write_logs(logs).await?;
        }
        Ok(response)
    }
}

/// `POST /otel/v1/logs`.
pub fn routes(ingest: Arc<OtlpIngest>) -> Router<Arc<AppState>> {
    Router::new().route("/otel/v1/logs", post(export_http)).layer(Extension(ingest))
}

async fn export_http(
    Extension(ingest): Extension<Arc<OtlpIngest>>,
    who: Principal,
    headers: HeaderMap,
    body: EncodedBody,
) -> Result<Response, ApiError> {
    let format = Format::from_headers(&headers)?;
    let project = header_project(&headers)?;
    // Held until the records are converted and written: decoding is where a body grows.
    let (bytes, _admitted) = format.admit(ingest.state(), body).await?;
    let decode = move || match format {
        Format::Protobuf => logs::decode_protobuf(&bytes),
        Format::Json => logs::decode_json(&bytes),
    };
    Ok(format.respond(ingest.export_logs(&who, project, decode).await?))
}
