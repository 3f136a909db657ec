//! The agents API (docs/api/agents.md): read views over the OpenTelemetry GenAI spans the OTLP
//! ingest stored as calls. Pure code: the query role reads the candidate calls through the
//! calls query, turns each into an [`AgentSpan`], filters it with the query language's
//! evaluator over the span catalog, and builds the view here.

pub mod catalog;
pub mod chat;
pub mod requests;
pub mod span;
pub mod stats;
pub mod views;

pub use span::AgentSpan;

#[cfg(test)]
mod tests;
