//! OTLP/gRPC `TraceService/Export` (`docs/otlp.md`), served the way OTLP/HTTP is:
//!
//! 1. authenticate on the HTTP/2 headers, before tonic reads, decompresses or decodes the
//!    message, so a request without a valid key costs no more than its headers;
//! 2. take the message as bytes (tonic still enforces the message size limit, compressed and
//!    decompressed) instead of letting tonic decode it on the async worker;
//! 3. admit it against the memory budget, then count its spans and values on the wire and
//!    decode and convert it on the blocking pool — the same path as an OTLP/HTTP protobuf body,
//!    so a message of empty spans is refused before it can decode into gigabytes.
//!
//! This replaces the generated `TraceServiceServer`, which decodes with prost before the
//! handler runs; the rest of the generated plumbing (`tonic::server::Grpc`) is reused.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http;
use bytes::{Buf, Bytes};
use futures::future::BoxFuture;
use heddle_api::{ApiError, Principal};
use heddle_proto::otlp;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::body::Body as GrpcBody;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::Service;
use tonic::server::{Grpc, NamedService, UnaryService};

use crate::otlp::{OtlpIngest, header_project};

const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The authenticated `TraceService`, as tonic routes.
pub(crate) fn routes(ingest: Arc<OtlpIngest>, max_message_bytes: usize) -> tonic::service::Routes {
    tonic::service::Routes::new(TraceService { ingest, max_message_bytes })
}

#[derive(Clone)]
pub struct TraceService {
    ingest: Arc<OtlpIngest>,
    max_message_bytes: usize,
}

impl NamedService for TraceService {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl Service<http::Request<GrpcBody>> for TraceService {
    type Response = http::Response<GrpcBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<GrpcBody>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            if req.uri().path() != EXPORT_PATH {
                return Ok(tonic::Status::unimplemented("no such method").into_http());
            }
            let who = match this.ingest.state().auth.authenticate(req.headers()).await {
                Ok(who) => who,
                Err(e) => return Ok(e.grpc_status().into_http()),
            };
            let mut grpc = Grpc::new(RawCodec)
                .accept_compressed(CompressionEncoding::Gzip)
                .send_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(this.max_message_bytes);
            Ok(grpc.unary(Export { ingest: this.ingest, who }, req).await)
        })
    }
}

/// One export, for a principal already authenticated.
struct Export {
    ingest: Arc<OtlpIngest>,
    who: Principal,
}

impl UnaryService<Bytes> for Export {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<'static, Result<tonic::Response<Self::Response>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let (ingest, who) = (self.ingest.clone(), self.who.clone());
        Box::pin(async move {
            let res = async {
                let project = header_project(&request.metadata().clone().into_headers())?;
                let body = request.into_inner();
                let _admitted = ingest.state().memory_budget.admit_body(body.len(), None).await?;
                let decode = move || Ok::<_, ApiError>(otlp::decode_protobuf(&body)?);
                ingest.export(&who, project, decode).await
            };
            res.await.map(tonic::Response::new).map_err(|e| e.grpc_status())
        })
    }
}

/// Requests as their (decompressed) bytes; responses encoded with prost.
struct RawCodec;

impl Codec for RawCodec {
    type Encode = ExportTraceServiceResponse;
    type Decode = Bytes;
    type Encoder = ResponseEncoder;
    type Decoder = BytesDecoder;

    fn encoder(&mut self) -> ResponseEncoder {
        ResponseEncoder
    }

    fn decoder(&mut self) -> BytesDecoder {
        BytesDecoder
    }
}

struct ResponseEncoder;

impl Encoder for ResponseEncoder {
    type Item = ExportTraceServiceResponse;
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
