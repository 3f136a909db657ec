//! The request body deadline: a body must arrive in full within a fixed time of its request's
//! headers, however it trickles in, or the request is answered 408 (`docs/limits.md`, "Network
//! limits"). hyper's header timeout covers only the headers, and tower-http's body timeout
//! only the gap between two chunks, which a slow sender keeps short.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// Middleware (`axum::middleware::from_fn_with_state`): puts the deadline on the request's
/// body and answers 408 if the handler gave up on the body because it passed.
pub async fn enforce(State(limit): State<Duration>, req: Request, next: Next) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + limit;
    let req = req.map(|body| {
        let deadline = Box::pin(tokio::time::sleep_until(deadline));
        Body::new(DeadlineBody { body, deadline, expired: expired.clone() })
    });
    let response = next.run(req).await;
    // 413 stays: it is what tells a client to split its batch, even if draining the rest of
    // the oversized body then ran out of time.
    if expired.load(Ordering::SeqCst) && response.status() != StatusCode::PAYLOAD_TOO_LARGE {
        let reason = format!("the request body did not arrive within {} s", limit.as_secs_f64());
        let body = axum::Json(serde_json::json!({ "reason": reason }));
        return (StatusCode::REQUEST_TIMEOUT, body).into_response();
    }
    response
}

/// A body that fails once `deadline` passes before its end, and says so in `expired`.
struct DeadlineBody {
    body: Body,
    deadline: Pin<Box<Sleep>>,
    expired: Arc<AtomicBool>,
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.expired.store(true, Ordering::SeqCst);
            return Poll::Ready(Some(Err("the request body did not arrive in time".into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
