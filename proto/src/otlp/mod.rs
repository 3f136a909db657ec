//! OTLP traces → calls (docs/api/otel.md, `docs/otlp.md`): decoding OTLP/protobuf and OTLP/JSON,
//! routing resource spans to projects, and mapping each span to one complete call. A span that
//! cannot become a call is rejected on its own and counted for `partial_success`; the rest of
//! the request goes on.

mod attributes;
pub mod conventions;
mod json;
pub mod logs;
pub mod op;
pub mod request;
mod sequences;
mod span;
mod tree;
pub mod values;
pub mod wire;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use std::collections::HashMap;

use crate::ProjectId;
use crate::ProtoError;
use crate::calls::CallPart;
use crate::lazy_part::LazyPart;
use crate::limits;

pub use json::{check_json_shape, decode_json};
pub use request::{Request, Scope};

/// Decodes an OTLP/protobuf body in place ([`request`]); one with more spans or values than
/// [`crate::limits`] allows is refused before it is decoded.
pub fn decode_protobuf(body: &[u8]) -> Result<Request<'_>, ProtoError> {
    wire::count(body)?;
    Request::decode(body)
}

/// What a request turned into.
#[derive(Debug, Default)]
pub struct Converted {
    pub parts: Vec<CallPart>,
    /// Every (project, span name) among the calls, for their placeholder ops.
    pub ops: std::collections::BTreeSet<(ProjectId, String)>,
    pub rejected: i64,
    /// Why spans were rejected: the first few reasons.
    pub errors: Vec<String>,
}

/// Reasons kept for the response's `error_message`.
const MAX_REASONS: usize = 20;

impl Converted {
    pub fn response(&self) -> ExportTraceServiceResponse {
        if self.rejected == 0 {
            return ExportTraceServiceResponse { partial_success: None };
        }
        let mut message = self.errors.join("; ");
        if self.rejected as usize > self.errors.len() {
            message.push_str("; ...");
        }
        ExportTraceServiceResponse {
            partial_success: Some(ExportTracePartialSuccess {
                rejected_spans: self.rejected,
                error_message: message,
            }),
        }
    }
}

fn resource_project(resource: Option<&request::Resource>) -> Option<Result<ProjectId, ProtoError>> {
    let attr = |key: &str| {
        resource?.attributes.iter().find(|kv| kv.key == key).and_then(|kv| match values::any_value(
            kv.value.as_ref()?,
        ) {
            serde_json::Value::String(s) if !s.is_empty() => Some(s),
            _ => None,
        })
    };
    match (attr(conventions::ENTITY_KEY), attr(conventions::PROJECT_KEY)) {
        (Some(e), Some(p)) => Some(ProjectId::from_parts(&e, &p)),
        _ => None,
    }
}

/// Maps every span of `req` to a call. The project is `header_project` when given, else each
/// resource's `wandb.entity` + `wandb.project`; a resource with neither fails the request.
pub fn convert(
    req: &Request,
    header_project: Option<&ProjectId>,
    wb_user_id: Option<&str>,
) -> Result<Converted, ProtoError> {
    let spans = req.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len());
    let mut parts = Vec::with_capacity(spans.sum());
    let mut each = |part: LazyPart| {
        parts.push(part.into_part()?);
        Ok(())
    };
    let converted = convert_each(req, header_project, wb_user_id, &mut each)?;
    Ok(Converted { parts, ..converted })
}

/// [`convert`], handing each call to `each` as soon as it is made, its members unwritten, for
/// `each` to write where the call goes; the `parts` of the answer are left empty. A span whose
/// call `each` fails with is rejected, for that reason.
pub fn convert_each(
    req: &Request,
    header_project: Option<&ProjectId>,
    wb_user_id: Option<&str>,
    each: &mut dyn FnMut(LazyPart) -> Result<(), ProtoError>,
) -> Result<Converted, ProtoError> {
    let mut out = Converted::default();
    let mut sequences = sequences::Sequences::default();
    for rs in &req.resource_spans {
        let project = match (header_project, resource_project(rs.resource.as_ref())) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) => p?,
            (None, None) => {
                return Err(ProtoError::invalid(
                    "no project for these spans: send a project_id: <entity>/<project> header \
                     or the resource attributes wandb.entity and wandb.project",
                ));
            }
        };
        // A resource's attributes go into every span's dump: a bad key rejects its spans.
        let resource_ok =
            rs.resource.as_ref().map_or(Ok(()), |r| span::check_attribute_keys(&r.attributes));
        // Written once for all its spans.
        let resource = rs.resource.as_ref().map(|r| {
            serde_json::json!({
                "attributes": values::nested(&r.attributes),
                "dropped_attributes_count": r.dropped_attributes_count,
            })
        });
        let resource_depth =
            resource.as_ref().map_or(0, |r| limits::json_depth(r, limits::MAX_MEMBER_DEPTH));
        let resource =
            serde_json::value::to_raw_value(&resource).expect("JSON values always serialise");
        // The op ref of each span name, made once (a request holds a few names many times), and
        // whether the name is among `out.ops` yet.
        let mut op_refs: HashMap<&str, (String, bool), foldhash::fast::RandomState> =
            HashMap::default();
        for ss in &rs.scope_spans {
            let shared = span::Shared {
                resource: resource.clone(),
                resource_depth,
                scope: ss.scope.clone().unwrap_or_default(),
            };
            for sp in &ss.spans {
                let (op, listed) = op_refs
                    .entry(sp.name)
                    .or_insert_with(|| (op::op_ref(&project, sp.name), false));
                let converted = resource_ok.clone().and_then(|()| {
                    span::to_call(&project, sp, op, &shared, wb_user_id, &mut sequences, each)
                });
                match converted {
                    Ok(()) => {
                        if !*listed {
                            out.ops.insert((project.clone(), sp.name.to_owned()));
                            *listed = true;
                        }
                    }
                    Err(reason) => {
                        out.rejected += 1;
                        if out.errors.len() < MAX_REASONS {
                            out.errors.push(format!(
                                "span {:?} (trace_id {:?}, span_id {:?}): {reason}",
                                sp.name,
                                hex::encode(sp.trace_id),
                                hex::encode(sp.span_id)
                            ));
                        }
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
