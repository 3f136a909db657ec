//! OTLP/gRPC `TraceService/Export` and `LogsService/Export` (`docs/otlp.md`), served the way
//! OTLP/HTTP is:
//!
//! 1. authenticate on the HTTP/2 headers, before tonic reads, decompresses or decodes the
//!    message, so a request without a valid key costs no more than its headers;
//! 2. take the message as bytes (tonic still enforces the message size limit, compressed and
//!    decompressed) instead of letting tonic decode it on the async worker;
//! 3. admit it against the memory budget, then count its spans (or log records) and values on
//!    the wire and decode and convert it on the blocking pool — the same path as an OTLP/HTTP
//!    protobuf body, so a message of empty spans is refused before it can decode into gigabytes.
//!
//! This replaces the generated `TraceServiceServer` and `LogsServiceServer`, which decode with
//! prost before the handler runs; the rest of the generated plumbing (`tonic::server::Grpc`) is
//! reused. The two services differ only in their [`Signal`].

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http;
use bytes::{Buf, Bytes};
use futures::future::BoxFuture;
use heddle_api::{ApiError, Principal};
use heddle_proto::ProjectId;
use heddle_proto::otlp;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::body::Body as GrpcBody;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::Service;
use tonic::server::{Grpc, NamedService, UnaryService};

use crate::otlp::{Each, OtlpIngest, header_project};

/// What one OTLP service exports: its name, its answer, and how a message is stored.
pub(crate) trait Signal: Send + Sync + 'static {
    const NAME: &'static str;
    const EXPORT_PATH: &'static str;
    type Response: Message + Default + Send + 'static;

    fn export(
        ingest: Arc<OtlpIngest>,
        who: Principal,
        project: Option<ProjectId>,
        message: Bytes,
    ) -> BoxFuture<'static, Result<Self::Response, ApiError>>;
}

/// `TraceService`: spans become calls.
pub(crate) struct Traces;

impl Signal for Traces {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const EXPORT_PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    type Response = ExportTraceServiceResponse;

    fn export(
        ingest: Arc<OtlpIngest>,
        who: Principal,
        project: Option<ProjectId>,
        message: Bytes,
    ) -> BoxFuture<'static, Result<Self::Response, ApiError>> {
        Box::pin(async move {
            let convert = move |project: Option<&ProjectId>, user: Option<&str>, each: Each| {
                otlp::convert_each(&otlp::decode_protobuf(&message)?, project, user, each)
            };
            ingest.export(&who, project, convert).await
        })
    }
}

/// `LogsService`: log records are stored and merged into their spans' calls on read.
pub(crate) struct Logs;

impl Signal for Logs {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    const EXPORT_PATH: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    type Response = ExportLogsServiceResponse;

    fn export(
        ingest: Arc<OtlpIngest>,
        who: Principal,
        project: Option<ProjectId>,
        message: Bytes,
    ) -> BoxFuture<'static, Result<Self::Response, ApiError>> {
        Box::pin(async move {
            let decode = move || otlp::logs::decode_protobuf(&message);
            ingest.export_logs(&who, project, decode).await
        })
    }
}

/// The authenticated `TraceService` and `LogsService`, as tonic routes.
pub(crate) fn routes(ingest: Arc<OtlpIngest>, max_message_bytes: usize) -> tonic::service::Routes {
    tonic::service::Routes::new(OtlpService::<Traces>::new(ingest.clone(), max_message_bytes))
        .add_service(OtlpService::<Logs>::new(ingest, max_message_bytes))
}

pub struct OtlpService<S> {
    ingest: Arc<OtlpIngest>,
    max_message_bytes: usize,
    signal: PhantomData<fn() -> S>,
}

impl<S> OtlpService<S> {
    fn new(ingest: Arc<OtlpIngest>, max_message_bytes: usize) -> Self {
        OtlpService { ingest, max_message_bytes, signal: PhantomData }
    }
}

impl<S> Clone for OtlpService<S> {
    fn clone(&self) -> Self {
        OtlpService::new(self.ingest.clone(), self.max_message_bytes)
    }
}

impl<S: Signal> NamedService for OtlpService<S> {
    const NAME: &'static str = S::NAME;
}

impl<S: Signal> Service<http::Request<GrpcBody>> for OtlpService<S> {
    type Response = http::Response<GrpcBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<GrpcBody>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if req.uri().path() != S::EXPORT_PATH {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let who = match this.ingest.state().auth.authenticate(req.headers()).await {
                Ok(who) => who,
                Err(e) => return Ok(e.grpc_status().into_http()),
            };
            let mut grpc = Grpc::new(RawCodec::<S::Response>(PhantomData))
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(this.max_message_bytes);
            let export = Export::<S> { ingest: this.ingest, who, signal: PhantomData };
            Ok(grpc.unary(export, req).await)
        })
    }
}

/// One export, for a principal already authenticated.
struct Export<S> {
    ingest: Arc<OtlpIngest>,
    who: Principal,
    signal: PhantomData<fn() -> S>,
}

impl<S: Signal> UnaryService<Bytes> for Export<S> {
    type Response = S::Response;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let (ingest, who) = (self.ingest.clone(), self.who.clone());
        Box::pin(async move {
            let res = async {
                let project = header_project(&request.metadata().clone().into_headers())?;
                let body = request.into_inner();
                let _admitted = ingest.state().memory_budget.admit_body(body.len(), None).await?;
                S::export(ingest.clone(), who, project, body).await
            };
            res.await.map(tonic::Response::new).map_err(|e| e.grpc_status())
        })
    }
}

/// Requests as their (decompressed) bytes; responses (`R`) encoded with prost.
struct RawCodec<R>(PhantomData<fn() -> R>);

impl<R: Message + Send + 'static> Codec for RawCodec<R> {
    type Encode = R;
    type Decode = Bytes;
    type Encoder = ResponseEncoder<R>;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> ResponseEncoder<R> {
        ResponseEncoder(PhantomData)
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

struct ResponseEncoder<R>(PhantomData<fn() -> R>);

impl<R: Message> Encoder for ResponseEncoder<R> {
    type Item = R;
    type Error = tonic::Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Self::Error> {
        item.encode(dst).map_err(|e| tonic::Status::internal(format!("encoding: {e}")))
    }
}

struct BytesDecoder;

impl Decoder for BytesDecoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Self::Error> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
